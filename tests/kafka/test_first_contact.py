"""First contact with an installed tool (issue 9): `run` from any directory,
the metrics address, the packaged fixture, one version number."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

import pytest

import streams
from streams.errors import ConfigError
from streams.fixtures import reference_fixture
from streams.kafka.connection import KafkaConnection
from streams.live.settings import (
    DEFAULT_DATA_DIR,
    check_metrics_address,
    prepare_local_state,
)
from streams.live.settings import settings_from_env as live_settings
from tests.support.worker import WorkerProcess

ROOT = Path(__file__).resolve().parents[2]


def _outward_address() -> str:
    """This host's non-loopback IPv4 address (the one a route to elsewhere uses)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("198.51.100.1", 9))  # TEST-NET-2; a UDP connect sends nothing
            address = str(s.getsockname()[0])
    except OSError:
        address = "127.0.0.1"
    if address.startswith("127."):
        pytest.fail("this host has no non-loopback IPv4 address to check the metrics binding")
    return address


@pytest.mark.kafka
def test_run_from_a_fresh_directory_creates_its_state_and_serves_metrics_outside(
    kafka_bootstrap: str, unique_topic: Callable[..., str], tmp_path: Path
) -> None:
    """`run` in a directory without .run/ creates ./.fencewatch/live, says so in one
    line, and with FENCEWATCH_METRICS_HOST=0.0.0.0 answers /health on a non-loopback address."""
    tag = uuid.uuid4().hex[:8]
    env = {
        "FENCEWATCH_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "FENCEWATCH_EVENTS_TOPIC": unique_topic(1, prefix="fc-events"),
        "FENCEWATCH_FINDINGS_TOPIC": f"fc-findings-{tag}",
        "FENCEWATCH_STATUS_TOPIC": f"fc-status-{tag}",
        "FENCEWATCH_APP_ID": f"fc-{tag}",
        "FENCEWATCH_METRICS_HOST": "0.0.0.0",
        "PYTHONPATH": str(ROOT),
    }
    worker = WorkerProcess(env, tmp_path / "worker.log", cwd=tmp_path)
    try:
        worker.wait_ready(90)
        state = tmp_path / DEFAULT_DATA_DIR
        assert state.is_dir()
        assert f"fencewatch run: local state in {state}\n" in worker.log_path.read_text()
        url = f"http://{_outward_address()}:{worker.port}/health"
        with urllib.request.urlopen(url, timeout=5) as answer:
            assert answer.status == 200
    finally:
        worker.stop()
        from streams.kafka import TopicAdmin

        TopicAdmin(KafkaConnection(kafka_bootstrap)).delete(
            [env["FENCEWATCH_FINDINGS_TOPIC"], env["FENCEWATCH_STATUS_TOPIC"],
             env["FENCEWATCH_EVENTS_TOPIC"] + ".dlq"]
        )  # fmt: skip


def test_local_state_directory_is_created_with_its_parents(tmp_path: Path) -> None:
    """--data-dir a/b/c is created with every missing parent; its absolute path is returned."""
    settings = live_settings(
        {"FENCEWATCH_BOOTSTRAP_SERVERS": "h:1"}, {"data_dir": str(tmp_path / "a" / "b" / "c")}
    )
    assert prepare_local_state(settings) == tmp_path / "a" / "b" / "c"
    assert (tmp_path / "a" / "b" / "c").is_dir()


def test_uncreatable_state_directory_is_one_line(tmp_path: Path) -> None:
    """A data dir below a regular file is refused with a ConfigError naming the path."""
    (tmp_path / "file").write_text("")
    settings = live_settings(
        {"FENCEWATCH_BOOTSTRAP_SERVERS": "h:1"}, {"data_dir": str(tmp_path / "file" / "x")}
    )
    with pytest.raises(ConfigError, match="cannot create the data directory"):
        prepare_local_state(settings)


