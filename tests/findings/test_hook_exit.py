"""How a hooked `fencewatch findings` ends: non-zero when no delivery succeeded,
and Ctrl-C that says what it waits for, a second Ctrl-C that stops at once,
exit 130 (issue 23)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from streams.cli import main
from streams.cli.findings import ALL_DELIVERIES_FAILED

REPO = Path(__file__).resolve().parents[2]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_hooked_read_whose_every_delivery_failed_exits_3(
    kafka_bootstrap: str,
    findings_topic: Callable[..., str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--exec 'exit 3' and a refused --webhook: everything dead-lettered, exit 3 (was 0)."""
    topic = findings_topic()
    base = ["findings", "--bootstrap-servers", kafka_bootstrap, "--topic", topic,
            "--max-attempts", "1", "--dead-letter", str(tmp_path / "dead.jsonl")]  # fmt: skip
    assert main([*base, "--exec", "exit 3"]) == ALL_DELIVERIES_FAILED == 3
    err = capsys.readouterr().err
    assert "5 finding(s) written to the dead letters" in err
    assert "no finding was delivered (exit 3)" in err
    webhook = f"http://127.0.0.1:{_closed_port()}/hook"
    assert main([*base, "--webhook", webhook]) == 3
    assert len((tmp_path / "dead.jsonl").read_text().splitlines()) == 10


def _wait_for_text(path: Path, text: str, proc: subprocess.Popen[bytes], within: float) -> float:
    """Seconds until ``text`` shows in ``path`` (the process's output file)."""
    started = time.monotonic()
    while text not in path.read_text():
        assert proc.poll() is None, f"exited {proc.returncode}: {path.read_text()[-2000:]}"
        assert time.monotonic() - started < within, f"no {text!r} in {path.read_text()[-2000:]}"
        time.sleep(0.02)
    return time.monotonic() - started


def test_ctrl_c_says_what_it_waits_for_and_a_second_one_stops_at_once(
    kafka_bootstrap: str, findings_topic: Callable[..., str], tmp_path: Path
) -> None:
    """A follower retrying a refused webhook: Ctrl-C says within 2 s what it waits for,
    a second Ctrl-C ends it at once, exit 130 (was 11 s of silence, exit 0)."""
    topic = findings_topic()
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FENCEWATCH_")}
    with out.open("wb") as o, err.open("wb") as e:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streams", "findings", "-f", "--bootstrap-servers",
             kafka_bootstrap, "--topic", topic, "--webhook",
             f"http://127.0.0.1:{_closed_port()}/hook", "--max-attempts", "20",
             "--dead-letter", str(tmp_path / "dead.jsonl")],
            cwd=REPO, env={**env, "PYTHONPATH": str(REPO)}, stdout=o, stderr=e,
        )  # fmt: skip
    try:
        # Every finding line is printed before it is handed to the hook.
        _wait_for_text(out, "conflicting_commit", proc, within=60)
        proc.send_signal(signal.SIGINT)
        assert _wait_for_text(err, "stopping: waiting up to 30 s for", proc, within=2.0) < 2.0
        assert "Ctrl-C again to stop now" in err.read_text()
        proc.send_signal(signal.SIGINT)
        started = time.monotonic()
        assert proc.wait(10) == 130
        assert time.monotonic() - started < 2.0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not (tmp_path / "dead.jsonl").exists()  # nothing was given up as undeliverable


def test_ctrl_c_on_a_plain_follower_exits_130(
    kafka_bootstrap: str, findings_topic: Callable[..., str], tmp_path: Path
) -> None:
    """`findings -f` without a hook: Ctrl-C exits 130, as audit and demo (was 0)."""
    topic = findings_topic()
    out = tmp_path / "out.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FENCEWATCH_")}
    with out.open("wb") as o:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streams", "findings", "-f", "--bootstrap-servers",
             kafka_bootstrap, "--topic", topic],
            cwd=REPO, env={**env, "PYTHONPATH": str(REPO)}, stdout=o,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
    try:
        _wait_for_text(out, "conflicting_commit", proc, within=60)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(10) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _follower(
    bootstrap: str, topic: str, url: str, tmp_path: Path, *extra: str
) -> tuple[subprocess.Popen[bytes], Path]:
    err = tmp_path / "err.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FENCEWATCH_")}
    with err.open("wb") as e:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streams", "findings", "-f", "--bootstrap-servers",
             bootstrap, "--topic", topic, "--webhook", url, "--format", "jsonl",
             "--dead-letter", str(tmp_path / "dead.jsonl"), *extra],
            cwd=REPO, env={**env, "PYTHONPATH": str(REPO)}, stdout=subprocess.DEVNULL,
            stderr=e,
        )  # fmt: skip
    return proc, err


def test_an_outage_is_one_failing_line_and_one_recovered_line(
    kafka_bootstrap: str, findings_topic: Callable[..., str], tmp_path: Path
) -> None:
    """A receiver answering 503 to everything, then 200: stderr says once that the
    deliveries are failing (after the first attempt) and once that they recovered; every
    finding is delivered, nothing dead-lettered."""
    from tests.findings.receiver import webhook_receiver

    topic = findings_topic()
    with webhook_receiver() as rx:
        rx.down = True
        proc, err = _follower(kafka_bootstrap, topic, rx.url, tmp_path, "--max-attempts", "100")
        try:
            _wait_for_text(err, "webhook deliveries are failing", proc, within=60)
            rx.down = False
            _wait_for_text(err, "webhook deliveries recovered", proc, within=60)
            rx.wait_for(5, sender=proc)
        finally:
            proc.send_signal(signal.SIGTERM)
            rc = proc.wait(40)
    text = err.read_text()
    assert text.count("deliveries are failing") == 1, text
    assert text.count("deliveries recovered") == 1, text
    assert f"{rx.url} answered 503" in text
    assert rc == 0 and not (tmp_path / "dead.jsonl").exists()


def test_a_stop_with_findings_undelivered_exits_4(
    kafka_bootstrap: str, findings_topic: Callable[..., str], tmp_path: Path
) -> None:
    """A receiver that never answers: SIGTERM, then a second SIGTERM to give up the
    drain: the follower names the undelivered findings and exits 4 (was 0)."""
    from streams.cli.findings import STOPPED_UNDELIVERED

    topic = findings_topic()
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts, never answers
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/hook"
        proc, err = _follower(
            kafka_bootstrap, topic, url, tmp_path, "--hook-timeout", "1", "--max-attempts", "50"
        )
        try:
            _wait_for_text(err, "no complete answer within 1 s", proc, within=60)
            proc.send_signal(signal.SIGTERM)
            _wait_for_text(err, "stopping: waiting up to", proc, within=10)
            proc.send_signal(signal.SIGTERM)
            rc = proc.wait(20)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    text = err.read_text()
    assert rc == STOPPED_UNDELIVERED == 4, text
    assert "stopped with 5 finding(s) neither delivered nor dead-lettered" in text
    assert not (tmp_path / "dead.jsonl").exists()
