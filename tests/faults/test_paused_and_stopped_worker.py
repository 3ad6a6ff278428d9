"""Both engines as an operator meets them: a worker frozen past its session
timeout under load rejoins instead of crashing, and a worker told to stop
after its broker died stops within the stated bound."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from streams.live.faust.run import STOP_BOUND_S as FAUST_STOP_BOUND_S
from streams.live.rdkafka.run import STOP_BOUND_S
from tests.faults.test_broker_restart_midstream import topic_factory
from tests.faults.test_rebalance_storm import feed
from tests.live.conftest import LiveHarness
from tests.live.test_live_kafka import assert_exactly_once_and_audit, assert_status_equals_audit
from tests.support.worker import WorkerProcess

pytestmark = [pytest.mark.kafka, pytest.mark.faults]

Live = Callable[..., Any]


def _wait(predicate: Callable[[], bool], timeout: float, what: str, h: LiveHarness) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    logs = "\n".join(w.tail() for w in h.workers)
    raise AssertionError(f"{what} not within {timeout} s\n{logs}")


def _freeze_with_open_transaction(h: LiveHarness, worker: WorkerProcess) -> None:
    """SIGSTOP ``worker`` at a moment its transaction is open on an output
    partition: one whose last stable offset stays put below its high
    watermark across 0.5 s (the live worker's transactions move theirs every
    commit interval). A brief freeze that missed is thawed and tried again,
    well within the session timeout."""
    with h.output_probe() as marks:
        for _ in range(10):
            worker.pause()
            first = marks()
            time.sleep(0.5)
            second = marks()
            held = [tp for tp, (lso, hw) in second.items() if lso < hw and first[tp][0] == lso]
            if held:
                return
            worker.resume()
            time.sleep(0.3)
    raise AssertionError("the frozen worker never had a transaction open on the outputs")


def _paused_worker_rejoins(h: LiveHarness, *, fenced_while_frozen: bool = False) -> None:
    """Worker a frozen under load until b holds every partition and has
    processed past it, then thawed; the assertions of both engines' tests.
    ``fenced_while_frozen``: a's transactions time out only after 120 s, and
    while a is still frozen every event fed must be committed by b with no
    transaction left open on the outputs (b fenced a's transactional id)."""
    extra = {"FENCEWATCH_TRANSACTION_TIMEOUT": "120"} if fenced_while_frozen else {}
    a = h.start("a", extra=extra)
    b = h.start("b")
    a.wait_ready()
    b.wait_ready()
    events = h.scenario_events(n_keys=400, epochs=4, seed=29)
    half = len(events) // 2
    feeder = threading.Thread(target=feed, args=(h, events[:half], 20.0))
    feeder.start()
    a.wait_processed(200, timeout=60)
    if fenced_while_frozen:
        _freeze_with_open_transaction(h, a)
    else:
        a.pause()
    try:
        paused_at = b.health() or {}
        _wait(
            lambda: set((b.health() or {}).get("partitions", [])) == set(range(4)),
            60,
            "b taking every partition",
            h,
        )
        before = paused_at.get("processed", 0)
        _wait(
            lambda: (b.health() or {}).get("processed", 0) > before + 200,
            60,
            "b processing a's partitions",
            h,
        )
        if fenced_while_frozen:
            feeder.join()
            # Outputs stable: a's open transaction was aborted, long before
            # its 120 s timeout (without the fence this waits for it).
            h.wait_all_committed(timeout=60)
            assert "fenced transactional id" in b.tail(400_000), b.tail()
    finally:
        a.resume()
    feeder.join()

    # a rejoins: the group rebalances and both hold partitions again. Their
    # assignments must also split the partitions between them: right after
    # the thaw, a's /health still listed the partitions it held before it
    # was frozen (it had not yet heard they were gone), which alone passed
    # this wait while b held everything (CI, session 12).
    def split_between_them() -> bool:
        held_a = set((a.health() or {}).get("partitions", []))
        held_b = set((b.health() or {}).get("partitions", []))
        return (
            bool(held_a)
            and bool(held_b)
            and held_a | held_b == set(range(4))
            and not (held_a & held_b)
        )

    _wait(split_between_them, 90, "both workers holding partitions after the thaw", h)
    a_before = (a.health() or {}).get("processed", 0)
    h.produce(events[half:])
    h.wait_all_committed(timeout=120)
    assert a.proc.poll() is None, a.tail()
    assert b.proc.poll() is None, b.tail()
    assert (a.health() or {}).get("processed", 0) > a_before, a.tail()
    latest = assert_exactly_once_and_audit(h)
    assert len(latest) > 100
    assert_status_equals_audit(h)
    log = a.tail(400_000)
    assert "Traceback" not in log, log
    assert "lost" in log or "fenced" in log or "stale generation" in log, log


@pytest.mark.timeout(300)
# Found by this test (CI run of 2026-12-02: 208 events processed before the
# thaw, 208 after): a worker whose commit failed with a stale generation
# rewound the partitions it no longer held (waiting on their changelog while
# the new owner wrote it) instead of polling, so it never rejoined, and its
# /health still listed them. docs/live.md.
def test_a_paused_rdkafka_worker_rejoins_with_exact_findings_and_no_duplicates(
    live: Live,
) -> None:
    """Worker a is frozen (SIGSTOP) under load until b holds every partition
    (past the session timeout) and has committed in the new generation, then
    thawed: b fenced a's transactional id when it took a's partitions, so
    with a 120 s transaction timeout every event is committed and no
    transaction is open on the outputs while a is still frozen; a's stale
    transaction never becomes visible, both processes stay up, both hold
    partitions and consume again, and every (finding id, revision) is seen
    exactly once, equal to the audit."""
    _paused_worker_rejoins(live(partitions=4, engine="rdkafka"), fenced_while_frozen=True)


@pytest.mark.timeout(300)
def test_a_paused_faust_worker_rejoins_with_exact_findings_and_no_duplicates(
    live: Live,
) -> None:
    """The same on the faust engine: the thawed worker's fenced producer
    publishes nothing more, it says so in one line (no traceback), restarts
    its app in the same process, rejoins the group, holds partitions and
    consumes again; findings and status equal the audit, no duplicates."""
    h = live(partitions=4, engine="faust")
    _paused_worker_rejoins(h)
    log = h.workers[0].tail(400_000)
    assert "restarting the faust app in this process" in log, log
    assert "App Crashed" not in log, log


def _stop_without_broker(broker: Any, tmp_path: Path, engine: str) -> str:
    """Kill (-9) the broker mid-stream, SIGTERM the worker: it exits within
    the bound, saying so in one line, without a traceback; its log."""
    h = LiveHarness(broker.bootstrap, topic_factory(broker.bootstrap), tmp_path, 3, engine)
    try:
        w = h.start()
        w.wait_ready()
        events = h.scenario_events(n_keys=100, epochs=3, seed=3)
        h.produce(events)
        w.wait_processed(len(events) // 2, timeout=60)
        broker.kill9()
        w.proc.send_signal(signal.SIGTERM)
        began = time.monotonic()
        with contextlib.suppress(subprocess.TimeoutExpired):
            w.proc.wait(STOP_BOUND_S + 5)
        took = time.monotonic() - began
        log = w.log_path.read_text("utf-8", "replace")  # a dead broker's client logs are long
        # The lines that say what the stop did, last: a CI log's tail shows them.
        stops = "\n".join(line for line in log.splitlines() if "stopping" in line)
        assert took <= STOP_BOUND_S + 2, f"{log[-3000:]}\n{stops}\nstopped after {took:.1f} s"
        assert "SIGTERM: stopping" in log, f"{log[-3000:]}\nno 'SIGTERM: stopping' line"
        tracebacks = [i for i, line in enumerate(log.splitlines()) if "Traceback" in line]
        assert not tracebacks, f"{log[-3000:]}\na traceback at log line(s) {tracebacks[:5]}"
        return log
    finally:
        h.close()
        broker.start()


@pytest.mark.timeout(300)
def test_sigterm_after_the_broker_died_stops_the_rdkafka_worker_within_the_bound(
    restartable_kafka: Any, tmp_path: Path
) -> None:
    """With its broker killed (-9) mid-stream, a worker sent SIGTERM exits
    within the stated stop bound, saying in one line that its last
    transaction was not committed, without a traceback."""
    log = _stop_without_broker(restartable_kafka, tmp_path, "rdkafka")
    assert "not committed" in log, log


@pytest.mark.timeout(300)
def test_sigterm_after_the_broker_died_stops_the_faust_worker_within_the_bound(
    restartable_kafka: Any, tmp_path: Path
) -> None:
    """The same on the faust engine (its bound is the same, FAUST_STOP_BOUND_S):
    gone within it, one line saying what was or was not committed, no
    traceback (mode's stop timeouts included)."""
    assert FAUST_STOP_BOUND_S == STOP_BOUND_S
    log = _stop_without_broker(restartable_kafka, tmp_path, "faust")
    assert "not committed" in log or "every processed event committed" in log, log


@pytest.mark.timeout(300)
def test_a_second_sigterm_stops_the_faust_worker_at_once(
    restartable_kafka: Any, tmp_path: Path
) -> None:
    """With its broker killed, a faust worker whose first SIGTERM's stop is
    still waiting on the broker ends at once on a second SIGTERM, in one
    line, without a traceback."""
    broker = restartable_kafka
    h = LiveHarness(broker.bootstrap, topic_factory(broker.bootstrap), tmp_path, 3, "faust")
    try:
        w = h.start()
        w.wait_ready()
        broker.kill9()
        w.proc.send_signal(signal.SIGTERM)
        _wait(lambda: b"SIGTERM: stopping" in w.log_path.read_bytes(), 10, "the first stop", h)
        w.proc.send_signal(signal.SIGTERM)
        began = time.monotonic()
        w.proc.wait(STOP_BOUND_S)
        took = time.monotonic() - began
        log = w.log_path.read_text("utf-8", "replace")
        assert took < 3, (took, log[-4000:])
        assert "SIGTERM again: stopping at once" in log, log[-4000:]
        assert "no commit within" not in log, log[-4000:]
        assert "Traceback" not in log, log
    finally:
        h.close()
        broker.start()
