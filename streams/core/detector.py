"""The detector state machine (SPEC §3-4).

One :class:`Detector` serves the live processor, topic replay and the file
audit. It keeps, per workflow key, a :class:`KeyState` holding the retained
evidence in position order plus indexes derived from it, and returns the
finding records whose content changed with each event.

How it stays exact under any arrival order: every finding is a pure function
of the retained evidence set (``_build``), never of the order it came in.
After each event the detector rebuilds the findings that event can touch and
re-emits those whose content changed. An event positioned after everything
retained (the normal, in-order case) can only touch findings about itself,
because nothing lies after it for a new acquisition to make stale; an event
that lands in the middle (late evidence) can touch anything, so all of the
key's candidate findings are rebuilt. Both paths run the same ``_build``.

Bounds (what an SRE can count on):

* ``max_events_per_key`` events are retained per key. Past it the oldest
  *fresh* checkpoints (progress, lease_released, outcome_verified that are not
  stale) are forgotten first, then, only if effects and acquisitions alone
  exceed the cap, the oldest of anything. Forgotten events are never
  re-classified: evidence that arrives positioned at or before the forgotten
  horizon is still applied and classified against what is retained, and is
  counted in ``late_beyond_horizon``.
* ``max_findings_per_key`` finding identities are remembered per key for
  revision numbering; past it the oldest identity is forgotten (counted in
  ``findings_forgotten``) and would start again at revision 1.
* Findings never disappear and never lose severity: a rebuilt finding that
  would be weaker than what was emitted (possible only after forgetting) is
  not re-emitted.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_right, insort
from dataclasses import dataclass
from typing import Any, Final, final

import msgspec
import orjson

from streams.core.errors import ConfigError, StateError
from streams.core.findings import ACTIONS, Evidence, Finding, confidence_of
from streams.core.records import SEVERITY_RANK, Confidence, Event, EventType, Family, Kind

try:
    # A machine integer when compiled (mypyc, which brings mypy_extensions);
    # interpreted, an int. mypyc_attr: see _Ev.
    from mypy_extensions import i64, mypyc_attr
except ImportError:  # pragma: no cover - interpreted, without mypy installed
    i64 = int  # type: ignore[misc]

    def mypyc_attr(*_attrs: Any, **_kwattrs: Any) -> Any:  # type: ignore[misc]
        return lambda cls: cls


__all__ = [
    "DEFAULT_MAX_EVENTS_PER_KEY",
    "DEFAULT_MAX_FINDINGS_PER_KEY",
    "Detector",
    "DetectorConfig",
    "KeyState",
    "StateError",
    "epoch_starts",
]

DEFAULT_MAX_EVENTS_PER_KEY: Final = 1024
DEFAULT_MAX_FINDINGS_PER_KEY: Final = 512
#: Evidence items carried on one finding (commit groups can be long).
MAX_EVIDENCE: Final = 32
_STATE_VERSION: Final = 1
#: How :meth:`KeyState.to_bytes` output starts, up to the first event row.
_STATE_HEAD: Final = b'{"v":' + str(_STATE_VERSION).encode() + b',"e":['

# Compact type codes for the serialized state; order is part of the format.
_TYPE_CODES: tuple[str, ...] = (
    "lease_acquired",
    "lease_released",
    "progress",
    "effect_attempted",
    "effect_committed",
    "effect_rejected",
    "outcome_verified",
)
# Final literals: compiled, each use is a constant rather than a global look-up.
_ACQ: Final = 0
_REL: Final = 1
_PROG: Final = 2
_ATT: Final = 3
_COM: Final = 4
_REJ: Final = 5
_VER: Final = 6
_T_ACQ: Final = EventType.LEASE_ACQUIRED
_T_REL: Final = EventType.LEASE_RELEASED
_T_PROG: Final = EventType.PROGRESS
_T_ATT: Final = EventType.EFFECT_ATTEMPTED
_T_COM: Final = EventType.EFFECT_COMMITTED
_T_REJ: Final = EventType.EFFECT_REJECTED


def _code_of(t: EventType) -> int:
    # Identity tests against the members, commonest first: compiled, cheaper
    # than hashing the member into a dict.
    if t is _T_PROG:
        return _PROG
    if t is _T_ACQ:
        return _ACQ
    if t is _T_COM:
        return _COM
    if t is _T_ATT:
        return _ATT
    if t is _T_REJ:
        return _REJ
    if t is _T_REL:
        return _REL
    return _VER


#: A key's event ids are kept in a set only past this many retained events.
#: Below it a filter of two 61-bit ints inside the state
#: (:attr:`KeyState.id_bits`, :attr:`KeyState.id_bits2`, one bit each per id)
#: answers "certainly new" for most ids, and a scan of the retained events
#: answers the rest exactly (for a 10-event key, ~1 % of its events on
#: average; with one int, 7 %). A set is two more cache lines on every
#: event (its object and its table) and 728 bytes for a 10-event key; on
#: a file audit that interleaves 10,000 workflows each of them is a miss
#: (docs/performance.md).
ID_SET_ABOVE: Final = 16
#: Bits of each filter int: ``hash(id) % 61`` picks the first one, the next
#: digit in base 61 the second (a prime, so the low bits of the hash do not
#: decide alone; under 2**62, so each stays a machine int).
_ID_BITS: Final = 61
#: Distinct worker ids and sink names :class:`Detector` keeps one string
#: of (see there); past it the table starts again, empty.
MAX_SHARED_WORKERS: Final = 4096


def _id_bits(eid: str) -> tuple[int, int]:
    # i64: compiled, the hash's arithmetic is C's rather than on a boxed int
    # (three quarters of string hashes do not fit a tagged int).
    h: i64 = hash(eid)
    return 1 << (h % _ID_BITS), 1 << ((h // _ID_BITS) % _ID_BITS)


def _retains_id(events: list[_Ev], eid: str) -> bool:
    return any(ev.eid == eid for ev in events)


# Kinds of checkpoint that no finding depends on unless stale: forgotten first.
_CHEAP = frozenset({_REL, _PROG, _VER})

# Index groups: (group tag, epoch, effect key). "k" groups are per effect key.
_G_ATTEMPT: Final = "a"  # effect_attempted and effect_rejected
_G_COMMIT: Final = "c"
_G_ACQUIRE: Final = "l"
_G_KEYCOMMITS: Final = "k"

# Finding families (the identity's first part): compiled, each use of a
# Final is a static load, and ``is`` compares them.
_FAM_ACTIVITY: Final = Family.STALE_ACTIVITY
_FAM_ATTEMPT: Final = Family.STALE_ATTEMPT
_FAM_COMMIT: Final = Family.STALE_COMMIT
_FAM_COMMIT_REPEAT: Final = Family.COMMIT_REPEAT
_FAM_REUSE: Final = Family.EPOCH_REUSE
_FAM_REGRESSION: Final = Family.EPOCH_REGRESSION
# Its value, as a compiled constant (the stale-checkpoint test of every event).
_FAM_V_ACTIVITY: Final = "stale_activity"
if Family.STALE_ACTIVITY.value != _FAM_V_ACTIVITY:  # pragma: no cover - records.py changed
    raise ImportError("streams.core.records.Family.STALE_ACTIVITY changed; update detector")

_ASTUPLE: Final = msgspec.structs.astuple
# Positions in msgspec.structs.astuple(event); checked against Event at import.
_F_TYPE: Final = 0
_F_WKEY: Final = 1
_F_EPOCH: Final = 2
_F_WORKER: Final = 3
_F_SEQ: Final = 4
_F_EFFECT_KEY: Final = 5
_F_SINK: Final = 6
_F_EVENT_ID: Final = 7
_F_NAMES: Final = (
    (_F_TYPE, "type"),
    (_F_WKEY, "workflow_key"),
    (_F_EPOCH, "epoch"),
    (_F_WORKER, "worker_id"),
    (_F_SEQ, "seq"),
    (_F_EFFECT_KEY, "effect_key"),
    (_F_SINK, "sink"),
    (_F_EVENT_ID, "event_id"),
)
if any(
    Event.__struct_fields__[i] != name for i, name in _F_NAMES
):  # pragma: no cover - a change to records.py that this module must follow
    raise ImportError("streams.core.records.Event fields moved; update detector._F_*")

# Kind.severity is a property (interpreted, records.py); this is one dict look-up.
_SEVERITY_OF: Final = {k: k.severity for k in Kind}
_RANK_OF: Final = {k: SEVERITY_RANK[k.severity] for k in Kind}
_ACTION_OF: Final = {k: ACTIONS[k] for k in Kind}
# The identity's first part (findings.finding_id): Kind.family is a property too.
_FAMILY_OF: Final = {k: k.family.value for k in Kind}
# confidence_of is interpreted (findings.py); its few distinct answers are kept
# here by argument (at most 7 kinds x 2 orderings x 3 implied x 4 outcomes).
_CONFIDENCE: dict[tuple[Kind, str, bool | None, str | None], Confidence] = {}

Identity = tuple[Family, int | None, str | None]  # (family, epoch, effect key)


@dataclass(frozen=True, slots=True)
class DetectorConfig:
    max_events_per_key: int = DEFAULT_MAX_EVENTS_PER_KEY
    max_findings_per_key: int = DEFAULT_MAX_FINDINGS_PER_KEY

    def __post_init__(self) -> None:
        if self.max_events_per_key < 8:
            raise ConfigError("max_events_per_key must be at least 8")
        if self.max_findings_per_key < 1:
            raise ConfigError("max_findings_per_key must be at least 1")


@final
@mypyc_attr(acyclic=True)
class _Ev:
    """One retained event. Its sort key (:attr:`k`) is position first
    (``major``, ``minor``), then a content tie-break (``code``, ``epoch``,
    ``worker``, effect key) so that even a contract breach (two events sharing
    a seq) orders the same way whatever the arrival order.

    The key's parts are plain typed fields rather than a stored tuple: the
    in-order path compares them field by field (:func:`_gt`), which compiled
    (mypyc, see ``scripts/build-native``) is a handful of C comparisons and
    saves one tuple per retained event.

    Acyclic (mypyc, ``mypyc_attr``): not tracked by the cyclic collector, no
    GC header. It holds ints and strings only, so no cycle can run through
    it; a key decoded at a state-cache miss builds one per retained event,
    and each tracked one counted toward the next young collection, which
    then traversed them all (docs/performance.md, "Many live keys")."""

    __slots__ = (
        "code",
        "eid",
        "ek",
        "epoch",
        "major",
        "minor",
        "offset",
        "sink",
        "worker",
    )

    def __init__(
        self,
        major: int,
        minor: int,
        seq: int | None,
        offset: int,
        epoch: int,
        code: int,
        worker: str,
        ek: str | None,
        sink: str | None,
        eid: str | None,
    ) -> None:
        # ``seq`` is not stored: it is ``major`` when the event had one
        # (``minor`` 0), else None (see the property; from_bytes checks a
        # stored row against it). Eight bytes fewer put a retained event in
        # obmalloc's 112-byte class, not the 128-byte one: 16 bytes an event.
        self.major = major
        self.minor = minor
        self.offset = offset
        self.epoch = epoch
        self.code = code
        self.worker = worker
        self.ek = ek
        self.sink = sink
        self.eid = eid

    @property
    def k(self) -> tuple[int, int, int, int, str, str]:
        return (self.major, self.minor, self.code, self.epoch, self.worker, self.ek or "")

    @property
    def seq(self) -> int | None:
        """The event's ``seq``: its major position, when it had one."""
        return self.major if self.minor == 0 else None

    @property
    def position(self) -> int:
        return self.major if self.minor == 0 else self.offset

    def evidence(self) -> Evidence:
        """This event as a finding's or a report's evidence record."""
        return Evidence(self.position, self.epoch, self.worker, _TYPE_CODES[self.code], self.ek)

    def row(self) -> list[Any]:
        return [
            self.major,
            self.minor,
            self.seq,
            self.offset,
            self.epoch,
            self.code,
            self.worker,
            self.ek,
            self.sink,
            self.eid,
        ]


