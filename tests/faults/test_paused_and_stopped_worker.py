"""The rdkafka engine as an operator meets it: a worker frozen past its session
timeout under load rejoins instead of crashing, and a worker told to stop
after its broker died stops within the stated bound."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from streams.live.rdkafka_run import STOP_BOUND_S
from tests.faults.test_broker_restart_midstream import topic_factory
from tests.faults.test_rebalance_storm import feed
from tests.live.conftest import LiveHarness
from tests.live.test_live_kafka import assert_exactly_once_and_audit, assert_status_equals_audit

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
    thawed: a's stale transaction never becomes visible, both processes stay
    up, both hold partitions and consume again, and every (finding id,
    revision) is seen exactly once, equal to the audit."""
    h = live(partitions=4, engine="rdkafka")
    a = h.start("a")
    b = h.start("b")
    a.wait_ready()
    b.wait_ready()
    events = h.scenario_events(n_keys=400, epochs=4, seed=29)
    half = len(events) // 2
    feeder = threading.Thread(target=feed, args=(h, events[:half], 20.0))
    feeder.start()
    a.wait_processed(200, timeout=60)
    os.kill(a.proc.pid, signal.SIGSTOP)
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
    finally:
        os.kill(a.proc.pid, signal.SIGCONT)
    feeder.join()
    # a rejoins: the group rebalances and both hold partitions again.
    _wait(
        lambda: bool((a.health() or {}).get("partitions")) and bool(
            (b.health() or {}).get("partitions")
        ),
        90,
        "both workers holding partitions after the thaw",
        h,
    )
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
def test_sigterm_after_the_broker_died_stops_the_rdkafka_worker_within_the_bound(
    restartable_kafka: Any, tmp_path: Path
) -> None:
    """With its broker killed (-9) mid-stream, a worker sent SIGTERM exits
    within the stated stop bound, saying in one line that its last
    transaction was not committed, without a traceback."""
    broker = restartable_kafka
    h = LiveHarness(broker.bootstrap, topic_factory(broker.bootstrap), tmp_path, 3, "rdkafka")
    try:
        w = h.start()
        w.wait_ready()
        events = h.scenario_events(n_keys=100, epochs=3, seed=3)
        h.produce(events)
        w.wait_processed(len(events) // 2, timeout=60)
        broker.kill9()
        w.proc.send_signal(signal.SIGTERM)
        began = time.monotonic()
        w.proc.wait(STOP_BOUND_S + 5)
        took = time.monotonic() - began
        log = w.tail(100_000)
        assert took <= STOP_BOUND_S + 2, (took, log)
        assert "SIGTERM: stopping" in log, log
        assert "not committed" in log, log
        assert "Traceback" not in log, log
    finally:
        h.close()
        broker.start()
