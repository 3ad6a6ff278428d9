"""A zombie made by the network (issue 22): one of two workers is cut off
from the cluster past its session timeout, the other takes its partitions,
then the network heals. The cut-off worker's late transactions must be
fenced: findings exactly the audit's, every revision once, DLQ empty, both
workers up after healing (the last is a known defect: the faust worker exits
on ProducerFenced; the test reports it as xfail after the safety checks)."""

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
        cut = ProcessIsolation(w1.proc.pid)
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
        if w1.proc.poll() is not None and "ProducerFenced" in w1.tail(20000):
            # Known defect (docs/reliability.md): the healed zombie's commit is
            # refused (fenced, as it must be), and the faust worker then exits
            # instead of dropping the batch and rejoining the group.
            pytest.xfail("the healed zombie worker exits on ProducerFenced instead of rejoining")
        assert w1.proc.poll() is None, f"w1 exited after healing: {w1.tail()}"
    finally:
        h.close()
        kafka_cluster.ensure_all_up()
