"""The docker-compose.yml stack for real: up with --wait, the SPEC §5 fixture
produced from the host to its broker, the four findings read back from its
findings topic, its Prometheus scraping the worker with the alert rules
loaded, and nothing left after ``down -v``."""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

import pytest
import yaml

from streams.demo import kafka_io
from streams.demo.expected import REFERENCE_EXPECTED
from streams.kafka.connection import KafkaConnection
from streams.kafka.topics import DEFAULT_EVENTS_TOPIC, DEFAULT_FINDINGS_TOPIC
from streams.live.settings import LiveSettings
from tests.containers.conftest import ROOT, docker

PROJECT = "fencewatch"  # docker-compose.yml's name:
HOST_BOOTSTRAP = "127.0.0.1:29092"
PROMETHEUS = "http://127.0.0.1:9090"
CONSOLE = "http://127.0.0.1:8765"
_UP_TIMEOUT_S = 600
_PROCESSED_TIMEOUT_S = 180
# Prometheus scrapes every 15 s (deploy/prometheus/prometheus.yml): a few rounds.
_SCRAPE_TIMEOUT_S = 90
# Bringing the stack up on a busy 2-core machine, and a first image build, take minutes.
pytestmark = pytest.mark.timeout(1200)
_RULES = yaml.safe_load((ROOT / "deploy" / "prometheus" / "alerts.yml").read_text())
ALERTS = {rule["alert"] for group in _RULES["groups"] for rule in group["rules"]}
_EXISTS = "a fencewatch compose project exists already: docker compose down -v"


def _compose(*args: str, timeout: float = 300) -> str:
    done = docker("compose", "-f", str(ROOT / "docker-compose.yml"), *args, timeout=timeout)
    assert done.returncode == 0, f"docker compose {' '.join(args)}:\n{done.stdout}{done.stderr}"
    return done.stdout


def _left_behind() -> list[str]:
    """Containers, volumes and networks of the compose project that still exist."""
    label = f"label=com.docker.compose.project={PROJECT}"
    left: list[str] = []
    for kind, args in (
        ("container", ("ps", "-a", "-q", "--filter", label)),
        ("volume", ("volume", "ls", "-q", "--filter", label)),
        ("network", ("network", "ls", "-q", "--filter", label)),
    ):
        done = docker(*args, timeout=60)
        assert done.returncode == 0, done.stderr
        left += [f"{kind} {name}" for name in done.stdout.split()]
    return left


def _get(path: str) -> dict[str, Any]:
    with urllib.request.urlopen(PROMETHEUS + path, timeout=10) as answer:
        doc = json.load(answer)
    assert doc["status"] == "success", doc
    data: dict[str, Any] = doc["data"]
    return data


def _scraped_up() -> list[dict[str, Any]]:
    """Prometheus's targets of the fencewatch job, once one is up (polls its API)."""
    deadline = time.monotonic() + _SCRAPE_TIMEOUT_S
    while True:
        try:
            targets = [
                t for t in _get("/api/v1/targets")["activeTargets"]
                if t["labels"].get("job") == "fencewatch"
            ]  # fmt: skip
        except OSError:
            targets = []  # still starting
        if any(t["health"] == "up" for t in targets) or time.monotonic() > deadline:
            return targets
        time.sleep(1)


def test_stack_turns_the_fixture_into_four_findings_is_scraped_and_leaves_nothing(
    fencewatch_image: str,
) -> None:
    """`up -d --wait`; fixture in from the host, SPEC §5's four findings out; Prometheus scrapes
    the worker (target up) with every alert rule loaded; the console lists the workflow;
    `down -v` leaves nothing behind."""
    assert _left_behind() == [], _EXISTS
    try:
        _compose("up", "-d", "--wait", timeout=_UP_TIMEOUT_S)
        _check_findings_and_scrape()
    except BaseException:
        logs = docker("compose", "-f", str(ROOT / "docker-compose.yml"), "logs", "--no-color",
                      "--tail", "40", timeout=60)  # fmt: skip
        print(logs.stdout)  # shown by pytest with the failure
        raise
    finally:
        _compose("down", "-v")
    assert _left_behind() == []


def _check_findings_and_scrape() -> None:
    records = kafka_io.jsonl_records(ROOT / "examples" / "reference.jsonl")
    assert kafka_io.publish(KafkaConnection(HOST_BOOTSTRAP), DEFAULT_EVENTS_TOPIC, records) == 16
    app_id = LiveSettings.__dataclass_fields__["app_id"].default
    # Findings commit in the same transactions as the worker's offsets.
    kafka_io.wait_committed(
        KafkaConnection(HOST_BOOTSTRAP), app_id, DEFAULT_EVENTS_TOPIC, _PROCESSED_TIMEOUT_S
    )
    latest, _ = kafka_io.latest_findings(KafkaConnection(HOST_BOOTSTRAP), DEFAULT_FINDINGS_TOPIC)
    found = {(f.workflow_key, f.kind.value, f.event_seq) for f in latest}
    assert found == REFERENCE_EXPECTED

    targets = _scraped_up()
    assert [t["health"] for t in targets] == ["up"], targets
    assert targets[0]["labels"]["instance"] == "fencewatch:9464"
    loaded = {r["name"] for g in _get("/api/v1/rules")["groups"] for r in g["rules"]}
    assert loaded == ALERTS

    # The console service tails the same topics: export-ledger with its four open findings.
    rows = _console_rows("export-ledger")
    assert [(r["workflow_key"], r["open_count"]) for r in rows] == [("export-ledger", 4)], rows


def _console_rows(prefix: str) -> list[dict[str, Any]]:
    """The console's /api/workflows rows under ``prefix``, once it lists any (polls)."""
    deadline = time.monotonic() + _SCRAPE_TIMEOUT_S
    while True:
        try:
            with urllib.request.urlopen(
                f"{CONSOLE}/api/workflows?prefix={prefix}", timeout=10
            ) as answer:
                rows: list[dict[str, Any]] = json.load(answer)["workflows"]
        except OSError:
            rows = []  # still starting
        if any(r.get("open_count") == 4 for r in rows) or time.monotonic() > deadline:
            return rows
        time.sleep(1)
