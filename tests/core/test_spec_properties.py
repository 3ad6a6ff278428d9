"""SPEC §3-4 as properties over generated workflows (strategies in tests/strategies.py).

(a) any arrival order of the same seq-carrying events gives the same final findings;
(b) the per-key state survives a bytes round trip at any point mid-stream;
(c) findings are monotone: never disappear, never lose severity, revisions 1, 2, 3...;
(d) an exact redelivery changes nothing;
plus per-finding invariants of the record table and deterministic ids.
"""

from __future__ import annotations

import itertools
from collections import defaultdict

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core import SEVERITY_RANK, Event, Finding, Kind, finding_id
from tests.core.conftest import comparable, run
from tests.strategies import (
    arrival_orders,
    multi_workflow_events,
    partly_sequenced,
    random_clocks,
    redelivery,
    workflow_events,
)

PROPS = settings(max_examples=200, deadline=None)
_COMMIT_FAMILY = (Kind.DUPLICATE_COMMIT, Kind.CONFLICTING_COMMIT)
_STALE_KINDS = (Kind.STALE_ACTIVITY, Kind.STALE_ATTEMPT, Kind.STALE_COMMIT)


def _by_position(events: list[Event]) -> list[Event]:
    return sorted(events, key=lambda e: (e.workflow_key, e.seq))


def _dicts(result_calls: list[list[Finding]]) -> list[list[dict[str, object]]]:
    return [[f.to_dict() for f in out] for out in result_calls]


@PROPS
@given(st.data())
def test_any_arrival_order_gives_the_same_final_findings(data: st.DataObject) -> None:
    """Any permutation of the same seq-carrying events gives the same latest finding per
    id, equal on every field but revision and event_offset (SPEC §4)."""
    events = data.draw(multi_workflow_events())
    arrival = data.draw(arrival_orders(events))
    assert comparable(run(arrival).latest) == comparable(run(_by_position(events)).latest)


@PROPS
@given(st.data())
def test_latest_confidence_is_arrival_order_independent(data: st.DataObject) -> None:
    """For seq-carrying workflows, two arrival orders of the same events give every finding
    the same latest confidence (and the same latest content otherwise)."""
    events = data.draw(multi_workflow_events())
    first = run(data.draw(arrival_orders(events))).latest
    second = run(data.draw(arrival_orders(events))).latest
    assert {k: f.confidence for k, f in first.items()} == {
        k: f.confidence for k, f in second.items()
    }
    assert comparable(first) == comparable(second)


def _spec_confidence(f: Finding) -> str:
    # SPEC §4 "Confidence", restated here from the SPEC, not imported from the code.
    if f.ordering == "arrival":
        return "low"
    if f.transition_implied is True:
        return "medium"
    if f.kind == Kind.STALE_ATTEMPT and f.sink_outcome == "unknown":
        return "medium"
    return "high"


@PROPS
@given(st.data())
def test_every_revision_has_the_confidence_its_sources_give(data: st.DataObject) -> None:
    """Every emitted revision, with seq on all, some or none of the events, has the
    confidence SPEC §4 gives its ordering, transition and sink outcome."""
    events = data.draw(multi_workflow_events())
    events = data.draw(st.sampled_from((events, [_no_seq(e) for e in events])))
    events = data.draw(partly_sequenced(events))
    for f in run(events).emitted:
        assert f.confidence == _spec_confidence(f), f.to_dict()


def _no_seq(e: Event) -> Event:
    return msgspec.structs.replace(e, seq=None)


@PROPS
@given(st.data())
def test_worker_clocks_never_change_findings(data: st.DataObject) -> None:
    """Arbitrary worker clocks (ts) on the same events in the same arrival order change
    no finding at all."""
    events = data.draw(arrival_orders(data.draw(multi_workflow_events())))
    stamped = data.draw(random_clocks(events))
    assert _dicts(run(stamped).per_call) == _dicts(run(events).per_call)


@PROPS
@given(st.data())
def test_state_survives_bytes_round_trip_mid_stream(data: st.DataObject) -> None:
    """Serializing every key's state with to_bytes()/from_bytes() (and a fresh Detector)
    at any point mid-stream changes no emitted finding, with or without seq."""
    with_seq = data.draw(st.booleans())
    events = data.draw(multi_workflow_events(with_seq=with_seq))
    if with_seq:
        events = data.draw(arrival_orders(events))
    k = data.draw(st.integers(0, len(events) - 1))
    plain = _dicts(run(events).per_call)
    assert _dicts(run(events, roundtrip=k).per_call) == plain


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_state_survives_bytes_round_trip_before_every_event(data: st.DataObject) -> None:
    """Restoring the state from bytes before every single event changes nothing."""
    events = data.draw(arrival_orders(data.draw(multi_workflow_events())))
    assert _dicts(run(events, roundtrip="every").per_call) == _dicts(run(events).per_call)


