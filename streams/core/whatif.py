"""What if a sink had enforced the fence? (SPEC §6 ``--what-if-fenced``)

The same evidence is replayed through the same detector, with one change:
every stale ``effect_committed`` at a fenced sink is fed as an
``effect_rejected`` (what a fencing destination would have answered). The
findings of that replay are compared with the real ones, finding by finding,
so the report can show what would change next to what happened, never
instead of it.

The evidence is the detector's retained state of the real replay, re-fed per
workflow key in its original arrival order (offsets), so nothing is read
twice and stdin and topics work alike. "Stale" is decided on the complete
real evidence (a commit made stale by a late acquisition is converted too).
The detector's bound applies: evidence a key forgot past
``max_events_per_key`` is not replayed (``summary.evidence_evicted`` says when).
Pure: no I/O.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from streams.core.destinations import UNNAMED, Destination
from streams.core.detector import _COM, _REJ, _TYPE_CODES, Detector
from streams.core.findings import Finding
from streams.core.records import Event, EventType
from streams.core.replay import Replay, sort_findings

__all__ = ["ADDED", "CHANGED", "REMOVED", "Change", "WhatIf", "what_if_fenced"]

REMOVED = "removed"
ADDED = "added"
CHANGED = "changed"
_TYPES = {code: EventType(name) for code, name in enumerate(_TYPE_CODES)}


def _brief(f: Finding | None) -> dict[str, Any] | None:
    if f is None:
        return None
    return {
        "kind": f.kind.value,
        "severity": f.severity.value,
        "sink_outcome": f.sink_outcome,
        "same_owner": f.same_owner,
        "epochs": None if f.epochs is None else list(f.epochs),
        "confidence": f.confidence.value,
    }


@dataclass(frozen=True, slots=True)
class Change:
    """One finding that differs between the real replay and the what-if one:
    ``removed`` (only real), ``added`` (only what-if) or ``changed`` (same
    finding id, different content)."""

    change: str
    real: Finding | None
    what_if: Finding | None

    @property
    def finding(self) -> Finding:
        found = self.real if self.real is not None else self.what_if
        assert found is not None
        return found

    def to_dict(self) -> dict[str, Any]:
        f = self.finding
        return {
            "finding_id": f.finding_id,
            "workflow_key": f.workflow_key,
            "effect_key": f.effect_key,
            "change": self.change,
            "real": _brief(self.real),
            "what_if": _brief(self.what_if),
        }


@dataclass(frozen=True, slots=True)
class WhatIf:
    """The what-if replay (``replay``), the stale commits it turned into
    rejections (``converted``), the fenced sinks no effect event names
    (``unseen_sinks``) and the findings that differ (``changes``, report order)."""

    fenced_sinks: tuple[str, ...]
    unseen_sinks: tuple[str, ...]
    converted: int
    replay: Replay
    changes: tuple[Change, ...]

    def findings(self) -> list[Finding]:
        return self.replay.latest_findings()

    def destinations(self) -> list[Destination]:
        return self.replay.destinations()

    def to_dict(self) -> dict[str, Any]:
        findings = self.findings()
        by_sev = Counter(f.severity.value for f in findings)
        worst = self.replay.worst_severity()
        return {
            "fenced_sinks": list(self.fenced_sinks),
            "unseen_sinks": list(self.unseen_sinks),
            "stale_commits_fenced": self.converted,
            "changed": [c.to_dict() for c in self.changes],
            "findings": [f.to_dict() for f in findings],
            "destinations": [d.to_dict() for d in self.destinations()],
            "summary": {
                "findings": len(findings),
                "by_severity": dict(sorted(by_sev.items())),
                "worst_severity": None if worst is None else worst.value,
                "changed": len(self.changes),
            },
        }


def _content(f: Finding) -> dict[str, Any]:
    d = f.to_dict()
    d.pop("revision")  # the what-if replay numbers its own revisions
    return d


def what_if_fenced(replay: Replay, sinks: Iterable[str]) -> WhatIf:
    """Replay ``replay``'s evidence as if every sink in ``sinks`` had refused
    the stale commits it accepted (``"(unnamed)"`` names effect events without
    a sink), and compare the findings."""
    fenced = tuple(dict.fromkeys(sinks))  # order kept, repeats dropped
    wanted = frozenset(fenced)
    alt = Replay(Detector(replay.detector.config), max_event_bytes=replay.max_event_bytes)
    seen: set[str] = set()
    converted = 0
    for wkey, st in replay.states.items():
        disp = st.displaced_at()
        # Arrival order within the key: offsets (lines, or the key's one
        # partition) are unique per key, and arrival places seq-less events.
        for ev in sorted(st.events, key=lambda e: e.offset):
            code = ev.code
            sink = UNNAMED if ev.sink is None else ev.sink
            if code == _COM and sink in wanted:
                seen.add(sink)
                t = disp.get(ev.epoch)
                if t is not None and ev.k > t:
                    code = _REJ
                    converted += 1
            elif sink in wanted and ev.ek is not None:
                seen.add(sink)
            event = Event(
                type=_TYPES[code],
                workflow_key=wkey,
                epoch=ev.epoch,
                worker_id=ev.worker,
                seq=ev.seq,
                effect_key=ev.ek,
                sink=ev.sink,
                event_id=ev.eid,
            )
            alt.feed_event(event, ev.offset)
    changes: list[Change] = []
    real = replay.latest
    other = alt.latest
    for fid, f in real.items():
        g = other.get(fid)
        if g is None:
            changes.append(Change(REMOVED, f, None))
        elif _content(f) != _content(g):
            changes.append(Change(CHANGED, f, g))
    changes.extend(Change(ADDED, None, g) for fid, g in other.items() if fid not in real)
    order = {f.finding_id: i for i, f in enumerate(sort_findings([c.finding for c in changes]))}
    changes.sort(key=lambda c: order[c.finding.finding_id])
    return WhatIf(
        fenced_sinks=fenced,
        unseen_sinks=tuple(s for s in fenced if s not in seen),
        converted=converted,
        replay=alt,
        changes=tuple(changes),
    )
