"""Destinations (SPEC §6): which sinks actually enforce the ownership fence.

A lease service can be healthy while a destination ignores the ownership
token. Per ``sink`` named on effect events (``effect_attempted``,
``effect_committed``, ``effect_rejected``; events without one count under
``(unnamed)``) this counts, over the detector's retained evidence:

* ``stale_rejected``: distinct stale effects the sink refused;
* ``stale_committed``: distinct stale effects it committed;
* ``current_committed``: distinct effects it committed for an epoch that was
  current at the commit;

where an effect is ``(workflow key, epoch, effect key)`` (the identity of a
stale effect in SPEC §4), and "stale" is the detector's own rule: positioned
after a higher epoch was acquired. The verdict is ``ignores_fence`` when
``stale_committed`` > 0, else ``enforces_fence`` when ``stale_rejected`` > 0,
else ``unproven``.

Pure: a function of the key states, so for workflows whose events carry
``seq`` it is the same whatever the arrival order. The detector's bound
applies: a key past ``max_events_per_key`` may have forgotten old effects
(effects are evicted only after fresh checkpoints; ``evidence_evicted`` in the
summary says when).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from streams.core.detector import _COM, _G_ATTEMPT, _G_COMMIT, _REJ, KeyState

__all__ = ["UNNAMED", "Destination", "Verdict", "destinations"]

#: The sink under which effect events that name none are counted.
UNNAMED = "(unnamed)"


class Verdict(StrEnum):
    IGNORES_FENCE = "ignores_fence"
    ENFORCES_FENCE = "enforces_fence"
    UNPROVEN = "unproven"


_VERDICT_ORDER = {v: i for i, v in enumerate(Verdict)}


@dataclass(frozen=True, slots=True)
class Destination:
    """One sink's fence coverage (SPEC §6)."""

    sink: str
    stale_rejected: int
    stale_committed: int
    current_committed: int

    @property
    def verdict(self) -> Verdict:
        if self.stale_committed > 0:
            return Verdict.IGNORES_FENCE
        if self.stale_rejected > 0:
            return Verdict.ENFORCES_FENCE
        return Verdict.UNPROVEN

    def to_dict(self) -> dict[str, Any]:
        return {
            "sink": self.sink,
            "stale_rejected": self.stale_rejected,
            "stale_committed": self.stale_committed,
            "current_committed": self.current_committed,
            "verdict": self.verdict.value,
        }


def destinations(states: Iterable[tuple[str, KeyState]]) -> list[Destination]:
    """Every sink named on the retained effect events of ``states`` (pairs of
    workflow key and state), worst verdict first, then by sink name."""
    seen: set[str] = set()
    # sink -> distinct (workflow key, epoch, effect key) per count.
    rejected: dict[str, set[tuple[str, int, str | None]]] = {}
    committed: dict[str, set[tuple[str, int, str | None]]] = {}
    current: dict[str, set[tuple[str, int, str | None]]] = {}
    for wkey, st in states:
        disp = st.displaced_at()
        # Effect events are exactly the attempt and commit groups: no scan of
        # the (mostly checkpoint) evidence.
        for (tag, epoch, ek), group in st.groups.items():
            if tag != _G_ATTEMPT and tag != _G_COMMIT:
                continue
            assert epoch is not None
            t = disp.get(epoch)
            for ev in group:
                sink = UNNAMED if ev.sink is None else ev.sink
                seen.add(sink)
                stale = t is not None and ev.k > t
                effect = (wkey, epoch, ek)
                if ev.code == _COM:
                    (committed if stale else current).setdefault(sink, set()).add(effect)
                elif ev.code == _REJ and stale:
                    rejected.setdefault(sink, set()).add(effect)
    out = [
        Destination(
            sink,
            len(rejected.get(sink, ())),
            len(committed.get(sink, ())),
            len(current.get(sink, ())),
        )
        for sink in seen
    ]
    out.sort(key=lambda d: (_VERDICT_ORDER[d.verdict], d.sink))
    return out
