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
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import LocalKafka

__all__ = ["LocalCluster", "ProcessIsolation", "kafka_cluster"]


class LocalCluster(LocalKafka):
    """Drives one ``scripts/kafka-local start --brokers N`` cluster state
    directory (tests/conftest.py's LocalKafka, with one node per broker)."""

    def __init__(self, state_dir: Path, brokers: int = 3) -> None:
        super().__init__(state_dir, brokers)

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


class ProcessIsolation:
    """Cuts one local process (a ``fencewatch run`` worker) off the network the
    way ``scripts/kafka-local isolate`` cuts a broker off: every packet it
    sends on loopback is dropped, from the sockets it has now by their local
    ports, from sockets it opens later by a cgroup of its own (iptables
    matches a socket's cgroup as of its creation). Root only; nothing but
    that process's loopback traffic is affected, and :meth:`heal` undoes it."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        mounts = Path("/proc/mounts").read_text().splitlines()
        roots = [line.split()[1] for line in mounts if line.split()[2] == "cgroup2"]
        if os.geteuid() != 0 or not roots or shutil.which("iptables") is None:
            pytest.fail("isolating a process needs root, iptables and cgroup2", pytrace=False)
        self.root = Path(roots[0])
        self.rel = f"fencewatch-test-{uuid.uuid4().hex[:10]}"
        self.isolated = False
        self.matches: list[list[str]] = []

    def _rule(self, op: str, match: list[str]) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            ["iptables", "-w", "5", op, "OUTPUT", "-o", "lo", *match, "-j", "DROP"],
            capture_output=True,
            check=False,
            timeout=30,
        )

    def _ports(self) -> set[int]:
        inodes = set()
        for fd in Path(f"/proc/{self.pid}/fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
        ports = set()
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            for row in Path(table).read_text().splitlines()[1:]:
                cols = row.split()
                if len(cols) > 9 and cols[9] in inodes:
                    ports.add(int(cols[1].rsplit(":", 1)[1], 16))
        return ports

    def isolate(self) -> None:
        (self.root / self.rel).mkdir()
        (self.root / self.rel / "cgroup.procs").write_text(f"{self.pid}\n")
        self.isolated = True
        self.matches = [["-m", "cgroup", "--path", self.rel]]
        self.matches += [["-p", "tcp", "--sport", str(p)] for p in sorted(self._ports())]
        for match in self.matches:
            done = self._rule("-I", match)
            assert done.returncode == 0, done.stderr

    def heal(self) -> None:
        if not self.isolated:
            return
        for match in self.matches:
            while self._rule("-C", match).returncode == 0:
                self._rule("-D", match)
        procs = self.root / self.rel / "cgroup.procs"
        for pid in procs.read_text().split():
            (self.root / "cgroup.procs").write_text(f"{pid}\n")
        (self.root / self.rel).rmdir()
        self.isolated = False
