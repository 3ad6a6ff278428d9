"""Helpers for the SPEC-driven detector tests (tests/core/test_spec_*.py).

These are written from SPEC.md alone, not from the detector's code: a tiny event
builder and a runner that feeds (event, offset) pairs to one Detector with one
KeyState per workflow key, the way the live processor and the audit do.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from streams.core import Detector, DetectorConfig, Event, EventType, Finding, KeyState
from streams.core.replay import Replay

FIXTURE = Path(__file__).resolve().parents[2] / "examples" / "reference.jsonl"

__all__ = [
    "RunResult",
    "acq",
    "att",
    "com",
    "comparable",
    "ev",
    "make_detector",
    "prog",
    "rej",
    "rel",
    "replay_events",
    "replay_fixture",
    "run",
    "ver",
]

_NEEDS_EFFECT = {"effect_attempted", "effect_committed", "effect_rejected", "outcome_verified"}


def ev(
    type: str,
    epoch: int,
    worker: str,
    seq: int | None = None,
    effect_key: str | None = None,
    *,
    key: str = "wf",
    sink: str | None = None,
    event_id: str | None = None,
    ts: str | None = None,
    attrs: dict[str, Any] | None = None,
) -> Event:
    """One event; effect types default to effect key ``"E"`` so short tests stay short."""
    if effect_key is None and type in _NEEDS_EFFECT:
        effect_key = "E"
    return Event(
        type=EventType(type),
        workflow_key=key,
        epoch=epoch,
        worker_id=worker,
        seq=seq,
        effect_key=effect_key,
        sink=sink,
        event_id=event_id,
        ts=ts,
        attrs=attrs,
    )


def acq(epoch: int, worker: str, seq: int | None = None, **kw: Any) -> Event:
    return ev("lease_acquired", epoch, worker, seq, **kw)


def rel(epoch: int, worker: str, seq: int | None = None, **kw: Any) -> Event:
    return ev("lease_released", epoch, worker, seq, **kw)


def prog(epoch: int, worker: str, seq: int | None = None, **kw: Any) -> Event:
    return ev("progress", epoch, worker, seq, **kw)


def att(epoch: int, worker: str, seq: int | None = None, effect_key: str = "E", **kw: Any) -> Event:
    return ev("effect_attempted", epoch, worker, seq, effect_key, **kw)


def com(epoch: int, worker: str, seq: int | None = None, effect_key: str = "E", **kw: Any) -> Event:
    return ev("effect_committed", epoch, worker, seq, effect_key, **kw)


def rej(epoch: int, worker: str, seq: int | None = None, effect_key: str = "E", **kw: Any) -> Event:
    return ev("effect_rejected", epoch, worker, seq, effect_key, **kw)


def ver(epoch: int, worker: str, seq: int | None = None, effect_key: str = "E", **kw: Any) -> Event:
    return ev("outcome_verified", epoch, worker, seq, effect_key, **kw)


def make_detector(max_events_per_key: int = 1024) -> Detector:
    return Detector(DetectorConfig(max_events_per_key=max_events_per_key))


@dataclass
class RunResult:
    """Everything a run emitted, plus the latest revision per finding id."""

    per_call: list[list[Finding]]
    emitted: list[Finding] = field(default_factory=list)
    latest: dict[str, Finding] = field(default_factory=dict)

    def findings(self) -> list[Finding]:
        return list(self.latest.values())

    def kinds(self) -> list[str]:
        return sorted(f.kind.value for f in self.latest.values())

    def of_kind(self, kind: str) -> list[Finding]:
        return [f for f in self.latest.values() if f.kind.value == kind]

    def only(self, kind: str) -> Finding:
        """The single latest finding of ``kind`` (fails the test if not exactly one)."""
        found = self.of_kind(kind)
        assert len(found) == 1, f"expected one {kind}, got {[f.to_dict() for f in found]}"
        return found[0]


def run(
    events: Iterable[Event | tuple[Event, int]],
    *,
    detector: Detector | None = None,
    roundtrip: str | int | None = None,
) -> RunResult:
    """Feed events in the given (arrival) order; an event without an explicit
    offset gets its 1-based arrival index, like a JSON Lines line number.

    ``roundtrip``: ``"every"`` serializes and restores every key's state (with a
    fresh Detector, as after a restart) before each event; an int does it once,
    before the event at that index.
    """
    det = detector or make_detector()
    config = DetectorConfig(max_events_per_key=1024) if detector is None else None
    states: dict[str, KeyState] = {}
    result = RunResult(per_call=[])
    for i, item in enumerate(events):
        event, offset = item if isinstance(item, tuple) else (item, i + 1)
        if roundtrip == "every" or roundtrip == i:
            states = {k: KeyState.from_bytes(s.to_bytes()) for k, s in states.items()}
            det = Detector(config) if config is not None else det
        state = states.get(event.workflow_key)
        if state is None:
            state = states[event.workflow_key] = det.new_state()
        out = det.process(state, event, offset)
        result.per_call.append(out)
        for f in out:
            result.emitted.append(f)
            result.latest[f.finding_id] = f
    return result


def replay_events(events: Iterable[Event]) -> Replay:
    """A Replay fed ``events`` in order, offsets 1, 2, 3... (like line numbers)."""
    replay = Replay()
    for n, event in enumerate(events, start=1):
        replay.feed_event(event, n)
    return replay


def replay_fixture() -> Replay:
    """A Replay of the SPEC §5 reference fixture file."""
    replay = Replay()
    with FIXTURE.open("rb") as fh:
        replay.feed_stream(fh.read, source="fixture")
    return replay


def comparable(findings: Sequence[Finding] | dict[str, Finding]) -> dict[str, dict[str, Any]]:
    """Findings keyed by id, each as its dict without the arrival-dependent
    fields SPEC §4 exempts (``revision``, ``event_offset``)."""
    items = findings.values() if isinstance(findings, dict) else findings
    out: dict[str, dict[str, Any]] = {}
    for f in items:
        d = f.to_dict()
        d.pop("revision")
        d.pop("event_offset")
        out[f.finding_id] = d
    return out


@pytest.fixture
def detector() -> Detector:
    return make_detector()
