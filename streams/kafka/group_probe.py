"""A look at a consumer group's progress from outside it, for the console's
processor watch: the group's committed offsets and the topic's ends, read
by a consumer that carries the group's id but never subscribes, so it never
joins the group (and never commits). Only ``Consumer.committed()`` asks the
group's coordinator: no AdminClient request, whose librdkafka path crashes
the process when the coordinator moves (librdkafka issue 5040,
docs/reliability.md), in a long-running console.

Client errors leave as fencewatch's (:mod:`streams.kafka.errors`)."""

from __future__ import annotations

from typing import Any

from streams.kafka.clients import fetch_committed
from streams.kafka.connection import KafkaConnection
from streams.kafka.errors import TopicMissing, kafka_errors

__all__ = ["GroupProbe", "PartitionProgress"]

#: Per partition: (the group's committed offset or None, the partition's
#: start, its end).
PartitionProgress = tuple[int | None, int, int]


class GroupProbe:
    """Reads ``group``'s committed offsets on a topic, and the topic's ends."""

    def __init__(self, connection: KafkaConnection, group: str) -> None:
        from confluent_kafka import Consumer

        self.connection = connection
        self.group = group
        conf = connection.librdkafka(
            **{
                "group.id": group,
                "enable.auto.commit": False,
                # The last committed offsets, not a wait for a transaction
                # that commits new ones: read_committed asks the coordinator
                # for stable offsets, and a frozen worker's open transaction
                # would hold every look until the broker aborts it.
                "isolation.level": "read_uncommitted",
            }
        )
        with kafka_errors(self._what):
            self._consumer: Any = Consumer(conf)

    @property
    def _what(self) -> str:
        return f"the offsets of group {self.group}"

    def progress(self, topic: str, max_partitions: int) -> tuple[dict[int, PartitionProgress], int]:
        """The first ``max_partitions`` partitions of ``topic``, each with its
        progress, and the topic's partition count; :class:`TopicMissing` when
        there is no such topic."""
        from confluent_kafka import TopicPartition

        timeout = self.connection.connect_timeout
        with kafka_errors(self._what):
            meta = self._consumer.list_topics(topic, timeout=timeout).topics.get(topic)
            if meta is None or meta.error is not None:
                raise TopicMissing(f"topic {topic} not found", code="UNKNOWN_TOPIC_OR_PART")
            numbers = sorted(meta.partitions)[:max_partitions]
            tps = fetch_committed(
                self._consumer, [TopicPartition(topic, p) for p in numbers], timeout
            )
            out: dict[int, PartitionProgress] = {}
            for tp in tps:
                low, high = self._consumer.get_watermark_offsets(
                    TopicPartition(topic, tp.partition), timeout=timeout, cached=False
                )
                # A negative offset is librdkafka's "none" (OFFSET_INVALID).
                out[tp.partition] = (tp.offset if tp.offset >= 0 else None, int(low), int(high))
        return out, len(meta.partitions)

    def close(self) -> None:
        self._consumer.close()
