"""The findings follower (`findings --follow --group --webhook`) across a
SIGKILL of the leader of a findings partition on the three-broker cluster:
every finding revision is delivered, each finding's revisions in order, and
the follower is still running afterwards."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cluster.conftest import LocalCluster
from tests.cluster.test_cluster_faults import _leader
from tests.conftest import REPO_ROOT
from tests.faults.test_broker_restart_midstream import topic_factory
from tests.findings.conftest import produce_findings, synthetic_findings
from tests.findings.receiver import webhook_receiver

pytestmark = [pytest.mark.kafka, pytest.mark.faults]


@pytest.mark.timeout(600)
def test_follower_delivers_every_revision_in_order_across_a_leader_kill(
    kafka_cluster: LocalCluster, tmp_path: Path
) -> None:
    """600 revisions on 3 partitions; the leader of partition 0 is SIGKILLed
    once 100 were posted, then brought back: all 600 arrive, per finding
    revision 1 before revision 2, and the follower keeps running."""
    kafka_cluster.ensure_all_up()
    findings = synthetic_findings(300, revisions=2)
    topic = topic_factory(kafka_cluster.bootstrap)(3, prefix="cluster-follow")
    produce_findings(kafka_cluster.bootstrap, topic, findings)
    group = f"cluster-follow-{os.getpid()}-{time.monotonic_ns()}"
    with webhook_receiver() as rx:
        rx.delay_s = 0.12  # stretches the stream so the kill lands mid-way (16 posts in flight)
        cmd = [
            sys.executable, "-m", "streams", "findings",
            "--bootstrap-servers", kafka_cluster.bootstrap, "--topic", topic,
            "--follow", "--group", group, "--format", "jsonl",
            "--webhook", rx.url, "--dead-letter", str(tmp_path / "dead.jsonl"),
        ]  # fmt: skip
        with open(tmp_path / "follower.log", "wb") as log:
            follower = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=log)
            try:
                rx.wait_for(100, timeout=120, sender=follower)
                node = _leader(kafka_cluster, topic, 0)
                kafka_cluster.broker(node, "kill")
                assert rx.count() < len(findings), "the kill was not mid-stream"
                kafka_cluster.broker(node, "start")
                rx.wait_for(len(findings), timeout=300, sender=follower)
                assert follower.poll() is None, (tmp_path / "follower.log").read_text()
            finally:
                follower.terminate()
                follower.wait(30)
        keys = rx.keys()
    assert set(keys) == {f"{f.finding_id}/{f.revision}" for f in findings}
    revisions: dict[str, list[int]] = {}
    for key in keys:
        fid, rev = key.rsplit("/", 1)
        revisions.setdefault(fid, []).append(int(rev))
    assert all(revs == sorted(revs) for revs in revisions.values())
    assert not (tmp_path / "dead.jsonl").exists() or (tmp_path / "dead.jsonl").read_text() == ""
