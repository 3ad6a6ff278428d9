"""A three-broker ``scripts/kafka-local start --brokers 3`` cluster for the
cluster and fault tests (``@pytest.mark.faults``: ``make test-faults``).

One cluster per session (starting three JVMs on a busy 2-core machine takes a
minute or more); a test that kills or stops a node must start it again before
it ends, which :class:`LocalCluster.ensure_all_up` checks.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
KAFKA_LOCAL = REPO_ROOT / "scripts" / "kafka-local"
_START_TIMEOUT_S = 600

__all__ = ["LocalCluster", "kafka_cluster"]


class LocalCluster:
    """Drives one ``scripts/kafka-local`` cluster state directory."""

    def __init__(self, state_dir: Path, brokers: int = 3) -> None:
        self.state_dir = state_dir
        self.brokers = brokers
        self.bootstrap = ""

    def run(self, *args: str, timeout: float = _START_TIMEOUT_S) -> str:
        """``scripts/kafka-local ARGS`` on this cluster's state dir; stdout, or a test failure."""
        env = dict(os.environ)
        env["FENCEWATCH_KAFKA_DIR"] = str(self.state_dir)
        env["FENCEWATCH_KAFKA_OWNER_PID"] = str(os.getpid())
        done = subprocess.run(
            [str(KAFKA_LOCAL), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise AssertionError(
                f"scripts/kafka-local {' '.join(args)} failed ({done.returncode}):\n"
                f"{done.stderr[-4000:]}"
            )
        return done.stdout.strip()

    def start(self) -> str:
        out = self.run("start", "--brokers", str(self.brokers)).splitlines()[-1]
        if self.bootstrap and out != self.bootstrap:
            raise AssertionError(f"cluster came back at {out}, not {self.bootstrap}")
        self.bootstrap = out
        return out

    def stop(self) -> None:
        self.run("stop", timeout=180)

    def broker(self, node: int, action: str) -> str:
        """``broker N kill|stop|start|pid``."""
        return self.run("broker", str(node), action)

    def port(self, node: int) -> int:
        return int((self.state_dir / f"node{node}" / "port").read_text().strip())

    def node_of_port(self, port: int) -> int:
        for node in range(1, self.brokers + 1):
            if self.port(node) == port:
                return node
        raise AssertionError(f"no node listens on {port}")

    def is_running(self, node: int) -> bool:
        pid_file = self.state_dir / f"node{node}" / "pid"
        if not pid_file.exists():
            return False
        return Path(f"/proc/{pid_file.read_text().strip()}").exists()

    def ensure_all_up(self) -> None:
        """Start any node a test left down (and fail if one cannot come back)."""
        for node in range(1, self.brokers + 1):
            if not self.is_running(node):
                self.broker(node, "start")


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A private three-node KRaft cluster for the session, stopped after it."""
    if shutil.which("java") is None:
        pytest.fail("the cluster tests need Java 17+ for scripts/kafka-local", pytrace=False)
    cluster = LocalCluster(tmp_path_factory.mktemp("kafka-cluster"))
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
