"""`fencewatch topics create` and the topic admin adapter."""

from __future__ import annotations

import uuid

import pytest

from streams.cli import main
from streams.kafka import (
    DEFAULT_EVENTS_RETENTION_MS,
    BrokerUnreachable,
    Retention,
    TopicAdmin,
    TopicNames,
    TopicSpec,
    ownership_topic_specs,
)
from streams.kafka.connection import KafkaConnection
from tests.support.worker import free_port


def _names() -> tuple[str, str, str, str]:
    tag = uuid.uuid4().hex[:10]
    return f"ev-{tag}", f"fi-{tag}", f"ev-{tag}.dlq", f"st-{tag}"


@pytest.mark.kafka
def test_topics_create_is_idempotent(
    kafka_bootstrap: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`topics create` run twice succeeds both times; the topics have the requested partitions."""
    events, findings, dlq, status = _names()
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
        "--status-topic",
        status,
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
            "created", status, "partitions=4",
        ]  # fmt: skip
        assert second.split() == [
            "exists", events, "partitions=4",
            "exists", findings, "partitions=4",
            "exists", dlq, "partitions=4",
            "exists", status, "partitions=4",
        ]  # fmt: skip
        admin = TopicAdmin(KafkaConnection(kafka_bootstrap))
        assert admin.partitions([events, findings, dlq, status]) == dict.fromkeys(
            [events, findings, dlq, status], 4
        )
    finally:
        TopicAdmin(KafkaConnection(kafka_bootstrap)).delete([events, findings, dlq, status])


@pytest.mark.kafka
def test_existing_topic_with_other_partition_count_is_left_unchanged(
    kafka_bootstrap: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An existing topic keeps its partition count; the difference is reported, not 'fixed'."""
    events, findings, dlq, status_topic = _names()
    admin = TopicAdmin(KafkaConnection(kafka_bootstrap))
    admin.ensure([TopicSpec(events, 2)])
    try:
        status = main(
            [
                "topics", "create", "--bootstrap-servers", kafka_bootstrap, "--partitions", "5",
                "--events-topic", events, "--findings-topic", findings,
                "--status-topic", status_topic,
            ]
        )  # fmt: skip
        captured = capsys.readouterr()
        assert status == 0
        assert f"exists   {events} partitions=2" in captured.out
        assert f"warning: {events} has 2 partitions, 5 requested" in captured.err
        assert admin.partitions([events, findings, dlq]) == {events: 2, findings: 5, dlq: 5}
    finally:
        admin.delete([events, findings, dlq, status_topic])


@pytest.mark.kafka
def test_created_topics_carry_the_documented_configs(kafka_bootstrap: str) -> None:
    """Events get delete cleanup with the configured retention; findings are not
    compacted; the status topic is (SPEC §8)."""
    events, findings, dlq, status = _names()
    admin = TopicAdmin(KafkaConnection(kafka_bootstrap))
    specs = ownership_topic_specs(TopicNames(events, findings, status=status), partitions=1)
    admin.ensure(specs)
    try:
        described = _configs(kafka_bootstrap, [events, findings, status])
        assert described[events]["retention.ms"] == str(DEFAULT_EVENTS_RETENTION_MS)
        assert described[events]["cleanup.policy"] == "delete"
        assert described[findings]["cleanup.policy"] == "delete"
        assert described[status]["cleanup.policy"] == "compact"
    finally:
        admin.delete([events, findings, dlq, status])


def _configs(bootstrap: str, topics: list[str]) -> dict[str, dict[str, str]]:
    from confluent_kafka.admin import AdminClient, ConfigResource

    client = AdminClient({"bootstrap.servers": bootstrap})
    resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics]
    return {
        r.name: {k: v.value for k, v in f.result(30).items()}
        for r, f in client.describe_configs(resources).items()
    }


@pytest.mark.kafka
def test_run_and_topics_create_make_the_same_topics(kafka_bootstrap: str) -> None:
    """`run`'s topic creation and `topics create` give identical partitions and configs
    (issue 9 item 5: run made 6 partitions without retention)."""
    from streams.live.prepare import ensure_topics as run_ensure
    from streams.live.settings import settings_from_env

    by_cli, by_run = _names(), _names()
    try:
        assert main(
            ["topics", "create", "--bootstrap-servers", kafka_bootstrap,
             "--events-topic", by_cli[0], "--findings-topic", by_cli[1],
             "--status-topic", by_cli[3]]
        ) == 0  # fmt: skip
        settings = settings_from_env(
            {"FENCEWATCH_BOOTSTRAP_SERVERS": kafka_bootstrap},
            {"events_topic": by_run[0], "findings_topic": by_run[1], "status_topic": by_run[3]},
        )
        assert run_ensure(settings)[0] == 3
        cli_conf = _configs(kafka_bootstrap, list(by_cli))
        run_conf = _configs(kafka_bootstrap, list(by_run))
        admin = TopicAdmin(KafkaConnection(kafka_bootstrap))
        assert admin.partitions(by_cli) == dict.fromkeys(by_cli, 3)
        assert admin.partitions(by_run) == dict.fromkeys(by_run, 3)
        for a, b in zip(by_cli, by_run, strict=True):
            for key in ("cleanup.policy", "retention.ms"):
                assert cli_conf[a][key] == run_conf[b][key], (a, key)
    finally:
        TopicAdmin(KafkaConnection(kafka_bootstrap)).delete([*by_cli, *by_run])


def test_unreachable_broker_is_reported_as_broker_unreachable() -> None:
    """Making a TopicAdmin touches nothing; its probe reports a refused connection at
    once as BrokerUnreachable naming address and cause."""
    port = free_port()  # nothing listens on it
    admin = TopicAdmin(KafkaConnection(f"127.0.0.1:{port}"))
    with pytest.raises(BrokerUnreachable) as raised:
        admin.probe()
    assert raised.value.retriable
    assert str(raised.value) == f"cannot connect to broker 127.0.0.1:{port}: connection refused"


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
        ownership_topic_specs(retention=Retention(events_ms=0))
    with pytest.raises(ValueError, match="must differ"):
        ownership_topic_specs(TopicNames("same", "same"))
    with pytest.raises(ValueError, match="retention"):
        ownership_topic_specs(retention=Retention(dlq_ms=-2))


def test_dlq_defaults_to_events_topic_dot_dlq() -> None:
    """Without --dlq-topic the dead-letter topic is `<events>.dlq` (SPEC §7)."""
    specs = ownership_topic_specs(TopicNames(events="orders.events"))
    assert [s.name for s in specs] == [
        "orders.events",
        "ownership.findings",
        "orders.events.dlq",
        "ownership.status",
    ]


def test_usage_error_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    """A partition count of 0 is a usage error (exit 2) with a message, before any connection."""
    status = main(["topics", "create", "--bootstrap-servers", "127.0.0.1:1", "--partitions", "0"])
    assert status == 2
    assert "partitions" in capsys.readouterr().err


def test_three_replicas_get_min_insync_replicas_two_and_fewer_keep_the_broker_default() -> None:
    """Replication 3 puts min.insync.replicas=2 on every topic; 1 and 2 (and the
    broker default, -1) leave the broker's own min ISR."""
    for spec in ownership_topic_specs(replication_factor=3):
        assert spec.replication_factor == 3
        assert spec.config["min.insync.replicas"] == "2", spec.name
    for rf in (-1, 1, 2):
        specs = ownership_topic_specs(replication_factor=rf)
        assert all("min.insync.replicas" not in s.config for s in specs), rf
