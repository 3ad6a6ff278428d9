"""Send a batch's outputs inside the transactions that commit its offsets.

Why this exists (faust-streaming 0.15.3, read from its source):

* ``TransactionManager.send`` (faust/transport/consumer.py) picks the
  transactional producer from the *destination* topic: it hashes the key over
  the destination's partitions and asks the assignor for the destination's
  topic group. For a topic the app does not consume (our findings and
  dead-letter topics) the consumer has no metadata for it, ``key_partition``
  returns ``None``, and the record goes out through the plain, *non*
  transactional ``app.producer`` -- visible to read_committed consumers even
  when the transaction that processed the event aborts. (When metadata is
  known, ``assignor.group_for_topic`` raises ``KeyError`` instead.)
* Table writes go to the changelog through ``send_soon`` (a buffer drained by
  a background task) and, with exactly-once on, the consumer does not flush
  that buffer before committing (``Consumer._commit_offsets`` flushes only in
  the at-least-once branch): a commit can cover an event whose changelog
  record is not yet in the transaction.
* The periodic commit runs concurrently with the agent. It computes the
  committable offsets first and takes the per-partition transaction lock
  later, so it can commit an event's outputs with the offset *before* that
  event; after a crash the event is processed again and its findings appear
  twice to a read_committed consumer.

Batches (:meth:`TransactionalSender.send_batch`): the live runtime takes up to
a few hundred records at a time from :mod:`streams.live.faust.intake` and sends all
their outputs while holding the gate once, then acks every record of the
batch before releasing it: a transaction holds whole batches, hence whole
events. The records are appended in event order to the aiokafka producer's
pending batches (its accumulator; no per-record metadata wait or delivery
wait). If a send fails half-way, every transaction the batch touched
is put in aiokafka's abortable-error state, so it can never commit (its
commit raises, the worker crashes, a restart reprocesses from the last
commit); the batch is never acked. The locked part runs as its own task that
cancellation of the caller does not interrupt (a cancelled batch would
otherwise release the gate with half its outputs in the transaction).

So :class:`TransactionalSender` sends every output record (findings,
dead-letter records and the state table's changelog record) directly through
the aiokafka producer of the *source* partition's transaction, and acks the
event while a gate is held that the consumer's commit also takes (around its
whole compute-offsets-then-commit step). A transaction therefore always holds
whole events: the outputs of events ``< N`` and the offset ``N``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from typing import Any, Protocol

from streams.live.faust import seam as faust_seam
from streams.live.faust.seam import TransactionFenced, TransactionUnavailable
from streams.live.processor import Outgoing, OutRecord

__all__ = [
    "BatchMessage",
    "BatchPlan",
    "TransactionFenced",
    "TransactionUnavailable",
    "TransactionalSender",
]

log = logging.getLogger(__name__)


class BatchMessage(Protocol):
    """What :meth:`TransactionalSender.send_batch` needs of a consumed record."""

    topic: str
    partition: int
    offset: int
    generation_id: int


#: ``plan(messages)`` -> (output records per source partition, apply_state).
BatchPlan = Callable[[Sequence[Any]], tuple[Mapping[int, Sequence[OutRecord]], Callable[[], None]]]


class TransactionalSender:
    """Produce a batch's outputs atomically with its offsets (exactly-once),
    or plainly before the ack (at-least-once)."""

    def __init__(self, app: Any, *, exactly_once: bool, wait_producer: float = 30.0) -> None:
        self.app = app
        self.exactly_once = exactly_once
        self.wait_producer = wait_producer
        self.gate = asyncio.Lock()
        self._gated = False
        self._tids: dict[tuple[str, int], str] = {}
        self._topic: str | None = None
        #: Records written once per key per transaction, at the commit:
        #: transactional id -> key -> the latest record (the status topic).
        self._deferred: dict[str, dict[bytes | None, Outgoing]] = {}
        #: Called with the number of deferred records each commit wrote.
        self.on_flushed: Callable[[int], None] | None = None
        #: Called with the duration (s) of each commit that committed something.
        self.on_commit: Callable[[float], None] | None = None
        #: Set once a commit was refused as fenced: from then on this sender
        #: processes, acks and commits nothing (its app is being replaced).
        self.fenced: TransactionFenced | None = None
        #: Called (once) with the refusal that set :attr:`fenced`.
        self.on_fenced: Callable[[TransactionFenced], None] | None = None
        #: Records acked so far, and as of the last completed commit.
        self.acked = 0
        self.committed = 0

    def install_commit_gate(self) -> None:
        """Make the consumer's commit take :attr:`gate` (idempotent; see
        :func:`streams.live.faust.seam.install_commit_gate`)."""
        if self._gated or not self.exactly_once:
            return
        faust_seam.install_commit_gate(
            self.app.consumer,
            self.gate,
            self.flush_deferred,
            on_fenced=self.fence,
            blocked=lambda: self.fenced is not None,
            after_commit=self._committed,
        )
        self._gated = True

    @property
    def uncommitted(self) -> int:
        """Records acked since the last completed commit (under exactly-once
        their outputs are in open transactions)."""
        return self.acked - self.committed

    def _committed(self, done: bool, seconds: float) -> None:
        # Under the gate: no batch is acked between the commit and this.
        self.committed = self.acked
        if done and self.on_commit is not None:
            self.on_commit(seconds)

    def fence(self, exc: TransactionFenced) -> None:
        """Stop for good: nothing more is processed, acked or committed
        (:meth:`send_batch` returns nothing, the gate refuses commits), and
        :attr:`on_fenced` is told once."""
        if self.fenced is not None:
            return
        self.fenced = exc
        self._deferred.clear()
        if self.on_fenced is not None:
            self.on_fenced(exc)

    def defer(self, records: Mapping[int, Sequence[Outgoing]]) -> None:
        """Write ``records`` (by source partition of the batch being sent) at
        the end of that partition's open transaction, at most one per key:
        a later record of the same key replaces an earlier one. Called under
        the gate, after the batch's sends succeeded. At-least-once: sent now
        (see :meth:`_send_batch_plain`)."""
        topic = self._topic
        if topic is None:
            return
        for p, recs in records.items():
            pending = self._deferred.setdefault(self.transactional_id(topic, p), {})
            for r in recs:
                pending[r.key] = r

    async def flush_deferred(self) -> None:
        """Append the deferred records to their transactions (under the gate,
        before faust's commit computes and commits the offsets)."""
        if not self._deferred:
            return
        deferred, self._deferred = self._deferred, {}
        producer = self.app.producer
        written = 0
        for tid, by_key in deferred.items():
            async with faust_seam.transaction_lock(producer, tid):
                txp = faust_seam.transaction_producer(producer, tid)
                if txp is None:  # fenced or stopped: its transaction is gone too
                    continue
                try:
                    await self._send_all(txp, list(by_key.values()))
                except BaseException as exc:
                    faust_seam.poison(txp, exc)
                    raise
                written += len(by_key)
        if self.on_flushed is not None and written:
            self.on_flushed(written)

    def transactional_id(self, topic: str, partition: int) -> str:
        # The same id faust's TransactionManager.commit uses for the offsets
        # of this source partition.
        tid = self._tids.get((topic, partition))
        if tid is None:
            group = self.app.assignor.group_for_topic(topic)
            tid = self._tids[topic, partition] = f"{self.app.conf.id}-{group}-{partition}"
        return tid

    def on_rebalance(self) -> None:
        # The commit on revocation has flushed what belonged to committed
        # transactions; anything left belonged to ones that are gone.
        self._tids.clear()
        self._deferred.clear()

    async def send_batch(self, messages: Sequence[Any], plan: BatchPlan) -> list[Any]:
        """Process and commit-proof a batch of consumed records (each a
        :class:`BatchMessage`, all of one topic, in fetch order).

        ``plan(kept)`` is called while the gate is held, with the records
        still to be processed; it returns their output records by source
        partition and a function that applies their state. Records fetched
        before a rebalance that started since, or of partitions no longer
        assigned, are dropped unprocessed (the rebalance's seek fetches them
        again). Returns the records acked."""
        if not messages or self.fenced is not None:
            return []
        if not self.exactly_once:
            return await self._send_batch_plain(messages, plan)
        self.install_commit_gate()
        topic = self._topic = messages[0].topic
        tids: dict[int, str] = {}
        for p in sorted({m.partition for m in messages}):
            tid = await self._wait_for_transaction(topic, p)
            if tid is not None:
                tids[p] = tid
        # Its own task: cancelling the caller must not release the gate with
        # half the batch in the transaction.
        task = asyncio.ensure_future(self._locked_batch(messages, tids, plan))
        return await asyncio.shield(task)

    def _current(self, messages: Sequence[Any]) -> list[Any]:
        app = self.app
        if not app.flow_control.is_active():
            return []  # a rebalance is under way; its seek refetches these
        generation = app.consumer_generation_id
        return [m for m in messages if m.generation_id == generation]

    async def _locked_batch(
        self, messages: Sequence[Any], tids: dict[int, str], plan: BatchPlan
    ) -> list[Any]:
        producer = self.app.producer
        async with self.gate, AsyncExitStack() as locks:
            for p in sorted(tids):
                await locks.enter_async_context(faust_seam.transaction_lock(producer, tids[p]))
            txps: dict[int, Any] = {}
            for p, tid in tids.items():
                txp = faust_seam.transaction_producer(producer, tid)
                if txp is not None:  # else fenced or stopped while we waited
                    txps[p] = txp
            if self.fenced is not None:
                return []
            kept = [m for m in self._current(messages) if m.partition in txps]
            if not kept:
                return []
            records, apply_state = plan(kept)
            try:
                for p, recs in records.items():
                    await self._send_all(txps[p], recs)
            except BaseException as exc:
                # Some outputs may be in the transactions, the offsets are
                # not: those transactions must never commit.
                for txp in txps.values():
                    faust_seam.poison(txp, exc)
                raise
            try:
                apply_state()
            except BaseException as exc:
                # The batch's outputs are in the transactions but its state
                # is not stored (a full disk): those transactions must never
                # commit either, and their deferred status records, which
                # may hold state this batch changed, are never read (a read
                # raised and hid the disk error, tests/faults/test_full_disk.py).
                for p, txp in txps.items():
                    faust_seam.poison(txp, exc)
                    self._deferred.pop(tids[p], None)
                raise
            consumer = self.app.consumer
            for m in kept:
                consumer.ack(m)
            self.acked += len(kept)
            return kept

    async def _send_all(self, txp: Any, records: Sequence[Outgoing]) -> None:
        # Appended to the producer's pending batches, no per-record wait
        # (faust_seam.append_records says why).
        await faust_seam.append_records(txp, records, _log_send_failure)

    async def _send_batch_plain(self, messages: Sequence[Any], plan: BatchPlan) -> list[Any]:
        kept = self._current(messages)
        if not kept:
            return []
        records, apply_state = plan(kept)
        producer = self.app.producer
        for recs in records.values():
            for r in recs:
                await producer.send(r.topic, r.key, r.value, r.partition, None, r.headers)
        apply_state()
        consumer = self.app.consumer
        for m in kept:
            consumer.ack(m)
        self.acked += len(kept)
        return kept

    async def _wait_for_transaction(self, topic: str, partition: int) -> str | None:
        # Right after a rebalance faust starts the partition's transactional
        # producer; an event can reach us a moment before it is ready.
        producer = self.app.producer
        tid = self.transactional_id(topic, partition)
        if faust_seam.transaction_producer(producer, tid) is not None:  # the common case
            return tid
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_producer
        while True:
            assigned = {(tp.topic, tp.partition) for tp in self.app.consumer.assignment()}
            if (topic, partition) not in assigned:
                return None
            tid = self.transactional_id(topic, partition)
            if faust_seam.transaction_producer_ready(producer, tid):
                return tid
            if loop.time() > deadline:
                raise TransactionUnavailable(
                    f"no transactional producer for {topic}[{partition}] "
                    f"after {self.wait_producer:.0f} s"
                )
            await asyncio.sleep(0.05)


def _log_send_failure(fut: asyncio.Future[Any]) -> None:
    # A failed send leaves the transaction abortable; the next commit raises
    # and crashes the worker, and a restart reprocesses from the last commit.
    # A fenced producer's sends fail too, and all pending sends of one whose
    # sender died on a lost connection (one per record): the fencing or
    # ProducerFailed line says it once.
    if fut.cancelled():
        return
    exc = fut.exception()
    if exc is None:
        return
    if faust_seam.is_fencing(exc) or faust_seam.connection_lost(exc):
        log.debug("transactional send refused: %r", exc)
    else:
        log.error("transactional send failed: %r", exc)
