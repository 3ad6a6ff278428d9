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

#: The line of a commit that timed out, failed or hung (each replaces the producer).
_REPLACED = r"(commit timed out|commit failed|transactional call hung) \(\w+\) while committing"


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
        # A 1 s commit interval: at almost any moment a transaction is open
        # (processed events waiting for their commit), so a freeze lands on a
        # commit. At 0.1 s a freeze sometimes fell between a commit and the
        # next records, and nothing failed (1 run of 4).
        w = h.start(extra={"FENCEWATCH_SESSION_TIMEOUT": "30", "FENCEWATCH_COMMIT_INTERVAL": "1"})
        w.wait_ready()
        feeder = threading.Thread(target=trickle, args=(h, events))
        feeder.start()
        pid = int((broker.state_dir / "pid").read_text().strip())
        for quarter in (1, 2, 3):  # a freeze that met no open transaction is tried again
            w.wait_processed(quarter * len(events) // 4, timeout=180)
            os.kill(pid, signal.SIGSTOP)
            try:
                time.sleep(20)  # past the commit's 10 s bound (and its 5 s grace)
            finally:
                os.kill(pid, signal.SIGCONT)
            if re.search(_REPLACED, w.tail(2_000_000)):
                break
        feeder.join()
        h.wait_all_committed(timeout=300)
        assert w.proc.poll() is None, f"worker exited: {w.tail()}"
        log = w.tail(2_000_000)
        warnings = "\n".join(
            line[:300] for line in log.splitlines() if " WARNING " in line or " ERROR " in line
        )
        assert re.search(_REPLACED, log), warnings or log[-3000:]
        assert "abort failed" not in log, warnings
        latest = no_duplicates_and_audit(h)
        assert len(latest) > 100
    finally:
        h.close()
