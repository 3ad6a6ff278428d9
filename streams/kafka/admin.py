"""Topic administration through confluent-kafka's AdminClient: idempotent
creation (already-exists is success), partition counts, deletion. What the
topics are is :mod:`streams.kafka.topics`; client errors leave as the typed
errors of :mod:`streams.kafka.errors`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

from streams.errors import BrokerError
from streams.kafka.connection import KafkaConnection, check_reachable
from streams.kafka.errors import no_answer, translate
from streams.kafka.topics import (
    DEFAULT_PARTITIONS,
    Retention,
    TopicNames,
    TopicSpec,
    ownership_topic_specs,
)

__all__ = ["TopicAdmin", "TopicResult", "ensure_topics"]


@dataclass(frozen=True, slots=True)
class TopicResult:
    """What ``ensure`` found or did for one topic."""

    name: str
    created: bool
    partitions: int
    requested_partitions: int

    @property
    def partitions_differ(self) -> bool:
        return self.partitions != self.requested_partitions


class TopicAdmin:
    """Creates and inspects topics through a confluent-kafka AdminClient."""

    def __init__(self, conn: KafkaConnection | str, *, timeout_s: float | None = None) -> None:
        """``conn`` may be a bare bootstrap string (PLAINTEXT). Fails fast
        with :class:`~streams.kafka.errors.BrokerUnreachable` when no
        bootstrap server accepts a connection. ``timeout_s`` bounds each
        operation (default: the connection's connect timeout)."""
        if isinstance(conn, str):
            conn = KafkaConnection(conn)
        conn.validate()
        if timeout_s is not None and timeout_s <= 0:
            raise ValueError("timeout must be positive")
        # Imported here so that `import streams.kafka` costs nothing until used.
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        check_reachable(conn)
        self._conn = conn
        self._kafka_exception = KafkaException
        self._timeout_s = timeout_s if timeout_s is not None else conn.connect_timeout
        try:
            self._client = AdminClient(conn.librdkafka())
        except KafkaException as exc:
            raise translate(exc, "configuring the Kafka admin client") from None
        try:  # a broker that accepts TCP but never answers: bounded here too
            self._client.list_topics(timeout=conn.connect_timeout)
        except KafkaException as exc:
            raise self._unreachable(translate(exc, "connecting")) from None

    def partitions(self, names: Sequence[str]) -> dict[str, int]:
        """Partition count of each existing topic among ``names`` (absent ones omitted)."""
        try:
            meta = self._client.list_topics(timeout=self._timeout_s)
        except self._kafka_exception as exc:
            raise self._unreachable(translate(exc, "listing topics")) from None
        found: dict[str, int] = {}
        for name in names:
            topic = meta.topics.get(name)
            if topic is not None and topic.error is None:
                found[name] = len(topic.partitions)
        return found

    def missing(self, names: Sequence[str]) -> list[str]:
        """Those of ``names`` that do not exist, asking for each by name (a
        full listing would leave out a topic this principal may not
        describe, which is not the same as missing): a topic the broker
        refuses to describe raises its typed error (an ACL refusal...).
        Never creates a topic."""
        from confluent_kafka import TopicCollection

        from streams.kafka.errors import topic_unavailable

        if not names:
            return []
        # DescribeTopics, not a metadata request naming the topic: a broker
        # with auto.create.topics.enable would create it by being asked.
        try:
            futures = self._client.describe_topics(
                TopicCollection(list(names)), request_timeout=self._timeout_s
            )
        except self._kafka_exception as exc:
            raise translate(exc, "describing topics") from None
        absent: list[str] = []
        for name in names:
            try:
                futures[name].result(timeout=self._timeout_s + 5)
            except self._kafka_exception as exc:
                err = exc.args[0] if exc.args else None
                failure = topic_unavailable(name, self._conn.bootstrap_servers, err)
                if failure.code != "UNKNOWN_TOPIC_OR_PART":
                    raise failure from None
                absent.append(name)
            except FutureTimeout as exc:
                raise translate(exc, f"describing topic {name}") from None
        return absent

    def ensure(self, specs: Sequence[TopicSpec]) -> list[TopicResult]:
        """Create each topic unless it exists; already-exists is success."""
        from confluent_kafka.cimpl import NewTopic

        if not specs:
            return []
        new = [
            NewTopic(
                s.name,
                num_partitions=s.partitions,
                replication_factor=s.replication_factor,
                config=dict(s.config),
            )
            for s in specs
        ]
        try:
            futures = self._client.create_topics(
                new, operation_timeout=self._timeout_s, request_timeout=self._timeout_s
            )
        except self._kafka_exception as exc:
            raise translate(exc, "creating topics") from None
        created: dict[str, bool] = {}
        for spec in specs:
            try:
                futures[spec.name].result(timeout=self._timeout_s + 5)
                created[spec.name] = True
            except self._kafka_exception as exc:
                if translate(exc, "").code == "TOPIC_ALREADY_EXISTS":
                    created[spec.name] = False
                else:
                    raise translate(exc, f"creating topic {spec.name}") from None
            except FutureTimeout as exc:
                raise translate(exc, f"creating topic {spec.name}") from None
        actual = self._await_partitions([s.name for s in specs])
        return [TopicResult(s.name, created[s.name], actual[s.name], s.partitions) for s in specs]

    def delete(self, names: Sequence[str]) -> None:
        """Delete topics; missing ones are ignored (used by test cleanup)."""
        if not names:
            return
        try:
            futures = self._client.delete_topics(
                list(names), operation_timeout=self._timeout_s, request_timeout=self._timeout_s
            )
        except self._kafka_exception as exc:
            raise translate(exc, "deleting topics") from None
        for name, fut in futures.items():
            try:
                fut.result(timeout=self._timeout_s + 5)
            except self._kafka_exception as exc:
                if translate(exc, "").code != "UNKNOWN_TOPIC_OR_PART":
                    raise translate(exc, f"deleting topic {name}") from None
            except FutureTimeout as exc:
                raise translate(exc, f"deleting topic {name}") from None

    def _await_partitions(self, names: Sequence[str]) -> dict[str, int]:
        """Metadata right after creation can lag; poll briefly until all topics show."""
        deadline = time.monotonic() + self._timeout_s
        while True:
            found = self.partitions(names)
            if len(found) == len(names):
                return found
            if time.monotonic() >= deadline:
                missing = sorted(set(names) - set(found))
                raise translate(
                    FutureTimeout(), f"topics not visible in metadata after creation: {missing}"
                )
            time.sleep(0.1)
    def _unreachable(self, err: BrokerError) -> BrokerError:
        # librdkafka queues its log lines until the client is polled: serve
        # them now, so that --log-level debug shows why.
        self._client.poll(0)
        return no_answer(self._conn.bootstrap_servers, self._conn.connect_timeout, err)


def ensure_topics(
    conn: KafkaConnection,
    names: TopicNames | None = None,
    *,
    partitions: int | None = None,
    replication_factor: int = -1,
    retention: Retention | None = None,
    timeout_s: float = 30.0,
) -> list[TopicResult]:
    """Create whichever of the deployment's topics are missing, as defined
    above, and report each (created or found, its actual partitions). Missing
    topics get ``partitions``, else the existing events topic's count, else
    :data:`DEFAULT_PARTITIONS`. Raises :class:`~streams.errors.BrokerError`
    (typed, see :mod:`streams.kafka.errors`) and ValueError for bad settings."""
    names = names or TopicNames()
    admin = TopicAdmin(conn, timeout_s=timeout_s)
    if partitions is None:
        partitions = admin.partitions([names.events]).get(names.events, DEFAULT_PARTITIONS)
    specs = ownership_topic_specs(
        names, partitions=partitions, replication_factor=replication_factor, retention=retention
    )
    return admin.ensure(specs)
