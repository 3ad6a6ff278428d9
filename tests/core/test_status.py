"""The per-workflow status record (SPEC §8), pure: streams/core/status.py."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core import Detector, DetectorConfig, Event, KeyState
from streams.core.pending import pending_status
from streams.core.replay import Replay
from streams.core.status import (
    ATTEMPTED,
    COMMITTED,
    REJECTED,
    WorkflowStatus,
    build_status,
    findings_of,
    stale_effects,
    status_from_replay,
    status_json,
)
from tests.core.conftest import acq, att, com, prog, rej, rel, ver
from tests.strategies import arrival_orders, multi_workflow_events, with_sinks


def run(events: list[Event]) -> tuple[KeyState, Replay]:
    replay = Replay()
    for i, e in enumerate(events):
        replay.feed_event(e, i)
    return replay.states["wf"], replay


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_findings_rebuilt_from_state_equal_the_replays_latest(data: st.DataObject) -> None:
    """findings_of(state) gives the latest revision of every finding the detector emitted."""
    events = data.draw(multi_workflow_events())
    replay = Replay()
    for i, e in enumerate(events):
        replay.feed_event(e, i)
    for key, state in replay.states.items():
        rebuilt = {f.finding_id: f.to_dict() for f in findings_of(state, key)}
        kept = {f.finding_id: f.to_dict() for f in replay.latest.values() if f.workflow_key == key}
        assert rebuilt == kept


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_status_json_is_the_records_json(data: st.DataObject) -> None:
    """status_json gives the bytes of build_status(...).to_json() and its stale epochs."""
    events = data.draw(multi_workflow_events())
    replay = Replay()
    for i, e in enumerate(events):
        replay.feed_event(e, i)
    for key, state in replay.states.items():
        found = findings_of(state, key)
        times = {ev.position: 1_000 + i for i, ev in enumerate(state.events) if i % 2}
        kw = {"seen_ms": {e: 7 for e in state.acq}, "event_ms": times, "updated_ms": 9}
        record = build_status(key, state, found, **kw)
        assert status_json(key, state, found, **kw) == (record.to_json(), record.stale_epochs)


@pytest.mark.parametrize("worker", ['w"\\/', "w\u00e9\u2028\U0001f600", "w\x00\x1f\x7f", "w" * 300])
def test_status_json_keeps_orjsons_bytes_for_escaped_and_unicode_names(worker: str) -> None:
    """status_json's bytes equal orjson's encoding of the record for names that need escaping."""
    detector = Detector()
    state = detector.new_state()
    events = [acq(1, worker, 1), att(1, worker, 2), acq(2, "w2", 3), att(1, worker, 4)]
    for i, e in enumerate(events):
        detector.process(state, e, i)
    found = findings_of(state, "wf")
    kw = {"seen_ms": {1: 5}, "event_ms": {4: 2**62}, "updated_ms": 2**62}
    expected = build_status("wf", state, found, **kw).to_json()
    assert status_json("wf", state, found, **kw)[0] == expected


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_a_pending_status_encodes_what_status_json_gives_at_its_batch(data: st.DataObject) -> None:
    """pending_status(...).to_json() equals status_json with the batch's timestamps."""
    events = data.draw(multi_workflow_events())
    replay = Replay()
    for i, e in enumerate(events):
        replay.feed_event(e, i)
    for key, state in replay.states.items():
        times = {ev.position: 1_000 + i for i, ev in enumerate(state.events) if i % 2}
        seen = {e: 7 for e in state.acq if e % 2}
        accepted = state.n_events - state.n_redeliveries
        pending = pending_status(key, state, accepted, seen_ms=seen, event_ms=times, updated_ms=9)
        doc, stale = status_json(
            key, state, findings_of(state, key), seen_ms=seen, event_ms=times, updated_ms=9
        )
        assert pending.to_json() == doc
        assert pending.seen == (
            {s.epoch: s.last_seen_ms for s in stale if s.last_seen_ms is not None}
            if stale
            else seen
        )


def test_a_pending_status_read_after_its_key_moved_on_raises() -> None:
    """A pending status never writes a later state's status under its own timestamps."""
    state, _replay = run([acq(1, "a", 1), prog(1, "a", 2)])
    pending = pending_status("wf", state, 2, seen_ms={}, event_ms={}, updated_ms=5)
    Detector().process(state, prog(1, "a", 3), 3)
    with pytest.raises(RuntimeError):
        pending.to_json()


def test_a_handover_with_a_stale_commit_shows_owner_stale_epoch_and_open_findings() -> None:
    """Current epoch and acquisition, the stale epoch's count and position, open worst first."""
    state, replay = run(
        [acq(1, "a", 1), prog(1, "a", 2), acq(2, "b", 3), prog(1, "a", 4), com(1, "a", 5)]
    )
    s = build_status("wf", state, replay.latest.values(), seen_ms={1: 1234}, updated_ms=99)
    assert (s.current_epoch, s.current_worker, s.acquired_seq) == (2, "b", 3)
    assert s.acquisition_implied is False and s.released is False
    assert s.last_position == 5
    assert [x.to_dict() for x in s.stale_epochs] == [
        {"epoch": 1, "worker": "a", "events": 2, "last_position": 5, "last_seen_ms": 1234}
    ]
    assert [f.kind for f in s.open] == ["stale_commit", "stale_activity"]
    assert s.worst_open == "incident" and s.cleared == ()
    assert s.updated_ms == 99