def _kept_one(table: dict[Any, Any], value: Any, cap: int) -> Any:
    """``value``, or the equal value ``table`` already keeps (an immutable
    one: a string, a tuple), kept from now on. At ``cap`` values the table
    starts again, empty: it only saves memory, and no result depends on
    which of two equal objects a caller holds."""
    kept = table.get(value)
    if kept is not None:
        return kept
    if len(table) >= cap:
        table.clear()
    table[value] = value
    return value


def _ev_of_row(row: list[Any]) -> _Ev:
    """The event a stored row (:meth:`_Ev.row`) holds; ValueError when its
    ``seq`` is not the one its position implies (a corrupt row), TypeError
    when it is not a row of ten fields of their types."""
    if len(row) != 10:
        raise TypeError(f"event row {row!r}: {len(row)} fields, not 10")
    # Field by field, not ``_Ev(*row)``: compiled, a call with ``*`` goes
    # through the generic call path and the constructor's argument parsing
    # (~2 µs a row); this is a native call with a type check per field. A
    # state is decoded at every cache miss (a worker with more live keys than
    # --state-cache-keys decodes one per event: docs/performance.md).
    ev = _Ev(row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7], row[8], row[9])
    if row[2] != ev.seq:
        raise ValueError(f"event row {row!r}: seq does not match its position")
    return ev


def _gt(a: _Ev, b: _Ev) -> bool:
    """``a.k > b.k`` without building either tuple."""
    if a.major != b.major:
        return a.major > b.major
    if a.minor != b.minor:
        return a.minor > b.minor
    if a.code != b.code:
        return a.code > b.code
    if a.epoch != b.epoch:
        return a.epoch > b.epoch
    if a.worker != b.worker:
        return a.worker > b.worker
    return (a.ek or "") > (b.ek or "")


