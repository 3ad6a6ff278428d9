"""fencewatch's topics: their names and their one definition (created by
:func:`streams.kafka.admin.ensure_topics`, which both ``fencewatch topics
create`` and ``fencewatch run`` use).

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
- ``ownership.sources``: ``cleanup.policy=compact``, created by a source
  (``fencewatch source etcd``) when missing: one record per source, the store
  revision it published up to (written in the transaction of that evidence).
- ``ownership.status`` (SPEC §8): ``cleanup.policy=compact``. One record per
  workflow key holds where the workflow stands now; only the latest matters,
  and compaction keeps it for every key however old, which time retention
  would not.

Replication: with ``replication_factor`` 3 or more every topic also gets
``min.insync.replicas=2`` (:func:`min_insync_replicas`). fencewatch's
producers write with ``acks=all`` (idempotent, transactional), and acks=all
means "every replica in the ISR": with a min ISR of 1 the ISR may shrink to
the leader alone, which then acknowledges writes no other broker has, and
losing that one broker loses acknowledged findings. With 2, an acknowledged
write is on two brokers, and one broker down still leaves the topic
writable. With 2 replicas it stays the broker default: a min ISR of 2 there
would stop all writes whenever either broker is down.

Every topic gets the same partition count, so a workflow key's records sit in
the same partition number end to end. Creation never changes an existing
topic (adding partitions would move keys to other partitions and break
per-key order, so that stays a deliberate operator action): a missing topic
gets the partition count asked for, else the existing events topic's, else
:data:`DEFAULT_PARTITIONS`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = [
    "DEFAULT_DLQ_RETENTION_MS",
    "DEFAULT_EVENTS_RETENTION_MS",
    "DEFAULT_EVENTS_TOPIC",
    "DEFAULT_FINDINGS_RETENTION_MS",
    "DEFAULT_FINDINGS_TOPIC",
    "DEFAULT_PARTITIONS",
    "DEFAULT_SOURCES_TOPIC",
    "DEFAULT_STATUS_TOPIC",
    "Retention",
    "TopicNames",
    "TopicSpec",
    "dlq_topic_for",
    "min_insync_replicas",
    "ownership_topic_specs",
    "validate_topic_name",
]

DEFAULT_EVENTS_TOPIC = "ownership.events"
DEFAULT_FINDINGS_TOPIC = "ownership.findings"
DEFAULT_STATUS_TOPIC = "ownership.status"
DEFAULT_SOURCES_TOPIC = "ownership.sources"
_DAY_MS = 24 * 60 * 60 * 1000
DEFAULT_EVENTS_RETENTION_MS = 7 * _DAY_MS
DEFAULT_FINDINGS_RETENTION_MS = 30 * _DAY_MS
DEFAULT_DLQ_RETENTION_MS = 14 * _DAY_MS
DEFAULT_PARTITIONS = 3
# Kafka's own limits: 249 characters of [a-zA-Z0-9._-], not "." or "..".
_TOPIC_RE = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_MAX_PARTITIONS = 10_000


def validate_topic_name(name: str) -> str:
    """Return ``name`` if Kafka accepts it as a topic name, else raise ValueError."""
    if not _TOPIC_RE.match(name) or name in {".", ".."}:
        raise ValueError(
            f"invalid topic name {name!r}: use 1-249 characters of letters, digits, '.', '_', '-'"
        )
    return name


def dlq_topic_for(events: str) -> str:
    """The dead-letter topic of an events topic (SPEC §7)."""
    return f"{events}.dlq"


@dataclass(frozen=True, slots=True)
class TopicNames:
    """The topics of a deployment. The DLQ defaults to ``<events>.dlq``."""

    events: str = DEFAULT_EVENTS_TOPIC
    findings: str = DEFAULT_FINDINGS_TOPIC
    dlq: str | None = None
    status: str = DEFAULT_STATUS_TOPIC

    @property
    def dlq_name(self) -> str:
        return self.dlq if self.dlq is not None else dlq_topic_for(self.events)

    def all(self) -> list[str]:
        return [self.events, self.findings, self.dlq_name, self.status]


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
class Retention:
    """Time retention of the delete-policy topics, in milliseconds (-1: forever)."""

    events_ms: int = DEFAULT_EVENTS_RETENTION_MS
    findings_ms: int = DEFAULT_FINDINGS_RETENTION_MS
    dlq_ms: int = DEFAULT_DLQ_RETENTION_MS


def _retention(value: int, what: str) -> str:
    # -1 is Kafka's "keep forever"; 0 or other negatives would be a typo.
    if value != -1 and value < 60_000:
        raise ValueError(f"{what} retention must be -1 (forever) or at least 60000 ms, got {value}")
    return str(value)


def min_insync_replicas(replication_factor: int) -> int | None:
    """The ``min.insync.replicas`` fencewatch sets on topics it creates with
    ``replication_factor`` replicas (None: leave the broker's default); see
    the module docstring for why."""
    return 2 if replication_factor >= 3 else None


def ownership_topic_specs(
    names: TopicNames | None = None,
    *,
    partitions: int = DEFAULT_PARTITIONS,
    replication_factor: int = -1,
    retention: Retention | None = None,
) -> list[TopicSpec]:
    """The events, findings, DLQ and status topics with the settings documented above."""
    names = names or TopicNames()
    retention = retention or Retention()
    topics = names.all()
    if len(set(topics)) != len(topics):
        raise ValueError(f"events, findings, DLQ and status topics must differ, got {topics}")

    isr = min_insync_replicas(replication_factor)
    replicated = {} if isr is None else {"min.insync.replicas": str(isr)}

    def delete(name: str, ms: int, what: str) -> TopicSpec:
        config = {"cleanup.policy": "delete", "retention.ms": _retention(ms, what), **replicated}
        return TopicSpec(name, partitions, replication_factor, config)

    return [
        delete(names.events, retention.events_ms, "events"),
        delete(names.findings, retention.findings_ms, "findings"),
        delete(names.dlq_name, retention.dlq_ms, "DLQ"),
        TopicSpec(
            names.status,
            partitions,
            replication_factor,
            {"cleanup.policy": "compact", **replicated},
        ),
    ]
