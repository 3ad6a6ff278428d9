"""A plain install works (issues 9, 23, 44): the compiled platform wheel,
installed non-editable with the ``kafka`` extra (and ``otel``, which
docs/integrations.md runs) into a fresh virtualenv shared by the session
(tests/support/installed.py), run from a directory outside the checkout:
``--version`` (the compiled detector), ``python -m fencewatch``, ``audit`` of the packaged
fixture, the packaged examples and deploy files, ``run`` on a closed port (one
line, no state left) and on a mistyped topic, ``run`` until ``/health`` is ok,
``publish`` of the fixture (and of an invalid line), ``demo live``, and the
rocksdb extra's one-line hint."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from streams.kafka import TopicAdmin, TopicSpec, end_offsets
from streams.kafka.connection import KafkaConnection
from tests.support.installed import Installed
from tests.support.worker import free_port, is_ready


@pytest.mark.kafka
@pytest.mark.timeout(1200)  # when first: the compiled wheel's build (cached) and its venv
def test_installed_wheel_works_from_outside_the_checkout(
    kafka_bootstrap: str, installed: Installed, tmp_path: Path
) -> None:
    """Compiled wheel[kafka] in a fresh venv, run from a temp dir: version (compiled), audit of
    the packaged fixture (exit 1, four findings), run and serve until /health ok, demo live,
    rocksdb hint."""
    bin_dir = installed.bin
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = installed.env()
    fencewatch = installed.fencewatch

    def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [fencewatch, *args], cwd=work, env=env, capture_output=True, text=True, timeout=timeout
        )

    version = cli("--version")
    assert version.returncode == 0 and version.stdout.startswith("fencewatch 0."), version
    assert version.stdout.endswith(" (detector: compiled)\n"), version.stdout
    assert not installed.wheel.name.endswith("-none-any.whl"), installed.wheel.name
    as_module = subprocess.run(
        [str(bin_dir / "python"), "-m", "fencewatch", "--version"],
        cwd=work, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert as_module.returncode == 0 and as_module.stdout == version.stdout, as_module

    files = Path(cli("demo", "files").stdout.strip())
    assert files.is_relative_to(installed.venv), files  # packaged, not the checkout
    assert (files / "examples" / "agent_worker.py").is_file()
    assert (files / "deploy" / "prometheus" / "alerts.yml").is_file()
    assert (files / "deploy" / "grafana" / "dashboards" / "fencewatch.json").is_file()

    where = cli("demo", "fixture", "--path").stdout.strip()
    assert where.startswith(str(installed.venv)), where  # the packaged copy, not the checkout
    audit = cli("audit", "--format", "json", where)
    assert audit.returncode == 1, audit.stderr
    kinds = sorted(f["kind"] for f in json.loads(audit.stdout)["findings"])
    assert len(kinds) == 4, kinds

    down = cli("run", "--bootstrap-servers", f"127.0.0.1:{free_port()}")
    assert down.returncode == 2 and len(down.stderr.splitlines()) == 1, down.stderr
    assert "cannot connect to broker" in down.stderr and down.stdout == ""
    assert not (work / ".fencewatch").exists()  # nothing left behind by a wrong address

    rocks = cli("run", "--bootstrap-servers", kafka_bootstrap, "--store", "rocksdb://")
    assert rocks.returncode == 2
    assert rocks.stderr.splitlines() == [
        "fencewatch run: --store rocksdb:// needs the rocksdb extra: "
        "pip install 'fencewatch[rocksdb]'"
    ]

    typo = cli("run", "--bootstrap-servers", kafka_bootstrap, "--events-topic", "pkg.evnts")
    assert typo.returncode == 2 and len(typo.stderr.splitlines()) == 1, typo.stderr
    assert "topic pkg.evnts does not exist" in typo.stderr
    assert (
        TopicAdmin(KafkaConnection(kafka_bootstrap)).partitions(["pkg.evnts", "pkg.evnts.dlq"])
        == {}
    )

    _run_until_healthy(fencewatch, kafka_bootstrap, work, env)
    _serve_until_healthy(fencewatch, kafka_bootstrap, work, env)
    _publish(cli, kafka_bootstrap, where, work)

    demo = cli("demo", "live", "--bootstrap-servers", kafka_bootstrap, timeout=240)
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]


def _serve_until_healthy(fencewatch: str, bootstrap: str, work: Path, env: dict[str, str]) -> None:
    """The console (its HTTP server is in the kafka extra) answers /health, stops on SIGTERM."""
    log = work / "serve.log"
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [fencewatch, "serve", "--bootstrap-servers", bootstrap, "--port", "0"],
            cwd=work, env=env, stderr=err,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while "\n" not in log.read_text():
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        url = log.read_text().split()[2]
        with urllib.request.urlopen(url + "/health", timeout=30) as resp:
            assert resp.read() == b"ok\n"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def _run_until_healthy(fencewatch: str, bootstrap: str, work: Path, env: dict[str, str]) -> None:
    tag = uuid.uuid4().hex[:10]
    topics = [f"pkg-events-{tag}", f"pkg-findings-{tag}", f"pkg-events-{tag}.dlq", f"pkg-st-{tag}"]
    port = free_port()
    log = work / "run.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [fencewatch, "run", "--create-topics", "--bootstrap-servers", bootstrap,
             "--events-topic", topics[0],
             "--findings-topic", topics[1], "--status-topic", topics[3], "--app-id",
             f"pkg-{tag}", "--metrics-port", str(port)],
            cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        health = None
        while not is_ready(health):
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.5)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    health = json.loads(r.read())
            except OSError:
                health = None
        assert (work / ".fencewatch" / "live").is_dir()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        TopicAdmin(KafkaConnection(bootstrap)).delete([*topics, f"pkg-{tag}-owner-state-changelog"])


def _publish(cli: Any, bootstrap: str, fixture: str, work: Path) -> None:
    """`fencewatch publish` of the packaged fixture plus one invalid line: the 16 events
    sent, the invalid line named by line and field, exit 1."""
    topic = f"pkg-publish-{uuid.uuid4().hex[:10]}"
    admin = TopicAdmin(KafkaConnection(bootstrap))
    admin.ensure([TopicSpec(topic, 1)])
    try:
        events = work / "events.jsonl"
        events.write_bytes(Path(fixture).read_bytes() + b'{"type": "progress"}\n')
        sent = cli("publish", "--bootstrap-servers", bootstrap, "--topic", topic, str(events))
        assert sent.returncode == 1, sent.stderr
        assert sent.stdout == f"published 16 event(s) to {topic}; 1 invalid line(s) not sent\n"
        assert sent.stderr == (
            f"fencewatch publish: {events}:17: workflow_key: is required (not sent)\n"
        )
        assert end_offsets(KafkaConnection(bootstrap), topic) == {0: 16}
    finally:
        admin.delete([topic])