def _append(
    groups: dict[tuple[str, int | None, str | None], _Ev | list[_Ev]],
    gk: tuple[str, int | None, str | None],
    ev: _Ev,
) -> int:
    """Append ``ev`` (at the tail: after everything in the group) to group
    ``gk``; the group's new length."""
    g = groups.get(gk)
    if g is None:
        groups[gk] = ev
        return 1
    if isinstance(g, _Ev):
        groups[gk] = [g, ev]
        return 2
    g.append(ev)
    return len(g)


def _as_list(g: _Ev | list[_Ev]) -> list[_Ev]:
    """A group's events as a list (a group of one holds the event itself)."""
    return g if isinstance(g, list) else [g]


def _effect_at_tail(st: KeyState, ev: _Ev, n_group: int) -> None:
    """Mark ``st``'s destinations changed by the effect event ``ev``, just
    appended at the tail to its effect's group (now ``n_group`` long): see
    ``KeyState.dests_tail``. A second change before the count, or a later
    event of the same effect, makes it a full recount."""
    st.dests_tail = ev if n_group == 1 and not st.dests_dirty else None
    st.dests_dirty = True


def _key(ev: _Ev) -> tuple[int, int, int, int, str, str]:
    return ev.k


def _major_minor(ev: _Ev) -> tuple[int, int]:
    return (ev.major, ev.minor)


def _kept(events: list[_Ev], seen: list[_Ev] | None, n: int, last: _Ev | None) -> bool:
    """Whether ``events`` still begins with the ``n`` events a memo covered
    (``seen`` the list it read, ``last`` the last of them): the same list
    (an eviction makes a new one) with that event still at ``n - 1`` (an
    out-of-order insert before it moves it). What :meth:`KeyState.to_bytes`'
    rows and :meth:`KeyState.stale_epochs`' scan rest on."""
    return seen is events and 0 < n <= len(events) and events[n - 1] is last


def _count(c: dict[str, Any], name: str) -> int:
    """``int(c.get(name, 0))``; an int as it is (a stored counter is one):
    compiled, ``int()`` of an object is a generic call, five per decode."""
    v = c.get(name, 0)
    return v if type(v) is int else int(v)


#: :meth:`KeyState.stale_epochs` when no epoch is stale: one shared object
#: (never changed), not an empty dict per key and batch kept in each memo.
_NO_STALE: Final[dict[int, list[Any]]] = {}

#: :meth:`KeyState.stale_epochs`' last scan: the events list, how many of its
#: events it covered, the last of those, the displacement map it used, its result.
_StaleMemo = tuple[list[_Ev], int, _Ev, dict[int, tuple[Any, ...] | None], dict[int, list[Any]]]