@PROPS
@given(st.data())
def test_findings_are_monotone(data: st.DataObject) -> None:
    """Per finding id, emitted revisions are 1, 2, 3, ... in emission order, each new
    revision changes content, severity never decreases, the id stays in the latest set."""
    with_seq = data.draw(st.booleans())
    events = data.draw(multi_workflow_events(with_seq=with_seq))
    if with_seq:
        events = data.draw(arrival_orders(events))
    result = run(events)
    history: dict[str, list[Finding]] = defaultdict(list)
    for f in result.emitted:
        history[f.finding_id].append(f)
    for fid, revs in history.items():
        assert [f.revision for f in revs] == list(range(1, len(revs) + 1)), fid
        ranks = [SEVERITY_RANK[f.severity] for f in revs]
        assert ranks == sorted(ranks), f"severity dropped: {[f.kind.value for f in revs]}"
        for before, after in itertools.pairwise(revs):
            b, a = before.to_dict(), after.to_dict()
            b.pop("revision")
            a.pop("revision")
            assert a != b, "a re-emitted revision must change content"
        assert result.latest[fid] == revs[-1]
        assert len({f.workflow_key for f in revs}) == 1


@PROPS
@given(st.data())
def test_exact_redelivery_changes_nothing(data: st.DataObject) -> None:
    """Feeding one event a second time later (same seq and event_id) emits nothing on the
    copy and leaves every other emission unchanged (with or without seq)."""
    with_seq = data.draw(st.booleans())
    events = data.draw(multi_workflow_events(with_seq=with_seq))
    if with_seq:
        events = data.draw(arrival_orders(events))
    i, j = data.draw(redelivery(events))
    fed = [(e, n) for n, e in enumerate(events, start=1)]
    again = [*fed[:j], (events[i], 10_000 + i), *fed[j:]]
    plain = run(fed).per_call
    doubled = run(again).per_call
    assert doubled[j] == []
    assert _dicts(doubled[:j] + doubled[j + 1 :]) == _dicts(plain)


def _identity(f: Finding) -> tuple[int | None, str | None]:
    if f.kind in (Kind.STALE_ACTIVITY, Kind.EPOCH_REUSE, Kind.EPOCH_REGRESSION):
        return f.stale_epoch, None
    if f.kind in (Kind.STALE_ATTEMPT, Kind.STALE_COMMIT):
        return f.stale_epoch, f.effect_key
    return None, f.effect_key


@PROPS
@given(st.data())
def test_every_finding_honours_the_record_table(data: st.DataObject) -> None:
    """Every emitted finding: id from its identity, severity of its kind, an action, evidence
    in position order containing the raising event, epochs only (and sorted) for the commit
    family, a current epoch above the stale one for stale kinds and regressions."""
    events = data.draw(arrival_orders(data.draw(multi_workflow_events())))
    by_key: dict[str, list[Event]] = defaultdict(list)
    for e in events:
        by_key[e.workflow_key].append(e)
    for f in run(events).emitted:
        epoch, effect = _identity(f)
        assert f.finding_id == finding_id(f.kind, f.workflow_key, epoch, effect)
        assert f.severity == f.kind.severity
        assert f.action
        assert f.ordering == "authoritative"
        positions = [e.position for e in f.evidence]
        assert positions == sorted(positions)
        assert f.event_seq in positions
        raising = [
            e
            for e in by_key[f.workflow_key]
            if e.seq == f.event_seq and e.type.value == f.event_type
        ]
        assert raising, "the raising event is one of the inputs"
        if f.kind in _COMMIT_FAMILY:
            assert f.epochs is not None
            assert list(f.epochs) == sorted(set(f.epochs))
            assert f.stale_epoch == f.epochs[0]
            assert f.event_type == "effect_committed"
            if f.kind == Kind.DUPLICATE_COMMIT:
                assert f.same_owner is (len(f.epochs) == 1)
            else:
                assert len(f.epochs) >= 2
        else:
            assert f.epochs is None
        if f.kind in _STALE_KINDS or f.kind == Kind.EPOCH_REGRESSION:
            assert f.current_epoch is not None
            assert f.current_epoch > f.stale_epoch
            assert raising[0].epoch == f.stale_epoch
        if f.kind in (Kind.EPOCH_REUSE, Kind.EPOCH_REGRESSION):
            assert f.event_type == "lease_acquired"
        if f.kind == Kind.STALE_ACTIVITY:
            assert f.event_type == "progress"
        if f.kind == Kind.STALE_ATTEMPT:
            assert f.event_type in ("effect_attempted", "effect_rejected")
            assert f.sink_outcome in ("committed", "rejected", "unknown")
        if f.kind == Kind.STALE_COMMIT:
            assert f.event_type == "effect_committed"


@PROPS
@given(workflow_events(with_seq=True))
def test_no_lower_epoch_event_after_takeover_means_no_stale_finding(events: list[Event]) -> None:
    """A workflow where no event of a lower epoch is positioned after a higher epoch's
    earliest evidence (clean handovers only) has no stale_* and no epoch_regression."""
    first_pos: dict[int, int] = {}
    seqs: list[tuple[Event, int]] = []
    for e in events:
        assert e.seq is not None
        seqs.append((e, e.seq))
        first_pos[e.epoch] = min(first_pos.get(e.epoch, e.seq), e.seq)
    # lease_released is never a finding and outcome_verified is never stale.
    clean = all(
        not (a > e.epoch and first_pos[a] < seq)
        for e, seq in seqs
        if e.type.value not in ("outcome_verified", "lease_released")
        for a in first_pos
    )
    kinds = {f.kind for f in run(events).findings()}
    if clean:
        assert not kinds & {*_STALE_KINDS, Kind.EPOCH_REGRESSION}
    else:
        assert kinds, "stale evidence of some kind must give some finding"
