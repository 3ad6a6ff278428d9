"""The rdkafka engine's rebalance handling: the consumer's assign, revoke and
lost callbacks, and the rewind to the committed offsets after a transaction
was lost.

Eager range assignment: every rebalance revokes everything, so a revoke
commits the open transaction (or aborts it) and drops every partition's
state, and an assignment fences the departed previous owners
(:mod:`streams.live.rdkafka.takeover`), reads the committed offsets and
restores (:mod:`streams.live.rdkafka.restore`) before the first record.

Why a mixin of :class:`~streams.live.rdkafka.engine.RdkafkaEngine`: the
callbacks run inside the engine's ``consume()`` call, on its thread, and
change the assignment state the consume loop reads for every batch (the
partitions held, their positions, the epoch a batch is checked against);
that state is the engine's, declared below with what else these use.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from streams.errors import BrokerError

if TYPE_CHECKING:
    from streams.live.rdkafka.restore import ChangelogRestore
    from streams.live.rdkafka.takeover import DepartedOwners
    from streams.live.rdkafka.transaction import TransactionUnit

__all__ = ["Rebalance"]

log = logging.getLogger(__name__)


class Rebalance:
    """The consumer's rebalance callbacks and the rewind (see the module's
    docstring), on the engine's assignment state."""

    # The engine's state these work on (set in RdkafkaEngine.__init__).
    consumer: Any
    eos: bool
    events_topic: str
    txn: TransactionUnit
    restorer: ChangelogRestore
    _takeover: DepartedOwners
    #: Input partitions held (sorted), and the next offset to process in each.
    assigned: list[int]
    positions: dict[int, int]
    recovering: bool
    generation: int
    member: str
    _epoch: int
    _told_stale: bool
    _reset_needed: bool
    _rewind_at: float
    _awaiting_rejoin: bool
    _discarded: bool

    if TYPE_CHECKING:

        def _drop_state(self) -> None: ...

    def _member(self) -> str:
        try:
            return str(self.consumer.memberid())
        except Exception:  # before the first join there is none
            return "-"

    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        self._epoch += 1
        self.generation += 1
        parts = sorted(tp.partition for tp in partitions if tp.topic == self.events_topic)
        self._drop_state()
        self.recovering = True
        try:
            if self.eos:
                # Before the committed offsets are read: a departed owner's
                # commit in flight then either completes or is aborted.
                self._takeover.fence(parts)
            committed = self.restorer.committed(parts)
            self.restorer.restore(parts, committed)
        except Exception as exc:  # retried by the loop's rewind
            log.warning("restore of partitions %s failed, retrying: %s", parts, exc)
            self._drop_state()
            self._reset_needed = True
            committed = partitions
        finally:
            self.recovering = False
        self.positions = {
            tp.partition: tp.offset for tp in committed if tp.offset is not None and tp.offset >= 0
        }
        self.assigned = parts
        self.member = self._member()
        consumer.assign(committed)

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        self.txn.settle(block=True)  # a failure aborts and arranges the rewind
        if self.txn.txn_open and not self._reset_needed:
            self.txn.commit()  # before the partitions go (a failure aborts)
        elif self.txn.txn_open or self.txn.begun:
            self.txn.abort()
            self.txn.clear_txn()
        # A failed commit, or a failure before: processed events were thrown
        # away, the committed offsets are behind the positions (_refetch).
        self._discarded = self._discarded or self._reset_needed
        self._release()

    def _on_lost(self, consumer: Any, partitions: list[Any]) -> None:
        lost = self.assigned
        # A commit already sent lands or not as the group coordinator
        # decides (it checks the generation); either way it has ended here.
        self.txn.settle(block=True)
        events = self.txn.txn_events
        self._discarded = self._discarded or self.txn.txn_open or self._reset_needed
        if self.txn.txn_open or self.txn.begun:
            self.txn.abort()  # never publish from a generation that is over
            self.txn.clear_txn()
        if not self._told_stale:
            log.warning(
                "partitions %s lost (generation %d, member %s left the group): %d uncommitted "
                "events aborted, never published; rejoining",
                lost,
                self.generation,
                self.member,
                events,
            )
        self._release()

    def _release(self) -> None:
        self._epoch += 1
        self._told_stale = False
        self._drop_state()
        self._reset_needed = False
        self._rewind_at = 0.0
        self._awaiting_rejoin = False
        self.assigned = []
        self.positions = {}

    def _rewind(self) -> None:
        """Back to the committed offsets, with the state restored to them."""
        if not self.assigned:
            self._reset_needed = False
            self._awaiting_rejoin = False
            return
        from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition

        if self.txn.settle(block=True) is False:
            return  # failed: rewinds again, from what it left
        parts = list(self.assigned)
        self.recovering = True
        try:
            committed = self.restorer.committed(parts)
            self._drop_state()
            self.restorer.restore(parts, committed)
            for tp in committed:
                offset = tp.offset if tp.offset is not None and tp.offset >= 0 else OFFSET_BEGINNING
                self.consumer.seek(TopicPartition(self.events_topic, tp.partition, offset))
        except (KafkaException, BrokerError) as exc:
            self._drop_state()
            log.warning("rewind of partitions %s failed, retrying in 1 s: %s", parts, exc)
            self._rewind_at = time.monotonic() + 1.0
            return
        finally:
            self.recovering = False
        self.positions = {tp.partition: tp.offset for tp in committed if tp.offset >= 0}
        self._epoch += 1
        self._reset_needed = False
        self._awaiting_rejoin = False
