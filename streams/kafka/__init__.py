"""Kafka adapters (confluent-kafka based). Client exceptions stop here and
leave as :class:`streams.errors.BrokerError`."""

from __future__ import annotations

from streams.kafka.admin import (
    DEFAULT_DLQ_RETENTION_MS,
    DEFAULT_EVENTS_RETENTION_MS,
    DEFAULT_FINDINGS_RETENTION_MS,
    DEFAULT_PARTITIONS,
    TopicAdmin,
    TopicNames,
    TopicResult,
    TopicSpec,
    ownership_topic_specs,
    validate_topic_name,
)

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
