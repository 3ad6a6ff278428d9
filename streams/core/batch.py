"""The live processor's batch logic: a batch of consumed records in, what
they produced out (findings and rejections per source partition, each
changed key's new stored value, status documents, stale-effect counts).

Pure and compiled (``streams._native``): it imports no Kafka client, logs
nothing and reads no clock. :class:`streams.live.processor.Processor` wraps
it and keeps the Kafka-facing parts: output records and their headers, and
the log line of an internal error (returned here as the exception in its
:class:`Rejection`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Final, Protocol, final

from streams.core.detector import Detector, KeyState
from streams.core.errors import InvalidEvent
from streams.core.findings import Finding
from streams.core.pending import PendingStatus
from streams.core.records import WORKFLOW_KEY_FIELD, Event, Kind
from streams.core.status import stale_effects, stale_seen
from streams.core.stored import (
    META_ERRORS,
    SEP,
    StatusMeta,
    decode_meta,
    encode_meta,
    split_value,
)
from streams.core.validate import decode_event

try:
    # Compiled (mypyc brings mypy_extensions): see _KeyWork.
    from mypy_extensions import mypyc_attr
except ImportError:  # pragma: no cover - interpreted, without mypy installed

    def mypyc_attr(*_attrs: Any, **_kwattrs: Any) -> Any:  # type: ignore[misc]
        return lambda cls: cls


__all__ = [
    "ADMIT_DECODED_EVERY",
    "INTERNAL_ERROR",
    "BatchCore",
    "BatchResult",
    "Consumed",
    "DetectorLike",
    "Rejection",
]

#: The dead-letter reason of an event the detector failed on.
INTERNAL_ERROR: Final = "internal error"
#: Findings about an effect: a batch that emits one may have new stale effects.
_EFFECT_KINDS: Final = frozenset({Kind.STALE_ATTEMPT, Kind.STALE_COMMIT})
#: A full state cache takes a key whose state was decoded from the table (a
#: miss of a known key) one time in this many; new keys and hits always
#: enter. Keys that come back in a cycle longer than the cache (more keys
#: live at once than ``cache_keys``) each miss under a plain LRU, which
#: evicts every entry just before its next use; refusing most of them keeps
#: a share of the cycle cached, and the one in 16 still lets the cache move
#: to a new working set. bench/live_batch_keys.py (25,000 keys live, 10,000
#: cached): 0 hits of 175,000 under the LRU, 40,979 with this (8: 38,188,
#: 32: 43,037); keys in blocks smaller than the cache hit as before.
ADMIT_DECODED_EVERY: Final = 16


class Consumed(Protocol):
    """What the batch reads of a consumed record."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def timestamp(self) -> int | None: ...


class DetectorLike(Protocol):
    """A :class:`Detector`, or a stand-in for one (tests wrap it to fail)."""

    def new_state(self) -> KeyState: ...
    def process(self, state: KeyState, event: Event, offset: int) -> list[Finding]: ...


@final
class Rejection:
    """A record that goes to the dead-letter topic: invalid (``field`` and
    ``reason`` from validation) or one the detector failed on (``reason``
    :data:`INTERNAL_ERROR`, ``error`` the exception, for the log)."""

    __slots__ = ("error", "field", "reason", "record", "value")

    def __init__(
        self,
        record: Consumed,
        value: bytes,
        field: str | None,
        reason: str,
        error: BaseException | None,
    ) -> None:
        self.record = record
        self.value = value
        self.field = field
        self.reason = reason
        self.error = error


@final
class BatchResult:
    """What a batch produced.

    ``outputs``: per source partition, its findings and rejections in event
    order. ``states``: each changed key's stored value once, as ``(key,
    partition, value)`` (a key seen in two source partitions gets one entry
    per partition run). ``status``: per source partition, the pending status
    record of each key whose status changed (encoded when read).
    ``stale_effects``: ``(outcome, sink)`` -> distinct stale effects that
    reached that outcome in the batch."""

    __slots__ = ("findings", "outputs", "rejections", "stale_effects", "states", "status")

    def __init__(
        self,
        outputs: dict[int, list[Finding | Rejection]],
        states: list[tuple[bytes, int, bytes]],
        findings: list[Finding],
        rejections: list[Rejection],
        stale_effects: dict[tuple[str, str], int],
        status: dict[int, list[PendingStatus]],
    ) -> None:
        self.outputs = outputs
        self.states = states
        self.findings = findings
        self.rejections = rejections
        self.stale_effects = stale_effects
        self.status = status


