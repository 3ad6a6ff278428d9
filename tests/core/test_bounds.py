"""Per-key state is bounded; what happens at the bound is counted and documented."""

from __future__ import annotations

import pytest

from streams.core import Detector, DetectorConfig, Event, EventType, KeyState
from streams.core.detector import StateError


def _e(t: str, epoch: int, seq: int | None, worker: str = "w", ek: str | None = None) -> Event:
    return Event(
        type=EventType(t), workflow_key="wf", epoch=epoch, worker_id=worker, seq=seq, effect_key=ek
    )


def test_retained_evidence_never_exceeds_the_cap() -> None:
    """A key with 10,000 checkpoints retains at most max_events_per_key and counts evictions."""
    det = Detector(DetectorConfig(max_events_per_key=64))
    st = det.new_state()
    det.process(st, _e("lease_acquired", 1, 1), 1)
    for i in range(2, 10_002):
        det.process(st, _e("progress", 1, i), i)
        assert len(st) <= 64
    assert st.counters["evicted"] == 10_001 - len(st)
    assert len(st.to_bytes()) < 64 * 200  # the serialized state is bounded too


def test_acquisitions_and_stale_evidence_survive_eviction() -> None:
    """Fresh checkpoints are forgotten first: a takeover far back still makes new events stale."""
    det = Detector(DetectorConfig(max_events_per_key=16))
    st = det.new_state()
    det.process(st, _e("lease_acquired", 1, 1, "a"), 1)
    det.process(st, _e("lease_acquired", 2, 2, "b"), 2)
    for i in range(3, 500):
        det.process(st, _e("progress", 2, i, "b"), i)
    out = det.process(st, _e("effect_committed", 1, 500, "a", "E"), 500)
    kinds = {f.kind.value for f in out}
    assert kinds == {"stale_commit"}
    assert out[0].current_epoch == 2 and out[0].transition_seq == 2


def test_late_evidence_behind_the_horizon_is_counted_and_still_classified() -> None:
    """An event positioned before forgotten evidence is counted and classified on what remains."""
    det = Detector(DetectorConfig(max_events_per_key=16))
    st = det.new_state()
    det.process(st, _e("lease_acquired", 1, 100, "a"), 1)
    for i in range(101, 200):
        det.process(st, _e("progress", 1, i, "a"), i)
    assert st.counters["evicted"] > 0
    # Epoch 2 was acquired at seq 150 but its record arrives late; seq 150 is behind the horizon.
    out = det.process(st, _e("lease_acquired", 2, 150, "b"), 300)
    assert st.counters["late_beyond_horizon"] == 1
    f = next(f for f in out if f.kind.value == "stale_activity")
    assert f.stale_epoch == 1 and f.current_epoch == 2
    assert f.event_seq is not None and f.event_seq > 150


def test_finding_identities_per_key_are_bounded() -> None:
    """Past max_findings_per_key the oldest identity is forgotten and counted."""
    det = Detector(DetectorConfig(max_events_per_key=4096, max_findings_per_key=8))
    st = det.new_state()
    det.process(st, _e("lease_acquired", 1, 1, "a"), 1)
    det.process(st, _e("lease_acquired", 2, 2, "b"), 2)
    emitted = 0
    for i in range(20):
        emitted += len(det.process(st, _e("effect_attempted", 1, 3 + i, "a", f"E{i}"), 3 + i))
    assert emitted == 20
    assert len(st.emitted) == 8
    assert st.counters["findings_forgotten"] == 12


def test_state_round_trips_through_bytes() -> None:
    """to_bytes/from_bytes keeps evidence, revisions and counters."""
    det = Detector()
    st = det.new_state()
    for i, (t, ep, w) in enumerate(
        [("lease_acquired", 1, "a"), ("lease_acquired", 2, "b"), ("progress", 1, "a")], start=1
    ):
        det.process(st, _e(t, ep, i, w), i)
    copy = KeyState.from_bytes(st.to_bytes())
    assert copy.to_bytes() == st.to_bytes()
    # A second stale checkpoint changes nothing in either copy (one finding per stale epoch).
    assert det.process(copy, _e("progress", 1, 4, "a"), 4) == []


@pytest.mark.parametrize("blob", [b"", b"{", b"[]", b'{"v": 99}', b'{"v": 1, "e": 3}'])
def test_corrupt_state_raises_a_typed_error(blob: bytes) -> None:
    """Undecodable state bytes raise StateError, never a bare KeyError or TypeError."""
    with pytest.raises(StateError):
        KeyState.from_bytes(blob)


def test_config_rejects_nonsense_bounds() -> None:
    """A cap too small to hold a takeover is refused up front."""
    with pytest.raises(ValueError, match="max_events_per_key"):
        DetectorConfig(max_events_per_key=2)


def test_a_run_of_one_workers_events_keeps_one_copy_of_its_id() -> None:
    """Consecutive events of one worker retain one worker-id string, not one per event."""
    det = Detector()
    st = det.new_state()
    # Separate string objects, as each decoded event carries its own.
    ids = ["".join(["w-", c]) for c in "aaabba"]
    for seq, w in enumerate(ids, start=1):
        det.process(st, _e("progress" if seq > 1 else "lease_acquired", 1, seq, w), seq)
    workers = [ev.worker for ev in st.events]
    assert workers == ids
    assert workers[0] is workers[1] is workers[2]
    assert workers[3] is workers[4] and workers[3] is not workers[2]
    assert len({id(w) for w in workers}) == 3
