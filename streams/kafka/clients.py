"""Small confluent-kafka clients for the packages outside this layer (SDK,
outbox, demos): they produce, run transactions and read offsets through
these, and see only fencewatch's error types (:mod:`streams.kafka.errors`).

A producer's local queue being full stays the builtin :class:`BufferError`
(the caller decides how long to wait for room: see ``poll``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import suppress
from typing import Any

from streams.errors import BrokerError
from streams.kafka.connection import KafkaConnection
from streams.kafka.errors import TopicMissing, from_kafka_error, kafka_errors

__all__ = [
    "COORDINATOR_NOT_READY",
    "DeliveryCallback",
    "Header",
    "Producer",
    "TransactionalProducer",
    "committed_offsets",
    "end_offsets",
    "fetch_committed",
]

#: Called once per produced record: ``None`` when acknowledged, else the error.
DeliveryCallback = Callable[[BrokerError | None], None]
Header = tuple[str, bytes]


class Producer:
    """An idempotent producer (``acks=all``). ``settings`` are further
    librdkafka settings (``linger.ms``...); they cannot turn idempotence or
    ``acks=all`` off. Thread-safe, as the client is."""

    def __init__(self, connection: KafkaConnection, settings: Mapping[str, Any] | None = None):
        from confluent_kafka import Producer as _Producer

        conf = connection.librdkafka()
        conf.update(settings or {})
        conf.update({"enable.idempotence": True, "acks": "all"})
        with kafka_errors("configuring the Kafka producer"):
            self._producer = _Producer(conf)

    def produce(
        self,
        topic: str,
        value: bytes,
        key: bytes | None = None,
        *,
        on_delivery: DeliveryCallback | None = None,
    ) -> None:
        """Queue one record; BufferError when the local queue is full."""
        callback = None
        if on_delivery is not None:
            report = on_delivery

            def callback(err: Any, _msg: Any) -> None:
                report(None if err is None else from_kafka_error(err, f"delivery to {topic}"))

        with kafka_errors(f"producing to {topic}"):
            self._producer.produce(topic, value=value, key=key, on_delivery=callback)

    def poll(self, timeout: float = 0.0) -> int:
        """Serve delivery callbacks for up to ``timeout`` seconds."""
        return int(self._producer.poll(timeout))

    def flush(self, timeout: float) -> int:
        """Wait up to ``timeout`` seconds for every acknowledgement; returns
        how many records are still unacknowledged."""
        with kafka_errors("flushing the producer"):
            return int(self._producer.flush(timeout))


class TransactionalProducer:
    """A transactional producer: :meth:`init` fences every earlier producer of
    the same ``transactional_id``; :meth:`send` writes records in one
    transaction. A fenced producer raises
    :class:`~streams.kafka.errors.ProducerFenced`."""

    def __init__(
        self,
        connection: KafkaConnection,
        transactional_id: str,
        *,
        settings: Mapping[str, Any] | None = None,
        op_timeout_s: float = 30.0,
    ) -> None:
        from confluent_kafka import KafkaException
        from confluent_kafka import Producer as _Producer

        self._kafka_exception = KafkaException
        self._timeout = op_timeout_s
        conf = connection.librdkafka()
        conf.update(settings or {})
        conf.update({"transactional.id": transactional_id, "enable.idempotence": True})
        conf["acks"] = "all"
        with kafka_errors("configuring the transactional producer"):
            self._producer = _Producer(conf)

    def init(self) -> None:
        with kafka_errors("init_transactions"):
            self._producer.init_transactions(self._timeout)

    def send(
        self, topic: str, records: Iterable[tuple[bytes | None, bytes, Sequence[Header]]]
    ) -> None:
        """Begin, produce ``(key, value, headers)`` records, commit. On a
        failure the transaction is aborted when the client requires it (the
        records are then not visible to read_committed readers) and the error
        is raised translated."""
        self.send_to((topic, key, value, headers) for key, value, headers in records)

    def send_to(self, records: Iterable[tuple[str, bytes | None, bytes, Sequence[Header]]]) -> None:
        """As :meth:`send`, each record ``(topic, key, value, headers)`` to its
        own topic: all of them visible together or none (e.g. evidence and the
        position it was read up to, in one transaction)."""
        p = self._producer
        with kafka_errors("transaction"):
            try:
                p.begin_transaction()
                for topic, key, value, headers in records:
                    p.produce(topic, value=value, key=key, headers=list(headers))
                p.commit_transaction(self._timeout)
            except self._kafka_exception as exc:
                # Aborted here, while the client's own error is at hand;
                # kafka_errors translates it on the way out.
                err = exc.args[0] if exc.args else None
                abort = getattr(err, "txn_requires_abort", None)
                if abort is not None and abort():
                    with suppress(self._kafka_exception):
                        p.abort_transaction(self._timeout)
                raise

    def close(self) -> None:
        """Drop the producer (an open transaction is aborted by Kafka's
        transaction timeout or by the next init of this transactional id)."""
        with suppress(self._kafka_exception):  # closing: nothing left to report to
            self._producer.flush(0)


def _probe_consumer(connection: KafkaConnection, group: str) -> Any:
    from confluent_kafka import Consumer

    # Never subscribes: only reads offsets, so it does not join the group.
    return Consumer(connection.librdkafka(**{"group.id": group, "enable.auto.commit": False}))


def end_offsets(connection: KafkaConnection, topic: str) -> dict[int, int]:
    """High watermark of each partition of ``topic``."""
    from confluent_kafka import TopicPartition

    timeout = connection.connect_timeout
    c = _probe_consumer(connection, "fencewatch-offsets-probe")
    try:
        with kafka_errors(f"offsets of {topic}"):
            meta = c.list_topics(topic, timeout=timeout).topics.get(topic)
            if meta is None or meta.error is not None:
                raise TopicMissing(f"topic {topic} not found", code="UNKNOWN_TOPIC_OR_PART")
            return {
                p: int(c.get_watermark_offsets(TopicPartition(topic, p), timeout, False)[1])
                for p in sorted(meta.partitions)
            }
    finally:
        c.close()


#: Answers of a group coordinator that is still being elected or loading
#: (a fresh broker, a coordinator that just moved): asked again, not fatal.
COORDINATOR_NOT_READY = frozenset(
    {"NOT_COORDINATOR", "COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE"}
)


def fetch_committed(consumer: Any, partitions: list[Any], timeout: float) -> list[Any]:
    """``consumer.committed(partitions)``, asked again while the group's
    coordinator is not ready, until ``timeout`` seconds have passed; then
    (or on any other error) the KafkaException propagates."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        try:
            return list(consumer.committed(partitions, timeout=max(left, 0.1)))
        except KafkaException as exc:
            err: Any = exc.args[0] if exc.args else None
            name = err.name() if err is not None and hasattr(err, "name") else ""
            if name not in COORDINATOR_NOT_READY or time.monotonic() + 0.2 > deadline:
                raise
            time.sleep(0.2)


def committed_offsets(
    connection: KafkaConnection, group: str, topic: str, partitions: Iterable[int]
) -> dict[int, int]:
    """The consumer group's committed offset per partition (negative: none)."""
    from confluent_kafka import TopicPartition

    c = _probe_consumer(connection, group)
    try:
        with kafka_errors(f"committed offsets of {group}"):
            tps = fetch_committed(
                c, [TopicPartition(topic, p) for p in partitions], connection.connect_timeout
            )
            return {tp.partition: int(tp.offset) for tp in tps}
    finally:
        c.close()
