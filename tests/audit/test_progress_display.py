"""The demos' progress display (streams.cli.progress.demo_status): a spinner
with the current step on a terminal, nothing on a pipe."""

from __future__ import annotations

import io
import os
import pty
import select

from streams.cli.progress import demo_status


def _drain(fd: int) -> bytes:
    out = b""
    while select.select([fd], [], [], 0.3)[0]:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    return out


def test_demo_status_shows_the_current_step_on_a_terminal() -> None:
    """On a terminal the story's latest step is the spinner's text; lines still reach out()."""
    master, slave = pty.openpty()
    said: list[str] = []
    with os.fdopen(slave, "w", encoding="utf-8") as term, demo_status(term, said.append) as out:
        out("  +0.01s  starting the live processor")
        out("  +2.50s  waiting for the processor to commit every event ...")
    shown = _drain(master).decode(errors="replace")
    os.close(master)
    assert "waiting for the processor to commit every event" in shown
    assert said == [
        "  +0.01s  starting the live processor",
        "  +2.50s  waiting for the processor to commit every event ...",
    ]


def test_demo_status_is_silent_on_a_pipe() -> None:
    """Not a terminal: out() is used as is and nothing is written to the stream."""
    stream = io.StringIO()
    said: list[str] = []
    with demo_status(stream, said.append) as out:
        out("  +0.01s  starting")
    assert stream.getvalue() == ""
    assert said == ["  +0.01s  starting"]


def test_demo_output_goes_to_a_redirected_stdout_while_the_spinner_runs(tmp_path) -> None:
    """stderr a terminal, stdout a file (`demo live > out.txt`): the story and anything else
    printed reach the file, not the terminal (rich redirected stdout to its console)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    script = (
        "import sys\n"
        "from streams.cli.progress import demo_status\n"
        "with demo_status(sys.stderr, print) as out:\n"
        "    out('  +0.01s  starting the live processor')\n"
        "    print('findings read from x (latest revision of each):')\n"
    )
    master, slave = pty.openpty()
    result = tmp_path / "out.txt"
    with result.open("w") as stdout:
        proc = subprocess.run(
            [sys.executable, "-c", script], stdout=stdout, stderr=slave, cwd=root,
            env={**os.environ, "PYTHONPATH": str(root), "TERM": "xterm"}, timeout=60,
        )  # fmt: skip
    os.close(slave)
    shown = _drain(master).decode(errors="replace")
    os.close(master)
    assert proc.returncode == 0
    assert result.read_text().splitlines() == [
        "  +0.01s  starting the live processor",
        "findings read from x (latest revision of each):",
    ]
    assert "findings read from" not in shown
