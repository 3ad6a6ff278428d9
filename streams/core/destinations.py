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

from streams.core.detector import (
    _COM,
    _G_ATTEMPT,
    _G_COMMIT,
    _REJ,
    KeyState,
    _as_list,
    _Ev,
    _kept_one,
)

__all__ = ["MAX_SHARES", "UNNAMED", "Destination", "Tally", "Verdict", "destinations", "key_counts"]

#: The sink under which effect events that name none are counted.
UNNAMED = "(unnamed)"
#: Distinct per-key shares a :class:`Tally` keeps one tuple of.
MAX_SHARES = 4096


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


def key_counts(st: KeyState) -> dict[str, list[int]]:
    """One key's share of :func:`destinations`: sink -> ``[stale_rejected,
    stale_committed, current_committed]``, with an entry (zeros allowed)
    for every sink its retained effect events name."""
    counts: dict[str, list[int]] = {}
    top = st.max_epoch
    disp: dict[int, Any] | None = None  # computed only when needed (it sorts)
    # Effect events are exactly the attempt and commit groups, and each
    # group is one effect (its key, epoch and effect key): counting each
    # group once per sink counts distinct effects, with no set of them.
    for (tag, epoch, _ek), g in st.groups.items():
        if tag == _G_COMMIT:
            assert epoch is not None
            t = None
            if epoch < top:  # the highest epoch is never displaced
                if disp is None:
                    disp = st.displaced_at()
                t = disp.get(epoch)
            if isinstance(g, _Ev):  # the common case: one commit of the effect
                ev = g
                sink = UNNAMED if ev.sink is None else ev.sink
                c = counts.get(sink)
                if c is None:
                    c = counts[sink] = [0, 0, 0]
                c[1 if t is not None and ev.k > t else 2] += 1
                continue
            stale: set[str] = set()
            current: set[str] = set()
            for ev in g:
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
            for ev in _as_list(g):
                sink = UNNAMED if ev.sink is None else ev.sink
                if sink not in counts:
                    counts[sink] = [0, 0, 0]
                if ev.code == _REJ and t is not None and ev.k > t:
                    refused.add(sink)
            for sink in refused:
                counts[sink][0] += 1
    return counts


def destinations(states: Iterable[KeyState]) -> list[Destination]:
    """Every sink named on the retained effect events of ``states``, worst
    verdict first, then by sink name (a walk of every key's effects; a
    :class:`Tally` keeps the same figures as the keys change)."""
    tally = Tally()
    for st in states:
        tally.add(key_counts(st))
    return tally.destinations()


class Tally:
    """:func:`destinations` kept up to date key by key: the sum of every
    key's :func:`key_counts`, and how many keys name each sink (a sink no
    retained event names any more is not listed, as the walk would not
    list it). The replay recounts a key while its state is in the cache,
    just after an event that may have changed its effects (the detector
    sets ``KeyState.dests_dirty``), rather than walking 10,000 cold key
    states for the report (docs/performance.md)."""

    __slots__ = ("_shares", "_sums")

    def __init__(self) -> None:
        # sink -> [stale_rejected, stale_committed, current_committed, keys naming it]
        self._sums: dict[str, list[int]] = {}
        # One tuple kept for each distinct share (see _shared).
        self._shares: dict[tuple[Any, ...], tuple[Any, ...]] = {}

    def _shared(self, share: tuple[Any, ...]) -> tuple[Any, ...]:
        """``share``, or the equal tuple another key already holds: most keys
        hold the same share (one sink, one current commit), ~70 bytes a key
        saved. At most MAX_SHARES kept, then the table starts again, empty
        (memory only: the counts never depend on it)."""
        kept: tuple[Any, ...] = _kept_one(self._shares, share, MAX_SHARES)
        return kept

    def add(self, counts: dict[str, list[int]]) -> None:
        for sink, c in counts.items():
            self._add_sink(sink, c[0], c[1], c[2])

    def _add_sink(self, sink: str, rejected: int, committed: int, current: int) -> None:
        """One more key naming ``sink``, with these counts."""
        t = self._sums.get(sink)
        if t is None:
            self._sums[sink] = [rejected, committed, current, 1]
        else:
            t[0] += rejected
            t[1] += committed
            t[2] += current
            t[3] += 1

    def recount(self, st: KeyState) -> None:
        """Replace ``st``'s share with its counts now, kept in ``st.dests``
        as one flat tuple (``sink, stale_rejected, stale_committed,
        current_committed`` per sink: most keys name one sink, and a tuple
        is a fifth of a dict of lists), and clear ``st.dests_dirty``.
        When the change is one effect's first event at the tail
        (``st.dests_tail``), that event is added alone: in an audit most
        effect events are, and a full count of the key cost ~25 times as
        much."""
        ev = st.dests_tail
        if ev is not None:
            st.dests_tail = None
            st.dests_dirty = False
            self._add_first(st, ev)
            return
        sums = self._sums
        old = st.dests
        if old is not None:
            for i in range(0, len(old), 4):
                sink: str = old[i]
                t = sums[sink]
                if t[3] == 1:
                    del sums[sink]
                else:
                    t[0] -= old[i + 1]
                    t[1] -= old[i + 2]
                    t[2] -= old[i + 3]
                    t[3] -= 1
        counts = key_counts(st) if st.groups else None
        if counts:
            self.add(counts)
            flat: list[Any] = []
            for sink, c in counts.items():
                flat.extend((sink, c[0], c[1], c[2]))
            st.dests = self._shared(tuple(flat))
        else:
            st.dests = None
        st.dests_dirty = False

    def _add_first(self, st: KeyState, ev: _Ev) -> None:
        """Add the effect event ``ev``, its effect's first and at ``st``'s
        tail, to ``st``'s share: what :func:`key_counts` would count for its
        one-event group. At the tail it is stale exactly when a higher epoch
        was acquired (it lies after that acquisition)."""
        sink = UNNAMED if ev.sink is None else ev.sink
        stale = ev.epoch < st.max_epoch
        # Its column in a share (sink, stale_rejected, stale_committed,
        # current_committed); 0: it names the sink and counts nowhere.
        if ev.code == _COM:
            col = 2 if stale else 3
        elif ev.code == _REJ and stale:
            col = 1
        else:
            col = 0
        old = st.dests
        if old is not None:
            for i in range(0, len(old), 4):
                if old[i] == sink:
                    if col:
                        share = list(old)
                        share[i + col] += 1
                        st.dests = self._shared(tuple(share))
                        self._sums[sink][col - 1] += 1
                    return
        added = (sink, int(col == 1), int(col == 2), int(col == 3))
        st.dests = self._shared(added if old is None else old + added)
        self._add_sink(sink, added[1], added[2], added[3])

    def destinations(self) -> list[Destination]:
        out = [Destination(sink, t[0], t[1], t[2]) for sink, t in self._sums.items()]
        out.sort(key=lambda d: (_VERDICT_ORDER[d.verdict], d.sink))
        return out
