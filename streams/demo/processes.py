"""Child processes of a demo: the live processor and the workers (and, through
``tests/support/worker.py``, the workers the live tests and benchmarks run:
one supervisor for both).

Every child is started under :mod:`streams.demo.guard` (it dies with the
demo even if the demo is SIGKILLed) and registered in a :class:`Children`
group whose exit stops whatever still runs: SIGTERM (plus SIGCONT, so a
paused worker can act on it), then SIGKILL after a bound. Ctrl-C and errors
therefore never leave a process behind.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

__all__ = ["Child", "Children", "Line", "free_port", "is_ready", "read_health"]

#: Longest line read from a worker's stdout; longer output is cut into pieces.
MAX_LINE_BYTES = 64 * 1024
#: Lines waiting to be handled by the demo; a reader thread blocks when full.
MAX_QUEUED_LINES = 1000
_STOP_WAIT_S = 15.0

#: (monotonic time received, child name, the line without its newline;
#: ``None`` when the child closed its stdout).
Line = tuple[float, str, bytes | None]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def read_health(port: int) -> dict[str, Any] | None:
    """The ``/health`` document of the ``fencewatch run`` worker serving on
    ``port``, or None while nothing (valid) answers there."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
            doc = json.loads(r.read())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def is_ready(health: dict[str, Any] | None) -> bool:
    """Holds partitions and is not restoring state: it is processing."""
    return bool(
        health is not None
        and health.get("ok")
        and health.get("partitions")
        and not health.get("recovering")
    )


class Child:
    """One child process; stderr (and stdout unless piped) go to ``log_path``.
    ``new_session``: the child leads a session of its own (see the Popen call)."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log_path: Path,
        env: dict[str, str] | None = None,
        lines: queue.Queue[Line] | None = None,
        death_signal: int = signal.SIGTERM,
        cwd: Path | None = None,
        new_session: bool = False,
    ) -> None:
        from streams.demo.guard import guarded

        self.name = name
        self.log_path = log_path
        self._log: IO[bytes] = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            guarded(os.getpid(), int(death_signal), list(argv)),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if lines is not None else self._log,
            stderr=self._log,
            env=env,
            cwd=cwd,
            # A session of its own (setsid) gets its own share of the CPU where
            # the kernel groups by session (sched_autogroup_enabled), as a
            # service under systemd would; it no longer gets the terminal's
            # Ctrl-C, so the starter must stop it, and the guard's death
            # signal still fires when the starter dies.
            start_new_session=new_session,
        )
        self.paused = False
        self._reader: threading.Thread | None = None
        if lines is not None:
            self._reader = threading.Thread(
                target=self._read, args=(lines,), name=f"demo-{name}-stdout", daemon=True
            )
            self._reader.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self, lines: queue.Queue[Line]) -> None:
        stdout = self.proc.stdout
        assert stdout is not None
        for raw in iter(lambda: stdout.readline(MAX_LINE_BYTES), b""):
            lines.put((time.monotonic(), self.name, raw.rstrip(b"\r\n")))
        lines.put((time.monotonic(), self.name, None))

    def poll(self) -> int | None:
        return self.proc.poll()

    def pause(self) -> None:
        """SIGSTOP: the process freezes wherever it is (think GC pause, VM
        migration, a laptop lid); its lease keeps running out meanwhile."""
        self.proc.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)
        self.paused = False

    def kill(self) -> None:
        """SIGKILL (a crash: no shutdown code runs), and reap it."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def wait(self, timeout: float) -> int:
        """The exit status; raises subprocess.TimeoutExpired."""
        return self.proc.wait(timeout)

    def stop(self, timeout: float = _STOP_WAIT_S) -> int:
        """SIGTERM (and SIGCONT), then SIGKILL after ``timeout``; returns the status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            if self.paused:
                self.resume()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)
        if self._reader is not None:
            self._reader.join(timeout)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._log.close()
        return int(self.proc.returncode)

    def tail(self, max_bytes: int = 3000) -> str:
        """The end of the child's log (for error messages; after stop too)."""
        if not self._log.closed:
            self._log.flush()
        try:
            data = self.log_path.read_bytes()
        except OSError:
            return ""
        return data[-max_bytes:].decode("utf-8", "replace")


class Children:
    """The children of one demo; leaving the block stops them all, newest first."""

    def __init__(self) -> None:
        self._children: list[Child] = []
        self.lines: queue.Queue[Line] = queue.Queue(MAX_QUEUED_LINES)

    def start(self, name: str, argv: Sequence[str], *, log_path: Path, **kwargs: Any) -> Child:
        child = Child(name, argv, log_path=log_path, **kwargs)
        self._children.append(child)
        return child

    def stop_all(self) -> None:
        # Stop every child even if one of them fails to stop.
        errors: list[BaseException] = []
        for child in reversed(self._children):
            try:
                child.stop()
            except BaseException as exc:
                errors.append(exc)
        self._children.clear()
        if errors:
            raise errors[0]

    def __enter__(self) -> Children:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()
