"""A bench worker in a session of its own (bench/live_scaleout.py) still dies
with the bench when the bench is killed with -9."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

# The bench's side: a child started the way live_support.Worker(own_session=True)
# starts a worker (Child with new_session), then the parent waits to be killed.
_PARENT = """
import sys, time
from pathlib import Path
from streams.demo.processes import Child
child = Child(
    "sleeper",
    [sys.executable, "-c", "import time; time.sleep(120)"],
    log_path=Path(sys.argv[1]),
    new_session=True,
)
print(child.pid, flush=True)
time.sleep(120)
"""


def _running(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie, dead but not yet reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_a_child_in_its_own_session_dies_when_its_starter_is_killed(tmp_path: Path) -> None:
    """The child leads its own session, and a kill -9 of its starter still ends it."""
    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT, str(tmp_path / "child.log")],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    child = 0
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        # Until the guard has exec'd the command (a starter gone before that
        # makes the guard exit on its own, and the test would prove nothing).
        deadline = time.monotonic() + 30
        while b"streams.demo.guard" in Path(f"/proc/{child}/cmdline").read_bytes():
            assert time.monotonic() < deadline, "the guarded child never started its command"
            time.sleep(0.02)
        assert os.getsid(child) == child
        assert os.getsid(parent.pid) != child
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 30
        while _running(child) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not _running(child)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(10)
        if child and _running(child):
            os.kill(child, signal.SIGKILL)
