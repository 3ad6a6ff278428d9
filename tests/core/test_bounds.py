"""Per-key state is bounded; what happens at the bound is counted and documented."""

from __future__ import annotations

import pytest

from streams.core import Detector, DetectorConfig, Event, EventType, KeyState
from streams.core.detector import ID_SET_ABOVE, MAX_SHARED_WORKERS, StateError


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


def test_events_of_one_worker_keep_one_copy_of_its_id_across_keys() -> None:
    """Every retained event of a worker, on any key, shares one worker-id string."""
    det = Detector()
    a, b = det.new_state(), det.new_state()
    # Separate string objects, as each decoded event carries its own.
    ids = ["".join(["w-", c]) for c in "aaabba"]
    for seq, w in enumerate(ids, start=1):
        det.process(a, _e("progress" if seq > 1 else "lease_acquired", 1, seq, w), seq)
        det.process(
            b, _e("progress" if seq > 1 else "lease_acquired", 1, seq, "".join([w[:2], w[2:]])), seq
        )
    workers = [ev.worker for ev in a.events] + [ev.worker for ev in b.events]
    assert workers == ids + ids
    assert len({id(w) for w in workers}) == 2


def test_the_shared_worker_ids_are_bounded() -> None:
    """Past MAX_SHARED_WORKERS distinct worker ids the table starts again: it never outgrows it."""
    det = Detector()
    st = det.new_state()
    for seq in range(1, MAX_SHARED_WORKERS + 50):
        det.process(st, _e("progress" if seq > 1 else "lease_acquired", 1, seq, f"w-{seq}"), seq)
        assert len(det._workers) <= MAX_SHARED_WORKERS
    assert [ev.worker for ev in st.events][-3:] == [
        f"w-{s}" for s in range(MAX_SHARED_WORKERS + 47, MAX_SHARED_WORKERS + 50)
    ]


def _p(seq: int | None, eid: str) -> Event:
    return Event(
        type=EventType.PROGRESS, workflow_key="wf", epoch=1, worker_id="w", seq=seq, event_id=eid
    )


@pytest.mark.parametrize("size", [3, ID_SET_ABOVE, ID_SET_ABOVE + 1, 3 * ID_SET_ABOVE])
def test_a_redelivered_event_id_is_dropped_below_and_past_the_id_set(size: int) -> None:
    """Every second copy of an event id is dropped, whether the key keeps its ids in the
    filter (few events) or in a set (past ID_SET_ABOVE), and across the switch."""
    det = Detector()
    st = det.new_state()
    for n in range(1, size + 1):
        assert det.process(st, _p(None, f"id-{n}"), n) == []
        # An earlier id again, at every size on the way.
        det.process(st, _p(None, f"id-{(n + 1) // 2}"), 10_000 + n)
    assert len(st) == size
    assert st.counters["redeliveries_dropped"] == size
    assert (st.event_ids is None) == (size <= ID_SET_ABOVE)


def _filter_bits(eid: str) -> tuple[int, int]:
    h = hash(eid)
    return h % 61, (h // 61) % 61


def test_ids_that_share_the_filter_bits_are_different_events() -> None:
    """Two ids on the same bits of the filter are both kept: the filter only sends the
    second to a scan of the retained events, which decides."""
    first = "id-0"
    bits = _filter_bits(first)
    twin = next(f"id-{n}" for n in range(1, 100_000) if _filter_bits(f"id-{n}") == bits)
    det = Detector()
    st = det.new_state()
    det.process(st, _p(None, first), 1)
    det.process(st, _p(None, twin), 2)
    det.process(st, _p(None, twin), 3)
    assert [ev.eid for ev in st.events] == [first, twin]
    assert st.counters["redeliveries_dropped"] == 1


@pytest.mark.parametrize("size", [4, 3 * ID_SET_ABOVE])
def test_an_id_dropped_with_its_seq_redelivery_is_free_again(size: int) -> None:
    """An event dropped as a redelivery by its seq leaves its own new id unretained: a later
    event with that id is kept (filter or set alike)."""
    det = Detector()
    st = det.new_state()
    for n in range(1, size + 1):
        det.process(st, _p(n, f"id-{n}"), n)
    det.process(st, _p(2, "fresh"), size + 1)  # seq 2 again: a redelivery, dropped
    det.process(st, _p(size + 1, "fresh"), size + 2)
    assert [ev.eid for ev in st.events][-1] == "fresh"
    assert st.counters["redeliveries_dropped"] == 1


def test_after_eviction_and_restore_only_retained_ids_are_redeliveries() -> None:
    """Eviction and a restore from bytes rebuild the ids from the retained events: a retained
    id's copy is dropped, an evicted id's is a new (late) event."""
    det = Detector(DetectorConfig(max_events_per_key=16))
    st = det.new_state()
    for n in range(1, 40):
        det.process(st, _p(None, f"id-{n}"), n)
    kept = [ev.eid for ev in st.events]
    assert "id-2" not in kept  # (id-1 stays: the epoch's first evidence)
    for state in (st, KeyState.from_bytes(st.to_bytes())):
        before = state.counters["redeliveries_dropped"]
        det.process(state, _p(None, kept[-1]), 100)
        assert state.counters["redeliveries_dropped"] == before + 1
        det.process(state, _p(None, "id-2"), 101)
        assert state.counters["redeliveries_dropped"] == before + 1
        assert [ev.eid for ev in state.events].count("id-2") == 1
