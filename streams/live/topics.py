"""Make sure the live processor's topics exist, and learn the input's
partition count (the state table must be partitioned exactly like it).

confluent-kafka's AdminClient is used here because it reports per-topic
errors; its exceptions are translated to :class:`streams.errors.BrokerError`.
"""

from __future__ import annotations

from typing import Any

from streams.errors import BrokerError
from streams.live.settings import KafkaSecurity, LiveSettings

__all__ = ["DEFAULT_PARTITIONS", "client_config", "ensure_topics"]

#: Partitions for an events topic that does not exist yet.
DEFAULT_PARTITIONS = 6


def client_config(bootstrap: str, security: KafkaSecurity | None = None) -> dict[str, Any]:
    """librdkafka settings for ``bootstrap`` and ``security``."""
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap}
    sec = security or KafkaSecurity()
    conf["security.protocol"] = sec.protocol
    optional = {
        "sasl.mechanism": sec.sasl_mechanism,
        "sasl.username": sec.sasl_username,
        "sasl.password": sec.sasl_password,
        "ssl.ca.location": sec.ssl_cafile,
        "ssl.certificate.location": sec.ssl_certfile,
        "ssl.key.location": sec.ssl_keyfile,
        "ssl.key.password": sec.ssl_key_password,
    }
    conf.update({k: v for k, v in optional.items() if v is not None})
    return conf


def ensure_topics(settings: LiveSettings, *, timeout: float = 15.0) -> int:
    """Create the events, findings and dead-letter topics when missing and
    return the events topic's partition count.

    A missing events topic gets ``settings.partitions`` (or
    :data:`DEFAULT_PARTITIONS`); findings and dead-letter topics get the same
    count so a key's records stay in one partition end to end."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    admin = AdminClient(client_config(settings.bootstrap_servers, settings.security))
    try:
        meta = admin.list_topics(timeout=timeout)
        existing = meta.topics
        if settings.events_topic in existing:
            partitions = len(existing[settings.events_topic].partitions)
            if settings.partitions is not None and settings.partitions != partitions:
                raise BrokerError(
                    f"topic {settings.events_topic} has {partitions} partitions, "
                    f"settings say {settings.partitions}",
                    code="PARTITIONS_MISMATCH",
                )
        else:
            partitions = settings.partitions or DEFAULT_PARTITIONS
        wanted = [
            NewTopic(name, num_partitions=partitions, replication_factor=settings.replication)
            for name in (settings.events_topic, settings.findings_topic, settings.dlq)
            if name not in existing
        ]
        if wanted:
            for name, fut in admin.create_topics(wanted, request_timeout=timeout).items():
                try:
                    fut.result(timeout)
                except KafkaException as exc:
                    err = exc.args[0]
                    if err.name() != "TOPIC_ALREADY_EXISTS":
                        raise BrokerError(
                            f"cannot create topic {name}: {err.str()}",
                            code=err.name(),
                            retriable=err.retriable(),
                        ) from None
    except KafkaException as exc:
        err = exc.args[0]
        raise BrokerError(
            f"broker {settings.bootstrap_servers}: {err.str()}",
            code=err.name(),
            retriable=err.retriable(),
        ) from None
    return partitions
