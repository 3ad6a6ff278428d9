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

Compiled with the detector (mypyc, ``scripts/build-native``): it walks every
key's effect evidence once per report. Pure: a function of the key states, so
for workflows whose events carry ``seq`` it is the same whatever the arrival
order. The detector's bound applies: a key past ``max_events_per_key`` may
have forgotten old effects (effects are evicted only after fresh checkpoints;
``evidence_evicted`` in the summary says when).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from streams.core.detector import _G_ATTEMPT, _G_COMMIT, _REJ, KeyState

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


def destinations(states: Iterable[KeyState]) -> list[Destination]:
    """Every sink named on the retained effect events of ``states``, worst
    verdict first, then by sink name."""
    # sink -> [stale_rejected, stale_committed, current_committed]
    counts: dict[str, list[int]] = {}
    for st in states:
        top = st.max_epoch
        disp: dict[int, Any] | None = None  # computed only when needed (it sorts)
        # Effect events are exactly the attempt and commit groups, and each
        # group is one effect (its key, epoch and effect key): counting each
        # group once per sink counts distinct effects, with no set of them.
        for (tag, epoch, _ek), group in st.groups.items():
            if tag == _G_COMMIT:
                assert epoch is not None
                t = None
                if epoch < top:  # the highest epoch is never displaced
                    if disp is None:
                        disp = st.displaced_at()
                    t = disp.get(epoch)
                if len(group) == 1:  # the common case: one commit of the effect
                    ev = group[0]
                    sink = UNNAMED if ev.sink is None else ev.sink
                    c = counts.get(sink)
                    if c is None:
                        c = counts[sink] = [0, 0, 0]
                    c[1 if t is not None and ev.k > t else 2] += 1
                    continue
                stale: set[str] = set()
                current: set[str] = set()
                for ev in group:
                    sink = UNNAMED if ev.sink is None else ev.sink
                    (stale if t is not None and ev.k > t else current).add(sink)
                for sink in stale | current:
                    c = counts.get(sink)
                    if c is None:
                        c = counts[sink] = [0, 0, 0]
                    c[1] += sink in stale
                    c[2] += sink in current
            elif tag == _G_ATTEMPT:
                assert epoch is not None
                t = None
                if epoch < top:
                    if disp is None:
                        disp = st.displaced_at()
                    t = disp.get(epoch)
                refused: set[str] = set()
                for ev in group:
                    sink = UNNAMED if ev.sink is None else ev.sink
                    if sink not in counts:
                        counts[sink] = [0, 0, 0]
                    if ev.code == _REJ and t is not None and ev.k > t:
                        refused.add(sink)
                for sink in refused:
                    counts[sink][0] += 1
    out = [Destination(sink, c[0], c[1], c[2]) for sink, c in counts.items()]
    out.sort(key=lambda d: (_VERDICT_ORDER[d.verdict], d.sink))
    return out