def test_verification_by_the_current_owner_after_a_fenced_attempt_clears_it() -> None:
    """A rejected stale attempt plus the current owner's verification clears it (SPEC §4)."""
    state, replay = run(
        [acq(1, "a", 1), acq(2, "b", 2), att(1, "a", 3), rej(1, "a", 4), ver(2, "b", 5)]
    )
    s = build_status("wf", state, replay.latest.values())
    assert s.open == ()
    assert [f.kind for f in s.cleared] == ["stale_attempt"]
    assert s.worst_open is None


def test_released_only_while_nothing_follows_the_release() -> None:
    """released is true when the current epoch's release is the latest evidence."""
    state, _ = run([acq(1, "a", 1), rel(1, "a", 2)])
    assert build_status("wf", state, ()).released is True
    state, _ = run([acq(1, "a", 1), rel(1, "a", 2), prog(1, "a", 3)])
    assert build_status("wf", state, ()).released is False


def test_an_epoch_seen_before_its_acquisition_is_implied() -> None:
    """An epoch whose earliest evidence is not lease_acquired reads acquisition_implied."""
    state, _ = run([prog(3, "c", 1)])
    s = build_status("wf", state, ())
    assert (s.current_epoch, s.acquisition_implied, s.acquired_seq) == (3, True, 1)


def test_empty_state_has_no_owner() -> None:
    """Before any evidence every field is null or empty."""
    s = build_status("wf", Detector().new_state(), ())
    assert s.current_epoch is None and s.last_position is None and s.stale_epochs == ()


def test_json_round_trip_and_content_drop_the_timestamps() -> None:
    """from_dict(to_dict) is the identity; content() drops updated_ms and last_seen_ms."""
    state, replay = run([acq(1, "a", 1), acq(2, "b", 2), prog(1, "a", 3)])
    s = build_status("wf", state, replay.latest.values(), seen_ms={1: 5}, updated_ms=7)
    assert WorkflowStatus.from_dict(s.to_dict()) == s
    assert "updated_ms" not in s.content()
    assert "last_seen_ms" not in s.content()["stale_epochs"][0]
    assert s.content() == build_status("wf", state, replay.latest.values()).content()


def test_stale_effects_by_outcome() -> None:
    """Every stale effect is attempted; a stale rejection adds rejected, a commit committed."""
    events = [
        acq(1, "a", 1),
        att(1, "a", 2, "X", sink="db"),  # before the handover: not stale
        acq(2, "b", 3),
        att(1, "a", 4, "Y", sink="db"),
        rej(1, "a", 5, "Y", sink="db"),
        com(1, "a", 6, "Z"),
    ]
    state, _ = run(events)
    assert stale_effects("wf", state) == {
        (ATTEMPTED, "db", 1, "Y"),
        (REJECTED, "db", 1, "Y"),
        (ATTEMPTED, "unnamed", 1, "Z"),
        (COMMITTED, "unnamed", 1, "Z"),
    }


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_status_from_replay_is_independent_of_how_the_stream_is_cut(data: st.DataObject) -> None:
    """Status from a replay equals the one rebuilt from serialized state and findings_of."""
    events = data.draw(multi_workflow_events().flatmap(with_sinks))
    replay = Replay()
    for i, e in enumerate(events):
        replay.feed_event(e, i)
    direct = status_from_replay(replay.states, replay.latest.values())
    for key, state in replay.states.items():
        restored = KeyState.from_bytes(state.to_bytes())
        live = build_status(key, restored, findings_of(restored, key))
        assert live == direct[key]


def _full_scan(state: KeyState) -> dict[int, list[object]]:
    """stale_epochs of a copy of ``state`` without its memo (decoded from its bytes)."""
    return KeyState.from_bytes(state.to_bytes()).stale_epochs()


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_stale_epochs_asked_after_every_event_equal_a_full_scan(data: st.DataObject) -> None:
    """The memoized stale-epoch scan, asked after each event as the live batch does, equals
    a scan from scratch, whatever the arrival order, redeliveries and evictions."""
    events = data.draw(multi_workflow_events())
    events = data.draw(arrival_orders(events))
    detector = Detector(
        DetectorConfig(max_events_per_key=data.draw(st.sampled_from([8, 12, 1024])))
    )
    states: dict[str, KeyState] = {}
    for i, e in enumerate(events):
        state = states.setdefault(e.workflow_key, detector.new_state())
        detector.process(state, e, i)
        if data.draw(st.booleans()):
            assert state.stale_epochs() == _full_scan(state)
    for key, state in states.items():
        first = state.stale_epochs()
        assert first == _full_scan(state)
        assert state.stale_epochs() == first  # asked again: the same answer
        status_json(key, state, findings_of(state, key), event_ms={})
    # The one empty result every clean key shares was never changed.
    assert KeyState().stale_epochs() == {}


def test_stale_epochs_of_a_long_key_scan_only_the_events_added_since() -> None:
    """A stale event appended after a memoized scan is counted once, and the earlier
    result handed out is left as it was."""
    detector = Detector()
    state = detector.new_state()
    stream = [acq(1, "w1", seq=1), acq(2, "w2", seq=2)] + [
        prog(1, "w1", seq=s) for s in range(3, 40)
    ]
    for i, e in enumerate(stream):
        detector.process(state, e, i)
    before = state.stale_epochs()
    assert before == {1: ["w1", 37, 39]}
    detector.process(state, prog(1, "w1", seq=40), 40)
    after = state.stale_epochs()
    assert after == {1: ["w1", 38, 40]} == _full_scan(state)
    assert before == {1: ["w1", 37, 39]}
