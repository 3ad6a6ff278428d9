"""The live processor's logic without faust: a batch of Kafka records in, the
records to produce (findings, dead letters, status) and each changed key's
new stored value out.

The faust wiring (:mod:`streams.live.app`) only moves bytes between Kafka, the
state table and this class, so everything that decides *what* is produced is
tested without a broker (``tests/support/driver.py`` drives the batch path
with its transaction semantics).

The stored value of a key is its ``KeyState.to_bytes()``, followed, when the
status topic is on, by a NUL byte and a small JSON object (:class:`StatusMeta`:
the Kafka timestamps the status record carries and a digest of its last
content, so a record is written only when the status changed). orjson never
writes a raw NUL, so the split is unambiguous; a value without it is a bare
state (an older changelog, or the status off).
"""

from __future__ import annotations

import logging
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import msgspec
import orjson

from streams.core import Detector, Event, Finding, InvalidEvent, KeyState, parse_event
from streams.core.detector import DetectorConfig
from streams.core.records import Kind
from streams.core.status import build_status, findings_of, stale_effects

if TYPE_CHECKING:
    from streams.live.settings import LiveSettings

__all__ = [
    "HEADER_ERROR_FIELD",
    "HEADER_ERROR_REASON",
    "HEADER_FINDING_ID",
    "HEADER_REVISION",
    "HEADER_SEVERITY",
    "INTERNAL_ERROR",
    "BatchOutcome",
    "Consumed",
    "OutRecord",
    "Processor",
    "SourceRecord",
    "StatusMeta",
    "join_value",
    "processor_for",
    "split_value",
    "with_changelog",
]

HEADER_FINDING_ID = "fencewatch-finding-id"
HEADER_REVISION = "fencewatch-revision"
HEADER_SEVERITY = "fencewatch-severity"
HEADER_KIND = "fencewatch-kind"
HEADER_ERROR_FIELD = "fencewatch-error-field"
HEADER_ERROR_REASON = "fencewatch-error-reason"
HEADER_SOURCE_TOPIC = "fencewatch-source-topic"
HEADER_SOURCE_PARTITION = "fencewatch-source-partition"
HEADER_SOURCE_OFFSET = "fencewatch-source-offset"
INTERNAL_ERROR = "internal error"

Headers = tuple[tuple[str, bytes], ...]
log = logging.getLogger(__name__)
#: Findings about an effect: a batch that emits one may have new stale effects.
_EFFECT_KINDS = frozenset({Kind.STALE_ATTEMPT, Kind.STALE_COMMIT})


