"""Topic administration through confluent-kafka's AdminClient: idempotent
creation (already-exists is success), partition counts, deletion. What the
topics are is :mod:`streams.kafka.topics`; client errors leave as the typed
errors of :mod:`streams.kafka.errors`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from streams.errors import BrokerError, BrokerUnreachable, TopicMissing
from streams.kafka.connection import KafkaConnection, check_reachable
from streams.kafka.coordinator import describe_group
from streams.kafka.errors import first_metadata, kafka_errors, no_answer
from streams.kafka.topics import (
    DEFAULT_PARTITIONS,
    Retention,
    TopicNames,
    TopicSpec,
    ownership_topic_specs,
)

__all__ = ["GroupMembers", "TopicAdmin", "TopicResult", "ensure_topics"]


@dataclass(frozen=True, slots=True)
class GroupMembers:
    """Who is in a consumer group now (:meth:`TopicAdmin.group_members`)."""

    #: How many members the group has.
    members: int
    #: The group's protocol (its partition assignor: ``range`` for
    #: librdkafka's, ``faust`` for faust's); empty while it rebalances.
    protocol: str


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
    """Creates and inspects topics through a confluent-kafka AdminClient.

    Building one has no side effect: the client is made on first use.
    :meth:`probe` checks, when the caller wants to, that a broker answers."""

    def __init__(self, connection: KafkaConnection, *, timeout_s: float | None = None) -> None:
        """``timeout_s`` bounds each operation (default: the connection's
        connect timeout)."""
        if timeout_s is not None and timeout_s <= 0:
            raise ValueError("timeout must be positive")
        self._conn = connection
        self._timeout_s = timeout_s if timeout_s is not None else connection.connect_timeout
        self._admin: Any = None

    @property
    def connection(self) -> KafkaConnection:
        return self._conn

    @property
    def _client(self) -> Any:
        if self._admin is None:
            # Imported here so that `import streams.kafka` costs nothing until used.
            from confluent_kafka.admin import AdminClient

            with kafka_errors("configuring the Kafka admin client"):
                self._admin = AdminClient(self._conn.librdkafka())
        return self._admin

    def probe(self) -> None:
        """Check that a broker answers, within the connect timeout: a TCP
        connection to a bootstrap server (so a wrong address fails at once with
        its real cause), then a metadata request (a broker that accepts TCP
        and never answers). Raises :class:`~streams.errors.BrokerUnreachable`
        or :class:`~streams.errors.AuthenticationFailed` naming the address."""
        # The client library first: a missing extra is named before any network.
        import confluent_kafka.admin  # noqa: F401

        check_reachable(self._conn)
        first_metadata(
            self._client, self._conn.bootstrap_servers, self._conn.connect_timeout, "connecting"
        )

    def partitions(self, names: Sequence[str]) -> dict[str, int]:
        """Partition count of each existing topic among ``names`` (absent ones omitted)."""
        meta = self._list_topics("listing topics", self._timeout_s)
        found: dict[str, int] = {}
        for name in names:
            topic = meta.topics.get(name)
            if topic is not None and topic.error is None:
                found[name] = len(topic.partitions)
        return found

    def brokers(self) -> int:
        """How many brokers the cluster's metadata lists now."""
        return len(self._list_topics("listing brokers", self._timeout_s).brokers)

    def _list_topics(self, action: str, timeout: float) -> Any:
        try:
            with kafka_errors(action):
                return self._client.list_topics(timeout=timeout)
        except BrokerError as err:
            raise self._unreachable(err) from None

    def group_members(self, group_id: str) -> GroupMembers:
        """The members of consumer group ``group_id`` and its protocol (none
        for a group that is empty or does not exist). Asked in a child
        process (:mod:`streams.kafka.coordinator`, librdkafka issue 5040)."""
        desc = describe_group(self._conn, group_id, timeout_s=self._timeout_s)
        return GroupMembers(len(desc.client_ids), desc.protocol)

    def missing(self, names: Sequence[str]) -> list[str]:
        """Those of ``names`` that do not exist, asking for each by name (a
        full listing would leave out a topic this principal may not
        describe, which is not the same as missing): a topic the broker
        refuses to describe raises its typed error (an ACL refusal...).
        Never creates a topic."""
        from confluent_kafka import TopicCollection

        if not names:
            return []
        # DescribeTopics, not a metadata request naming the topic: a broker
        # with auto.create.topics.enable would create it by being asked.
        with kafka_errors("describing topics"):
            futures = self._client.describe_topics(
                TopicCollection(list(names)), request_timeout=self._timeout_s
            )
        absent: list[str] = []
        for name in names:
            try:
                with kafka_errors(f"topic {name}"):
                    futures[name].result(timeout=self._timeout_s + 5)
            except TopicMissing:
                absent.append(name)
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
        with kafka_errors("creating topics"):
            futures = self._client.create_topics(
                new, operation_timeout=self._timeout_s, request_timeout=self._timeout_s
            )
        created: dict[str, bool] = {}
        for spec in specs:
            try:
                with kafka_errors(f"creating topic {spec.name}"):
                    futures[spec.name].result(timeout=self._timeout_s + 5)
                created[spec.name] = True
            except BrokerError as err:
                if err.code != "TOPIC_ALREADY_EXISTS":
                    raise
                created[spec.name] = False
        actual = self._await_partitions([s.name for s in specs])
        return [TopicResult(s.name, created[s.name], actual[s.name], s.partitions) for s in specs]

    def delete(self, names: Sequence[str]) -> None:
        """Delete topics; missing ones are ignored (used by test cleanup)."""
        if not names:
            return
        with kafka_errors("deleting topics"):
            futures = self._client.delete_topics(
                list(names), operation_timeout=self._timeout_s, request_timeout=self._timeout_s
            )
        for name, fut in futures.items():
            try:
                with kafka_errors(f"deleting topic {name}"):
                    fut.result(timeout=self._timeout_s + 5)
            except TopicMissing:
                pass  # already gone: what was asked

    def recreate(
        self, name: str, partitions: int, timeout: float, *, action: str | None = None
    ) -> None:
        """Delete ``name`` and create it again with ``partitions``, keeping its
        replication and the settings set on the topic (``fencewatch migrate``
        rewrites a changelog so). ``timeout`` bounds each step; a client error
        leaves as the typed error of ``action`` (default: recreating the topic)."""
        from confluent_kafka.admin._config import ConfigResource, ConfigSource
        from confluent_kafka.cimpl import NewTopic

        admin = self._client
        with kafka_errors(action or f"recreating topic {name}"):
            meta = admin.list_topics(name, timeout=timeout).topics[name]
            replication = len(next(iter(meta.partitions.values())).replicas)
            res = ConfigResource(ConfigResource.Type.TOPIC, name)
            described = admin.describe_configs([res])[res].result(timeout)
            config = {
                k: v.value
                for k, v in described.items()
                if v.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
            }
            admin.delete_topics([name], operation_timeout=timeout)[name].result(timeout)
            deadline = time.monotonic() + timeout
            while True:  # deletion completes asynchronously: create until accepted
                try:
                    fut = admin.create_topics(
                        [NewTopic(name, partitions, replication, config=config)],
                        operation_timeout=timeout,
                    )[name]
                    fut.result(timeout)
                    return
                except Exception as exc:
                    if time.monotonic() > deadline:
                        raise
                    text = str(exc)
                    if "TOPIC_ALREADY_EXISTS" not in text and "marked for deletion" not in text:
                        raise
                    time.sleep(0.5)

    def _await_partitions(self, names: Sequence[str]) -> dict[str, int]:
        """Metadata right after creation can lag; poll briefly until all topics show."""
        deadline = time.monotonic() + self._timeout_s
        while True:
            found = self.partitions(names)
            if len(found) == len(names):
                return found
            if time.monotonic() >= deadline:
                missing = sorted(set(names) - set(found))
                raise BrokerUnreachable(
                    f"topics not visible in metadata after creation: {missing}: timed out",
                    code="_TIMED_OUT",
                    retriable=True,
                )
            time.sleep(0.1)

    def _unreachable(self, err: BrokerError) -> BrokerError:
        # librdkafka queues its log lines until the client is polled: serve
        # them now, so that --log-level debug shows why.
        self._client.poll(0)
        return no_answer(self._conn.bootstrap_servers, self._conn.connect_timeout, err)


def ensure_topics(
    connection: KafkaConnection,
    names: TopicNames | None = None,
    *,
    partitions: int | None = None,
    replication_factor: int = -1,
    retention: Retention | None = None,
    timeout_s: float = 30.0,
    admin: TopicAdmin | None = None,
) -> list[TopicResult]:
    """Create whichever of the deployment's topics are missing, as defined
    above, and report each (created or found, its actual partitions). Missing
    topics get ``partitions``, else the existing events topic's count, else
    :data:`DEFAULT_PARTITIONS`. Raises :class:`~streams.errors.BrokerError`
    (typed, see :mod:`streams.kafka.errors`) and ValueError for bad settings.
    ``admin``: an admin client of ``connection`` to use (one is made otherwise)."""
    names = names or TopicNames()
    admin = admin or TopicAdmin(connection, timeout_s=timeout_s)
    if partitions is None:
        partitions = admin.partitions([names.events]).get(names.events, DEFAULT_PARTITIONS)
    specs = ownership_topic_specs(
        names, partitions=partitions, replication_factor=replication_factor, retention=retention
    )
    return admin.ensure(specs)
