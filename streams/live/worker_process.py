"""A ``fencewatch run`` worker as a child process, watched through its
``/health`` endpoint: what the live tests and benchmarks start, stop, kill -9
and wait on (one implementation for both, so they measure what they test).

Not used by the worker itself; an adapter for whoever runs workers.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from streams.errors import FencewatchError

__all__ = ["WorkerProcess", "WorkerProcessError", "free_port", "is_ready", "read_health"]


class WorkerProcessError(FencewatchError):
    """The worker exited, or did not become ready (or busy) in time; the
    message carries the tail of its log."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def read_health(port: int) -> dict[str, Any] | None:
    """The ``/health`` document of the worker serving on ``port``, or None
    while nothing (valid) answers there."""
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


class WorkerProcess:
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
    ) -> None:
        self.name = name
        self.port = free_port()
        self.log_path = log_path
        full = dict(os.environ)
        full.update(env)
        # The harness names its own (run-unique) topics: creating them is asked for.
        full.setdefault("FENCEWATCH_CREATE_TOPICS", "true")
        full["FENCEWATCH_METRICS_PORT"] = str(self.port)
        self.log: IO[bytes] = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.started = time.monotonic()
        #: Seconds from start to the first ready health answer (wait_ready).
        self.ready_after: float | None = None
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "streams", "run"],
            cwd=cwd,
            env=full,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

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
        """Resident memory of the worker (Linux ``/proc``), 0 if unknown."""
        try:
            status = Path(f"/proc/{self.proc.pid}/status").read_text()
        except OSError:
            return 0
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def kill(self) -> None:
        """kill -9, and reap it."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM (the worker leaves its group at once), SIGKILL after
        ``timeout``; idempotent."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()

    def tail(self, n: int = 4000) -> str:
        """The last ``n`` bytes of the worker's log."""
        if not self.log.closed:
            self.log.flush()
        return self.log_path.read_bytes()[-n:].decode("utf-8", "replace")