@mypyc_attr(acyclic=True)
class KeyState:
    """All the detector knows about one workflow key.

    Serializes to bytes (orjson) for a changelog-backed table; the indexes are
    derived and rebuilt on load, so the bytes hold each event once.

    Acyclic (see :class:`_Ev`): nothing it holds refers back to it (events,
    indexes and memos hold events, ints, strings and tuples of them), so it
    is left out of the cyclic collector; its lists and dicts are tracked as
    ever.
    """

    __slots__ = (
        "_enc_last",
        "_enc_list",
        "_enc_n",
        "_enc_rows",
        "_stale_memo",
        "_t_cache",
        "acq",
        "dests",
        "dests_dirty",
        "dests_tail",
        "emitted",
        "event_ids",
        "events",
        "groups",
        "horizon",
        "id_bits",
        "id_bits2",
        "max_epoch",
        "max_major",
        "n_events",
        "n_evicted",
        "n_forgotten",
        "n_late",
        "n_redeliveries",
    )

    def __init__(self, events: list[_Ev] | None = None) -> None:
        # ``events``: a decoded state's (from_bytes), not an empty list
        # made to be dropped at once.
        self.events: list[_Ev] = [] if events is None else events
        self.max_major = -1
        # finding id -> [revision, content hash, severity rank]; None until
        # the key's first finding (most keys have none: ~70 bytes each).
        self.emitted: dict[str, list[Any]] | None = None
        self.horizon: tuple[Any, ...] | None = None
        # Counters (see :attr:`counters`): plain ints, bumped on every event.
        self.n_events = 0
        self.n_redeliveries = 0
        self.n_evicted = 0
        self.n_late = 0
        self.n_forgotten = 0
        # Derived.
        self.acq: dict[int, _Ev] = {}
        # The highest epoch in ``acq`` (-1: none). At the tail an event is
        # stale exactly when its epoch is below it, no index needed.
        self.max_epoch = -1
        # A group of one event holds the event itself, not a list of it:
        # most groups never grow (one acquisition an epoch, one commit an
        # effect), and a list of one is ~70 bytes a group (see group()).
        self.groups: dict[tuple[str, int | None, str | None], _Ev | list[_Ev]] = {}
        # The ids of the retained events: a set past ID_SET_ABOVE events,
        # before that None and the filter ``id_bits`` (see ID_SET_ABOVE). A
        # bit stays set after its event is dropped or evicted: it only costs
        # a scan.
        self.event_ids: set[str] | None = None
        self.id_bits = 0
        self.id_bits2 = 0
        # This key's share of the report's destinations, kept by
        # destinations.Tally (the replay's), and whether an event may have
        # changed it since: an effect event, an insert before the tail, an
        # eviction or a restore. (At the tail an acquisition lies after
        # every effect, so it makes none of them stale.)
        self.dests: tuple[Any, ...] | None = None
        self.dests_dirty = False
        # When the one change since the last count is an effect event
        # appended at the tail as its effect's first event: that event. The
        # tally then adds it alone (a commit counts once, stale exactly when
        # a higher epoch was acquired) instead of recounting the key.
        self.dests_tail: _Ev | None = None
        self._t_cache: dict[int, tuple[Any, ...] | None] | None = None
        # The encoded rows of ``events[:_enc_n]`` (see :meth:`to_bytes`), valid
        # while ``events`` is the list ``_enc_list`` and ``_enc_last`` is still
        # at index ``_enc_n - 1``.
        self._enc_list: list[_Ev] | None = None
        self._enc_n = 0
        self._enc_last: _Ev | None = None
        self._enc_rows = b""
        # The last :meth:`stale_epochs` scan (see there); one slot, not five:
        # a restored idle key pays 8 bytes for it.
        self._stale_memo: _StaleMemo | None = None

    @property
    def counters(self) -> dict[str, int]:
        """A snapshot of this key's counters, by name."""
        return {
            "events": self.n_events,
            "redeliveries_dropped": self.n_redeliveries,
            "evicted": self.n_evicted,
            "late_beyond_horizon": self.n_late,
            "findings_forgotten": self.n_forgotten,
        }

    def _set_counters(self, c: dict[str, Any]) -> None:
        self.n_events = _count(c, "events")
        self.n_redeliveries = _count(c, "redeliveries_dropped")
        self.n_evicted = _count(c, "evicted")
        self.n_late = _count(c, "late_beyond_horizon")
        self.n_forgotten = _count(c, "findings_forgotten")

    # -- derived indexes ---------------------------------------------------
    def _index(self, ev: _Ev, *, tail: bool) -> None:
        code = ev.code
        epoch = ev.epoch
        gk: tuple[str, int | None, str | None] | None
        if code == _PROG:
            # Checkpoints are the bulk of the evidence and are not grouped: the
            # one stale_activity needs (the first stale one) is found by a
            # short scan from the displacement point, see _first_progress_after.
            gk = None
        elif code == _COM:
            gk = (_G_COMMIT, epoch, ev.ek)
            self._add((_G_KEYCOMMITS, None, ev.ek), ev, tail)
        elif code in (_ATT, _REJ):
            gk = (_G_ATTEMPT, epoch, ev.ek)
        elif code == _ACQ:
            gk = (_G_ACQUIRE, epoch, None)
        else:
            gk = None
        if gk is not None:
            self._add(gk, ev, tail)
        cur = self.acq.get(epoch)
        if cur is None or _gt(cur, ev):
            self.acq[epoch] = ev
            self._t_cache = None
            if epoch > self.max_epoch:
                self.max_epoch = epoch
        if ev.eid is not None:
            self._add_id(ev.eid)

    def _add_id(self, eid: str) -> None:
        ids = self.event_ids
        if ids is not None:
            ids.add(eid)
        else:
            b1, b2 = _id_bits(eid)
            self.id_bits |= b1
            self.id_bits2 |= b2

    def _admit_id(self, eid: str) -> bool:
        """False when a retained event carries ``eid`` (a redelivery);
        otherwise record it and return True. Past ID_SET_ABOVE retained
        events the ids move to a set, tested and added in one operation
        (the set did not grow: the id was there)."""
        ids = self.event_ids
        if ids is not None:
            n_ids = len(ids)
            ids.add(eid)
            return len(ids) != n_ids
        # A small key: the filter, then (rarely) a scan; see ID_SET_ABOVE.
        b1, b2 = _id_bits(eid)
        if self.id_bits & b1 and self.id_bits2 & b2 and _retains_id(self.events, eid):
            return False
        self.id_bits |= b1
        self.id_bits2 |= b2
        if len(self.events) >= ID_SET_ABOVE:
            self.event_ids = {ev.eid for ev in self.events if ev.eid is not None}
            self.event_ids.add(eid)
        return True

    def retains_id(self, eid: str) -> bool:
        """Whether a retained event carries the event id ``eid`` (a copy of it
        would be a redelivery)."""
        ids = self.event_ids
        if ids is not None:
            return eid in ids
        b1, b2 = _id_bits(eid)
        return bool(self.id_bits & b1 and self.id_bits2 & b2) and _retains_id(self.events, eid)

    def _add(self, gk: tuple[str, int | None, str | None], ev: _Ev, tail: bool) -> None:
        g = self.groups.get(gk)
        # Appended unless the group's last event lies after it (an equal key
        # goes after, as insort places it).
        if tail or g is None or not _gt(g if isinstance(g, _Ev) else g[-1], ev):
            _append(self.groups, gk, ev)
        elif isinstance(g, _Ev):
            self.groups[gk] = [ev, g]
        else:
            insort(g, ev, key=_key)

    def group(self, gk: tuple[str, int | None, str | None]) -> list[_Ev] | None:
        """The events of group ``gk`` in order, or None when it has none."""
        g = self.groups.get(gk)
        return None if g is None else _as_list(g)

    def _reindex(self) -> None:
        """The indexes of ``events`` rebuilt: what :meth:`_index` at the tail
        of each event in turn leaves, in one loop. A state is reindexed at
        every decode, and a worker with more live keys than its state cache
        decodes one per event: the method call per event and the second
        group look-up of ``_add`` were a fifth of a decode (callgrind,
        docs/performance.md)."""
        # A new state's empty dicts serve (from_bytes); an index in use gets
        # new ones, as before.
        acq = self.acq
        if acq:
            acq = {}
        groups = self.groups
        if groups:
            groups = {}
        max_epoch = -1
        ids: set[str] | None = set() if len(self.events) > ID_SET_ABOVE else None
        bits1 = 0
        bits2 = 0
        for ev in self.events:
            code = ev.code
            epoch = ev.epoch
            # _index's groups, in its order (a commit's effect-key group first).
            if code == _PROG:
                pass
            elif code == _COM:
                _append(groups, (_G_KEYCOMMITS, None, ev.ek), ev)
                _append(groups, (_G_COMMIT, epoch, ev.ek), ev)
            elif code in (_ATT, _REJ):
                _append(groups, (_G_ATTEMPT, epoch, ev.ek), ev)
            elif code == _ACQ:
                _append(groups, (_G_ACQUIRE, epoch, None), ev)
            cur = acq.get(epoch)
            if cur is None or _gt(cur, ev):
                acq[epoch] = ev
                if epoch > max_epoch:
                    max_epoch = epoch
            eid = ev.eid
            if eid is not None:
                if ids is not None:
                    ids.add(eid)
                else:
                    b1, b2 = _id_bits(eid)
                    bits1 |= b1
                    bits2 |= b2
        self.acq = acq
        self.groups = groups
        self.max_epoch = max_epoch
        self.event_ids = ids
        self.id_bits = bits1
        self.id_bits2 = bits2
        self._t_cache = None
        self.dests_dirty = True
        self.dests_tail = None

    def displaced_at(self) -> dict[int, tuple[Any, ...] | None]:
        """epoch -> sort key of the earliest acquisition of any higher epoch
        (None when no higher epoch exists): events of that epoch positioned
        after it are stale."""
        cache = self._t_cache
        if cache is None:
            cache = {}
            best: tuple[Any, ...] | None = None
            # Highest epoch first; sorted() without ``reverse=``: compiled, a
            # keyword argument made it a generic call with names (the map is
            # built once per key per batch at a state-cache miss).
            epochs = sorted(self.acq)
            for i in range(len(epochs) - 1, -1, -1):
                epoch = epochs[i]
                cache[epoch] = best
                k = self.acq[epoch].k
                if best is None or k < best:
                    best = k
            self._t_cache = cache
        return cache

    def stale_epochs(self) -> dict[int, list[Any]]:
        """Stale epoch -> [its latest stale event's worker, its stale event
        count, its latest stale position], over the retained events: the
        status record's ``stale_epochs`` (SPEC §8). The caller must not
        change what it returns.

        Kept between calls, like :meth:`to_bytes`' rows: the live processor
        asks once per changed key per batch, and a full scan is O(retained
        events) -- 28 µs a call for a key holding 1,000 events, on every
        batch of a long-lived workflow (docs/performance.md). While the
        displacement map is the same object (no acquisition moved: it is
        rebuilt whenever one does), ``events`` is the same list (an eviction
        makes a new one) and the last event scanned is still where it was
        (an out-of-order insert before it moves it), the events scanned
        keep their verdicts and only the ones after them are scanned."""
        if len(self.acq) < 2:
            return _NO_STALE  # no epoch is displaced before a second acquisition
        disp = self.displaced_at()
        events = self.events
        start = 0
        stale = _NO_STALE
        #: Whether ``stale`` is shared (handed out before, or the empty one).
        shared = True
        memo = self._stale_memo
        if memo is not None:
            m_list, m_n, m_last, m_disp, m_stale = memo
            if m_disp is disp and _kept(events, m_list, m_n, m_last):
                if m_n == len(events):
                    return m_stale
                start = m_n
                stale = m_stale
        for i in range(start, len(events)):
            ev = events[i]
            code = ev.code
            if code in (_ACQ, _VER):
                continue
            t = disp.get(ev.epoch)
            if t is None:
                continue
            major: int = t[0]
            if ev.major != major:
                if ev.major < major:
                    continue
            elif not ev.k > t:
                continue
            if shared:
                # Never changed in place: an earlier call handed it out.
                stale = {e: list(v) for e, v in stale.items()}
                shared = False
            entry = stale.get(ev.epoch)
            if entry is None:
                stale[ev.epoch] = [ev.worker, 1, ev.position]
            else:  # events are in position order: the last one seen is the latest
                entry[0] = ev.worker
                entry[1] += 1
                entry[2] = ev.position
        self._stale_memo = (events, len(events), events[-1], disp, stale)
        return stale

    # -- bytes -------------------------------------------------------------
    def to_bytes(self, suffix: bytes = b"") -> bytes:
        """The state as one JSON object: ``{"v", "e", "m", "f", "h", "c"}``, in
        that order (the changelog format, ``v`` 1), followed by ``suffix``
        (the live table's status meta trailer: in the same join, not a
        second copy of the whole value).

        The retained events' rows are most of it and are append-mostly (the
        live processor encodes a key once per batch, one event more each
        time), so the encoded rows are kept and only rows appended since are
        encoded; an insert before them or an eviction (a new list) encodes
        them all again. The bytes are the same as encoding the whole object
        at once (tests/core/test_state_format.py)."""
        events = self.events
        n = self._enc_n
        if not _kept(events, self._enc_list, n, self._enc_last):
            n = 0
        if n < len(events):
            # An event's fields never change once retained: its row is final.
            fresh = orjson.dumps([ev.row() for ev in (events[n:] if n else events)])[1:-1]
            # Joined, not concatenated twice: each ``+`` copied every row
            # encoded so far once more (a key holding 1,000 events: ~70 KB).
            rows = fresh if n == 0 else b"".join((self._enc_rows, b",", fresh))
            self._enc_list = events
            self._enc_n = len(events)
            self._enc_last = events[-1]
            self._enc_rows = rows
        else:
            rows = self._enc_rows if n else b""
        return b"".join((_STATE_HEAD, rows, self._tail(), suffix))

    def _tail(self) -> bytes:
        """What :meth:`to_bytes` writes after the rows: ``m``, ``f``, ``h``
        and the counters ``c`` in the order and spelling of :attr:`counters`.
        Built as a str and encoded once (ASCII: ints and fixed names), not a
        ``bytes % tuple``: compiled, the f-string is a native string build,
        where bytes formatting parsed its format and boxed each int, a
        fifth of an encode (callgrind, docs/performance.md)."""
        emitted = self.emitted
        horizon = self.horizon
        counts = (
            f'"c":{{"events":{self.n_events},"redeliveries_dropped":{self.n_redeliveries},'
            f'"evicted":{self.n_evicted},"late_beyond_horizon":{self.n_late},'
            f'"findings_forgotten":{self.n_forgotten}}}}}'
        )
        if not emitted and horizon is None:
            return f'],"m":{self.max_major},"f":{{}},"h":null,{counts}'.encode()
        return b"".join(
            (
                f'],"m":{self.max_major},"f":'.encode(),
                orjson.dumps(emitted) if emitted else b"{}",
                b',"h":',
                b"null" if horizon is None else orjson.dumps(list(horizon)),
                b",",
                counts.encode(),
            )
        )

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview) -> KeyState:
        try:
            doc = orjson.loads(data)
            if doc.get("v") != _STATE_VERSION:
                raise StateError(f"state version {doc.get('v')!r} is not known to this build")
            # KeyState(), not cls(): compiled, a native constructor call
            # rather than a generic call of the class (no subclass exists).
            st = KeyState([_ev_of_row(row) for row in doc["e"]])
            st.max_major = int(doc["m"])
            st.emitted = dict(doc["f"]) or None
            h = doc["h"]
            st.horizon = None if h is None else tuple(h)
            st._set_counters(doc["c"])
        except StateError:
            raise
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
            raise StateError(f"corrupt key state: {exc}") from None
        st._reindex()
        return st

    def __len__(self) -> int:
        return len(self.events)

    def epoch_count(self) -> int:
        """How many epochs the retained evidence spans (for reports: counted
        here, compiled, rather than over a :meth:`timeline` built for it)."""
        return len({ev.epoch for ev in self.events})

    def timeline_columns(self) -> tuple[list[int], list[int], list[str], list[str]]:
        """The positions, epochs, worker ids and types of :meth:`timeline`'s
        evidence, as four lists in its order: what a report reads of every
        retained event, built here (compiled) rather than attribute by
        attribute from 100,000 Evidence records."""
        pos: list[int] = []
        ep: list[int] = []
        wk: list[str] = []
        ty: list[str] = []
        for ev in self.events:
            pos.append(ev.position)
            ep.append(ev.epoch)
            wk.append(ev.worker)
            ty.append(_TYPE_CODES[ev.code])
        return pos, ep, wk, ty

    def evidence(self, i: int) -> Evidence:
        """The ``i``-th record of :meth:`timeline`, built alone (a report
        draws a few hundred of a long workflow's events)."""
        return self.events[i].evidence()

    def timeline(self) -> list[Evidence]:
        """The retained evidence in position order (for reports)."""
        return [ev.evidence() for ev in self.events]


