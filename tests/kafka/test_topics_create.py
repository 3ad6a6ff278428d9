"""`fencewatch topics create` and the topic admin adapter."""

from __future__ import annotations

import socket
import uuid

import pytest

from streams.cli import main
from streams.errors import BrokerError
from streams.kafka.admin import (
    DEFAULT_EVENTS_RETENTION_MS,
    TopicAdmin,
    TopicNames,
    TopicSpec,
    ownership_topic_specs,
)


def _names() -> tuple[str, str, str]:
    tag = uuid.uuid4().hex[:10]
    return f"ev-{tag}", f"fi-{tag}", f"ev-{tag}.dlq"


@pytest.mark.kafka
def test_topics_create_is_idempotent(
    kafka_bootstrap: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`topics create` run twice succeeds both times; the topics have the requested partitions."""
    events, findings, dlq = _names()
    argv = [
        "topics",
        "create",
        "--bootstrap-servers",
        kafka_bootstrap,
        "--partitions",
        "4",
        "--events-topic",
        events,
        "--findings-topic",
        findings,
    ]
    try:
        assert main(argv) == 0
        first = capsys.readouterr().out
        assert main(argv) == 0
        second = capsys.readouterr().out

        assert first.split() == [
            "created", events, "partitions=4",
            "created", findings, "partitions=4",
            "created", dlq, "partitions=4",
        ]  # fmt: skip
        assert second.split() == [
            "exists", events, "partitions=4",
            "exists", findings, "partitions=4",
            "exists", dlq, "partitions=4",
        ]  # fmt: skip
        admin = TopicAdmin(kafka_bootstrap)
        assert admin.partitions([events, findings, dlq]) == {events: 4, findings: 4, dlq: 4}
    finally:
        TopicAdmin(kafka_bootstrap).delete([events, findings, dlq])


@pytest.mark.kafka
def test_existing_topic_with_other_partition_count_is_left_unchanged(
    kafka_bootstrap: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An existing topic keeps its partition count; the difference is reported, not 'fixed'."""
    events, findings, dlq = _names()
    admin = TopicAdmin(kafka_bootstrap)
    admin.ensure([TopicSpec(events, 2)])
    try:
        status = main(
            [
                "topics", "create", "--bootstrap-servers", kafka_bootstrap, "--partitions", "5",
                "--events-topic", events, "--findings-topic", findings,
            ]
        )  # fmt: skip
        captured = capsys.readouterr()
        assert status == 0
        assert f"exists   {events} partitions=2" in captured.out
        assert f"warning: {events} has 2 partitions, 5 requested" in captured.err
        assert admin.partitions([events, findings, dlq]) == {events: 2, findings: 5, dlq: 5}
    finally:
        admin.delete([events, findings, dlq])


@pytest.mark.kafka
def test_created_topics_carry_the_documented_configs(kafka_bootstrap: str) -> None:
    """Events get delete cleanup with the configured retention; findings are not compacted."""
    from confluent_kafka.admin import AdminClient, ConfigResource

    events, findings, dlq = _names()
    admin = TopicAdmin(kafka_bootstrap)
    specs = ownership_topic_specs(TopicNames(events, findings), partitions=1)
    admin.ensure(specs)
    try:
        client = AdminClient({"bootstrap.servers": kafka_bootstrap})
        resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in (events, findings)]
        described = {r.name: f.result(30) for r, f in client.describe_configs(resources).items()}
        assert described[events]["retention.ms"].value == str(DEFAULT_EVENTS_RETENTION_MS)
        assert described[events]["cleanup.policy"].value == "delete"
        assert described[findings]["cleanup.policy"].value == "delete"
    finally:
        admin.delete([events, findings, dlq])


def test_unreachable_broker_is_reported_as_broker_error() -> None:
    """A broker that does not answer surfaces as our BrokerError, not a client exception."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]  # bound but not listening: connections are refused
        admin = TopicAdmin(f"127.0.0.1:{closed_port}", timeout_s=2.0)
        with pytest.raises(BrokerError) as raised:
            admin.ensure([TopicSpec("never-created", 1)])
    assert raised.value.retriable


def test_topic_specs_reject_bad_input() -> None:
    """Invalid names, partition counts, retention and clashing names are refused up front."""
    with pytest.raises(ValueError, match="invalid topic name"):
        TopicSpec("bad name", 1)
    with pytest.raises(ValueError, match="invalid topic name"):
        TopicSpec("..", 1)
    with pytest.raises(ValueError, match="partitions"):
        TopicSpec("ok", 0)
    with pytest.raises(ValueError, match="replication"):
        TopicSpec("ok", 1, replication_factor=0)
    with pytest.raises(ValueError, match="retention"):
        ownership_topic_specs(events_retention_ms=0)
    with pytest.raises(ValueError, match="must differ"):
        ownership_topic_specs(TopicNames("same", "same"))


def test_dlq_defaults_to_events_topic_dot_dlq() -> None:
    """Without --dlq-topic the dead-letter topic is `<events>.dlq` (SPEC §7)."""
    specs = ownership_topic_specs(TopicNames(events="orders.events"))
    assert [s.name for s in specs] == ["orders.events", "ownership.findings", "orders.events.dlq"]


def test_usage_error_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    """A partition count of 0 is a usage error (exit 2) with a message, before any connection."""
    status = main(["topics", "create", "--bootstrap-servers", "127.0.0.1:1", "--partitions", "0"])
    assert status == 2
    assert "partitions" in capsys.readouterr().err
