"""A differential test: the detector against a direct, slow transcription of SPEC §4.

The oracle below reads the definitions literally over the whole (deduplicated)
evidence, sorted by position, with no incremental state. For generated
seq-carrying workflows in any arrival order, the detector's final findings must
be exactly the oracle's: same set of identities, and per finding the kind,
raising event, stale and current owner, transition, epochs, sink outcome and
same_owner flag.

Readings (SPEC silent): epoch_reuse is raised by the first lease_acquired (by
position) whose worker differs from the epoch's first acquisition's worker, and
its stale_worker is not checked; the commit family's stale_worker is the worker
of the lowest committing epoch's first commit.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core import Event, Finding, Kind, finding_id
from tests.core.conftest import run
from tests.strategies import arrival_orders, multi_workflow_events

_STALEABLE = {
    "lease_released",
    "progress",
    "effect_attempted",
    "effect_committed",
    "effect_rejected",
}


@dataclass(frozen=True)
class Expected:
    kind: Kind
    workflow_key: str
    event_seq: int
    event_type: str
    stale_epoch: int
    stale_worker: str | None  # None: not checked
    current: tuple[int, str, int, bool] | None  # epoch, worker, transition seq, implied
    epochs: tuple[int, ...] | None
    effect_key: str | None
    sink_outcome: str | None  # checked for stale_attempt only
    same_owner: bool | None  # checked for duplicate_commit only


def _dedup(events: list[Event]) -> list[Event]:
    seen_ids: set[str] = set()
    seen_sigs: set[tuple[object, ...]] = set()
    out = []
    for e in events:
        sig = (e.seq, e.type, e.epoch, e.effect_key)
        if (e.event_id is not None and e.event_id in seen_ids) or sig in seen_sigs:
            continue
        if e.event_id is not None:
            seen_ids.add(e.event_id)
        seen_sigs.add(sig)
        out.append(e)
    return out


def _pos(e: Event) -> int:
    assert e.seq is not None
    return e.seq


def oracle_for_key(key: str, events: list[Event]) -> dict[str, Expected]:
    """SPEC §4 read literally for one workflow key's seq-carrying events."""
    evs = sorted(_dedup(events), key=_pos)
    first: dict[int, Event] = {}
    for e in evs:
        first.setdefault(e.epoch, e)

    def current_before(pos: int) -> tuple[int, str, int, bool] | None:
        acquired = [a for a, fe in first.items() if _pos(fe) < pos]
        if not acquired:
            return None
        a = max(acquired)
        fe = first[a]
        return (a, fe.worker_id, _pos(fe), fe.type.value != "lease_acquired")

    def stale(e: Event) -> bool:
        return any(a > e.epoch and _pos(fe) < _pos(e) for a, fe in first.items())

    out: dict[str, Expected] = {}

    def add(kind: Kind, ident: tuple[int | None, str | None], exp: Expected) -> None:
        out[finding_id(kind, key, ident[0], ident[1])] = exp

    def stale_finding(kind: Kind, raising: Event, **kw: object) -> Expected:
        return Expected(
            kind=kind,
            workflow_key=key,
            event_seq=_pos(raising),
            event_type=raising.type.value,
            stale_epoch=raising.epoch,
            stale_worker=raising.worker_id,
            current=current_before(_pos(raising)),
            epochs=None,
            effect_key=raising.effect_key,
            sink_outcome=kw.get("sink_outcome"),  # type: ignore[arg-type]
            same_owner=None,
        )

    stale_evs = [e for e in evs if e.type.value in _STALEABLE and stale(e)]
    by_epoch: dict[int, list[Event]] = defaultdict(list)
    by_epoch_effect: dict[tuple[int, str], list[Event]] = defaultdict(list)
    commits_stale: dict[tuple[int, str], list[Event]] = defaultdict(list)
    rejected_stale: set[tuple[int, str]] = set()
    for e in stale_evs:
        t = e.type.value
        if t == "progress":
            by_epoch[e.epoch].append(e)
        elif t in ("effect_attempted", "effect_rejected"):
            assert e.effect_key is not None
            by_epoch_effect[(e.epoch, e.effect_key)].append(e)
            if t == "effect_rejected":
                rejected_stale.add((e.epoch, e.effect_key))
        elif t == "effect_committed":
            assert e.effect_key is not None
            commits_stale[(e.epoch, e.effect_key)].append(e)
    for epoch, group in by_epoch.items():
        add(Kind.STALE_ACTIVITY, (epoch, None), stale_finding(Kind.STALE_ACTIVITY, group[0]))
    for (epoch, effect), group in by_epoch_effect.items():
        if (epoch, effect) in commits_stale:
            outcome = "committed"
        elif (epoch, effect) in rejected_stale:
            outcome = "rejected"
        else:
            outcome = "unknown"
        add(
            Kind.STALE_ATTEMPT,
            (epoch, effect),
            stale_finding(Kind.STALE_ATTEMPT, group[0], sink_outcome=outcome),
        )
    for (epoch, effect), group in commits_stale.items():
        add(Kind.STALE_COMMIT, (epoch, effect), stale_finding(Kind.STALE_COMMIT, group[0]))

    acquisitions: dict[int, list[Event]] = defaultdict(list)
    for e in evs:
        if e.type.value == "lease_acquired":
            acquisitions[e.epoch].append(e)
    for epoch, group in acquisitions.items():
        regressing = [
            e for e in group if any(a > epoch and _pos(fe) < _pos(e) for a, fe in first.items())
        ]
        if regressing:
            add(
                Kind.EPOCH_REGRESSION,
                (epoch, None),
                stale_finding(Kind.EPOCH_REGRESSION, regressing[0]),
            )
        others = [e for e in group if e.worker_id != group[0].worker_id]
        if others:
            exp = stale_finding(Kind.EPOCH_REUSE, others[0])
            add(Kind.EPOCH_REUSE, (epoch, None), _replace(exp, stale_worker=None))

    commits: dict[str, list[Event]] = defaultdict(list)
    for e in evs:
        if e.type.value == "effect_committed":
            assert e.effect_key is not None
            commits[e.effect_key].append(e)
    for effect, group in commits.items():
        if len(group) < 2:
            continue
        epochs = tuple(sorted({e.epoch for e in group}))
        conflicting = len(epochs) >= 2 and any(stale(e) for e in group)
        differing = [e for e in group if e.epoch != group[0].epoch]
        raising = differing[0] if differing else group[1]
        kind = Kind.CONFLICTING_COMMIT if conflicting else Kind.DUPLICATE_COMMIT
        lowest_worker = next(e.worker_id for e in group if e.epoch == epochs[0])
        add(
            kind,
            (None, effect),
            Expected(
                kind=kind,
                workflow_key=key,
                event_seq=_pos(raising),
                event_type="effect_committed",
                stale_epoch=epochs[0],
                stale_worker=lowest_worker,
                current=current_before(_pos(raising)),
                epochs=epochs,
                effect_key=effect,
                sink_outcome=None,
                same_owner=(len(epochs) == 1) if kind == Kind.DUPLICATE_COMMIT else None,
            ),
        )
    return out


