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

from streams.core import Detector, Finding, InvalidEvent, KeyState, parse_event

__all__ = [
    "HEADER_ERROR_FIELD",
    "HEADER_ERROR_REASON",
    "HEADER_FINDING_ID",
    "HEADER_REVISION",
    "HEADER_SEVERITY",
    "INTERNAL_ERROR",
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
        self, record: SourceRecord, value: bytes, field: str | None, reason: str
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