@final
@mypyc_attr(acyclic=True)
class _KeyWork:
    """One key's state while a batch is processed.

    Acyclic (mypyc): left out of the cyclic collector, like the state it
    holds (``KeyState``); nothing it holds refers back to it. One is made
    per key per batch: with every event another key, one per event."""

    __slots__ = (
        "applied",
        "decoded",
        "effects",
        "latest",
        "meta",
        "partition",
        "rebuilt",
        "state",
        "stored",
    )

    def __init__(
        self,
        state: KeyState,
        meta: _Meta | None,
        stored: bytes | None,
        partition: int,
    ) -> None:
        self.state = state
        #: The status meta stored with the state (None: none stored).
        self.meta = meta
        self.stored = stored
        self.partition = partition
        #: The key's events of this batch the detector accepted, with their
        #: offsets (to rebuild the state if a later one fails half-way) and
        #: Kafka timestamps (the status's: a stale epoch's last_seen_ms).
        #: One tuple per event, not a position -> timestamp dict per key per
        #: batch: that dict is read only for a key with a stale epoch, so
        #: :func:`_times` builds it then (each dict was a tracked allocation
        #: per key per batch, and brought the next collection closer).
        self.applied: list[tuple[Event, int, int | None]] = []
        #: The latest of those timestamps (status only), kept as they come
        #: rather than a max() per changed key.
        self.latest: int | None = None
        #: Whether a stale-effect finding came out of this batch.
        self.effects = False
        #: Whether the state was rebuilt after a detector failure: a pending
        #: status of an earlier batch holds the object given up, so the
        #: status is written again from the rebuilt one.
        self.rebuilt = False
        #: Whether the state was decoded from the table (not cached, not new):
        #: see ADMIT_DECODED_EVERY.
        self.decoded = False


def _times(applied: Sequence[tuple[Event, int, int | None]]) -> dict[int, int]:
    """Position -> Kafka timestamp of a batch's applied events (a position
    is the event's ``seq``, else its offset)."""
    out: dict[int, int] = {}
    for event, offset, ts in applied:
        if ts is not None:
            seq = event.seq
            out[offset if seq is None else seq] = ts
    return out


@final
@mypyc_attr(acyclic=True)
class _Meta:
    """A key's status meta while the batch logic holds it: a
    :class:`~streams.core.stored.StatusMeta`'s fields in a compiled class.
    One is made per changed key per batch and read by the key's next batch:
    the Struct cost a call to build and a generic attribute look-up per
    field read; this costs neither. The Struct stays the stored format.
    Acyclic (mypyc), as the Struct was ``gc=False``: it holds ints and a
    dict of ints."""

    __slots__ = ("accepted", "seen", "updated_ms")

    def __init__(self, seen: dict[int, int], updated_ms: int | None, accepted: int) -> None:
        self.seen = seen
        self.updated_ms = updated_ms
        self.accepted = accepted


#: No status record written yet (``StatusMeta``'s ``NO_META``).
_NO_META: Final = _Meta({}, None, -1)


def _trailer(meta: _Meta | None) -> bytes:
    """What ``join_value`` puts after the state's bytes for ``meta``: SEP and
    the meta's bytes (``None``: nothing). Passed to ``KeyState.to_bytes``,
    which writes it in the value's one join: a second join of the whole
    state to append it copied the state once more per changed key."""
    if meta is None:
        return b""
    seen = meta.seen
    if seen:
        return SEP + encode_meta(StatusMeta(seen, meta.updated_ms, meta.accepted))
    # encode_meta's bytes for the usual meta (no stale epoch), without
    # building a Struct to encode: SEP, then the meta, one f-string encoded
    # (compiled, a native string build; each ``b"%d" %`` was a bytes
    # formatting call: callgrind, docs/performance.md).
    # tests/live/test_processor_batch.py checks they are encode_meta's bytes.
    updated = meta.updated_ms
    if updated is None:
        return f'\x00{{"s":{{}},"u":null,"n":{meta.accepted}}}'.encode()
    return f'\x00{{"s":{{}},"u":{updated},"n":{meta.accepted}}}'.encode()


#: A cached decoded state: (the stored value it stands for, the state, its meta).
_Cached = tuple[bytes, KeyState, _Meta | None]


