"""A broker-free test driver for the live batch path, in the spirit of Kafka
Streams' ``TopologyTestDriver``: feed records, observe outputs, state and
commits -- in milliseconds, without faust or a broker.

What runs is the worker's own code: :meth:`Processor.process_batch`, the
changelog records of :func:`~streams.live.processor.with_changelog` and the
metrics of :meth:`LiveMetrics.record_batch`. What the driver stands in for
is the transactional sender and faust's commit (:mod:`streams.live.faust.txn`),
with their semantics:

* a batch's output records (findings, dead letters, changelog records)
  join the open transaction, its state writes go to the store, its offsets
  are acked; its status records wait for the commit, latest per key (the
  sender writes them once per key per transaction, at its commit);
  :meth:`BatchDriver.commit` commits the open transaction (outputs, status
  records and offsets together, as faust's commit does);
* a send that fails part-way (``fail_at``) poisons the open transaction, so
  the worker crashes; the driver does what the restart does: the open
  transaction's outputs are never visible, the store is rebuilt from the
  committed changelog (latest value per key), the processor starts cold,
  and processing resumes at the committed offsets. :class:`BatchAborted`
  is raised.

A read_committed consumer sees exactly :attr:`BatchDriver.outputs`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from streams.core import Detector, DetectorConfig, KeyState
from streams.errors import FencewatchError
from streams.kafka.topics import (
    DEFAULT_EVENTS_TOPIC,
    DEFAULT_FINDINGS_TOPIC,
    DEFAULT_STATUS_TOPIC,
    dlq_topic_for,
)
from streams.live.metrics import LiveMetrics
from streams.live.processor import (
    OutRecord,
    Processor,
    SourceRecord,
    StatusRecord,
    encoded,
    headers_dict,
    split_value,
    with_changelog,
)

__all__ = ["BatchAborted", "BatchDriver", "Committed"]

#: The changelog topic name the driver uses (the worker's is ``<app-id>-owner-state-changelog``).
CHANGELOG = "driver-owner-state-changelog"


class BatchAborted(FencewatchError):
    """A send failed part-way: the open transaction aborted, the worker restarted."""


@dataclass(frozen=True, slots=True)
class Committed:
    """What one :meth:`BatchDriver.commit` made visible."""

    records: tuple[OutRecord, ...]
    offsets: dict[int, int]


class BatchDriver:
    """Drive the live batch path. ``status_topic=None`` turns the status off."""

    def __init__(
        self,
        *,
        events_topic: str = DEFAULT_EVENTS_TOPIC,
        findings_topic: str = DEFAULT_FINDINGS_TOPIC,
        dlq_topic: str = dlq_topic_for(DEFAULT_EVENTS_TOPIC),
        status_topic: str | None = DEFAULT_STATUS_TOPIC,
        max_events_per_key: int = 1024,
        cache_keys: int = 10_000,
        detector: Detector | None = None,
    ) -> None:
        self.events_topic = events_topic
        self.findings_topic = findings_topic
        self.dlq_topic = dlq_topic
        self.status_topic = status_topic
        self._detector = detector or Detector(DetectorConfig(max_events_per_key=max_events_per_key))
        self._cache_keys = cache_keys
        self.processor = self._new_processor()
        self.metrics = LiveMetrics()
        #: The state table (key -> stored value), including uncommitted writes
        #: as the worker's store has them.
        self.store: dict[bytes, bytes] = {}
        #: Committed output records in commit order: what read_committed sees.
        self.outputs: list[OutRecord] = []
        #: Committed offsets per partition (the next offset to process).
        self.committed: dict[int, int] = {}
        self.commits: list[Committed] = []
        self.restarts = 0
        self._open: list[OutRecord] = []
        self._deferred: dict[int, dict[bytes | None, StatusRecord]] = {}
        self._acked: dict[int, int] = {}
        self._next: dict[int, int] = {}  # partition -> next offset record() assigns

    def _new_processor(self) -> Processor:
        return Processor(
            self._detector,
            findings_topic=self.findings_topic,
            dlq_topic=self.dlq_topic,
            status_topic=self.status_topic,
            cache_keys=self._cache_keys,
        )

    # -- input ------------------------------------------------------------------

    def record(
        self,
        value: bytes | None,
        *,
        key: bytes | None = None,
        partition: int = 0,
        offset: int | None = None,
        timestamp: int | None = None,
    ) -> SourceRecord:
        """A source record; ``key`` defaults to the value's workflow key and
        ``offset`` to the next one of ``partition`` not yet piped."""
        if key is None and value is not None:
            try:
                doc = orjson.loads(value)
                key = str(doc["workflow_key"]).encode() if isinstance(doc, dict) else None
            except (orjson.JSONDecodeError, KeyError):
                key = None
        if offset is None:
            offset = self._next.get(partition, 0)
        self._next[partition] = max(self._next.get(partition, 0), offset + 1)
        return SourceRecord(self.events_topic, partition, offset, key, value, timestamp)

    def pending(self, records: Iterable[SourceRecord]) -> list[SourceRecord]:
        """The ``records`` not processed yet: at or after their partition's
        acked offset (after a restart: the committed one, so this is what the
        restarted worker fetches again)."""
        done = {**self.committed, **self._acked}
        return [r for r in records if r.offset >= done.get(r.partition, 0)]

    def pipe(
        self,
        records: Sequence[SourceRecord],
        *,
        commit: bool = True,
        fail_at: int | None = None,
    ) -> list[OutRecord]:
        """Process ``records`` as one batch (records below their partition's
        acked offset are redeliveries and dropped, as the intake does); then
        commit unless ``commit=False``. ``fail_at=N``: the send of the N-th
        output record (0-based, in send order) fails: :class:`BatchAborted`.
        Returns the batch's output records (changelog included; status
        records come at the commit)."""
        seen = {**self.committed, **self._acked}
        kept = [r for r in records if r.offset >= seen.get(r.partition, 0)]
        if not kept:
            return []
        outcome = self.processor.process_batch(kept, self.store.get)
        sent: list[OutRecord] = []
        for recs in with_changelog(outcome, CHANGELOG).values():
            for r in recs:
                if fail_at is not None and len(sent) == fail_at:
                    self._restart()
                    raise BatchAborted(f"send of output record {fail_at} failed")
                sent.append(r)
        self._open.extend(sent)
        for key, _partition, value in outcome.states:
            self.store[key] = value
        for p, recs in (outcome.status or {}).items():
            pending = self._deferred.setdefault(p, {})
            for r in recs:
                pending[r.key] = r
        for m in kept:
            self._acked[m.partition] = max(self._acked.get(m.partition, 0), m.offset + 1)
        self.metrics.record_batch(len(kept), outcome)
        if commit:
            self.commit()
        return sent

    def commit(self) -> Committed:
        """Commit the open transaction: its outputs become visible with the offsets."""
        for p in sorted(self._deferred):
            # Encoded now, as the engines produce them at their commit.
            self._open.extend(encoded(r) for r in self._deferred[p].values())
            self.metrics.status_records.inc(len(self._deferred[p]))
        self._deferred = {}
        done = Committed(tuple(self._open), dict(self._acked))
        self.outputs.extend(self._open)
        self.committed.update(self._acked)
        self._open = []
        self._acked = {}
        self.commits.append(done)
        return done

    def _restart(self) -> None:
        self._open = []
        self._deferred = {}
        self._acked = {}
        self.store = {}
        for r in self.outputs:
            if r.topic == CHANGELOG and r.key is not None:
                self.store[r.key] = r.value
        self.processor = self._new_processor()
        self.metrics = LiveMetrics()  # a new process starts its counters at 0
        self.restarts += 1

    # -- observation --------------------------------------------------------------

    def topic(self, name: str) -> list[OutRecord]:
        return [r for r in self.outputs if r.topic == name]

    def findings(self) -> list[dict[str, Any]]:
        """Every committed finding record, in order (JSON documents)."""
        return [orjson.loads(r.value) for r in self.topic(self.findings_topic)]

    def revisions(self) -> list[tuple[str, int]]:
        """``(finding_id, revision)`` of every committed finding record."""
        return [(d["finding_id"], d["revision"]) for d in self.findings()]

    def latest_findings(self) -> dict[str, dict[str, Any]]:
        latest: dict[str, dict[str, Any]] = {}
        for d in self.findings():
            latest[d["finding_id"]] = d
        return latest

    def dead_letters(self) -> list[tuple[bytes | None, bytes, dict[str, str]]]:
        return [(r.key, r.value, headers_dict(r.headers)) for r in self.topic(self.dlq_topic)]

    def statuses(self) -> dict[str, dict[str, Any]]:
        """The status topic as compaction leaves it: the latest record per key."""
        if self.status_topic is None:
            return {}
        out: dict[str, dict[str, Any]] = {}
        for r in self.topic(self.status_topic):
            doc = orjson.loads(r.value)
            out[doc["workflow_key"]] = doc
        return out

    def state(self, workflow_key: str) -> KeyState | None:
        value = self.store.get(workflow_key.encode())
        return None if value is None else KeyState.from_bytes(split_value(value)[0])

    def metric(self, name: str, **labels: str) -> float:
        """A sample of the driver's metrics (0 when absent)."""
        value = self.metrics.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value
