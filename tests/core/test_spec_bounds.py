"""Bounded per-key state (issue 2: "a documented cap per key on retained evidence").

Reading: the cap bounds memory and the serialized state, not correctness of the
small per-epoch facts: an epoch's acquisition survives however much evidence
follows it, and findings stay monotone when old evidence is evicted.
"""

from __future__ import annotations

import orjson

from streams.core import Event, KeyState, event_to_dict
from streams.core.replay import Replay
from tests.core.conftest import acq, att, com, make_detector, prog, run


def _state_size_after(n: int, cap: int) -> int:
    det = make_detector(cap)
    state = det.new_state()
    det.process(state, acq(17, "a", 1), 1)
    for s in range(2, n + 2):
        det.process(state, prog(17, "a", s), s)
    return len(state.to_bytes())


def test_serialized_state_stays_bounded() -> None:
    """Ten times more events for one key does not make its serialized state grow past the
    cap's worth: the size after 4000 events is within 1.5x of the size after 400."""
    assert _state_size_after(4000, 32) <= 1.5 * _state_size_after(400, 32) + 1024


def test_finding_evidence_stays_bounded() -> None:
    """A stale owner that keeps emitting for thousands of events gives one finding whose
    evidence stays within the documented 32 items (README "Bounds"), always keeping the
    raising event and its transition."""
    events = [acq(17, "a", 1), acq(18, "b", 2)] + [prog(17, "a", s) for s in range(3, 3003)]
    result = run(events)
    f = result.only("stale_activity")
    assert f.event_seq == 3
    assert len(f.evidence) <= 32
    kept = {(e.position, e.type) for e in f.evidence}
    assert {(2, "lease_acquired"), (3, "progress")} <= kept


def test_acquisition_survives_eviction_of_old_evidence() -> None:
    """Reading: with a small cap, an acquisition followed by hundreds of events is still
    the transition a late-resuming old owner is stale against."""
    events = [acq(17, "a", 1), acq(18, "b", 2)]
    events += [prog(18, "b", s) for s in range(3, 503)]
    events += [com(17, "a", 503, "X")]
    result = run(events, detector=make_detector(32))
    f = result.only("stale_commit")
    assert (f.stale_epoch, f.current_epoch, f.current_worker, f.transition_seq) == (
        17,
        18,
        "b",
        2,
    )


def test_late_acquisition_beyond_the_window_still_flags_retained_evidence() -> None:
    """A late acquisition positioned before the retained window still makes the retained
    lower-epoch evidence after it stale (whatever was evicted)."""
    events = [acq(17, "a", 1)] + [prog(17, "a", s) for s in range(2, 500)]
    events += [att(17, "a", 500, "X"), acq(18, "b", 250)]
    result = run(events, detector=make_detector(32))
    # The retained window (after the acquisition at 250) holds both progress and the attempt.
    assert sorted(f.kind.value for f in result.findings()) == ["stale_activity", "stale_attempt"]
    for f in result.findings():
        assert (f.stale_epoch, f.current_epoch, f.transition_seq) == (17, 18, 250)


def test_bounded_state_round_trips() -> None:
    """A state at its cap serializes and restores to the same bytes-level behaviour."""
    det = make_detector(16)
    state = det.new_state()
    for s in range(1, 200):
        det.process(state, prog(17, "a", s), s)
    restored = KeyState.from_bytes(state.to_bytes())
    a = det.process(state, acq(18, "b", 100), 300)
    b = make_detector(16).process(restored, acq(18, "b", 100), 300)
    assert [f.to_dict() for f in a] == [f.to_dict() for f in b]
    assert state.to_bytes() == restored.to_bytes()


def test_late_evidence_behind_the_horizon_is_counted() -> None:
    """Late evidence positioned behind the forgotten horizon is still classified and is
    counted as late_beyond_horizon in the replay summary (README "Bounds")."""
    r = Replay(make_detector(16))
    events = [prog(17, "a", s) for s in range(1, 200)]
    events += [acq(18, "b", 50), prog(17, "a", 60)]
    for n, e in enumerate(events, start=1):
        r.feed(orjson.dumps(event_to_dict(e)), key=None, offset=n, source="f")
    summary = r.summary()
    assert summary["late_beyond_horizon"] >= 1
    assert [f.kind.value for f in r.latest_findings()] == ["stale_activity"]


def test_state_bounded_over_many_epochs_and_effects() -> None:
    """Thousands of chain takeovers, or thousands of distinct stale effects, keep the
    serialized key state within 1.5x of its size after a tenth as many."""

    def chain(i: int) -> list[Event]:
        return [acq(i, f"w{i % 7}", 2 * i), prog(i, f"w{i % 7}", 2 * i + 1)]

    def stale_effects(i: int) -> list[Event]:
        if i == 1:
            return [acq(1, "a", 1), acq(2, "b", 2)]
        return [att(1, "a", i + 2, f"E{i}"), com(1, "a", i + 5000, f"E{i}")]

    for make in (chain, stale_effects):
        sizes = []
        for n in (300, 3000):
            det = make_detector(32)
            state = det.new_state()
            for i in range(1, n + 1):
                for e in make(i):
                    det.process(state, e, i)
            sizes.append(len(state.to_bytes()))
        assert sizes[1] <= 1.5 * sizes[0] + 1024, (make.__name__, sizes)
