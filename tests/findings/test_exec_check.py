"""``findings --exec`` (issue 44): a program the shell will not find is one
line and exit 2 at start (it was 12 s of retries, the reason only in the dead
letters), and the status the last line names is the one returned (it said
"exit 3" when Ctrl-C made it 130)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from streams.cli import main
from streams.findings import ExecTarget

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("command", "missing"),
    [
        ('notify-send-not-installed "stale owner"', "notify-send-not-installed"),
        ("LANG=C notify-send-not-installed x", "notify-send-not-installed"),
        ("/nonexistent/dir/alert --now", "/nonexistent/dir/alert"),
        ("exit 3", None),  # a shell builtin
        ("cat > /dev/null", None),
        (f"{sys.executable} -c pass", None),
        ("(cd /tmp && nothing-here)", None),  # not a plain word: the shell judges
        ("echo 'unbalanced", None),
    ],
)
def test_missing_program_names_what_the_shell_would_not_find(
    command: str, missing: str | None
) -> None:
    """The first program of the command, when /bin/sh would not find it; else None."""
    assert ExecTarget.missing_program(command) == missing


def test_an_exec_command_not_on_path_is_one_line_and_exit_2_before_reading(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--exec 'notify-send ...' without notify-send: one line naming it, exit 2, no broker asked."""
    argv = ["findings", "--bootstrap-servers", "127.0.0.1:1", "--exec", "notify-send-nope hi"]
    assert main(argv) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "fencewatch findings: --exec: notify-send-nope: command not found on PATH "
        "(nothing was read)"
    ]


@pytest.mark.kafka
def test_ctrl_c_after_every_delivery_failed_says_the_status_it_returns(
    kafka_bootstrap: str, findings_topic: Callable[..., str], tmp_path: Path
) -> None:
    """A follower whose every delivery was dead-lettered, then Ctrl-C: exit 130, and the
    line says 130, not 3."""
    topic = findings_topic()
    dead = tmp_path / "dead.jsonl"
    err = tmp_path / "err.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FENCEWATCH_")}
    with err.open("wb") as e:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streams", "findings", "-f", "--bootstrap-servers",
             kafka_bootstrap, "--topic", topic, "--exec", "exit 3", "--max-attempts", "1",
             "--dead-letter", str(dead)],
            cwd=REPO, env={**env, "PYTHONPATH": str(REPO)}, stdout=subprocess.DEVNULL, stderr=e,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not dead.exists() or len(dead.read_text().splitlines()) < 5:
            assert proc.poll() is None, err.read_text()
            assert time.monotonic() < deadline, err.read_text()
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = err.read_text()
    assert "no finding was delivered (exit 130)" in text, text
    assert "(exit 3)" not in text