def test_metrics_host_has_a_flag_and_a_variable() -> None:
    """FENCEWATCH_METRICS_HOST sets the bind address; --metrics-host wins over it."""
    env = {"FENCEWATCH_BOOTSTRAP_SERVERS": "h:1", "FENCEWATCH_METRICS_HOST": "0.0.0.0"}
    assert live_settings(env).metrics_host == "0.0.0.0"
    assert live_settings(env, {"metrics_host": "::"}).metrics_host == "::"
    assert live_settings({"FENCEWATCH_BOOTSTRAP_SERVERS": "h:1"}).metrics_host == "127.0.0.1"


def test_one_version_number() -> None:
    """streams.__version__ is the installed metadata's, and no module writes another literal."""
    assert streams.__version__ == version("fencewatch")
    literal = re.compile(r"""__version__\s*=\s*["']\d""")
    for path in [
        *ROOT.joinpath("streams").rglob("*.py"),
        *ROOT.joinpath("fencewatch").rglob("*.py"),
    ]:
        assert not literal.search(path.read_text(encoding="utf-8")), path
    out = subprocess.run(
        [sys.executable, "-m", "streams", "--version"], capture_output=True, text=True, check=True
    ).stdout
    assert out.startswith(f"fencewatch {version('fencewatch')} ")


def test_demo_fixture_prints_the_reference_fixture() -> None:
    """`fencewatch demo fixture` writes the SPEC §5 fixture; --path names the file."""
    proc = subprocess.run(
        [sys.executable, "-m", "streams", "demo", "fixture"], capture_output=True, check=True
    )
    assert proc.stdout == (ROOT / "examples" / "reference.jsonl").read_bytes()
    path = subprocess.run(
        [sys.executable, "-m", "streams", "demo", "fixture", "--path"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert Path(path) == reference_fixture()


def _run_cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FENCEWATCH_")}
    return subprocess.run(
        [sys.executable, "-m", "streams", "run", *args],
        cwd=cwd,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unusable_metrics_address_is_one_line_before_anything_starts(tmp_path: Path) -> None:
    """A --metrics-host that does not resolve, is not this host's, or a port in use is one
    line naming the address (was: the worker's traceback, then 'Name or service not known'
    without the address), checked before the broker."""
    broker = f"127.0.0.1:{_closed_port()}"  # never reached: the address is checked first
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        busy = int(taken.getsockname()[1])
        cases = {
            ("no-such-host.invalid", "9"): "no-such-host.invalid:9: unknown host",
            ("198.51.100.77", "9"): "198.51.100.77:9: not an address of this host",
            ("127.0.0.1", str(busy)): f"127.0.0.1:{busy}: address already in use",
        }
        for (host, port), said in cases.items():
            proc = _run_cli(
                ["--bootstrap-servers", broker, "--metrics-host", host, "--metrics-port", port],
                tmp_path,
            )
            assert proc.returncode == 2, proc.stderr
            lines = proc.stderr.splitlines()
            assert len(lines) == 1, proc.stderr
            assert lines[0].startswith(f"fencewatch run: cannot serve /metrics on {said}"), lines
    settings = live_settings(
        {"FENCEWATCH_BOOTSTRAP_SERVERS": "h:1"}, {"metrics_port": _closed_port()}
    )
    check_metrics_address(settings)  # a free port on the default host: fine
    check_metrics_address(settings.replace(metrics_port=0))  # off: nothing to check


def test_unreachable_broker_leaves_no_state_directory(tmp_path: Path) -> None:
    """`run` with a wrong broker address fails before it makes ./.fencewatch/ (a typo in a
    home directory must not leave state behind)."""
    proc = _run_cli(["--bootstrap-servers", f"127.0.0.1:{_closed_port()}"], tmp_path)
    assert proc.returncode == 2 and "cannot connect to broker" in proc.stderr, proc.stderr
    assert not (tmp_path / ".fencewatch").exists()
