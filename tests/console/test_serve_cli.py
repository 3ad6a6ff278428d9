"""``fencewatch serve`` as a command: it says where it listens, serves, and
stops cleanly on SIGTERM; bad settings are one line and exit 2."""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from streams.cli import main

REPO = Path(__file__).resolve().parents[2]


def test_serve_announces_its_url_serves_and_stops_on_sigterm(kafka_bootstrap: str) -> None:
    """The first stderr line names the URL (read-only without a token); SIGTERM exits 0."""
    env = {k: v for k, v in os.environ.items() if k != "FENCEWATCH_SERVE_TOKEN"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "streams", "serve", "--bootstrap-servers", kafka_bootstrap,
         "--port", "0"],
        stderr=subprocess.PIPE, text=True, cwd=REPO, env=env,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert line.startswith("fencewatch serve: http://127.0.0.1:"), line
        assert "read-only (no FENCEWATCH_SERVE_TOKEN)" in line
        url = line.split()[2]
        with urllib.request.urlopen(url + "/health", timeout=30) as resp:
            assert resp.read() == b"ok\n"
        with urllib.request.urlopen(url + "/", timeout=30) as resp:
            assert "Read-only" in resp.read().decode()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


@pytest.mark.parametrize(
    ("argv", "env", "needle"),
    [
        (["--port", "70000"], {}, "--port must be 0..65535"),
        (["--replay-events", "0"], {}, "--replay-events must be at least 1"),
        ([], {"FENCEWATCH_SERVE_TOKEN": "short"}, "at least 16 characters"),
        (["--replay-concurrency", "0"], {}, "--replay-concurrency must be at least 1"),
        (["--allowed-hosts", "a.example,b.example:443"], {}, "without a port, got 'b.example:443'"),
        (["--stall-after", "0"], {}, "--stall-after must be a number of seconds more than 0"),
        ([], {"FENCEWATCH_STALL_TIMEOUT": "soon"}, "FENCEWATCH_STALL_TIMEOUT must be a number"),
    ],
)
def test_bad_settings_are_one_line_and_exit_2(
    argv: list[str],
    env: dict[str, str],
    needle: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bad port, bound, host name or token: one line naming it, status 2."""
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert main(["serve", "--bootstrap-servers", "127.0.0.1:1", *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1


def test_the_processor_watched_is_the_workers_group_with_its_stall_rule() -> None:
    """Group and threshold from the worker's variables (3 commit intervals at least); flags win."""
    from streams.cli.serve import _processor

    args = argparse.Namespace(app_id=None, stall_after=None)
    assert _processor(args, {}) == ("fencewatch-live", 60.0)
    env = {"FENCEWATCH_APP_ID": "fw-prod", "FENCEWATCH_STALL_TIMEOUT": "5",
           "FENCEWATCH_COMMIT_INTERVAL": "4"}  # fmt: skip
    assert _processor(args, env) == ("fw-prod", 12.0)
    flags = argparse.Namespace(app_id="fw-other", stall_after=7.5)
    assert _processor(flags, env) == ("fw-other", 7.5)


def test_unreachable_broker_and_taken_port_exit_2(
    kafka_bootstrap: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """No broker at the address, or the port already bound: one line, status 2."""
    assert main(["serve", "--bootstrap-servers", "127.0.0.1:1", "--connect-timeout", "2"]) == 2
    assert "127.0.0.1:1" in capsys.readouterr().err
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert main(["serve", "--bootstrap-servers", kafka_bootstrap, "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert f"cannot listen on 127.0.0.1:{port}" in err and len(err.strip().splitlines()) == 1


def test_without_the_kafka_extra_serve_names_the_pip_install_and_audit_still_runs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No confluent-kafka nor prometheus-client: `audit FILE` works (the parser does not
    need them) and `serve` is one line naming `pip install 'fencewatch[kafka]'`."""
    import sys as _sys

    for name in list(_sys.modules):
        if name.split(".", 1)[0] in ("confluent_kafka", "prometheus_client") or name.startswith(
            "streams.console."
        ):
            monkeypatch.delitem(_sys.modules, name)
    for name in ("confluent_kafka", "prometheus_client"):
        monkeypatch.setitem(_sys.modules, name, None)
    fixture = str(REPO / "examples" / "reference.jsonl")
    assert main(["audit", fixture, "--fail-on", "never"]) == 0
    capsys.readouterr()
    assert main(["serve", "--bootstrap-servers", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fencewatch serve: ") and "pip install 'fencewatch[kafka]'" in err
    assert len(err.strip().splitlines()) == 1
