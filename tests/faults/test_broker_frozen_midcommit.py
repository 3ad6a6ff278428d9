"""The broker frozen (SIGSTOP: a grey failure) while the rdkafka engine
commits every 0.1 s: the commit that times out or hangs replaces the
producer before anything else is sent (issue 42 item 5), and the findings
stay exactly the audit's once the broker is thawed."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.faults.test_broker_restart_midstream import (
    no_duplicates_and_audit,
    topic_factory,
    trickle,
)
from tests.live.conftest import LiveHarness

pytestmark = [pytest.mark.kafka, pytest.mark.faults]


@pytest.mark.timeout(600)
def test_a_commit_on_a_frozen_broker_replaces_the_producer(
    restartable_kafka: Any, tmp_path: Path
) -> None:
    """Broker SIGSTOPped 20 s mid-stream: one line saying the commit timed out
    (or hung) and the producer was replaced; no abort on the old producer;
    the worker alive; every finding revision once, equal to the audit."""
    broker = restartable_kafka
    h = LiveHarness(broker.bootstrap, topic_factory(broker.bootstrap), tmp_path, 3, "rdkafka")
    try:
        events = h.scenario_events(n_keys=300, epochs=4, seed=23)
        w = h.start(extra={"FENCEWATCH_SESSION_TIMEOUT": "30"})
        w.wait_ready()
        feeder = threading.Thread(target=trickle, args=(h, events))
        feeder.start()
        w.wait_processed(len(events) // 4, timeout=120)
        pid = int((broker.state_dir / "pid").read_text().strip())
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(20)  # past the commit's 10 s bound (and its 5 s grace)
        finally:
            os.kill(pid, signal.SIGCONT)
        feeder.join()
        h.wait_all_committed(timeout=300)
        assert w.proc.poll() is None, f"worker exited: {w.tail()}"
        log = w.tail(2_000_000)
        warnings = "\n".join(
            line[:300] for line in log.splitlines() if " WARNING " in line or " ERROR " in line
        )
        assert re.search(
            r"(commit timed out|commit failed|transactional call hung) \(\w+\) while committing",
            log,
        ), warnings or log[-3000:]
        assert "abort failed" not in log, warnings
        latest = no_duplicates_and_audit(h)
        assert len(latest) > 100
    finally:
        h.close()