@final
class BatchCore:
    """Validate, run the detector against each key's stored state, and
    collect what came out; see :meth:`run`.

    ``load_state(key)`` returns the key's stored value or ``None``. A small
    LRU of decoded states (``cache_keys`` entries) saves decoding the state
    on every event of a busy key; a cached entry is used only when the
    stored value is still the one it was decoded from, so a table restored
    from its changelog never meets a stale cache. Full, it takes a key
    decoded from the table only one time in :data:`ADMIT_DECODED_EVERY`
    (see there)."""

    def __init__(
        self,
        detector: DetectorLike,
        *,
        status: bool,
        max_event_bytes: int,
        cache_keys: int,
        status_topic: str = "",
    ) -> None:
        self.detector = detector
        #: The topic the pending status records name (the engines produce them as they are).
        self.status_topic = status_topic
        #: The same object when it is a Detector: called natively (compiled).
        self._native: Detector | None = detector if isinstance(detector, Detector) else None
        self.status = status
        self.max_event_bytes = max_event_bytes
        self.cache_keys = cache_keys
        #: key -> (stored value, its decoded state, its status meta)
        self.cache: OrderedDict[bytes, _Cached] = OrderedDict()
        #: Decoded keys refused by the full cache since the last one taken.
        self._refused = 0

    def forget(self) -> None:
        """Drop every cached state (after a rebalance the table is the truth)."""
        self.cache.clear()

    def run(
        self, records: Sequence[Consumed], load_state: Callable[[bytes], bytes | None]
    ) -> BatchResult:
        """Process ``records`` in order (per key: validate, detector against
        the stored state, findings), and encode each changed key's value once
        per batch (coalesced state writes). Never raises for bad input or a
        detector bug: both become a :class:`Rejection`.

        The outputs and final states are those of processing the records one
        at a time. An event the detector fails on leaves its key's state as
        it was before that event: the state is rebuilt from the stored value
        and the key's earlier events of this batch."""
        outputs: dict[int, list[Finding | Rejection]] = {}
        work: dict[bytes, _KeyWork] = {}
        states: list[tuple[bytes, int, bytes]] = []
        findings: list[Finding] = []
        rejections: list[Rejection] = []
        detector = self.detector
        native = self._native
        status = self.status
        max_bytes = self.max_event_bytes
        for record in records:
            raw = record.value
            value = raw if raw is not None else b""
            rkey = record.key
            partition = record.partition
            offset = record.offset
            try:
                event, fields = decode_event(value, key=rkey, max_bytes=max_bytes)
            except InvalidEvent as exc:
                rej = Rejection(record, value, exc.field, exc.reason, None)
                _out(outputs, partition).append(rej)
                rejections.append(rej)
                continue
            # A valid event's Kafka key, when present, is its workflow key's
            # UTF-8 (validation checked it): no need to encode it again.
            wkey: str = fields[WORKFLOW_KEY_FIELD]
            key = rkey if type(rkey) is bytes else wkey.encode("utf-8")
            w = work.get(key)
            if w is None:
                stored = load_state(key)
                w = self._take(key, stored, partition)
                work[key] = w
            elif w.partition != partition:
                # The key's events came through two partitions (a producer
                # that does not partition by key): the state as it stood goes
                # to the first partition's changelog, as per-event writes
                # would have left it.
                if w.applied:
                    # Its status meta as stored: the status record, if any,
                    # comes with the key's final state.
                    states.append((key, w.partition, w.state.to_bytes(_trailer(w.meta))))
                w.partition = partition
            try:
                if native is not None:
                    found = native.process_fields(w.state, fields, offset)
                else:
                    found = detector.process(w.state, event, offset)
            except Exception as exc:  # a detector bug must not stop the partition
                w.state = self._rebuild(w.stored, w.applied)
                w.rebuilt = True
                rej = Rejection(record, value, None, INTERNAL_ERROR, exc)
                _out(outputs, partition).append(rej)
                rejections.append(rej)
                continue
            ts = record.timestamp
            w.applied.append((event, offset, ts))
            if status and ts is not None:
                latest = w.latest
                if latest is None or ts > latest:
                    w.latest = ts
            if found:
                findings.extend(found)
                _out(outputs, partition).extend(found)
                if not w.effects:
                    for f in found:
                        if f.kind in _EFFECT_KINDS:
                            w.effects = True
                            break
        effects: dict[tuple[str, str], int] = {}
        status_out: dict[int, list[PendingStatus]] = {}
        for key, w in work.items():
            # A key whose only events failed: nothing changed, unless a
            # pending status of an earlier batch holds the object given up.
            if not w.applied and not (w.rebuilt and w.stored is not None and status):
                continue
            blob = self._value(key, w, effects, status_out)
            # Every event the detector accepts bumps the state's counters, so
            # a key with applied events has new bytes: only a key rebuilt with
            # none needs the comparison (a full memcmp, 70 KB for a key
            # holding 1,000 events).
            if w.applied or blob != w.stored:
                states.append((key, w.partition, blob))
            self._remember(key, blob, w.state, w.meta, w.decoded)
        return BatchResult(outputs, states, findings, rejections, effects, status_out)

    def _value(
        self,
        key: bytes,
        w: _KeyWork,
        effects: dict[tuple[str, str], int],
        status_out: dict[int, list[PendingStatus]],
    ) -> bytes:
        """The key's value to store; its status document into ``status_out``
        if the status changed; the stale effects new in this batch counted
        into ``effects``."""
        state = w.state
        if w.effects:
            wkey = key.decode("utf-8")
            stored = w.stored
            before = (
                set()
                if stored is None
                else stale_effects(wkey, KeyState.from_bytes(split_value(stored)[0]))
            )
            for outcome, sink, _epoch, _ek in stale_effects(wkey, state) - before:
                effects[outcome, sink] = effects.get((outcome, sink), 0) + 1
        if not self.status:
            w.meta = None
            return state.to_bytes()
        prev = w.meta if w.meta is not None else _NO_META
        accepted = state.n_events - state.n_redeliveries
        if accepted == prev.accepted and not w.rebuilt:
            return state.to_bytes(_trailer(w.meta))
        updated = w.latest if w.latest is not None else prev.updated_ms
        applied = w.applied
        # status_seen's, in two parts: only a key with a stale epoch reads
        # its events' timestamps.
        stale = state.stale_epochs()
        seen = stale_seen(stale, prev.seen, _times(applied)) if stale else prev.seen
        # The event's workflow key is the key's UTF-8: no decode per key.
        wkey = applied[-1][0].workflow_key if applied else key.decode("utf-8")
        # Encoded when the engine writes it, once per key per transaction.
        pending = PendingStatus(self.status_topic, key, wkey, state, seen, updated, accepted, stale)
        meta = _Meta(seen, updated, accepted)
        w.meta = meta
        _status(status_out, w.partition).append(pending)
        return state.to_bytes(_trailer(meta))

    def _take(self, key: bytes, stored: bytes | None, partition: int) -> _KeyWork:
        # The entry leaves the cache while the batch mutates it: if the batch
        # is abandoned half-way, no mutated object can be mistaken for the
        # stored bytes it was decoded from. _remember puts it back.
        cached = self.cache.pop(key, None)
        if cached is not None and stored is not None and cached[0] == stored:
            return _KeyWork(cached[1], cached[2], stored, partition)
        if stored is None:
            # A Detector's new state without a generic method call (it is
            # KeyState()); a stand-in's from its own method.
            state = KeyState() if self._native is not None else self.detector.new_state()
            return _KeyWork(state, None, None, partition)
        # split_value's, here: compiled, not an interpreted call per cache miss.
        blob, sep, trailer = stored.partition(SEP)
        meta: _Meta | None = None
        if sep:
            try:
                m = decode_meta(trailer)
                meta = _Meta(m.seen, m.updated_ms, m.accepted)
            except META_ERRORS:
                pass  # a damaged trailer costs timestamps, never the state
        w = _KeyWork(KeyState.from_bytes(blob), meta, stored, partition)
        w.decoded = True
        return w

    def _rebuild(
        self, stored: bytes | None, applied: Sequence[tuple[Event, int, int | None]]
    ) -> KeyState:
        detector = self.detector
        state = (
            detector.new_state() if stored is None else KeyState.from_bytes(split_value(stored)[0])
        )
        for event, offset, _ts in applied:
            detector.process(state, event, offset)
        return state

    def _remember(
        self, key: bytes, blob: bytes, state: KeyState, meta: _Meta | None, decoded: bool
    ) -> None:
        cap = self.cache_keys
        if cap <= 0:
            return
        cache = self.cache
        if decoded and len(cache) >= cap:
            refused = self._refused + 1
            if refused < ADMIT_DECODED_EVERY:
                self._refused = refused
                return
            self._refused = 0
        # _take popped the key, so this appends it at the recent end.
        cache[key] = (blob, state, meta)
        while len(cache) > cap:
            # Positional: a keyword argument made it a generic call with names.
            cache.popitem(False)


def _out(
    outputs: dict[int, list[Finding | Rejection]], partition: int
) -> list[Finding | Rejection]:
    lst = outputs.get(partition)
    if lst is None:
        lst = outputs[partition] = []
    return lst


def _status(status: dict[int, list[PendingStatus]], partition: int) -> list[PendingStatus]:
    lst = status.get(partition)
    if lst is None:
        lst = status[partition] = []
    return lst
