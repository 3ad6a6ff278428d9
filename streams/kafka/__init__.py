"""The Kafka layer: the one place (with the faust seam, ``streams.live``) that
imports a Kafka client (tests/kafka/test_layers.py enforces it).

- :mod:`~streams.kafka.connection`: :class:`KafkaConnection`, bootstrap and
  security settings for every client (librdkafka and faust/aiokafka);
- :mod:`~streams.kafka.errors`: the one translation of client errors into
  typed :class:`~streams.errors.BrokerError` subclasses (the
  :func:`~streams.kafka.errors.kafka_errors` context manager around each
  client call);
- :mod:`~streams.kafka.topics`: topic names and their one definition
  (created by :func:`~streams.kafka.admin.ensure_topics`);
- :mod:`~streams.kafka.admin`, :mod:`~streams.kafka.clients`,
  :mod:`~streams.kafka.reader`: the clients (topic admin, producers,
  offsets, the bounded topic reader of ``audit --topic``);
- :mod:`~streams.kafka.logs`: client logs quiet unless asked for.

Importing this package loads no client library; each client is imported
when first used.
"""

from __future__ import annotations

from streams.kafka.admin import TopicAdmin, TopicResult, ensure_topics
from streams.kafka.clients import Producer, TransactionalProducer, committed_offsets, end_offsets
from streams.kafka.connection import (
    DEFAULT_CONNECT_TIMEOUT,
    KafkaConnection,
    check_reachable,
    connection_from_env,
)
from streams.kafka.errors import (
    AuthenticationFailed,
    AuthorizationFailed,
    BrokerUnreachable,
    ProducerFenced,
    TopicMissing,
    kafka_errors,
    translate,
)
from streams.kafka.logs import configure_client_logs
from streams.kafka.reader import BEGINNING, END, Offset, Timestamp, TopicRecord, iter_topic
from streams.kafka.topics import (
    DEFAULT_DLQ_RETENTION_MS,
    DEFAULT_EVENTS_RETENTION_MS,
    DEFAULT_EVENTS_TOPIC,
    DEFAULT_FINDINGS_RETENTION_MS,
    DEFAULT_FINDINGS_TOPIC,
    DEFAULT_PARTITIONS,
    DEFAULT_STATUS_TOPIC,
    Retention,
    TopicNames,
    TopicSpec,
    dlq_topic_for,
    ownership_topic_specs,
    validate_topic_name,
)

__all__ = [
    "BEGINNING",
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_DLQ_RETENTION_MS",
    "DEFAULT_EVENTS_RETENTION_MS",
    "DEFAULT_EVENTS_TOPIC",
    "DEFAULT_FINDINGS_RETENTION_MS",
    "DEFAULT_FINDINGS_TOPIC",
    "DEFAULT_PARTITIONS",
    "DEFAULT_STATUS_TOPIC",
    "END",
    "AuthenticationFailed",
    "AuthorizationFailed",
    "BrokerUnreachable",
    "KafkaConnection",
    "Offset",
    "Producer",
    "ProducerFenced",
    "Retention",
    "Timestamp",
    "TopicAdmin",
    "TopicMissing",
    "TopicNames",
    "TopicRecord",
    "TopicResult",
    "TopicSpec",
    "TransactionalProducer",
    "check_reachable",
    "committed_offsets",
    "configure_client_logs",
    "connection_from_env",
    "dlq_topic_for",
    "end_offsets",
    "ensure_topics",
    "iter_topic",
    "kafka_errors",
    "ownership_topic_specs",
    "translate",
    "validate_topic_name",
]
