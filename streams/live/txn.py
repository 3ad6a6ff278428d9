"""Send one event's outputs inside the transaction that commits its offset.

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
from collections.abc import Callable, Sequence
from typing import Any

from streams.errors import FencewatchError
from streams.live.processor import OutRecord

__all__ = ["TransactionUnavailable", "TransactionalSender"]

log = logging.getLogger(__name__)


class TransactionUnavailable(FencewatchError):
    """No transactional producer appeared for an assigned partition in time."""


class TransactionalSender:
    """Produce an event's outputs atomically with its offset (exactly-once),
    or plainly before the ack (at-least-once)."""

    def __init__(self, app: Any, *, exactly_once: bool, wait_producer: float = 30.0) -> None:
        self.app = app
        self.exactly_once = exactly_once
        self.wait_producer = wait_producer
        self.gate = asyncio.Lock()
        self._gated = False
        self._tids: dict[tuple[str, int], str] = {}

    def install_commit_gate(self) -> None:
        """Make the consumer's commit take :attr:`gate` (idempotent).

        ``force_commit`` is the one entry point of every commit (the periodic
        one, the one on rebalance, the one on shutdown)."""
        if self._gated or not self.exactly_once:
            return
        consumer = self.app.consumer
        original = consumer.force_commit
        gate = self.gate

        async def gated_force_commit(*args: Any, **kwargs: Any) -> bool:
            async with gate:
                return bool(await original(*args, **kwargs))

        consumer.force_commit = gated_force_commit
        self._gated = True

    def transactional_id(self, topic: str, partition: int) -> str:
        # The same id faust's TransactionManager.commit uses for the offsets
        # of this source partition.
        tid = self._tids.get((topic, partition))
        if tid is None:
            group = self.app.assignor.group_for_topic(topic)
            tid = self._tids[topic, partition] = f"{self.app.conf.id}-{group}-{partition}"
        return tid

    def on_rebalance(self) -> None:
        self._tids.clear()

    async def send(
        self,
        event: Any,
        records: Sequence[OutRecord],
        apply_state: Callable[[], None],
    ) -> bool:
        """Send ``records`` for ``event``, then ``apply_state()``, then ack.

        Returns ``False`` (nothing sent, not acked) when the event's partition
        was revoked meanwhile: its new owner processes it again."""
        if not self.exactly_once:
            producer = self.app.producer
            for r in records:
                await producer.send(r.topic, r.key, r.value, r.partition, None, r.headers)
            apply_state()
            return True
        message = event.message
        self.install_commit_gate()
        producer = self.app.producer
        tid = await self._wait_for_transaction(message.topic, message.partition)
        if tid is None:
            return False
        async with self.gate, producer._trn_locks[tid]:
            txp = producer._transaction_producers.get(tid)
            if txp is None:  # fenced or stopped while we waited for the gate
                return False
            for r in records:
                fut = await txp.send(
                    r.topic, r.value, key=r.key, partition=r.partition, headers=list(r.headers)
                )
                fut.add_done_callback(_log_send_failure)
            apply_state()
            event.ack()
        return True

    async def _wait_for_transaction(self, topic: str, partition: int) -> str | None:
        # Right after a rebalance faust starts the partition's transactional
        # producer; an event can reach us a moment before it is ready.
        producer = self.app.producer
        tid = self.transactional_id(topic, partition)
        if tid in producer._transaction_producers:  # the common case, checked cheaply
            return tid
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_producer
        while True:
            assigned = {(tp.topic, tp.partition) for tp in self.app.consumer.assignment()}
            if (topic, partition) not in assigned:
                return None
            tid = self.transactional_id(topic, partition)
            if tid in producer._transaction_producers and tid in producer._trn_locks:
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
    if not fut.cancelled() and fut.exception() is not None:
        log.error("transactional send failed: %r", fut.exception())
