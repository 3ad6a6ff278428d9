"""A ``fencewatch run`` worker as a child process, watched through its
``/health`` endpoint: what the live tests and benchmarks start, stop, kill -9
and wait on (one implementation for both, so they measure what they test).

A thin layer over the product's one child-process supervisor,
:class:`streams.demo.processes.Child` (the demos run their processor with it):
the worker also dies with the test process, even one killed with SIGKILL.
Test support, not shipped (tests/kafka/test_wheel_contents.py).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from streams.demo.processes import Child, free_port, is_ready, read_health
from streams.errors import FencewatchError

__all__ = ["WorkerProcess", "WorkerProcessError", "free_port", "is_ready", "read_health"]


class WorkerProcessError(FencewatchError):
    """The worker exited, or did not become ready (or busy) in time; the
    message carries the tail of its log."""


class WorkerProcess(Child):
    """``python -m streams run`` with ``env`` on top of this process's
    environment, its output in ``log_path`` and its metrics/health server on a
    free port (``FENCEWATCH_METRICS_PORT``)."""

    def __init__(
        self,
        env: Mapping[str, str],
        log_path: Path,
        *,
        name: str = "worker",
        cwd: Path | None = None,
        new_session: bool = False,
    ) -> None:
        self.port = free_port()
        full = dict(os.environ)
        full.update(env)
        # The harness names its own (run-unique) topics: creating them is asked for.
        full.setdefault("FENCEWATCH_CREATE_TOPICS", "true")
        full["FENCEWATCH_METRICS_PORT"] = str(self.port)
        self.started = time.monotonic()
        #: Seconds from start to the first ready health answer (wait_ready).
        self.ready_after: float | None = None
        super().__init__(
            name,
            [sys.executable, "-m", "streams", "run"],
            log_path=log_path,
            env=full,
            cwd=cwd,
            new_session=new_session,
        )

    def engine_pid(self, timeout: float = 30.0) -> int:
        """The engine's pid: ``fencewatch run`` supervises its engine in a
        child process (streams/live/supervisor.py), its only child; the
        process itself with ``FENCEWATCH_SUPERVISE=false``. Waits for it."""
        deadline = time.monotonic() + timeout
        pid = self.proc.pid
        while True:
            try:
                kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            except OSError:
                kids = []
            if kids:
                return int(kids[0])
            if self.proc.poll() is not None or time.monotonic() > deadline:
                return pid  # not supervised (or gone): the process is the engine
            time.sleep(0.05)

    def pause(self) -> None:
        """SIGSTOP the whole worker, supervisor and engine: a frozen host
        (a suspended VM, a GC stop of everything)."""
        engine = self.engine_pid()
        super().pause()
        if engine != self.proc.pid:
            os.kill(engine, signal.SIGSTOP)
        self._frozen_engine = engine

    def resume(self) -> None:
        engine = getattr(self, "_frozen_engine", None)
        if engine is not None and engine != self.proc.pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(engine, signal.SIGCONT)
        super().resume()

    def kill(self) -> None:
        """SIGKILL the whole worker (a crash: no shutdown code runs), engine
        first, and wait until both are gone."""
        engine = self.engine_pid(timeout=0)
        if engine != self.proc.pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(engine, signal.SIGKILL)
        super().kill()
        _wait_gone(engine)

    def health(self) -> dict[str, Any] | None:
        """The ``/health`` document, or None while the server does not answer."""
        return read_health(self.port)

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=2) as r:
            return str(r.read().decode())

    def wait_ready(self, timeout: float = 120.0) -> dict[str, Any]:
        """Wait until the worker holds partitions and is not recovering; return
        its health document. Raises :class:`WorkerProcessError` if it exits."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise WorkerProcessError(
                    f"worker {self.name} exited with {self.proc.returncode}: {self.tail()}"
                )
            h = self.health()
            if h is not None and is_ready(h):
                self.ready_after = time.monotonic() - self.started
                return h
            time.sleep(0.05)
        raise WorkerProcessError(f"worker {self.name} not ready in {timeout} s: {self.tail()}")

    def wait_processed(self, n: int, timeout: float = 30.0) -> None:
        """Wait until the worker reports at least ``n`` processed events."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            h = self.health()
            if h and h.get("processed", 0) >= n:
                return
            time.sleep(0.05)
        raise WorkerProcessError(f"worker {self.name} did not process {n} events: {self.tail()}")

    def rss_bytes(self) -> int:
        """Resident memory of the worker's engine (Linux ``/proc``), 0 if unknown."""
        try:
            status = Path(f"/proc/{self.engine_pid(timeout=0)}/status").read_text()
        except OSError:
            return 0
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def tail(self, max_bytes: int = 4000) -> str:
        """The last ``max_bytes`` of the worker's log."""
        return super().tail(max_bytes)


def _wait_gone(pid: int, timeout: float = 10.0) -> None:
    """Until ``pid`` no longer runs (a zombie counts as gone)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return
        if state == "Z":
            return
        time.sleep(0.02)
    raise WorkerProcessError(f"process {pid} still runs {timeout} s after SIGKILL")
