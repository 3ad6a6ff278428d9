"""The live processor's logic without faust: one Kafka record in, the records
to produce and the key's new state out.

The faust wiring (:mod:`streams.live.app`) only moves bytes between Kafka, the
state table and this class, so everything that decides *what* is produced is
tested here without a broker.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from streams.core import Detector, Event, Finding, InvalidEvent, KeyState, parse_event

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
    "Outcome",
    "Processor",
    "SourceRecord",
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


@dataclass(frozen=True, slots=True)
class SourceRecord:
    """One consumed Kafka record, as bytes."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


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


@dataclass(frozen=True, slots=True)
class OutRecord:
    """One record to produce, in the same transaction as the source offset."""

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


class _KeyWork:
    """One key's state while a batch is processed."""

    __slots__ = ("applied", "partition", "state", "stored")

    def __init__(self, state: KeyState, stored: bytes | None, partition: int) -> None:
        self.state = state
        self.stored = stored
        self.partition = partition
        #: The key's events of this batch the detector accepted, to rebuild
        #: the state if a later one fails half-way.
        self.applied: list[tuple[Event, int]] = []


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one source record produced. ``state_key``/``state`` are set when
    the key's state changed and must be written to the table (and changelog)."""

    records: tuple[OutRecord, ...]
    findings: tuple[Finding, ...] = ()
    state_key: bytes | None = None
    state: bytes | None = None
    #: ``(field, reason)`` when the record went to the dead-letter topic.
    error: tuple[str | None, str] | None = None


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
        max_event_bytes: int = 64 * 1024,
        cache_keys: int = 10_000,
    ) -> None:
        self.detector = detector
        self.findings_topic = findings_topic
        self.dlq_topic = dlq_topic
        self.max_event_bytes = max_event_bytes
        self.cache_keys = cache_keys
        self._cache: OrderedDict[bytes, tuple[bytes, KeyState]] = OrderedDict()

    def process(self, record: SourceRecord, load_state: Callable[[bytes], bytes | None]) -> Outcome:
        """Never raises for bad input or a detector bug: both become one
        dead-letter record (the latter with reason ``internal error``), and
        the key's state is left as it was."""
        value = record.value if record.value is not None else b""
        try:
            event = parse_event(value, key=record.key, max_bytes=self.max_event_bytes)
        except InvalidEvent as exc:
            return self._dead_letter(record, value, exc.field, exc.reason)
        state_key = event.workflow_key.encode("utf-8")
        try:
            state = self._load(state_key, load_state)
            findings = self.detector.process(state, event, record.offset)
            blob = state.to_bytes()
        except Exception:  # a detector bug must not stop the partition
            log.exception(
                "internal error processing %s[%d]@%d", record.topic, record.partition, record.offset
            )
            # The cached object may be half-mutated; forget it so the next
            # event of this key decodes the stored (unchanged) state.
            self._cache.pop(state_key, None)
            return self._dead_letter(record, value, None, INTERNAL_ERROR)
        self._remember(state_key, blob, state)
        records = tuple(self._finding_record(f) for f in findings)
        return Outcome(records, tuple(findings), state_key, blob)

    def process_batch(
        self, records: Sequence[Consumed], load_state: Callable[[bytes], bytes | None]
    ) -> BatchOutcome:
        """Process ``records`` in order as :meth:`process` would one by one,
        but encode and return each key's state once per batch (coalesced
        state writes) instead of once per event.

        The outputs are the same as per-event processing's, and so is the
        final state of every key (tested). An event the detector fails on
        goes to the dead-letter topic and leaves its key's state as it was
        before that event: the state is rebuilt from the stored bytes and
        the key's earlier events of this batch."""
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
                errors.append((exc.field, exc.reason))
                continue
            key = event.workflow_key.encode("utf-8")
            w = work.get(key)
            if w is None:
                stored = load_state(key)
                w = work[key] = _KeyWork(self._take(key, stored), stored, record.partition)
            elif w.partition != record.partition:
                # The key's events came through two partitions (a producer
                # that does not partition by key): the state as it stood goes
                # to the first partition's changelog, as per-event writes
                # would have left it.
                if w.applied:
                    states.append((key, w.partition, w.state.to_bytes()))
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
            if found:
                findings.extend(found)
                dest = out.setdefault(record.partition, [])
                dest.extend(self._finding_record(f) for f in found)
        for key, w in work.items():
            if not w.applied:
                continue
            blob = w.state.to_bytes()
            if blob != w.stored:
                states.append((key, w.partition, blob))
            self._remember(key, blob, w.state)
        return BatchOutcome(out, tuple(states), tuple(findings), tuple(errors))

    def _take(self, key: bytes, stored: bytes | None) -> KeyState:
        # The entry leaves the cache while the batch mutates it: if the batch
        # is abandoned half-way, no mutated object can be mistaken for the
        # stored bytes it was decoded from. _remember puts it back.
        cached = self._cache.pop(key, None)
        if cached is not None and stored is not None and cached[0] == stored:
            return cached[1]
        if stored is None:
            return self.detector.new_state()
        return KeyState.from_bytes(stored)

    def _rebuild(self, stored: bytes | None, applied: Sequence[tuple[Event, int]]) -> KeyState:
        state = self.detector.new_state() if stored is None else KeyState.from_bytes(stored)
        for event, offset in applied:
            self.detector.process(state, event, offset)
        return state

    def forget(self) -> None:
        """Drop every cached state (after a rebalance the table is the truth)."""
        self._cache.clear()

    def _load(self, key: bytes, load_state: Callable[[bytes], bytes | None]) -> KeyState:
        stored = load_state(key)
        cached = self._cache.get(key)
        if cached is not None and stored is not None and cached[0] == stored:
            self._cache.move_to_end(key)
            return cached[1]
        if stored is None:
            return self.detector.new_state()
        return KeyState.from_bytes(stored)

    def _remember(self, key: bytes, blob: bytes, state: KeyState) -> None:
        if self.cache_keys <= 0:
            return
        self._cache[key] = (blob, state)
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
    ) -> Outcome:
        headers: Headers = (
            (HEADER_ERROR_FIELD, (field or "").encode("utf-8")),
            (HEADER_ERROR_REASON, reason.encode("utf-8")),
            (HEADER_SOURCE_TOPIC, record.topic.encode("utf-8")),
            (HEADER_SOURCE_PARTITION, str(record.partition).encode()),
            (HEADER_SOURCE_OFFSET, str(record.offset).encode()),
        )
        out = OutRecord(self.dlq_topic, record.key, value, headers)
        return Outcome((out,), error=(field, reason))


def headers_dict(headers: Sequence[tuple[str, bytes]]) -> dict[str, str]:
    """Decode headers for display and tests (last value wins)."""
    return {k: v.decode("utf-8", "replace") for k, v in headers}
