"""Shared test fixtures: a real Kafka broker and unique topics.

Where the broker comes from is chosen with ``FENCEWATCH_TEST_BROKER``:

- ``local`` (the default): ``KAFKA_BOOTSTRAP`` when set (``make test`` sets it
  to the broker it started with ``scripts/kafka-local``), else
  ``scripts/kafka-local`` started for this session in a temporary state
  directory and stopped at the end;
- ``testcontainers``: an ``apache/kafka`` container (the settings of
  docker-compose.yml) started with testcontainers on the Docker engine; the
  image must be on the engine already (``scripts/docker-local images``): a
  missing one stops the session with one line, no pull is attempted.
  Containers carry the label ``org.fencewatch.tests`` and are removed by it
  when the session ends, whatever happened (the reaper, Ryuk, is disabled: its
  image cannot be pulled everywhere);
- ``external``: ``KAFKA_BOOTSTRAP`` must name a cluster (bring your own).

If the chosen broker does not work the fixture fails the test with the reason
(or, for a missing tool or image, stops the session): Kafka tests are never
skipped.

``restartable_kafka`` is a separate, module-scoped ``scripts/kafka-local``
broker with ``restart()``, ``stop()``, ``start()`` and ``kill9()`` for
recovery tests (the address stays the same across restarts).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from streams.kafka.admin import TopicAdmin, TopicSpec
from streams.kafka.connection import KafkaConnection
from tests.support.installed import installed  # noqa: F401  (the compiled wheel, installed)

REPO_ROOT = Path(__file__).resolve().parent.parent
KAFKA_LOCAL = REPO_ROOT / "scripts" / "kafka-local"
KAFKA_VERSION = (REPO_ROOT / "scripts" / "kafka-version").read_text().strip()
# First start may download ~45 MB of jars (scripts/kafka-jars, with curl).
_LOCAL_START_TIMEOUT_S = 600
_READY_TIMEOUT_S = 60.0

# tests/containers builds images and runs the compose stack: only `make
# test-containers` (which makes Docker available first) collects it.
collect_ignore = [] if os.environ.get("FENCEWATCH_TEST_CONTAINERS") == "1" else ["containers"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # A test that uses the broker is a Kafka test whether or not its author
    # remembered the marker, so `-m "not kafka"` really leaves Kafka out.
    for item in items:
        names = getattr(item, "fixturenames", ())
        if "kafka_bootstrap" in names or "restartable_kafka" in names:
            item.add_marker(pytest.mark.kafka)


def _wait_until_answers(bootstrap: str, timeout_s: float) -> str | None:
    """None when a metadata request succeeds within the timeout, else the error."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        meta = admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        return str(exc)
    return None if meta.brokers else "metadata lists no broker"


BROKER_CHOICES = ("local", "testcontainers", "external")
# Every container a test session starts carries this label, with the session's id.
CONTAINER_LABEL = "org.fencewatch.tests"


def _broker_choice() -> str:
    choice = os.environ.get("FENCEWATCH_TEST_BROKER", "").strip() or "local"
    if choice not in BROKER_CHOICES:
        pytest.exit(
            f"FENCEWATCH_TEST_BROKER={choice!r}: expected one of {', '.join(BROKER_CHOICES)}",
            returncode=4,
        )
    return choice


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _compose_kafka_env(port: int) -> dict[str, str]:
    """The broker settings of docker-compose.yml (kept in step with
    scripts/kafka-local by tests/kafka/test_compose.py), with the HOST listener
    (container port 29092) advertised on the host port. The broker reaches
    itself (transactions) on PLAINTEXT, inside the container, as in compose."""
    import yaml

    compose = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())
    env = {k: str(v) for k, v in compose["services"]["kafka"]["environment"].items()}
    env.update(
        {
            "KAFKA_CONTROLLER_QUORUM_VOTERS": "1@localhost:9093",
            "KAFKA_ADVERTISED_LISTENERS": f"PLAINTEXT://localhost:9092,HOST://127.0.0.1:{port}",
        }
    )
    env.pop("KAFKA_LOG_DIRS", None)  # no volume: the container's default path
    return env