class Detector:
    """Classifies ownership evidence per workflow key (SPEC §3-4)."""

    def __init__(self, config: DetectorConfig | None = None) -> None:
        self.config = config or DetectorConfig()
        # worker id or sink name -> the one string kept for it (see
        # process_fields); at most MAX_SHARED_WORKERS, then emptied. Only
        # saves memory: results never depend on it.
        self._workers: dict[str, str] = {}
        # Read on every event: a native attribute, where the frozen config's
        # is a generic look-up from compiled code.
        self._max_events = self.config.max_events_per_key

    def new_state(self) -> KeyState:
        return KeyState()

    def process(self, state: KeyState, event: Event, offset: int) -> list[Finding]:
        """Apply ``event`` (arrived at ``offset``: partition offset or line
        number) to ``state`` in place; return the finding records whose content
        changed (a new finding at revision 1, or a new revision)."""
        # All the fields in one C call: compiled, reading eight attributes of a
        # msgspec Struct one by one is a generic attribute look-up each.
        return self.process_fields(state, _ASTUPLE(event), offset)

    def process_fields(
        self, state: KeyState, fields: tuple[Any, ...], offset: int
    ) -> list[Finding]:
        """:meth:`process` of the event whose fields are ``fields``
        (``msgspec.structs.astuple(event)``, as
        :func:`~streams.core.validate.decode_event` returns them)."""
        st = state
        st.n_events += 1
        wkey: str = fields[_F_WKEY]
        eid: str | None = fields[_F_EVENT_ID]
        # Recorded at once; taken out of a set again below if the event turns
        # out to be dropped after all (a set then holds exactly the ids of the
        # retained events, as _reindex builds it; a filter bit only costs a scan).
        if eid is not None and not st._admit_id(eid):
            st.n_redeliveries += 1
            return []
        code = _code_of(fields[_F_TYPE])
        seq: int | None = fields[_F_SEQ]
        epoch: int = fields[_F_EPOCH]
        worker: str = fields[_F_WORKER]
        worker = self._shared(worker)
        ek: str | None = fields[_F_EFFECT_KEY]
        sink: str | None = fields[_F_SINK]
        if sink is not None:
            sink = self._shared(sink)
        at_tail = False
        if seq is not None:
            if seq > st.max_major:
                # Beyond every retained position: the tail, no comparison needed.
                at_tail = True
                st.max_major = seq
            elif self._is_redelivery(st, seq, code, epoch, ek):
                st.n_redeliveries += 1
                if eid is not None and st.event_ids is not None:
                    st.event_ids.discard(eid)
                return []
            ev = _Ev(seq, 0, seq, offset, epoch, code, worker, ek, sink, eid)
        else:
            # Placed after every event of this key that arrived before it.
            ev = _Ev(st.max_major, 1 + offset, None, offset, epoch, code, worker, ek, sink, eid)
        events = st.events
        if at_tail or not events or _gt(ev, events[-1]):
            events.append(ev)
            # KeyState._index at the tail, inlined (its group look-ups are
            # the ones the findings below need) and with the event id added
            # above: checkpoints, releases and verifications are in no
            # group; at the tail an event is appended to its groups and can
            # only be its epoch's first evidence, never an earlier one.
            n_group = 0
            if code == _ACQ:
                n_group = _append(st.groups, (_G_ACQUIRE, epoch, None), ev)
            elif code == _COM:
                n_group = _append(st.groups, (_G_KEYCOMMITS, None, ek), ev)
                _effect_at_tail(st, ev, _append(st.groups, (_G_COMMIT, epoch, ek), ev))
            elif code in (_ATT, _REJ):
                _effect_at_tail(st, ev, _append(st.groups, (_G_ATTEMPT, epoch, ek), ev))
            if epoch > st.max_epoch:
                st.acq[epoch] = ev
                st._t_cache = None
                st.max_epoch = epoch
            elif epoch < st.max_epoch and epoch not in st.acq:
                # (The highest epoch is in acq: no look-up for the current owner's events.)
                st.acq[epoch] = ev
                st._t_cache = None
            # In-order fast path: only findings about this event can change.
            # At the tail every acquisition lies before the event, so it is
            # stale (or, for an acquisition, a regression) exactly when a
            # higher epoch has been acquired at all.
            stale = epoch < st.max_epoch
            if code in (_PROG, _REL, _VER):
                # The commonest case, kept to one allocation (the result): a
                # checkpoint raises only its stale epoch's one stale_activity,
                # on the first stale checkpoint (a later one at the tail
                # changes nothing); releases and verifications raise nothing.
                if (
                    code == _PROG
                    and stale
                    and (
                        st.emitted is None
                        or _fid(_FAM_V_ACTIVITY, wkey, epoch, None) not in st.emitted
                    )
                ):
                    out = self._emit(st, [(_FAM_ACTIVITY, epoch, None)], wkey)
                else:
                    out = []
            else:
                touched: list[Identity] = []
                if code == _ACQ:
                    if n_group > 1:
                        touched.append((_FAM_REUSE, epoch, None))
                    if stale:
                        touched.append((_FAM_REGRESSION, epoch, None))
                elif code == _COM:
                    if stale:
                        touched.append((_FAM_COMMIT, epoch, ek))
                        touched.append((_FAM_ATTEMPT, epoch, ek))
                    if n_group > 1:
                        touched.append((_FAM_COMMIT_REPEAT, None, ek))
                elif stale:  # attempted, rejected
                    touched.append((_FAM_ATTEMPT, epoch, ek))
                out = self._emit(st, touched, wkey) if touched else []
        else:
            if st.horizon is not None and ev.k <= st.horizon:
                st.n_late += 1
            insort(events, ev, key=_key)
            st._index(ev, tail=False)
            st.dests_dirty = True
            st.dests_tail = None
            # Late evidence can restate anything of this key: rebuild it all.
            out = self._emit(st, self._all_identities(st), wkey)
        if len(events) > self._max_events:
            self._evict(st)
        return out

    def _shared(self, name: str) -> str:
        """The one string kept for the worker id or sink name ``name``.

        One string per name, not one per event: a retained event is ~110
        bytes and its own copy of the worker id added ~50 more (measured:
        the file audit's page faults follow the bytes retained per event).
        Shared by every key, so the table is small and in cache, where the
        key's own last worker id was one more cold read per event."""
        kept: str = _kept_one(self._workers, name, MAX_SHARED_WORKERS)
        return kept

    # -- redelivery --------------------------------------------------------
    @staticmethod
    def _is_redelivery(st: KeyState, seq: int, code: int, epoch: int, ek: str | None) -> bool:
        events = st.events
        i = bisect_right(events, (seq, 0), key=_major_minor)
        j = i - 1
        while j >= 0 and events[j].major == seq:
            other = events[j]
            if other.minor == 0 and other.code == code and other.epoch == epoch and other.ek == ek:
                return True
            j -= 1
        return False

    # -- which findings an event can change ----------------------------------
    @staticmethod
    def _all_identities(st: KeyState) -> list[Identity]:
        out: list[Identity] = []
        out.extend((_FAM_ACTIVITY, epoch, None) for epoch in st.acq)
        for tag, epoch, ek in st.groups:
            if tag == _G_ATTEMPT:
                out.append((_FAM_ATTEMPT, epoch, ek))
            elif tag == _G_COMMIT:
                out.append((_FAM_COMMIT, epoch, ek))
                out.append((_FAM_ATTEMPT, epoch, ek))
            elif tag == _G_KEYCOMMITS:
                out.append((_FAM_COMMIT_REPEAT, None, ek))
            elif tag == _G_ACQUIRE:
                out.append((_FAM_REUSE, epoch, None))
                out.append((_FAM_REGRESSION, epoch, None))
        # Stable order: emitted records come out in a deterministic sequence.
        out = sorted(set(out), key=lambda i: (i[0], -1 if i[1] is None else i[1], i[2] or ""))
        return out

    # -- emission ------------------------------------------------------------
    def _emit(self, st: KeyState, identities: list[Identity], wkey: str) -> list[Finding]:
        if not identities:
            return []
        out: list[Finding] = []
        cap = self.config.max_findings_per_key
        emitted = st.emitted
        if emitted is None:
            emitted = st.emitted = {}
        for ident in identities:
            built = _build(st, ident, wkey)
            if built is None:
                continue
            fid, content = built
            digest = hashlib.blake2b(
                orjson.dumps(content, option=orjson.OPT_SORT_KEYS), digest_size=12
            ).hexdigest()
            sev = _RANK_OF[content["kind"]]
            prev = emitted.get(fid)
            if prev is None:
                rev = 1
                if len(emitted) >= cap:
                    del emitted[next(iter(emitted))]
                    st.n_forgotten += 1
            else:
                if prev[1] == digest or sev < prev[2]:
                    continue
                rev = prev[0] + 1
            emitted[fid] = [rev, digest, sev]
            out.append(_finding(fid, rev, content))
        return out

    # -- bounds --------------------------------------------------------------
    def _evict(self, st: KeyState) -> None:
        cap = self.config.max_events_per_key
        target = cap - max(1, cap // 8)  # evict in batches: amortized O(1) per event
        drop = len(st.events) - target
        disp = st.displaced_at()
        acq_ids = {id(ev) for ev in st.acq.values()}
        victims: set[int] = set()
        for ev in st.events:
            if len(victims) >= drop:
                break
            if ev.code in _CHEAP and id(ev) not in acq_ids:
                t = disp.get(ev.epoch)
                if t is None or ev.k < t:  # fresh: no finding rests on it
                    victims.add(id(ev))
        if len(victims) < drop:
            for ev in st.events:
                if len(victims) >= drop:
                    break
                victims.add(id(ev))
        kept: list[_Ev] = []
        horizon = st.horizon
        for ev in st.events:
            if id(ev) in victims:
                if horizon is None or ev.k > horizon:
                    horizon = ev.k
            else:
                kept.append(ev)
        st.n_evicted += len(st.events) - len(kept)
        st.events = kept
        st.horizon = horizon
        st._reindex()


# -- report helpers over a timeline's columns ----------------------------------
def epoch_starts(
    epochs: list[int], workers: list[str], per_epoch: int
) -> tuple[dict[int, int], dict[int, list[str]]]:
    """Over a timeline's epoch and worker columns (:meth:`KeyState.timeline_columns`):
    each epoch's first index, and its first ``per_epoch`` distinct workers
    in order. For the HTML timeline's lanes; here, compiled, one pass where
    the report made two over 100,000 zipped pairs."""
    firsts: dict[int, int] = {}
    names: dict[int, list[str]] = {}
    for i in range(len(epochs)):
        ep = epochs[i]
        ws = names.get(ep)
        if ws is None:
            firsts[ep] = i
            names[ep] = [workers[i]]
        elif len(ws) < per_epoch:
            w = workers[i]
            if w not in ws:
                ws.append(w)
    return firsts, names


# -- building findings (pure functions of the retained evidence) -------------
def _first_after(lst: list[_Ev] | None, t: tuple[Any, ...] | None) -> _Ev | None:
    if not lst or t is None:
        return None
    i = bisect_right(lst, t, key=_key)
    return lst[i] if i < len(lst) else None


def _first_progress_after(events: list[_Ev], epoch: int, t: tuple[Any, ...] | None) -> _Ev | None:
    if t is None:
        return None
    for i in range(bisect_right(events, t, key=_key), len(events)):
        ev = events[i]
        if ev.code == _PROG and ev.epoch == epoch:
            return ev
    return None


def _current_at(st: KeyState, ev: _Ev) -> _Ev | None:
    """The acquisition of the highest epoch acquired before ``ev``."""
    best: _Ev | None = None
    for epoch, acq in st.acq.items():
        if _gt(ev, acq) and (best is None or epoch > best.epoch):
            best = acq
    return best


@final
class _Raised:
    """What a family's builder found: the kind, the raising event, the
    displaced owner and the family's own fields; :func:`_assemble` turns it
    into the finding's content the same way for every family."""

    __slots__ = (
        "epochs",
        "extra",
        "kind",
        "raising",
        "same_owner",
        "sink_outcome",
        "stale_epoch",
        "stale_worker",
    )

    def __init__(
        self,
        kind: Kind,
        raising: _Ev,
        stale_epoch: int,
        stale_worker: str,
        *,
        sink_outcome: str | None = None,
        same_owner: bool | None = None,
        epochs: list[int] | None = None,
        extra: list[_Ev] | None = None,
    ) -> None:
        self.kind = kind
        self.raising = raising
        self.stale_epoch = stale_epoch
        self.stale_worker = stale_worker
        self.sink_outcome = sink_outcome
        self.same_owner = same_owner
        self.epochs = epochs
        self.extra: list[_Ev] = [] if extra is None else extra


# ---- stale_activity: the first stale checkpoint of a displaced epoch -------
def _stale_activity(st: KeyState, epoch: int, disp: dict[int, Any]) -> _Raised | None:
    raising = _first_progress_after(st.events, epoch, disp.get(epoch))
    if raising is None:
        return None
    return _Raised(Kind.STALE_ACTIVITY, raising, epoch, raising.worker)


# ---- stale_attempt: a stale attempt or rejection, with the sink's answer ---
def _stale_attempt(
    st: KeyState, epoch: int, ek: str | None, disp: dict[int, Any]
) -> _Raised | None:
    t = disp.get(epoch)
    attempts = st.group((_G_ATTEMPT, epoch, ek))
    raising = _first_after(attempts, t)
    if raising is None:
        return None
    commit = _first_after(st.group((_G_COMMIT, epoch, ek)), t)
    if commit is not None:
        outcome, extra = "committed", [commit]
    else:
        assert attempts is not None and t is not None
        rejection = next((a for a in attempts if a.code == _REJ and a.k > t), None)
        if rejection is not None:
            outcome, extra = "rejected", [rejection]
        else:
            outcome, extra = "unknown", []
    return _Raised(
        Kind.STALE_ATTEMPT, raising, epoch, raising.worker, sink_outcome=outcome, extra=extra
    )


# ---- stale_commit: the first stale commit of an effect by an epoch ---------
def _stale_commit(st: KeyState, epoch: int, ek: str | None, disp: dict[int, Any]) -> _Raised | None:
    raising = _first_after(st.group((_G_COMMIT, epoch, ek)), disp.get(epoch))
    if raising is None:
        return None
    return _Raised(Kind.STALE_COMMIT, raising, epoch, raising.worker, sink_outcome="committed")


# ---- commit_repeat: duplicate_commit, escalating to conflicting_commit -----
def _commit_repeat(st: KeyState, ek: str | None, disp: dict[int, Any]) -> _Raised | None:
    commits = st.group((_G_KEYCOMMITS, None, ek))
    if not commits or len(commits) < 2:
        return None
    first = commits[0]
    raising = next((c for c in commits if c.epoch != first.epoch), commits[1])
    epochs = sorted({c.epoch for c in commits})
    conflicting = len(epochs) >= 2 and any(
        (t := disp.get(c.epoch)) is not None and c.k > t for c in commits
    )
    stale_epoch = epochs[0]
    return _Raised(
        Kind.CONFLICTING_COMMIT if conflicting else Kind.DUPLICATE_COMMIT,
        raising,
        stale_epoch,
        next(c.worker for c in commits if c.epoch == stale_epoch),
        sink_outcome="committed",
        same_owner=len(epochs) == 1,
        epochs=epochs,
        extra=list(commits),
    )


# ---- epoch_reuse: one epoch acquired by two workers ------------------------
def _epoch_reuse(st: KeyState, epoch: int) -> _Raised | None:
    acqs = st.group((_G_ACQUIRE, epoch, None))
    if not acqs or len(acqs) < 2:
        return None
    w0 = acqs[0].worker
    raising = next((a for a in acqs if a.worker != w0), None)
    if raising is None:
        return None
    return _Raised(Kind.EPOCH_REUSE, raising, epoch, raising.worker, extra=[acqs[0]])


# ---- epoch_regression: an acquisition after a higher epoch's ---------------
def _epoch_regression(st: KeyState, epoch: int, disp: dict[int, Any]) -> _Raised | None:
    raising = _first_after(st.group((_G_ACQUIRE, epoch, None)), disp.get(epoch))
    if raising is None:
        return None
    return _Raised(Kind.EPOCH_REGRESSION, raising, epoch, raising.worker)


# ---- common to every family --------------------------------------------------
def _build(st: KeyState, ident: Identity, wkey: str) -> tuple[str, dict[str, Any]] | None:
    """The finding ``ident`` names, as (finding id, content), or None when the
    retained evidence raises none."""
    family, epoch, ek = ident
    disp = st.displaced_at()
    found: _Raised | None
    if family is _FAM_COMMIT_REPEAT:
        found = _commit_repeat(st, ek, disp)
    else:
        assert epoch is not None
        if family is _FAM_ACTIVITY:
            found = _stale_activity(st, epoch, disp)
        elif family is _FAM_ATTEMPT:
            found = _stale_attempt(st, epoch, ek, disp)
        elif family is _FAM_COMMIT:
            found = _stale_commit(st, epoch, ek, disp)
        elif family is _FAM_REUSE:
            found = _epoch_reuse(st, epoch)
        elif family is _FAM_REGRESSION:
            found = _epoch_regression(st, epoch, disp)
        else:  # pragma: no cover - identities are produced by this module
            raise AssertionError(family)
    if found is None:
        return None
    return _assemble(st, found, family is _FAM_COMMIT_REPEAT, ek, wkey)


def _assemble(
    st: KeyState, r: _Raised, per_effect: bool, ek: str | None, wkey: str
) -> tuple[str, dict[str, Any]]:
    """The content of the finding ``r`` describes: its transition, evidence,
    ordering and confidence. ``per_effect``: the identity is the effect key
    alone (commit_repeat), not the epoch's."""
    raising = r.raising
    kind = r.kind
    stale_epoch = r.stale_epoch
    extra = r.extra
    sink_outcome = r.sink_outcome
    transition = _current_at(st, raising)
    evidence = {id(raising): raising}
    if transition is not None:
        evidence[id(transition)] = transition
    own = st.acq.get(stale_epoch)
    if own is not None and not per_effect:
        evidence[id(own)] = own
    for ev in extra:
        evidence[id(ev)] = ev
    ordered = sorted(evidence.values(), key=_key)
    if len(ordered) > MAX_EVIDENCE:
        # Keep the raising event and its transition; trim the rest evenly from the end.
        must = {id(raising)} | ({id(transition)} if transition is not None else set())
        rest = [e for e in ordered if id(e) not in must][: MAX_EVIDENCE - len(must)]
        ordered = sorted([*rest, *(evidence[i] for i in must)], key=_key)
    sink = raising.sink
    if sink is None:
        sink = next((e.sink for e in extra if e.sink is not None), None)
    ordering = "authoritative" if all(e.seq is not None for e in ordered) else "arrival"
    implied = None if transition is None else transition.code != _ACQ
    content: dict[str, Any] = {
        "kind": kind,
        "severity": _SEVERITY_OF[kind],
        "workflow_key": wkey,
        "stale_epoch": stale_epoch,
        "stale_worker": r.stale_worker,
        "current_epoch": None if transition is None else transition.epoch,
        "current_worker": None if transition is None else transition.worker,
        "transition_seq": None if transition is None else transition.seq,
        "transition_implied": implied,
        "epochs": r.epochs,
        "event_type": _TYPE_CODES[raising.code],
        "event_seq": raising.seq,
        "event_offset": raising.offset,
        "effect_key": raising.ek,
        "sink": sink,
        "sink_outcome": sink_outcome,
        "same_owner": r.same_owner,
        "ordering": ordering,
        "evidence": [(e.position, e.epoch, e.worker, _TYPE_CODES[e.code], e.ek) for e in ordered],
        # A pure function of the fields above; kept in the content so a change
        # of confidence is visibly a new revision (SPEC §4).
        "confidence": _confidence(kind, ordering, implied, sink_outcome),
    }
    fid = _fid(_FAMILY_OF[kind], wkey, None if per_effect else stale_epoch, ek)
    return fid, content


def _fid(family: str, wkey: str, epoch: int | None, ek: str | None) -> str:
    """:func:`~streams.core.findings.finding_id` of a finding of ``family``
    (its value), computed here: compiled, without the interpreted call and the
    enum properties (tests/core/test_families.py holds the two equal)."""
    e = "" if epoch is None else str(epoch)
    k = "" if ek is None else ek
    material = f"{len(family)}:{family}{len(wkey)}:{wkey}{len(e)}:{e}{len(k)}:{k}"
    return "fw1-" + hashlib.blake2b(material.encode("utf-8"), digest_size=12).hexdigest()


def _confidence(
    kind: Kind, ordering: str, implied: bool | None, sink_outcome: str | None
) -> Confidence:
    """:func:`~streams.core.findings.confidence_of` (the one rule), remembered
    by argument: an interpreted call per finding built is most of a build."""
    args = (kind, ordering, implied, sink_outcome)
    got = _CONFIDENCE.get(args)
    if got is None:
        got = _CONFIDENCE[args] = confidence_of(kind, ordering, implied, sink_outcome)
    return got


def _finding(fid: str, rev: int, c: dict[str, Any]) -> Finding:
    kind: Kind = c["kind"]
    return Finding(
        finding_id=fid,
        revision=rev,
        kind=kind,
        severity=c["severity"],
        workflow_key=c["workflow_key"],
        stale_epoch=c["stale_epoch"],
        stale_worker=c["stale_worker"],
        current_epoch=c["current_epoch"],
        current_worker=c["current_worker"],
        transition_seq=c["transition_seq"],
        transition_implied=c["transition_implied"],
        epochs=None if c["epochs"] is None else tuple(c["epochs"]),
        event_type=c["event_type"],
        event_seq=c["event_seq"],
        event_offset=c["event_offset"],
        effect_key=c["effect_key"],
        sink=c["sink"],
        sink_outcome=c["sink_outcome"],
        same_owner=c["same_owner"],
        ordering=c["ordering"],
        evidence=tuple(Evidence(p, e, w, t, k) for p, e, w, t, k in c["evidence"]),
        action=_ACTION_OF[kind],
        confidence=c["confidence"],
    )
