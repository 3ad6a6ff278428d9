"""SPEC §6 destinations: per-sink fence coverage, counted as distinct effects, with a verdict."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.destinations import UNNAMED, destinations
from streams.core.detector import Detector, DetectorConfig
from streams.core.replay import Replay
from streams.report import render_json, render_text
from tests.core.conftest import acq, att, com, prog, rej, replay_events, replay_fixture
from tests.strategies import (
    arrival_orders,
    multi_workflow_events,
    partly_sequenced,
    redelivery,
    with_sinks,
)


def _table(replay: Replay) -> list[tuple[str, int, int, int, str]]:
    return [
        (d.sink, d.stale_rejected, d.stale_committed, d.current_committed, d.verdict.value)
        for d in replay.destinations()
    ]


def test_fixture_shows_the_release_bucket_ignoring_the_fence() -> None:
    """On the SPEC §5 fixture release-bucket committed one stale and one current effect
    (ignores_fence); search-index and orders-db only committed current effects (unproven)."""
    replay = replay_fixture()
    assert _table(replay) == [
        ("release-bucket", 0, 1, 1, "ignores_fence"),
        ("orders-db", 0, 0, 1, "unproven"),
        ("search-index", 0, 0, 2, "unproven"),
    ]


def test_a_sink_that_only_rejects_stale_effects_enforces_the_fence() -> None:
    """Stale rejections and no stale commit: enforces_fence, one count per distinct effect
    (a retried rejection of the same effect counts once; another effect key counts again)."""
    events = [
        acq(1, "a", 1),
        acq(2, "b", 2),
        att(1, "a", 3, "X", sink="db"),
        rej(1, "a", 4, "X", sink="db"),
        rej(1, "a", 5, "X", sink="db"),
        rej(1, "a", 6, "Y", sink="db"),
        com(2, "b", 7, "X", sink="db"),
        com(2, "b", 8, "X", sink="db"),
    ]
    assert _table(replay_events(events)) == [("db", 2, 0, 1, "enforces_fence")]


def test_one_stale_commit_outweighs_any_number_of_rejections() -> None:
    """A sink with stale rejections and one stale commit ignores the fence."""
    events = [
        acq(1, "a", 1),
        acq(2, "b", 2),
        rej(1, "a", 3, "X", sink="db"),
        com(1, "a", 4, "Y", sink="db"),
    ]
    assert _table(replay_events(events)) == [("db", 1, 1, 0, "ignores_fence")]


def test_distinct_effects_are_per_workflow_epoch_and_effect_key() -> None:
    """The same effect key committed stale by two displaced epochs, and in another workflow,
    counts three distinct stale effects."""
    events = [
        acq(1, "a", 1),
        acq(2, "b", 2),
        acq(3, "c", 3),
        com(1, "a", 4, "X", sink="s"),
        com(2, "b", 5, "X", sink="s"),
        com(2, "b", 6, "X", sink="s"),
        acq(1, "a", 1, key="other"),
        acq(2, "b", 2, key="other"),
        com(1, "a", 3, "X", sink="s", key="other"),
    ]
    assert _table(replay_events(events)) == [("s", 0, 3, 0, "ignores_fence")]


def test_effect_events_without_a_sink_count_as_unnamed() -> None:
    """Effect events that name no sink are counted under "(unnamed)"; progress names none."""
    events = [acq(1, "a", 1), prog(1, "a", 2), att(1, "a", 3), com(1, "a", 4)]
    assert _table(replay_events(events)) == [(UNNAMED, 0, 0, 1, "unproven")]


def test_a_sink_only_attempted_is_listed_unproven() -> None:
    """A sink named only on attempts is listed, all counts zero, unproven."""
    assert _table(replay_events([acq(1, "a", 1), att(1, "a", 2, sink="q")])) == [
        ("q", 0, 0, 0, "unproven")
    ]


def test_a_late_acquisition_turns_a_current_commit_stale() -> None:
    """A commit counted current becomes a stale commit when an acquisition positioned before
    it arrives late (classified by position, not arrival)."""
    early = replay_events([acq(1, "a", 1), com(1, "a", 3, sink="s")])
    assert _table(early) == [("s", 0, 0, 1, "unproven")]
    late = replay_events([acq(1, "a", 1), com(1, "a", 3, sink="s"), acq(2, "b", 2)])
    assert _table(late) == [("s", 0, 1, 0, "ignores_fence")]


def test_destinations_are_in_the_json_and_text_reports() -> None:
    """--format json has a top-level destinations list; the text report a line per sink."""
    replay = replay_fixture()
    doc = orjson.loads(render_json(replay))
    assert doc["destinations"][0] == {
        "sink": "release-bucket",
        "stale_rejected": 0,
        "stale_committed": 1,
        "current_committed": 1,
        "verdict": "ignores_fence",
    }
    text = render_text(replay)
    assert (
        "  release-bucket  IGNORES FENCE   1 stale committed, 0 stale rejected, 1 current committed"
    ) in text


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_destinations_do_not_depend_on_arrival_order(data: st.DataObject) -> None:
    """For seq-carrying workflows with sinks, any arrival order gives the same destinations."""
    events = data.draw(with_sinks(data.draw(multi_workflow_events())))
    shuffled = data.draw(arrival_orders(events))
    in_order = sorted(events, key=lambda e: (e.workflow_key, e.seq))
    assert _table(replay_events(shuffled)) == _table(replay_events(in_order))


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_the_kept_tally_is_a_walk_of_every_key_after_each_event(data: st.DataObject) -> None:
    """Replay.destinations, kept key by key as events arrive, equals destinations() walked
    over every key state after each event: any arrival order, partly without seq, with
    redelivered copies, and past a per-key bound small enough to evict."""
    events = data.draw(with_sinks(data.draw(multi_workflow_events())))
    events = data.draw(arrival_orders(data.draw(partly_sequenced(events))))
    i, j = data.draw(redelivery(events))
    events = [*events[:j], events[i], *events[j:]]
    cap = data.draw(st.sampled_from([8, 1024]))
    replay = Replay(Detector(DetectorConfig(max_events_per_key=cap)))
    for n, event in enumerate(events, start=1):
        replay.feed_event(event, n)
        assert replay.destinations() == destinations(replay.states.values())


def test_a_sink_no_retained_event_names_any_more_is_not_listed() -> None:
    """A sink named only on effects that were evicted drops out of the kept tally, as
    it drops out of a walk."""
    replay = Replay(Detector(DetectorConfig(max_events_per_key=8)))
    feed = [
        acq(1, "a", 1),
        com(1, "a", 2, "E1", sink="old-bucket"),
        acq(2, "b", 3),
        *[com(2, "b", n, f"E{n}", sink="new-bucket") for n in range(4, 30)],
    ]
    for n, event in enumerate(feed, start=1):
        replay.feed_event(event, n)
    assert [d.sink for d in replay.destinations()] == ["new-bucket"]
    assert replay.destinations() == destinations(replay.states.values())