def _docker_client() -> Any:
    """A docker SDK client on an engine that answers, or the session stops with why."""
    try:
        import docker
    except ImportError:
        pytest.exit(
            "FENCEWATCH_TEST_BROKER=testcontainers needs the testcontainers package "
            "(a dev dependency: make venv)",
            returncode=4,
        )
    try:
        client = docker.from_env(timeout=10)
        client.ping()
    except Exception as exc:  # any failure means "no usable engine"
        pytest.exit(
            f"FENCEWATCH_TEST_BROKER=testcontainers: no Docker engine answers ({exc}); "
            "start one with scripts/docker-local engine",
            returncode=4,
        )
    return client


def remove_labelled_containers(session_id: str | None = None) -> int:
    """Force-remove the containers test sessions started (this session's only,
    when ``session_id`` is given); returns how many."""
    import docker

    label = CONTAINER_LABEL if session_id is None else f"{CONTAINER_LABEL}={session_id}"
    client = docker.from_env(timeout=30)
    containers = client.containers.list(all=True, filters={"label": label})
    for container in containers:
        with contextlib.suppress(docker.errors.NotFound):
            container.remove(force=True, v=True)
    return len(containers)


_SESSION_ID = uuid.uuid4().hex[:12]
# The compose file's listener for clients outside the container network.
_CONTAINER_HOST_PORT = 29092
_containers_started = False


def _container_broker() -> Iterator[str]:
    """A testcontainers ``apache/kafka`` broker for the session."""
    global _containers_started
    # The reaper's image cannot be pulled here; the label below replaces it. The
    # engine is reached the way this host sees it, even inside a container.
    os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
    os.environ.setdefault("TESTCONTAINERS_CONNECTION_MODE", "docker_host")
    client = _docker_client()
    image = f"apache/kafka:{KAFKA_VERSION}"
    import docker

    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        pytest.exit(
            f"FENCEWATCH_TEST_BROKER=testcontainers: the image {image} is not on the Docker "
            "engine; pull it or build a stand-in with scripts/docker-local images",
            returncode=4,
        )
    from testcontainers.core.container import DockerContainer

    # A fixed host port, so the advertised listener is right from the start.
    port = _free_port()
    container = DockerContainer(image, labels={CONTAINER_LABEL: _SESSION_ID})
    container = container.with_bind_ports(_CONTAINER_HOST_PORT, port)
    for name, value in _compose_kafka_env(port).items():
        container = container.with_env(name, value)
    _containers_started = True
    with container:
        bootstrap = f"127.0.0.1:{port}"
        error = _wait_until_answers(bootstrap, 240.0)
        if error is not None:
            pytest.fail(f"Kafka container did not answer at {bootstrap}: {error}", pytrace=False)
        yield bootstrap


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # Without the reaper, a container left by a failed or interrupted teardown
    # would outlive the session: remove whatever this session labelled.
    if _containers_started:
        with contextlib.suppress(Exception):
            remove_labelled_containers(_SESSION_ID)