def _replace(exp: Expected, **changes: Any) -> Expected:
    return dataclasses.replace(exp, **changes)


def oracle(events: list[Event]) -> dict[str, Expected]:
    by_key: dict[str, list[Event]] = defaultdict(list)
    for e in events:
        by_key[e.workflow_key].append(e)
    out: dict[str, Expected] = {}
    for key, group in by_key.items():
        out.update(oracle_for_key(key, group))
    return out


def _observed(f: Finding, exp: Expected) -> Expected:
    """The finding projected onto what the oracle predicts."""
    current = (
        None
        if f.current_epoch is None
        else (
            f.current_epoch,
            f.current_worker,
            f.transition_seq,
            f.transition_implied,
        )
    )
    return Expected(
        kind=f.kind,
        workflow_key=f.workflow_key,
        event_seq=f.event_seq,  # type: ignore[arg-type]
        event_type=f.event_type,
        stale_epoch=f.stale_epoch,
        stale_worker=f.stale_worker if exp.stale_worker is not None else None,
        current=current,  # type: ignore[arg-type]
        epochs=f.epochs,
        effect_key=f.effect_key,
        sink_outcome=f.sink_outcome if exp.kind == Kind.STALE_ATTEMPT else None,
        same_owner=f.same_owner if exp.kind == Kind.DUPLICATE_COMMIT else None,
    )


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_detector_matches_a_literal_reading_of_the_spec(data: st.DataObject) -> None:
    """For generated seq-carrying workflows in any arrival order, the final findings are
    exactly those a literal, non-incremental reading of SPEC §4 predicts."""
    events = data.draw(multi_workflow_events())
    arrival = data.draw(arrival_orders(events))
    expected = oracle(events)
    latest = run(arrival).latest
    assert sorted(latest) == sorted(expected), (
        "finding identities differ: got "
        + str(sorted((f.kind.value, f.stale_epoch, f.effect_key) for f in latest.values()))
        + " expected "
        + str(sorted((e.kind.value, e.stale_epoch, e.effect_key) for e in expected.values()))
    )
    for fid, exp in expected.items():
        assert _observed(latest[fid], exp) == exp


@settings(max_examples=200, deadline=None)
@given(multi_workflow_events(with_seq=False))
def test_detector_matches_the_spec_without_seq(events: list[Event]) -> None:
    """Without seq, position is arrival: the final findings are the oracle's over the same
    events with each one's offset as its position (event_offset in place of event_seq;
    Reading: transition_seq is not compared, SPEC names no seq to report)."""
    positioned = [_with_seq(e, n) for n, e in enumerate(events, start=1)]
    expected = oracle(positioned)
    latest = run(events).latest
    assert sorted(latest) == sorted(expected)
    for fid, exp in expected.items():
        f = latest[fid]
        assert f.event_seq is None
        assert f.ordering == "arrival"
        got = _observed(f, exp)
        got = _replace(
            got,
            event_seq=f.event_offset,
            current=None if got.current is None else (*got.current[:2], None, got.current[3]),
        )
        want = _replace(
            exp,
            current=None if exp.current is None else (*exp.current[:2], None, exp.current[3]),
        )
        assert got == want


def _with_seq(e: Event, seq: int) -> Event:
    return Event(
        type=e.type,
        workflow_key=e.workflow_key,
        epoch=e.epoch,
        worker_id=e.worker_id,
        seq=seq,
        effect_key=e.effect_key,
        event_id=e.event_id,
    )