@dataclass(frozen=True, slots=True)
class SourceRecord:
    """One consumed Kafka record, as bytes; ``timestamp`` in ms (the record's
    Kafka timestamp), ``None`` when unknown."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int | None = None


class Consumed(Protocol):
    """What the processor reads of a consumed record (a :class:`SourceRecord`
    or the live intake's message)."""

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


class OutRecord(msgspec.Struct, frozen=True, gc=False):
    """One record to produce, in the same transaction as the source offset.

    A frozen msgspec Struct, not a frozen dataclass, for the reason
    :class:`~streams.core.findings.Finding` is one: two or three are built
    per event, and a frozen dataclass's ``__init__`` (``object.__setattr__``
    per field) was most of each one's cost (figures in docs/performance.md)."""

    topic: str
    key: bytes | None
    value: bytes
    headers: Headers = ()
    #: ``None``: the producer's partitioner (murmur2 of the key, like Java).
    partition: int | None = None


@dataclass(frozen=True, slots=True)
class BatchOutcome:
    """What a batch of source records produced.

    ``records`` maps each source partition to its output records (findings
    and dead letters) in event order; ``states`` holds each changed key's
    state once, as ``(key, partition, state bytes)``: the state after the
    key's last event of the batch (a key seen in two source partitions gets
    one entry per partition run)."""

    records: dict[int, list[OutRecord]]
    states: tuple[tuple[bytes, int, bytes], ...]
    findings: tuple[Finding, ...] = ()
    #: ``(field, reason)`` of every record that went to the dead-letter topic.
    errors: tuple[tuple[str | None, str], ...] = ()
    #: Stale effects that reached an outcome in this batch: ``(outcome, sink)``
    #: -> how many distinct effects (``fencewatch_stale_effects_total``).
    stale_effects: dict[tuple[str, str], int] | None = None
    #: Status records per source partition (at most one per key), kept
    #: apart from ``records``: the sender writes them once per key per
    #: transaction, at its commit (:mod:`streams.live.txn`).
    status: dict[int, list[OutRecord]] | None = None


class _KeyWork:
    """One key's state while a batch is processed."""

    __slots__ = ("applied", "effects", "meta", "partition", "state", "stored", "times")

    def __init__(
        self, state: KeyState, meta: StatusMeta | None, stored: bytes | None, partition: int
    ) -> None:
        self.state = state
        #: The status meta stored with the state (None: none stored).
        self.meta = meta
        self.stored = stored
        self.partition = partition
        #: The key's events of this batch the detector accepted, to rebuild
        #: the state if a later one fails half-way.
        self.applied: list[tuple[Event, int]] = []
        #: Position -> Kafka timestamp of the key's events of this batch.
        self.times: dict[int, int] = {}
        #: Whether a stale-effect finding came out of this batch.
        self.effects = False


class StatusMeta(msgspec.Struct, frozen=True):
    """What the status needs beyond the detector state, stored with it:
    stale epoch -> Kafka timestamp of its latest stale event (``seen``), the
    status's ``updated_ms``, and how many events the key had accepted when
    its last status record was written (``accepted``: the status is a
    function of the accepted evidence, so an unchanged count means an
    unchanged status -- an exact redelivery writes nothing). A Struct for the
    same reason as :class:`OutRecord` (one per changed key per batch)."""

    seen: dict[int, int]
    updated_ms: int | None
    accepted: int

    def to_bytes(self) -> bytes:
        # OPT_NON_STR_KEYS writes the int keys as JSON strings, as before.
        doc = {"s": self.seen, "u": self.updated_ms, "n": self.accepted}
        return orjson.dumps(doc, option=orjson.OPT_NON_STR_KEYS)

    @classmethod
    def from_bytes(cls, data: bytes) -> StatusMeta:
        doc = orjson.loads(data)
        return cls({int(k): int(v) for k, v in doc["s"].items()}, doc["u"], int(doc["n"]))


_NO_META = StatusMeta({}, None, -1)
_SEP = b"\x00"


def split_value(value: bytes) -> tuple[bytes, StatusMeta | None]:
    """A stored value -> (``KeyState`` bytes, status meta or ``None``)."""
    state, sep, meta = value.partition(_SEP)
    if not sep:
        return value, None
    try:
        return state, StatusMeta.from_bytes(meta)
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
        return state, None  # a damaged trailer costs timestamps, never the state


def join_value(state: bytes, meta: StatusMeta | None) -> bytes:
    return state if meta is None else state + _SEP + meta.to_bytes()


@dataclass(frozen=True, slots=True)
class _Dead:
    records: tuple[OutRecord, ...]
    error: tuple[str | None, str]


class Processor:
    """Validate, run the detector against the key's stored state, and turn
    findings and rejections into output records.

    ``load_state(key)`` returns the key's stored state bytes or ``None``. A
    small LRU of decoded states (``cache_keys`` entries) saves decoding the
    state on every event of a busy key; a cached entry is used only when the
    stored bytes are still the bytes it was decoded from, so a table restored
    from its changelog never meets a stale cache.
    """

    def __init__(
        self,
        detector: Detector,
        *,
        findings_topic: str,
        dlq_topic: str,
        status_topic: str | None = None,
        max_event_bytes: int = 64 * 1024,
        cache_keys: int = 10_000,
    ) -> None:
        self.detector = detector
        self.findings_topic = findings_topic
        self.dlq_topic = dlq_topic
        #: ``None``: no status records (and no status meta in stored values).
        self.status_topic = status_topic
        self.max_event_bytes = max_event_bytes
        self.cache_keys = cache_keys
        #: key -> (stored value, its decoded state, its status meta)
        self._cache: OrderedDict[bytes, tuple[bytes, KeyState, StatusMeta | None]] = OrderedDict()

    def process_batch(
        self, records: Sequence[Consumed], load_state: Callable[[bytes], bytes | None]
    ) -> BatchOutcome:
        """Process ``records`` in order (per key: validate, detector against
        the stored state, findings), and encode each changed key's value once
        per batch (coalesced state writes). Never raises for bad input or a
        detector bug: both become one dead-letter record (the latter with
        reason ``internal error``).

        The outputs and final states are those of processing the records one
        at a time (tested with batches of one). An event the detector fails
        on leaves its key's state as it was before that event: the state is
        rebuilt from the stored bytes and the key's earlier events of this
        batch. With the status topic on, each key whose status changed gets
        one status record (in ``status``, by source partition)."""
        out: dict[int, list[OutRecord]] = {}
        work: dict[bytes, _KeyWork] = {}
        states: list[tuple[bytes, int, bytes]] = []
        findings: list[Finding] = []
        errors: list[tuple[str | None, str]] = []
        detector = self.detector
        max_bytes = self.max_event_bytes
        for record in records:
            value = record.value if record.value is not None else b""
            try:
                event = parse_event(value, key=record.key, max_bytes=max_bytes)
            except InvalidEvent as exc:
                dead = self._dead_letter(record, value, exc.field, exc.reason)
                out.setdefault(record.partition, []).extend(dead.records)
                errors.append(dead.error)
                continue
            key = event.workflow_key.encode("utf-8")
            w = work.get(key)
            if w is None:
                stored = load_state(key)
                state, meta = self._take(key, stored)
                w = work[key] = _KeyWork(state, meta, stored, record.partition)
            elif w.partition != record.partition:
                # The key's events came through two partitions (a producer
                # that does not partition by key): the state as it stood goes
                # to the first partition's changelog, as per-event writes
                # would have left it.
                if w.applied:
                    # Its status meta as stored: the status record, if any,
                    # comes with the key's final state.
                    states.append((key, w.partition, join_value(w.state.to_bytes(), w.meta)))
                w.partition = record.partition
            try:
                found = detector.process(w.state, event, record.offset)
            except Exception:  # a detector bug must not stop the partition
                log.exception(
                    "internal error processing %s[%d]@%d",
                    record.topic,
                    record.partition,
                    record.offset,
                )
                w.state = self._rebuild(w.stored, w.applied)
                dead = self._dead_letter(record, value, None, INTERNAL_ERROR)
                out.setdefault(record.partition, []).extend(dead.records)
                errors.append((None, INTERNAL_ERROR))
                continue
            w.applied.append((event, record.offset))
            ts = record.timestamp
            if ts is not None:
                w.times[record.offset if event.seq is None else event.seq] = ts
            if found:
                findings.extend(found)
                dest = out.setdefault(record.partition, [])
                dest.extend(self._finding_record(f) for f in found)
                if not w.effects:
                    w.effects = any(f.kind in _EFFECT_KINDS for f in found)
        effects: Counter[tuple[str, str]] = Counter()
        status_out: dict[int, list[OutRecord]] = {}
        for key, w in work.items():
            if not w.applied:
                continue
            blob, status = self._value(key, w, effects)
            if status is not None:
                status_out.setdefault(w.partition, []).append(status)
            if blob != w.stored:
                states.append((key, w.partition, blob))
            self._remember(key, blob, w.state, w.meta)
        return BatchOutcome(
            out, tuple(states), tuple(findings), tuple(errors), dict(effects), status_out
        )

    def _value(
        self, key: bytes, w: _KeyWork, effects: Counter[tuple[str, str]]
    ) -> tuple[bytes, OutRecord | None]:
        """The key's value to store and, if its status changed, the status
        record; counts the stale effects new in this batch into ``effects``."""
        state = w.state
        blob = state.to_bytes()
        if w.effects:
            wkey = key.decode("utf-8")
            before = (
                set()
                if w.stored is None
                else stale_effects(wkey, KeyState.from_bytes(split_value(w.stored)[0]))
            )
            for outcome, sink, _epoch, _ek in stale_effects(wkey, state) - before:
                effects[outcome, sink] += 1
        if self.status_topic is None:
            w.meta = None
            return blob, None
        prev = w.meta or _NO_META
        accepted = state.n_events - state.n_redeliveries
        if accepted == prev.accepted:
            return join_value(blob, w.meta), None
        wkey = key.decode("utf-8")
        times = w.times
        updated = max(times.values()) if times else prev.updated_ms
        status = build_status(
            wkey,
            state,
            findings_of(state, wkey),
            seen_ms=prev.seen,
            event_ms=times,
            updated_ms=updated,
        )
        seen = (
            {se.epoch: se.last_seen_ms for se in status.stale_epochs if se.last_seen_ms is not None}
            if status.stale_epochs
            else prev.seen
        )
        meta = w.meta = StatusMeta(seen, updated, accepted)
        record = OutRecord(self.status_topic, key, status.to_json())
        return join_value(blob, meta), record

    def _take(self, key: bytes, stored: bytes | None) -> tuple[KeyState, StatusMeta | None]:
        # The entry leaves the cache while the batch mutates it: if the batch
        # is abandoned half-way, no mutated object can be mistaken for the
        # stored bytes it was decoded from. _remember puts it back.
        cached = self._cache.pop(key, None)
        if cached is not None and stored is not None and cached[0] == stored:
            return cached[1], cached[2]
        if stored is None:
            return self.detector.new_state(), None
        state, meta = split_value(stored)
        return KeyState.from_bytes(state), meta

    def _rebuild(self, stored: bytes | None, applied: Sequence[tuple[Event, int]]) -> KeyState:
        state = (
            self.detector.new_state()
            if stored is None
            else KeyState.from_bytes(split_value(stored)[0])
        )
        for event, offset in applied:
            self.detector.process(state, event, offset)
        return state

    def forget(self) -> None:
        """Drop every cached state (after a rebalance the table is the truth)."""
        self._cache.clear()

    def _remember(
        self, key: bytes, blob: bytes, state: KeyState, meta: StatusMeta | None
    ) -> None:
        if self.cache_keys <= 0:
            return
        self._cache[key] = (blob, state, meta)
        self._cache.move_to_end(key)
        while len(self._cache) > self.cache_keys:
            self._cache.popitem(last=False)

    def _finding_record(self, finding: Finding) -> OutRecord:
        headers: Headers = (
            (HEADER_FINDING_ID, finding.finding_id.encode()),
            (HEADER_REVISION, str(finding.revision).encode()),
            (HEADER_SEVERITY, finding.severity.value.encode()),
            (HEADER_KIND, finding.kind.value.encode()),
        )
        return OutRecord(
            self.findings_topic, finding.workflow_key.encode("utf-8"), finding.to_json(), headers
        )

    def _dead_letter(
        self, record: Consumed, value: bytes, field: str | None, reason: str
    ) -> _Dead:
        headers: Headers = (
            (HEADER_ERROR_FIELD, (field or "").encode("utf-8")),
            (HEADER_ERROR_REASON, reason.encode("utf-8")),
            (HEADER_SOURCE_TOPIC, record.topic.encode("utf-8")),
            (HEADER_SOURCE_PARTITION, str(record.partition).encode()),
            (HEADER_SOURCE_OFFSET, str(record.offset).encode()),
        )
        out = OutRecord(self.dlq_topic, record.key, value, headers)
        return _Dead((out,), (field, reason))


def with_changelog(outcome: BatchOutcome, changelog_topic: str) -> dict[int, list[OutRecord]]:
    """``outcome``'s records per source partition, each partition's state
    writes appended as changelog records to the *source* partition: they go
    in the same transaction as that partition's outputs and offsets."""
    out = outcome.records
    for key, partition, state in outcome.states:
        out.setdefault(partition, []).append(OutRecord(changelog_topic, key, state, (), partition))
    return out


def headers_dict(headers: Sequence[tuple[str, bytes]]) -> dict[str, str]:
    """Decode headers for display and tests (last value wins)."""
    return {k: v.decode("utf-8", "replace") for k, v in headers}


def processor_for(settings: LiveSettings, *, cache_keys: int | None = None) -> Processor:
    """The :class:`Processor` for ``settings``: the one configuration that every
    engine (faust, rdkafka) and ``fencewatch migrate`` run, so their outputs
    cannot drift apart. ``cache_keys`` overrides ``settings.state_cache_keys``."""
    return Processor(
        Detector(DetectorConfig(max_events_per_key=settings.max_events_per_key)),
        findings_topic=settings.findings_topic,
        dlq_topic=settings.dlq,
        status_topic=settings.status_topic if settings.status else None,
        max_event_bytes=settings.max_event_bytes,
        cache_keys=settings.state_cache_keys if cache_keys is None else cache_keys,
    )
