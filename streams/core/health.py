"""The health view (SPEC §4): which findings are still open.

An audit lists every finding for good; the health view says which ones still
need someone. SPEC §4: "A finding is cleared only when the stale worker is
fenced and the intended outcome is verified (``outcome_verified`` by the
current epoch)". Read from the evidence a key retains, that is:

* **fenced**: an ``effect_rejected`` of the finding's stale epoch positioned
  after that epoch lost ownership, i.e. a destination refused the old owner
  (the fence's receipt). A ``stale_attempt`` whose sink rejected it carries its
  own receipt. ``duplicate_commit`` needs no fence: it is by definition not
  conflicting, so there is no stale worker to stop (a client retry, or work
  redone across a clean handover).
* **verified**: an ``outcome_verified`` for the finding's effect key (any
  effect key for a finding without one, ``stale_activity`` and the epoch
  findings) by an owner that was current when it verified (its epoch not
  displaced at that position), positioned after the finding's raising event.

Both rest on retained evidence, so the bound of the detector applies: a key
past ``max_events_per_key`` may have forgotten a fresh verification (fresh
checkpoints are evicted first), and its finding then reads open again. Pure:
a function of a finding and its key's state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from streams.core.detector import _REJ, _TYPE_CODES, _VER, KeyState
from streams.core.findings import Evidence, Finding
from streams.core.records import Kind

__all__ = ["CLEARED", "OPEN", "Health", "assess"]

OPEN = "open"
CLEARED = "cleared"


@dataclass(frozen=True, slots=True)
class Health:
    """Where one finding stands. ``fenced`` is None when the kind needs no
    fence; ``fenced_by``/``verified_by`` are the evidence that showed it."""

    finding_id: str
    workflow_key: str
    status: str
    fenced: bool | None
    fenced_by: Evidence | None
    verified_by: Evidence | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "finding_id": self.finding_id,
            "workflow_key": self.workflow_key,
            "status": self.status,
            "fenced": self.fenced,
            "fenced_by": None if self.fenced_by is None else self.fenced_by.to_dict(),
            "verified_by": None if self.verified_by is None else self.verified_by.to_dict(),
        }


def assess(finding: Finding, state: KeyState) -> Health:
    """The health of ``finding`` given its key's current ``state``."""
    disp = state.displaced_at()
    events = state.events
    # The finding's fields read once: each read of a msgspec Struct's field
    # from compiled code is a generic attribute look-up, and the scans below
    # visit every retained event of the key.
    stale_epoch = finding.stale_epoch
    event_offset = finding.event_offset
    event_seq = finding.event_seq
    event_type = finding.event_type
    effect_key = finding.effect_key
    fenced: bool | None = None
    fenced_by: Evidence | None = None
    if finding.kind is not Kind.DUPLICATE_COMMIT:
        t = disp.get(stale_epoch)
        refusal = None
        if t is not None:
            for ev in events:
                if ev.code == _REJ and ev.epoch == stale_epoch and ev.k > t:
                    refusal = ev
                    break
        fenced = refusal is not None
        fenced_by = None if refusal is None else refusal.evidence()
    # The raising event, found by its arrival (unique) and type; if it has been
    # evicted, any verification after the stale epoch lost ownership counts.
    raised = disp.get(stale_epoch)
    for ev in events:
        if ev.offset == event_offset and ev.seq == event_seq and _TYPE_CODES[ev.code] == event_type:
            raised = ev.k
            break
    verification = None
    for ev in events:
        if ev.code != _VER or (raised is not None and not ev.k > raised):
            continue
        if effect_key is not None and ev.ek != effect_key:
            continue
        t = disp.get(ev.epoch)
        if t is None or ev.k < t:  # its owner was current when it verified
            verification = ev
            break
    verified_by = None if verification is None else verification.evidence()
    cleared = fenced is not False and verified_by is not None
    return Health(
        finding.finding_id,
        finding.workflow_key,
        CLEARED if cleared else OPEN,
        fenced,
        fenced_by,
        verified_by,
    )
