"""``fencewatch run`` supervises its engine (streams/live/supervisor.py,
issue 42): on a real broker, an engine that dies of a signal or stalls is
one log line and a restart with findings still exact, and a kill -9 of the
supervisor leaves no engine behind."""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.live.conftest import ENGINES
from tests.live.test_live_kafka import assert_exactly_once_and_audit, assert_status_equals_audit
from tests.support.worker import WorkerProcess

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

Live = Callable[..., Any]


def _wait_for(
    predicate: Callable[[], bool], timeout: float, what: str, worker: WorkerProcess
) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what} not within {timeout} s: {worker.tail()}"
        time.sleep(0.1)


def _restart_lines(worker: WorkerProcess) -> list[str]:
    # faulthandler's last stack line has no newline of its own: cut at the prefix.
    return re.findall(r"ERROR streams\.live\.supervisor: [^\n]*", worker.tail(1_000_000))


@pytest.mark.timeout(240)
@pytest.mark.parametrize("engine", ENGINES)
def test_an_engine_that_dies_of_a_signal_is_restarted_exactly_once(live: Live, engine: str) -> None:
    """SIGSEGV of the engine mid-stream: one line naming the signal and the
    partitions, a new engine, the restart counted, the findings exact."""
    h = live(partitions=3, engine=engine)
    events = h.scenario_events(n_keys=300, epochs=4)
    w = h.start("w")
    w.wait_ready()
    first = w.engine_pid()
    h.produce(events[: len(events) // 2])
    w.wait_processed(len(events) // 6)
    time.sleep(2.0)  # its report of the partitions reaches the supervisor (each second)
    os.kill(first, signal.SIGSEGV)
    _wait_for(lambda: bool(_restart_lines(w)), 30, "the restart line", w)
    (line,) = _restart_lines(w)
    assert re.search(
        rf"the {engine} engine \(pid {first}\) died of SIGSEGV .*holding partitions \[0, 1, 2\]; "
        r"restarting it in 1 s \(restart 1 of at most 5 within 600 s\)",
        line,
    ), line
    assert "Fatal Python error: Segmentation fault" in w.tail(1_000_000)  # faulthandler's stacks
    _wait_for(lambda: w.engine_pid(timeout=0) not in (first, w.proc.pid), 30, "a new engine", w)
    w.wait_ready(timeout=90)
    h.produce(events[len(events) // 2 :])
    h.wait_all_committed(timeout=90)
    assert w.proc.poll() is None
    assert "fencewatch_engine_restarts_total 1.0" in w.metrics()
    latest = assert_exactly_once_and_audit(h)
    assert len(latest) > 100
    assert_status_equals_audit(h)


@pytest.mark.timeout(240)
def test_an_engine_that_stops_reporting_is_killed_and_restarted(live: Live) -> None:
    """An engine frozen on its own (the supervisor still runs) past 3 x
    --stall-timeout is killed and restarted, with one line saying so."""
    h = live(partitions=2)
    w = h.start("w", extra={"FENCEWATCH_STALL_TIMEOUT": "5"})
    w.wait_ready()
    first = w.engine_pid()
    time.sleep(2.0)  # its report of the partitions reaches the supervisor (each second)
    os.kill(first, signal.SIGSTOP)
    _wait_for(lambda: bool(_restart_lines(w)), 60, "the restart line", w)
    (line,) = _restart_lines(w)
    assert f"(pid {first}) stopped reporting for 15 s (killed), holding partitions [0, 1]" in line
    w.wait_ready(timeout=90)
    assert w.engine_pid() != first
    health = w.health() or {}
    assert health["stalled"] is False and health["pid"] == w.engine_pid()


@pytest.mark.timeout(120)
def test_kill_9_of_the_supervisor_leaves_no_engine(live: Live, tmp_path: Path) -> None:
    """The engine dies with its supervisor (PR_SET_PDEATHSIG): no orphan worker."""
    h = live(partitions=1)
    w = h.start("w")
    w.wait_ready()
    engine = w.engine_pid()
    assert engine != w.proc.pid
    w.proc.send_signal(signal.SIGKILL)
    w.proc.wait(10)
    deadline = time.monotonic() + 10
    while Path(f"/proc/{engine}").exists() and time.monotonic() < deadline:
        state = Path(f"/proc/{engine}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if state == "Z":
            break
        time.sleep(0.05)
    else:
        assert not Path(f"/proc/{engine}").exists(), f"engine {engine} outlived its supervisor"
