"""A zombie made by the network (issue 22): one of two workers is cut off
from the cluster past its session timeout, the other takes its partitions,
then the network heals. The cut-off worker's late transactions must be
fenced: findings exactly the audit's, every revision once, DLQ empty, both
workers up after healing, and the healed one (fenced) back in the group,
consuming again."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tests.cluster.conftest import LocalCluster, ProcessIsolation
from tests.faults.test_broker_restart_midstream import (
    no_duplicates_and_audit,
    topic_factory,
    trickle,
)
from tests.live.conftest import ENGINES, LiveHarness

pytestmark = [pytest.mark.kafka, pytest.mark.faults]


@pytest.mark.timeout(900)
@pytest.mark.parametrize("engine", ENGINES)
def test_worker_cut_off_past_its_session_is_fenced_after_healing(
    kafka_cluster: LocalCluster, tmp_path: Path, engine: str
) -> None:
    """Worker w1 isolated until w2 holds all three partitions, then healed:
    nothing w1 had in flight becomes visible twice, and both stay up."""
    kafka_cluster.ensure_all_up()
    h = LiveHarness(
        kafka_cluster.bootstrap, topic_factory(kafka_cluster.bootstrap), tmp_path, 3, engine
    )
    try:
        events = h.scenario_events(n_keys=400, epochs=4, seed=37)
        w1 = h.start("w1")
        w1.wait_ready(timeout=180)
        w2 = h.start("w2")
        w2.wait_ready(timeout=180)
        feeder = threading.Thread(target=trickle, args=(h, events))
        feeder.start()
        w1.wait_processed(len(events) // 10, timeout=300)
        cut = ProcessIsolation(w1.engine_pid())  # the supervised engine holds the sockets
        cut.isolate()
        try:
            deadline = time.monotonic() + 300
            while True:  # w2 takes every partition once w1's session expired
                health = w2.health() or {}
                if sorted(health.get("partitions", [])) == [0, 1, 2] and not health.get(
                    "recovering", True
                ):
                    break
                assert time.monotonic() < deadline, f"w2 never took over: {w2.tail()}"
                time.sleep(0.2)
        finally:
            cut.heal()
        feeder.join()
        h.wait_all_committed(timeout=600)
        assert w2.proc.poll() is None, f"w2 exited: {w2.tail()}"
        # Safety first: nothing the zombie had in flight became visible.
        latest = no_duplicates_and_audit(h)
        assert len(latest) > 100
        assert h.read(h.dlq) == []
        assert w1.proc.poll() is None, f"w1 exited after healing: {w1.tail()}"
        log = w1.log_path.read_text("utf-8", "replace")
        assert "Traceback" not in log, log[-4000:]
        if engine == "faust" and "producer fenced" in log:
            # Its commit was refused: it replaced its app and rejoined (the
            # rdkafka engine drops its partitions and rejoins, no new app).
            assert "restarting the faust app in this process" in log, log[-4000:]
        # Back in the group: after a later rebalance (w2 leaves) it takes
        # every partition and consumes what is produced then.
        w2.stop()
        deadline = time.monotonic() + 300
        while sorted((w1.health() or {}).get("partitions", [])) != [0, 1, 2]:
            assert w1.proc.poll() is None, f"w1 exited: {w1.tail()}"
            assert time.monotonic() < deadline, f"w1 never took over: {w1.tail()}"
            time.sleep(0.2)
        more = h.scenario_events(n_keys=50, epochs=2, seed=41)
        processed = (w1.health() or {}).get("processed", 0)
        h.produce(more)
        w1.wait_processed(processed + len(more), timeout=300)
        h.wait_all_committed(timeout=300)
        no_duplicates_and_audit(h)
        assert h.read(h.dlq) == []
        assert w1.proc.poll() is None, f"w1 exited: {w1.tail()}"
    finally:
        h.close()
        kafka_cluster.ensure_all_up()
