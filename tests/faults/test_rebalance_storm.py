"""A rebalance storm: live workers join, leave (SIGTERM) and die (SIGKILL) every
few seconds for a minute under a steady input; nothing is lost or duplicated."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from tests.live.conftest import ENGINES, LiveHarness, Worker

pytestmark = [pytest.mark.kafka, pytest.mark.faults]

Live = Callable[..., Any]
STORM_S = 60.0


def feed(h: LiveHarness, records: list[tuple[bytes, bytes]], seconds: float) -> None:
    """Produce ``records`` evenly over ``seconds``."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": h.bootstrap, "partitioner": "murmur2_random"})
    start = time.monotonic()
    for i, (key, value) in enumerate(records):
        delay = start + seconds * i / len(records) - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        p.produce(h.events, value, key=key)
        p.poll(0)
    assert p.flush(60) == 0


# Found by this test before fix 7 of streams/live/faust/seam.py (3 runs of 3
# failed): a rebalance dropped faust's ack bookkeeping before the revoke
# commit, so a kept partition's acked-but-uncommitted batch stayed in its open
# transaction, was processed again after the seek, and both copies committed
# (duplicates at consecutive offsets of the findings topic). docs/reliability.md.
@pytest.mark.timeout(600)
# On the rdkafka engine it found, after the two fixes of docs/live.md, a
# third (1 run of 2 failed: findings short of the audit, nothing logged): a
# batch during which the assignment changed was dropped whole, with the
# records librdkafka had fetched for the new assignment in it.
@pytest.mark.parametrize("engine", ENGINES)
def test_workers_joining_and_leaving_for_a_minute_lose_and_duplicate_nothing(
    live: Live, engine: str
) -> None:
    """For 60 s, every 2-5 s a worker joins, leaves gracefully, or is killed -9 (one to
    three alive, six partitions) while ~8,000 events arrive; afterwards every finding
    revision was published exactly once, none is missing, and the findings equal the audit."""
    h = live(partitions=6, engine=engine)
    events = h.scenario_events(n_keys=500, epochs=5, seed=21)
    rng = random.Random(4)
    alive: list[Worker] = []
    n = 0

    def join() -> None:
        nonlocal n
        n += 1
        alive.append(h.start(f"s{n}"))

    join()
    alive[0].wait_ready()
    feeder = threading.Thread(target=feed, args=(h, events, STORM_S))
    feeder.start()
    actions: Counter[str] = Counter()
    end = time.monotonic() + STORM_S
    while time.monotonic() < end:
        time.sleep(rng.uniform(2.0, 5.0))
        if len(alive) < 2 or (len(alive) < 3 and rng.random() < 0.5):
            join()
            actions["join"] += 1
        else:
            victim = alive.pop(rng.randrange(len(alive)))
            if rng.random() < float(__import__("os").environ.get("FW_STORM_KILL_P", "0.3")):
                victim.kill()
                actions["kill -9"] += 1
            else:
                victim.stop()
                actions["leave"] += 1
    feeder.join()
    # Everyone still alive must have survived the storm.
    for w in alive:
        assert w.proc.poll() is None, f"worker {w.name} exited: {w.tail()}"
    h.wait_all_committed(timeout=300)
    latest, seen = h.live_findings()
    assert [x for x, c in Counter(seen).items() if c > 1] == []
    revs: dict[str, set[int]] = {}
    for fid, rev in seen:
        revs.setdefault(fid, set()).add(rev)
    assert all(r == set(range(1, max(r) + 1)) for r in revs.values())
    assert latest == h.audit()
    assert len(latest) > 150
    print(f"rebalance storm: {dict(actions)} over {STORM_S:.0f} s, {len(events)} events")
    assert actions["join"] >= 5 and actions["leave"] + actions["kill -9"] >= 5
