"""The rdkafka engine's partition-count watch: the events topic's partition
count re-read every :data:`COUNT_CHECK_S` in a thread of its own, a change
(or a read failing otherwise than a broker error) left for the consume loop,
which raises it before its next batch (streams/live/partitions.py says why a
changed count stops the engine).
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from streams.errors import BrokerError
from streams.kafka.connection import KafkaConnection
from streams.live.partitions import PartitionChange, PartitionGuard

if TYPE_CHECKING:
    from streams.kafka.admin import TopicAdmin

__all__ = ["COUNT_CHECK_S", "CountWatch"]

log = logging.getLogger(__name__)

#: The events topic's partition count is re-read this often, in a thread of
#: its own: a metadata round trip to the broker (seconds when it is away) that
#: the loop's thread made every 2 s, holding up the records consumed meanwhile.
COUNT_CHECK_S = 2.0


class CountWatch:
    """Watches ``events_topic``'s partition count against ``guard`` over
    ``connection`` (see the module's docstring)."""

    def __init__(
        self, connection: KafkaConnection, events_topic: str, guard: PartitionGuard
    ) -> None:
        self.connection = connection
        self.events_topic = events_topic
        self.guard = guard
        self._counter: TopicAdmin | None = None
        #: A change of the partition count seen by the watch (its thread).
        self.change: PartitionChange | None = None
        #: A count read that failed otherwise than a broker error (its thread
        #: ends; the loop raises it, as when the loop read the count itself).
        self.failure: BaseException | None = None
        #: Set by stop(): the watch's wait ends at once.
        self._stopped = threading.Event()

    def start(self) -> None:
        threading.Thread(target=self.watch, name="fencewatch-partitions", daemon=True).start()

    def stop(self) -> None:
        self._stopped.set()

    def watch(self) -> None:
        """The count check every :data:`COUNT_CHECK_S` until a change (left
        for the loop, which raises it before its next batch) or the stop."""
        while not self._stopped.is_set():
            try:
                change = self._count_check()
            except BaseException as exc:  # the loop raises it (no stray thread traceback)
                self.failure = exc
                return
            if change is not None:
                self.change = change
                return
            self._stopped.wait(COUNT_CHECK_S)

    def _count_check(self) -> PartitionChange | None:
        """The events topic's partition count re-read; a broker that does not
        answer is no change (the next check retries), as in the faust
        engine. (It was an exception out of the loop: a worker checking the
        count while the broker restarted exited with "no answer from broker",
        tests/faults/test_broker_restart_midstream.py.)"""
        from streams.kafka.admin import TopicAdmin

        try:
            if self._counter is None:
                self._counter = TopicAdmin(self.connection)
            return self.guard.check_count(self._counter)
        except BrokerError as exc:
            log.debug("partition count of %s not read: %s", self.events_topic, exc)
            return None
