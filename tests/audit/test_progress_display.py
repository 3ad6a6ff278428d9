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
