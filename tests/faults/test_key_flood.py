"""A flood of one workflow key (1,000,000 events) through a real live worker:
that key's state stays inside its bounds and the other keys' findings are unharmed."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from streams.core import KeyState
from streams.core.detector import DEFAULT_MAX_EVENTS_PER_KEY, DEFAULT_MAX_FINDINGS_PER_KEY
from streams.kafka.connection import KafkaConnection
from streams.kafka.reader import iter_topic
from streams.live.processor import split_value
from tests.live.conftest import ENGINES

pytestmark = [pytest.mark.kafka, pytest.mark.faults]

Live = Callable[..., Any]
FLOOD_KEY = "flood/one-key"
FLOOD_EVENTS = 1_000_000
# Bounds, not timings: the flooded key's serialized state, and the worker's
# resident memory growth over its idle size while it reads the flood.
STATE_BYTES_BOUND = 2 * 2**20
RSS_GROWTH_BOUND = 256 * 2**20


def flood() -> Iterator[tuple[bytes, bytes]]:
    """A new owner every 2,000 events; every 97th event a stale checkpoint of the
    previous owner (a finding revision), the rest current progress."""
    key = FLOOD_KEY.encode()
    for i in range(FLOOD_EVENTS):
        epoch = i // 2000 + 1
        if i % 2000 == 0:
            kind, e = "lease_acquired", epoch
        elif i % 97 == 0 and epoch > 1:
            kind, e = "progress", epoch - 1
        else:
            kind, e = "progress", epoch
        doc = {
            "type": kind,
            "workflow_key": FLOOD_KEY,
            "epoch": e,
            "worker_id": f"w{e}",
            "seq": i + 1,
        }
        yield key, json.dumps(doc, separators=(",", ":")).encode()


def produce_fast(bootstrap: str, topic: str, records: Iterator[tuple[bytes, bytes]]) -> None:
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "partitioner": "murmur2_random",
            "linger.ms": 20,
            "compression.type": "lz4",
            "queue.buffering.max.messages": 500_000,
        }
    )
    for n, (key, value) in enumerate(records):
        while True:
            try:
                p.produce(topic, value, key=key)
                break
            except BufferError:
                p.poll(0.05)
        if n % 10_000 == 0:
            p.poll(0)
    assert p.flush(120) == 0


@pytest.mark.timeout(900)
@pytest.mark.parametrize("engine", ENGINES)
def test_one_key_flood_keeps_its_state_bounded(live: Live, engine: str) -> None:
    """1,000,000 events of one key among 200 ordinary workflows: the flooded key's stored
    state holds at most 1,024 events and 512 finding identities (the rest counted as
    evicted/forgotten), its size stays under 2 MiB, the worker's RSS grows by less than
    256 MiB, no revision is emitted twice, and the other keys' findings equal the audit's."""
    h = live(partitions=3, engine=engine)
    others = h.scenario_events(n_keys=200, epochs=4)
    w = h.start()
    w.wait_ready()
    rss_idle = w.rss_bytes()
    peak = [rss_idle]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], w.rss_bytes())
            time.sleep(0.5)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        h.produce(others[: len(others) // 2])
        produce_fast(h.bootstrap, h.events, flood())
        h.produce(others[len(others) // 2 :])
        h.wait_all_committed(timeout=780)
    finally:
        done.set()
        sampler.join()
    assert w.proc.poll() is None, f"worker exited: {w.tail()}"

    # The flooded key's last stored state (the changelog is the table's truth).
    last: bytes | None = None
    changelog = f"{h.app_id}-owner-state-changelog"
    for key, value, _p, _o in iter_topic(KafkaConnection(h.bootstrap), changelog, timeout=60):
        if key == FLOOD_KEY.encode() and value is not None:
            last = value
    assert last is not None
    state = KeyState.from_bytes(split_value(last)[0])  # the status meta trails the state
    counters = state.counters
    assert counters["events"] == FLOOD_EVENTS
    assert len(state) <= DEFAULT_MAX_EVENTS_PER_KEY
    assert counters["evicted"] >= FLOOD_EVENTS - DEFAULT_MAX_EVENTS_PER_KEY
    assert len(state.emitted) <= DEFAULT_MAX_FINDINGS_PER_KEY
    assert len(last) < STATE_BYTES_BOUND

    latest, seen = h.live_findings()
    assert [x for x, n in Counter(seen).items() if n > 1] == []
    audit = h.audit()
    others_live = {f: d for f, d in latest.items() if d["workflow_key"] != FLOOD_KEY}
    others_audit = {f: d for f, d in audit.items() if d["workflow_key"] != FLOOD_KEY}
    assert len(others_audit) > 30
    assert others_live == others_audit
    growth = peak[0] - rss_idle
    print(
        f"key flood: {FLOOD_EVENTS:,} events of one key; state {len(last):,} B, "
        f"{len(state)} events kept, {len(state.emitted)} finding ids, counters {counters}; "
        f"RSS idle {rss_idle / 2**20:.0f} MiB, peak {peak[0] / 2**20:.0f} MiB"
    )
    assert growth < RSS_GROWTH_BOUND
