"""The faust engine's bounded stop counts from the signal's arrival, not from
when the busy event loop gets to it (streams/live/faust/run.py,
faust_seam.take_stop_signals). A real asyncio loop and mode's real Worker
signal installation; no broker."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections.abc import Iterator

import mode
import pytest

from streams.live.faust import run as faust_run
from streams.live.faust import seam as faust_seam
from streams.live.stopping import STOP_BOUND_S

#: The supervisor fixture's clock: a test sets the time it reads.
now = [100.0]


@pytest.fixture
def supervisor() -> Iterator[faust_run._Supervisor]:
    sup = faust_run._Supervisor(clock=lambda: now[0])
    yield sup
    if sup._watchdog is not None:
        sup._watchdog.cancel()
    faust_run._loud_tracebacks()  # on_signal quiets them process-wide


def test_the_watchdog_runs_for_the_bound_less_what_the_signal_waited_for_the_loop(
    supervisor: faust_run._Supervisor, caplog: pytest.LogCaptureFixture
) -> None:
    """A signal that reached the process 3.5 s before the loop ran its callback leaves
    the watchdog 3.5 s less, and the stop line says how long the signal waited."""
    now[0] = 100.0
    supervisor.note_arrival(signal.SIGTERM)
    now[0] = 103.5
    with caplog.at_level(logging.INFO, logger=faust_run.__name__):
        supervisor.on_signal(signal.SIGTERM)
    assert supervisor._watchdog is not None
    assert supervisor._watchdog.interval == pytest.approx(STOP_BOUND_S - 3.5)
    assert "the signal waited 3.5 s for the event loop" in caplog.text


def test_a_signal_the_loop_takes_at_once_gets_the_whole_bound(
    supervisor: faust_run._Supervisor, caplog: pytest.LogCaptureFixture
) -> None:
    """Taken within a second of its arrival (or with no arrival noted, between two
    apps), the watchdog gets the whole bound and the line no delay."""
    now[0] = 50.0
    with caplog.at_level(logging.INFO, logger=faust_run.__name__):
        supervisor.on_signal(signal.SIGTERM)
    assert supervisor._watchdog is not None
    assert supervisor._watchdog.interval == pytest.approx(STOP_BOUND_S)
    assert "waited" not in caplog.text


def test_arrival_is_noted_while_the_loop_is_busy_and_the_loop_still_gets_the_signal() -> None:
    """With mode's own handlers installed on a real loop, a SIGTERM sent while a
    callback holds the loop for 0.5 s is noted at once (during the callback), and
    the loop still runs mode's handler, routed to on_signal, afterwards."""
    loop = asyncio.new_event_loop()
    worker = mode.Worker(loop=loop)
    arrivals: list[float] = []
    taken: list[tuple[int, float]] = []
    faust_seam.take_stop_signals(
        worker,
        lambda signum: taken.append((signum, time.monotonic())),
        lambda signum, _frame: arrivals.append(time.monotonic()),
    )
    busy_until: list[float] = []

    def busy() -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        end = time.monotonic() + 0.5
        while time.monotonic() < end:  # Python bytecodes: the handler may run
            pass
        busy_until.append(time.monotonic())

    try:
        worker.install_signal_handlers()
        loop.call_soon(busy)
        loop.run_until_complete(asyncio.sleep(0.2))
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2):
            loop.remove_signal_handler(sig)
        loop.close()
    assert len(arrivals) == 1 and arrivals[0] < busy_until[0]
    assert [s for s, _ in taken] == [signal.SIGTERM]
    assert taken[0][1] >= busy_until[0]


def test_a_second_signal_ends_the_process_in_the_handler_without_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A second SIGTERM/SIGINT ends the process from the Python-level handler itself
    (exit status 128 + signal), even before the loop has run the first one's callback."""
    exits: list[tuple[int, str]] = []

    def fake_exit(_log: logging.Logger, code: int, line: str) -> None:
        exits.append((code, line))

    monkeypatch.setattr(faust_run, "hard_exit", fake_exit)
    clock = iter([10.0, 20.0])
    sup = faust_run._Supervisor(clock=lambda: next(clock))
    sup.note_arrival(signal.SIGTERM)
    assert exits == []
    sup.note_arrival(signal.SIGINT)
    assert sup._arrived == 10.0  # the bound stays the first signal's
    assert [code for code, _ in exits] == [128 + signal.SIGINT]
    assert exits[0][1].startswith("SIGINT again: stopping at once; ")