def _local_broker(state_dir: Path) -> Iterator[str]:
    if shutil.which("java") is None:
        pytest.fail(
            "no Kafka broker: KAFKA_BOOTSTRAP is unset and Java is missing for "
            "scripts/kafka-local (install Java 17+, run `make test`, or choose "
            "FENCEWATCH_TEST_BROKER=testcontainers)",
            pytrace=False,
        )
    env = dict(os.environ)
    env["FENCEWATCH_KAFKA_DIR"] = str(state_dir)
    # The script's watchdog stops the broker if this pytest dies without teardown.
    env["FENCEWATCH_KAFKA_OWNER_PID"] = str(os.getpid())
    try:
        started = subprocess.run(
            [str(KAFKA_LOCAL), "start"],
            env=env,
            capture_output=True,
            text=True,
            timeout=_LOCAL_START_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        subprocess.run([str(KAFKA_LOCAL), "stop"], env=env, capture_output=True, check=False)
        pytest.fail(
            f"scripts/kafka-local start did not finish in {_LOCAL_START_TIMEOUT_S}s", pytrace=False
        )
    if started.returncode != 0:
        pytest.fail(
            f"scripts/kafka-local start failed ({started.returncode}):\n{started.stderr[-4000:]}",
            pytrace=False,
        )
    try:
        yield started.stdout.strip().splitlines()[-1]
    finally:
        subprocess.run(
            [str(KAFKA_LOCAL), "stop"], env=env, capture_output=True, timeout=120, check=False
        )


class LocalKafka:
    """A private ``scripts/kafka-local`` broker (or, with ``brokers``, a
    cluster: tests/cluster) that a test may stop, restart or kill -9
    (recovery tests); the bootstrap address survives restarts."""

    def __init__(self, state_dir: Path, brokers: int = 1) -> None:
        self.state_dir = state_dir
        self.brokers = brokers
        self.bootstrap = ""

    def run(self, *args: str, timeout: float = _LOCAL_START_TIMEOUT_S) -> str:
        """``scripts/kafka-local ARGS`` on this state dir; stdout, or a test failure."""
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
        args = ("start",) if self.brokers == 1 else ("start", "--brokers", str(self.brokers))
        out = self.run(*args).splitlines()[-1]
        if self.bootstrap and out != self.bootstrap:
            raise AssertionError(f"the broker came back at {out}, not {self.bootstrap}")
        self.bootstrap = out
        return out

    def stop(self) -> None:
        self.run("stop", timeout=120 + 60 * (self.brokers - 1))

    def restart(self) -> str:
        """Clean stop (SIGTERM) and start on the same data directory and port."""
        self.stop()
        return self.start()

    def kill9(self) -> None:
        """SIGKILL the broker: no clean shutdown, as in a crash."""
        pid = int((self.state_dir / "pid").read_text().strip())
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.1)


@pytest.fixture(scope="module")
def restartable_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafka]:
    """A broker private to this test module (started), for stop/restart/kill -9
    tests; a test that stops it must start it again. Needs Java even when
    KAFKA_BOOTSTRAP is set; fails, never skips, without it."""
    if shutil.which("java") is None:
        pytest.fail("restartable_kafka needs Java 17+ for scripts/kafka-local", pytrace=False)
    broker = LocalKafka(tmp_path_factory.mktemp("kafka-restartable"))
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Bootstrap address of a real Kafka broker for the whole session (FENCEWATCH_TEST_BROKER)."""
    choice = _broker_choice()
    if choice == "testcontainers":
        yield from _container_broker()
        return
    given = os.environ.get("KAFKA_BOOTSTRAP", "").strip()
    if choice == "external" and not given:
        pytest.exit("FENCEWATCH_TEST_BROKER=external needs KAFKA_BOOTSTRAP=host:port", returncode=4)
    if given:
        error = _wait_until_answers(given, _READY_TIMEOUT_S)
        if error is not None:
            pytest.fail(f"KAFKA_BOOTSTRAP={given} does not answer: {error}", pytrace=False)
        yield given
        return
    yield from _local_broker(tmp_path_factory.mktemp("kafka"))


@pytest.fixture(scope="session")
def kafka_admin(kafka_bootstrap: str) -> TopicAdmin:
    """A TopicAdmin on the session broker."""
    return TopicAdmin(KafkaConnection(kafka_bootstrap), timeout_s=30.0)


@pytest.fixture
def unique_topic(
    request: pytest.FixtureRequest, kafka_admin: TopicAdmin
) -> Iterator[Callable[..., str]]:
    """Factory: ``unique_topic(partitions=1, prefix=None, config=None)`` creates
    a topic no other test uses and returns its name; deleted after the test."""
    created: list[str] = []
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", request.node.name)[:80].strip("-") or "test"

    def make(
        partitions: int = 1, prefix: str | None = None, config: dict[str, str] | None = None
    ) -> str:
        name = f"{prefix or base}-{uuid.uuid4().hex[:10]}"
        kafka_admin.ensure([TopicSpec(name, partitions, -1, config or {})])
        created.append(name)
        return name

    yield make
    if created:
        # Cleanup only: a broker error here must not mask the test's result.
        with contextlib.suppress(Exception):
            kafka_admin.delete(created)
