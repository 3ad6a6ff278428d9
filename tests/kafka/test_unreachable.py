"""Every Kafka entry point fails on an unreachable broker with one line naming
the address and the cause: no traceback, no client log lines (issue 9 item 4)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _closed_port() -> int:
    """A port nothing listens on: bound to get a free number, then closed."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts TCP connections (the kernel's backlog) and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield int(s.getsockname()[1])


def _fencewatch(
    args: list[str], cwd: Path, env_extra: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FENCEWATCH_")}
    return subprocess.run(
        [sys.executable, "-m", "streams", *args],
        cwd=cwd,
        env={**env, "PYTHONPATH": str(ROOT), **(env_extra or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )


ENTRY_POINTS = {
    "audit --topic": ["audit", "--topic", "ownership.events"],
    "topics create": ["topics", "create"],
    "run": ["run"],
    "demo live": ["demo", "live"],
}


@pytest.mark.parametrize("command", sorted(ENTRY_POINTS))
def test_refused_connection_is_one_line_naming_address_and_cause(
    command: str, tmp_path: Path
) -> None:
    """A closed port: exit 2, one line 'cannot connect to broker ADDR: connection refused'."""
    address = f"127.0.0.1:{_closed_port()}"
    proc = _fencewatch([*ENTRY_POINTS[command], "--bootstrap-servers", address], tmp_path)
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2, proc.stderr
    name = {"audit --topic": "audit", "demo live": "demo"}.get(command, command)
    assert lines == [
        f"fencewatch {name}: cannot connect to broker {address}: connection refused"
    ], proc.stderr
    assert proc.stdout == ""


@pytest.mark.parametrize("command", ["audit --topic", "run", "topics create"])
def test_silent_broker_fails_within_the_connect_timeout(
    command: str, silent_port: int, tmp_path: Path
) -> None:
    """A port that accepts but never answers: one line naming the address and the timeout."""
    address = f"127.0.0.1:{silent_port}"
    proc = _fencewatch(
        [*ENTRY_POINTS[command], "--bootstrap-servers", address, "--connect-timeout", "1.5"],
        tmp_path,
    )
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and f"no answer from broker {address} within 1.5 s" in lines[0], lines
    assert "Traceback" not in proc.stderr and "%3|" not in proc.stderr


def test_debug_log_level_shows_the_client_log(tmp_path: Path) -> None:
    """--log-level debug routes librdkafka's own lines (FAIL on connect) to stderr."""
    # The probe refuses first; the client's own log needs a client: a broker
    # that accepts TCP and never answers gives it one to try.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        address = f"127.0.0.1:{s.getsockname()[1]}"
        proc = _fencewatch(
            ["topics", "create", "--bootstrap-servers", address, "--connect-timeout", "1",
             "--log-level", "debug"],
            tmp_path,
        )  # fmt: skip
    assert proc.returncode == 2
    assert "streams.kafka.librdkafka" in proc.stderr, proc.stderr[-2000:]
    assert len(proc.stderr.splitlines()) > 1


def test_silent_broker_is_one_line_for_demo_live(silent_port: int, tmp_path: Path) -> None:
    """demo live on a broker that accepts TCP and never answers: exit 2, one line, no child log."""
    address = f"127.0.0.1:{silent_port}"
    proc = _fencewatch(["demo", "live", "--bootstrap-servers", address], tmp_path)
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and lines[0].startswith(
        f"fencewatch demo: no answer from broker {address} within 10 s"
    ), lines


@pytest.mark.parametrize("command", sorted(ENTRY_POINTS))
def test_every_entry_point_reads_the_broker_from_fencewatch_bootstrap_servers(
    command: str, tmp_path: Path
) -> None:
    """FENCEWATCH_BOOTSTRAP_SERVERS alone (no flag, no KAFKA_BOOTSTRAP) names the broker for
    every Kafka command, the demos included (demo read only KAFKA_BOOTSTRAP and answered
    '--bootstrap-servers is required')."""
    address = f"127.0.0.1:{_closed_port()}"
    proc = _fencewatch(
        ENTRY_POINTS[command],
        tmp_path,
        {"FENCEWATCH_BOOTSTRAP_SERVERS": address, "KAFKA_BOOTSTRAP": ""},
    )
    assert proc.returncode == 2, proc.stderr
    name = {"audit --topic": "audit", "demo live": "demo"}.get(command, command)
    assert proc.stderr.splitlines() == [
        f"fencewatch {name}: cannot connect to broker {address}: connection refused"
    ]
