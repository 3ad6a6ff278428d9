"""The health view (SPEC §4): a finding is cleared only when the stale worker is
fenced and the outcome is verified by the current owner; the audit still lists it."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from streams.core.replay import Replay

FIXTURE = Path(__file__).resolve().parents[2] / "examples" / "reference.jsonl"
WF = "export-ledger"
FX = "release index for 2026-07-26"


def _ev(kind: str, epoch: int, worker: str, seq: int, **extra: Any) -> bytes:
    doc = {"type": kind, "workflow_key": WF, "epoch": epoch, "worker_id": worker, "seq": seq}
    doc.update(extra)
    return json.dumps(doc).encode()


FENCE = _ev("effect_rejected", 17, "alpha", 10, effect_key=FX, sink="release-bucket")
VERIFY = _ev("outcome_verified", 18, "beta", 11, effect_key=FX)


def _replay(extra: list[bytes], *, base: list[bytes] | None = None) -> Replay:
    r = Replay()
    lines = (FIXTURE.read_bytes().splitlines() if base is None else base) + extra
    for n, line in enumerate(lines, 1):
        r.feed(line, offset=n, source="t")
    return r


def _status(r: Replay) -> dict[str, str]:
    kinds = {f.finding_id: f.kind.value for f in r.latest_findings()}
    return {kinds[h.finding_id]: h.status for h in r.health()}


def test_the_reference_findings_are_all_open() -> None:
    """The SPEC §5 findings are open, each needing a fence and a verification."""
    r = _replay([])
    health = r.health()
    assert [h.status for h in health] == ["open"] * 4
    assert all(h.fenced is False and h.verified_by is None for h in health)
    assert r.summary()["findings_open"] == 4 and r.summary()["findings_cleared"] == 0


def test_a_fence_receipt_and_a_verification_clear_every_finding() -> None:
    """A refusal of epoch 17 after the takeover plus outcome_verified by epoch 18
    clears all four findings, and the audit still lists them."""
    r = _replay([FENCE, VERIFY])
    assert _status(r) == {
        "stale_activity": "cleared",
        "stale_attempt": "cleared",
        "stale_commit": "cleared",
        "conflicting_commit": "cleared",
    }
    h = r.health()[0]
    assert h.fenced_by is not None and h.fenced_by.position == 10
    assert h.verified_by is not None and h.verified_by.position == 11
    assert r.summary()["findings"] == 4 and r.summary()["findings_cleared"] == 4


def test_verification_alone_is_not_enough() -> None:
    """Without a refusal of the stale epoch every finding stays open."""
    assert set(_status(_replay([VERIFY])).values()) == {"open"}


def test_a_fence_alone_is_not_enough() -> None:
    """Without outcome_verified by the current owner every finding stays open."""
    assert set(_status(_replay([FENCE])).values()) == {"open"}


def test_verification_by_the_stale_owner_does_not_count() -> None:
    """outcome_verified from the displaced epoch is stale evidence, not a verification."""
    stale_verify = _ev("outcome_verified", 17, "alpha", 11, effect_key=FX)
    assert set(_status(_replay([FENCE, stale_verify])).values()) == {"open"}


def test_verification_of_another_effect_does_not_clear_an_effect_finding() -> None:
    """A finding about one effect key needs that key verified; stale_activity, which
    names no effect, is cleared by any verification of the current owner."""
    other = _ev("outcome_verified", 18, "beta", 11, effect_key="another effect")
    status = _status(_replay([FENCE, other]))
    assert status["stale_activity"] == "cleared"
    assert status["stale_commit"] == "open" and status["conflicting_commit"] == "open"


def test_a_verification_before_the_raising_event_does_not_count() -> None:
    """A verification positioned before the commit it should cover leaves it open."""
    early = _ev("outcome_verified", 18, "beta", 5, effect_key=FX)
    lines = FIXTURE.read_bytes().splitlines()
    status = _status(_replay([FENCE, early], base=lines))
    assert status["stale_commit"] == "open" and status["conflicting_commit"] == "open"


def test_a_same_owner_duplicate_needs_only_verification() -> None:
    """duplicate_commit has no stale worker to fence: verification clears it."""
    base = [
        _ev("lease_acquired", 3, "delta", 1),
        _ev("effect_committed", 3, "delta", 2, effect_key=FX),
        _ev("effect_committed", 3, "delta", 3, effect_key=FX),
    ]
    r = _replay([], base=base)
    pairs = zip(r.latest_findings(), r.health(), strict=True)
    assert [(f.kind.value, h.fenced, h.status) for f, h in pairs] == [
        ("duplicate_commit", None, "open")
    ]
    r = _replay([_ev("outcome_verified", 3, "delta", 4, effect_key=FX)], base=base)
    assert [h.status for h in r.health()] == ["cleared"]


def test_the_health_view_does_not_depend_on_arrival_order() -> None:
    """Every arrival order of the workflow's evidence gives the same health view."""
    lines = [line for line in FIXTURE.read_bytes().splitlines() if WF.encode() in line]
    extra = [FENCE, VERIFY]
    views = set()
    tail = [*lines[-3:], *extra]
    for order in itertools.permutations(tail):
        r = _replay(list(order), base=lines[:-3])
        views.add(tuple((h.finding_id, h.status, h.fenced_by, h.verified_by) for h in r.health()))
    assert len(views) == 1
    (view,) = views
    assert {status for _, status, _, _ in view} == {"cleared"}
