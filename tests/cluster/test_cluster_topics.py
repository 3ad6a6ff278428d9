"""On the three-broker cluster, `fencewatch topics create --replication 3` and
the live processor's topic creation (`run --replication 3`) make every topic
with 3 replicas and min.insync.replicas=2 set on the topic itself."""

from __future__ import annotations

import logging
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource

from streams.kafka.connection import KafkaConnection
from streams.kafka.topics import TopicNames
from streams.live.prepare import ensure_topics, prepare
from streams.live.settings import LiveSettings
from tests.cluster.conftest import LocalCluster

pytestmark = [pytest.mark.kafka, pytest.mark.faults]


def _check_replicated(bootstrap: str, topics: list[str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    meta = admin.list_topics(timeout=30)
    for name in topics:
        parts = meta.topics[name].partitions.values()
        assert parts and all(len(p.replicas) == 3 for p in parts), name
    resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics]
    for res, fut in admin.describe_configs(resources).items():
        entry = fut.result(30)["min.insync.replicas"]
        assert entry.value == "2", res.name
        # Set on the topic, not inherited from this cluster's broker default.
        assert entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value, res.name


def test_topics_create_replication_3_sets_min_insync_replicas_2(
    kafka_cluster: LocalCluster,
) -> None:
    """`fencewatch topics create --replication 3`: four topics, 3 replicas, min ISR 2 each."""
    base = f"cl-{uuid.uuid4().hex[:8]}"
    names = TopicNames(f"{base}.events", f"{base}.findings", None, f"{base}.status")
    done = subprocess.run(
        [
            sys.executable, "-m", "streams", "topics", "create",
            "--bootstrap-servers", kafka_cluster.bootstrap,
            "--replication", "3", "--partitions", "2",
            "--events-topic", names.events, "--findings-topic", names.findings,
            "--status-topic", names.status,
        ],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    _check_replicated(kafka_cluster.bootstrap, names.all())


def test_run_replication_3_creates_its_topics_with_min_insync_replicas_2(
    kafka_cluster: LocalCluster,
) -> None:
    """The live processor's topic creation with replication 3 sets min ISR 2 too."""
    base = f"cl-{uuid.uuid4().hex[:8]}"
    settings = LiveSettings(
        connection=KafkaConnection(kafka_cluster.bootstrap),
        events_topic=f"{base}.events",
        findings_topic=f"{base}.findings",
        status_topic=f"{base}.status",
        replication=3,
    )
    assert ensure_topics(settings)[0] >= 1
    _check_replicated(kafka_cluster.bootstrap, settings.topic_names.all())


@pytest.mark.parametrize("replication", [1, 3])
def test_a_start_with_one_replica_on_a_cluster_warns_once(
    kafka_cluster: LocalCluster,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    replication: int,
) -> None:
    """A start preparing with replication 1 on the three-broker cluster logs one
    warning naming --replication 3 (a broker down drops transaction markers);
    with replication 3 it logs none."""
    base = f"cl-{uuid.uuid4().hex[:8]}"
    settings = LiveSettings(
        connection=KafkaConnection(kafka_cluster.bootstrap),
        events_topic=f"{base}.events",
        findings_topic=f"{base}.findings",
        status_topic=f"{base}.status",
        replication=replication,
        data_dir=str(tmp_path / "data"),
    )
    with caplog.at_level(logging.WARNING, logger="streams.live.prepare"):
        prepare(settings)
    warned = [r.getMessage() for r in caplog.records if r.name == "streams.live.prepare"]
    if replication == 1:
        assert len(warned) == 1
        assert "replication 1 on a cluster of 3 brokers" in warned[0]
        assert "--replication 3" in warned[0]
    else:
        assert warned == []
