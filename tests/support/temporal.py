"""A real Temporal server for the tests: ``temporal server start-dev`` (the
CLI built once by ``scripts/temporal-local build`` into the cache), headless,
in-memory, on free ports of 127.0.0.1, in its own process group that is
stopped afterwards whatever happened."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from streams.demo.guard import guarded
from tests.support.worker import free_port

__all__ = ["temporal_binary", "temporal_server"]

ROOT = Path(__file__).resolve().parents[2]
_START_S = 90.0


def temporal_binary() -> str:
    """The Temporal CLI's path, built first if the cache has none (progress
    on stderr; about 3 minutes once). Fails the test in one line when it
    cannot be built (no Go)."""
    out = subprocess.run(
        [str(ROOT / "scripts" / "temporal-local"), "build"],
        stdout=subprocess.PIPE,
        stderr=None,  # the build's progress, as it happens
        text=True,
        check=False,
    )
    if out.returncode != 0 or not out.stdout.strip():
        pytest.fail("the Temporal CLI could not be built (scripts/temporal-local build, above)")
    return out.stdout.strip().splitlines()[-1]


async def _answers(address: str) -> bool:
    from temporalio.client import Client

    try:
        # Connecting asks the server for its system info: it answers only once up.
        await Client.connect(address)
    except Exception:
        return False
    return True


@contextmanager
def temporal_server(work: Path) -> Iterator[str]:
    """Start the dev server; yields its frontend address (``127.0.0.1:PORT``,
    namespace ``default``). Its log is ``work/temporal.log``."""
    exe = temporal_binary()
    port, http, metrics = free_port(), free_port(), free_port()
    argv = [exe, "server", "start-dev", "--headless", "--ip", "127.0.0.1"]
    argv += ["--port", str(port), "--http-port", str(http), "--metrics-port", str(metrics)]
    argv += ["--log-level", "warn"]
    work.mkdir(parents=True, exist_ok=True)
    log_path = work / "temporal.log"
    log = log_path.open("wb")
    # Its own process group (stopped as one), and SIGKILL if pytest dies first.
    proc = subprocess.Popen(
        guarded(os.getpid(), int(signal.SIGKILL), argv),
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + _START_S
        while not asyncio.run(_answers(address)):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(
                    f"temporal server start-dev did not answer on {address}:"
                    f" {log_path.read_text(errors='replace')[-2000:]}",
                    pytrace=False,
                )
            time.sleep(0.2)
        yield address
    finally:
        _stop_group(proc)
        log.close()


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the server's process group, SIGKILL after 10 s."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
