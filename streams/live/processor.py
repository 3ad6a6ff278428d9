"""The live processor's logic without faust: a batch of Kafka records in, the
records to produce (findings, dead letters, status) and each changed key's
new stored value out.

The engines (:mod:`streams.live.faust.app`, :mod:`streams.live.rdkafka.engine`) only
move bytes between Kafka, the state table and this class, so everything that
decides *what* is produced is tested without a broker
(``tests/support/driver.py`` drives the batch path with its transaction
semantics). The batch logic itself is the pure, compiled
:class:`streams.core.batch.BatchCore`; this class turns what it returns into
output records (headers included) and logs internal errors.

The stored value of a key (:mod:`streams.core.stored`) is its
``KeyState.to_bytes()``, followed, when the status topic is on, by a NUL byte
and the key's :class:`StatusMeta`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import msgspec

from streams.core import Detector, Finding
from streams.core.batch import INTERNAL_ERROR, BatchCore, Consumed, DetectorLike, Rejection
from streams.core.detector import DetectorConfig
from streams.core.pending import PendingStatus
from streams.core.stored import StatusMeta, join_value, split_value

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
    "Outgoing",
    "Processor",
    "SourceRecord",
    "StatusMeta",
    "StatusRecord",
    "encoded",
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

Headers = tuple[tuple[str, bytes], ...]
log = logging.getLogger(__name__)


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


#: A status record (SPEC §8) whose value is encoded when it is first read:
#: the batch logic's pending status, produced as it is (one object per
#: changed key per batch; see :class:`streams.core.pending.PendingStatus`).
StatusRecord = PendingStatus


def encoded(record: StatusRecord) -> OutRecord:
    """The same status record with its value encoded now (it no longer
    depends on the key's state moving on)."""
    return OutRecord(record.topic, record.key, record.value)


#: A record an engine produces: an output record or a status record.
Outgoing = OutRecord | StatusRecord


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
    #: transaction, at its commit (:mod:`streams.live.faust.txn`).
    status: dict[int, list[StatusRecord]] | None = None


class Processor:
    """Validate, run the detector against the key's stored state, and turn
    findings and rejections into output records.

    ``load_state(key)`` returns the key's stored value or ``None``. A cache
    of decoded states (``cache_keys`` entries, the batch core's: least
    recently used out, see :data:`streams.core.batch.ADMIT_DECODED_EVERY`)
    saves decoding the state on every event of a busy key; a cached entry is
    used only when the stored bytes are still the bytes it was decoded from,
    so a table restored from its changelog never meets a stale cache.
    """

    def __init__(
        self,
        detector: DetectorLike,
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
        self.core = BatchCore(
            detector,
            status=status_topic is not None,
            max_event_bytes=max_event_bytes,
            cache_keys=cache_keys,
            status_topic=status_topic or "",
        )

    def process_batch(
        self, records: Sequence[Consumed], load_state: Callable[[bytes], bytes | None]
    ) -> BatchOutcome:
        """Process ``records`` in order (per key: validate, detector against
        the stored state, findings), and encode each changed key's value once
        per batch (coalesced state writes). Never raises for bad input or a
        detector bug: both become one dead-letter record (the latter with
        reason ``internal error``, and one log line with its traceback).

        The outputs and final states are those of processing the records one
        at a time (tested with batches of one). An event the detector fails
        on leaves its key's state as it was before that event: the state is
        rebuilt from the stored bytes and the key's earlier events of this
        batch. With the status topic on, each key whose status changed gets
        one status record (in ``status``, by source partition)."""
        res = self.core.run(records, load_state)
        out: dict[int, list[OutRecord]] = {}
        for partition, items in res.outputs.items():
            out[partition] = [
                self._finding_record(i) if isinstance(i, Finding) else self._dead_letter(i)
                for i in items
            ]
        errors: list[tuple[str | None, str]] = []
        for rej in res.rejections:
            errors.append((rej.field, rej.reason))
            if rej.error is not None:
                r = rej.record
                log.error(
                    "internal error processing %s[%d]@%d",
                    r.topic,
                    r.partition,
                    r.offset,
                    exc_info=rej.error,
                )
        return BatchOutcome(
            out,
            tuple(res.states),
            tuple(res.findings),
            tuple(errors),
            res.stale_effects,
            # The batch logic's pending status records, as they are (empty
            # when the status is off).
            res.status,
        )

    def forget(self) -> None:
        """Drop every cached state (after a rebalance the table is the truth)."""
        self.core.forget()

    def _finding_record(self, finding: Finding) -> OutRecord:
        headers: Headers = (
            (HEADER_FINDING_ID, finding.finding_id.encode()),
            (HEADER_REVISION, str(finding.revision).encode()),
            # StrEnums: their own str.encode, not the ``value`` property (an
            # interpreted descriptor, ~1 % of a 2,000 events/s worker, py-spy).
            (HEADER_SEVERITY, finding.severity.encode()),
            (HEADER_KIND, finding.kind.encode()),
        )
        return OutRecord(
            self.findings_topic, finding.workflow_key.encode("utf-8"), finding.to_json(), headers
        )

    def _dead_letter(self, rej: Rejection) -> OutRecord:
        record = rej.record
        headers: Headers = (
            (HEADER_ERROR_FIELD, (rej.field or "").encode("utf-8")),
            (HEADER_ERROR_REASON, rej.reason.encode("utf-8")),
            (HEADER_SOURCE_TOPIC, record.topic.encode("utf-8")),
            (HEADER_SOURCE_PARTITION, str(record.partition).encode()),
            (HEADER_SOURCE_OFFSET, str(record.offset).encode()),
        )
        return OutRecord(self.dlq_topic, record.key, rej.value, headers)


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
