"""Topic administration: idempotent creation of fencewatch's topics.

Topic settings (why):
- ``ownership.events``: ``cleanup.policy=delete``, 7 days by default. Events
  are the audit trail that `fencewatch audit --topic` replays; a week covers
  an incident found after a weekend. Not compacted: every event of a key
  matters, not only the last one.
- ``ownership.findings``: ``cleanup.policy=delete``, 30 days by default.
  Findings are keyed by ``workflow_key`` and one key carries several findings
  (e.g. ``stale_activity`` and ``stale_commit``), each re-emitted with a higher
  ``revision``. Compaction keeps one record per *key*, so it would silently
  drop whole findings; it is only safe if the key were the ``finding_id``.
- ``ownership.events.dlq`` (``<events>.dlq``, SPEC §7): ``cleanup.policy=delete``,
  14 days by default, longer than events so rejected input outlives the
  stream it came from while someone looks at it.

Creation never changes an existing topic: when a topic already exists it is a
success and its actual partition count is reported (adding partitions would
move keys to other partitions and break per-key order, so that stays a
deliberate operator action).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any

from streams.errors import BrokerError

__all__ = [
    "DEFAULT_DLQ_RETENTION_MS",
    "DEFAULT_EVENTS_RETENTION_MS",
    "DEFAULT_FINDINGS_RETENTION_MS",
    "DEFAULT_PARTITIONS",
    "TopicAdmin",
    "TopicNames",
    "TopicResult",
    "TopicSpec",
    "ownership_topic_specs",
    "validate_topic_name",
]

_DAY_MS = 24 * 60 * 60 * 1000
DEFAULT_EVENTS_RETENTION_MS = 7 * _DAY_MS
DEFAULT_FINDINGS_RETENTION_MS = 30 * _DAY_MS
DEFAULT_DLQ_RETENTION_MS = 14 * _DAY_MS
DEFAULT_PARTITIONS = 3
# Kafka's own limits: 249 characters of [a-zA-Z0-9._-], not "." or "..".
_TOPIC_RE = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_MAX_PARTITIONS = 10_000
# Error codes that mean "ask again later" for topic creation.
_RETRIABLE = frozenset({"_TRANSPORT", "_TIMED_OUT", "REQUEST_TIMED_OUT", "NOT_CONTROLLER"})


_client_log = logging.getLogger("streams.kafka.client")


def validate_topic_name(name: str) -> str:
    """Return ``name`` if Kafka accepts it as a topic name, else raise ValueError."""
    if not _TOPIC_RE.match(name) or name in {".", ".."}:
        raise ValueError(
            f"invalid topic name {name!r}: use 1-249 characters of letters, digits, '.', '_', '-'"
        )
    return name


@dataclass(frozen=True, slots=True)
class TopicNames:
    """The three topics of a deployment. The DLQ defaults to ``<events>.dlq``."""

    events: str = "ownership.events"
    findings: str = "ownership.findings"
    dlq: str | None = None

    @property
    def dlq_name(self) -> str:
        return self.dlq if self.dlq is not None else f"{self.events}.dlq"


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """One topic to create. ``replication_factor=-1`` uses the broker default."""

    name: str
    partitions: int
    replication_factor: int = -1
    config: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        validate_topic_name(self.name)
        if not 1 <= self.partitions <= _MAX_PARTITIONS:
            raise ValueError(f"partitions must be 1..{_MAX_PARTITIONS}, got {self.partitions}")
        if self.replication_factor != -1 and not 1 <= self.replication_factor <= 32:
            raise ValueError(
                f"replication factor must be -1 (broker default) or 1..32, "
                f"got {self.replication_factor}"
            )


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


def _retention(value: int, what: str) -> str:
    # -1 is Kafka's "keep forever"; 0 or other negatives would be a typo.
    if value != -1 and value < 60_000:
        raise ValueError(f"{what} retention must be -1 (forever) or at least 60000 ms, got {value}")
    return str(value)


def ownership_topic_specs(
    names: TopicNames | None = None,
    *,
    partitions: int = DEFAULT_PARTITIONS,
    replication_factor: int = -1,
    events_retention_ms: int = DEFAULT_EVENTS_RETENTION_MS,
    findings_retention_ms: int = DEFAULT_FINDINGS_RETENTION_MS,
    dlq_retention_ms: int = DEFAULT_DLQ_RETENTION_MS,
) -> list[TopicSpec]:
    """The events, findings and DLQ topics with the settings documented above."""
    names = names or TopicNames()
    topics = [names.events, names.findings, names.dlq_name]
    if len(set(topics)) != len(topics):
        raise ValueError(f"events, findings and DLQ topics must differ, got {topics}")
    return [
        TopicSpec(
            names.events,
            partitions,
            replication_factor,
            {"cleanup.policy": "delete", "retention.ms": _retention(events_retention_ms, "events")},
        ),
        TopicSpec(
            names.findings,
            partitions,
            replication_factor,
            {
                "cleanup.policy": "delete",
                "retention.ms": _retention(findings_retention_ms, "findings"),
            },
        ),
        TopicSpec(
            names.dlq_name,
            partitions,
            replication_factor,
            {"cleanup.policy": "delete", "retention.ms": _retention(dlq_retention_ms, "DLQ")},
        ),
    ]


def _translate(exc: BaseException, action: str) -> BrokerError:
    """A confluent-kafka exception (or a future timeout) as our BrokerError."""
    from confluent_kafka import KafkaError

    if isinstance(exc, FutureTimeout):
        return BrokerError(f"{action}: timed out", code="TIMEOUT", retriable=True)
    err = exc.args[0] if exc.args else None
    if isinstance(err, KafkaError):
        code = err.name()
        return BrokerError(
            f"{action}: {err.str()} ({code})",
            code=code,
            retriable=err.retriable() or code in _RETRIABLE,
        )
    return BrokerError(f"{action}: {exc}")


def _error_code(exc: BaseException) -> int | None:
    from confluent_kafka import KafkaError

    err = exc.args[0] if exc.args else None
    return err.code() if isinstance(err, KafkaError) else None


class TopicAdmin:
    """Creates and inspects topics through a confluent-kafka AdminClient."""

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        timeout_s: float = 30.0,
        client_config: Mapping[str, Any] | None = None,
    ) -> None:
        if not bootstrap_servers.strip():
            raise ValueError("bootstrap servers must not be empty")
        if timeout_s <= 0:
            raise ValueError("timeout must be positive")
        # Imported here so that `import streams.kafka` costs nothing until used.
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        self._kafka_exception = KafkaException
        self._timeout_s = timeout_s
        # librdkafka's own log lines (every failed connect) go to Python
        # logging, where the application decides what is shown, not to stderr.
        config: dict[str, Any] = {"bootstrap.servers": bootstrap_servers, "logger": _client_log}
        config.update(client_config or {})
        try:
            self._client = AdminClient(config)
        except KafkaException as exc:
            raise _translate(exc, "configuring the Kafka admin client") from exc

    def partitions(self, names: Sequence[str]) -> dict[str, int]:
        """Partition count of each existing topic among ``names`` (absent ones omitted)."""
        try:
            meta = self._client.list_topics(timeout=self._timeout_s)
        except self._kafka_exception as exc:
            raise _translate(exc, "listing topics") from exc
        found: dict[str, int] = {}
        for name in names:
            topic = meta.topics.get(name)
            if topic is not None and topic.error is None:
                found[name] = len(topic.partitions)
        return found

    def ensure(self, specs: Sequence[TopicSpec]) -> list[TopicResult]:
        """Create each topic unless it exists; already-exists is success."""
        from confluent_kafka import KafkaError
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
            raise _translate(exc, "creating topics") from exc
        created: dict[str, bool] = {}
        for spec in specs:
            try:
                futures[spec.name].result(timeout=self._timeout_s + 5)
                created[spec.name] = True
            except self._kafka_exception as exc:
                if _error_code(exc) == KafkaError.TOPIC_ALREADY_EXISTS:
                    created[spec.name] = False
                else:
                    raise _translate(exc, f"creating topic {spec.name}") from exc
            except FutureTimeout as exc:
                raise _translate(exc, f"creating topic {spec.name}") from exc
        actual = self._await_partitions([s.name for s in specs])
        return [TopicResult(s.name, created[s.name], actual[s.name], s.partitions) for s in specs]

    def delete(self, names: Sequence[str]) -> None:
        """Delete topics; missing ones are ignored (used by test cleanup)."""
        from confluent_kafka import KafkaError

        if not names:
            return
        try:
            futures = self._client.delete_topics(
                list(names), operation_timeout=self._timeout_s, request_timeout=self._timeout_s
            )
        except self._kafka_exception as exc:
            raise _translate(exc, "deleting topics") from exc
        for name, fut in futures.items():
            try:
                fut.result(timeout=self._timeout_s + 5)
            except self._kafka_exception as exc:
                if _error_code(exc) != KafkaError.UNKNOWN_TOPIC_OR_PART:
                    raise _translate(exc, f"deleting topic {name}") from exc
            except FutureTimeout as exc:
                raise _translate(exc, f"deleting topic {name}") from exc

    def _await_partitions(self, names: Sequence[str]) -> dict[str, int]:
        """Metadata right after creation can lag; poll briefly until all topics show."""
        deadline = time.monotonic() + self._timeout_s
        while True:
            found = self.partitions(names)
            if len(found) == len(names):
                return found
            if time.monotonic() >= deadline:
                missing = sorted(set(names) - set(found))
                raise BrokerError(
                    f"topics not visible in metadata after creation: {missing}",
                    code="TIMEOUT",
                    retriable=True,
                )
            time.sleep(0.1)
