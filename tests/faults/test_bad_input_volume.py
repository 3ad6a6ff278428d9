"""10,000 generated bad records (every SPEC §7 class) mixed into valid traffic
through a real live worker: no crash, each bad record dead-lettered with its
reason and source, the valid events' findings those of the audit, memory bounded."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from streams.core.replay import Replay
from tests.faults.bad_input import BAD_CLASSES, bad_records
from tests.live.conftest import ENGINES

pytestmark = [pytest.mark.kafka, pytest.mark.faults]

Live = Callable[..., Any]
# A bound, not a timing: the worker's resident memory after reading ~16,000
# records (100 of them 64 KiB) may grow by this much over its idle size.
RSS_GROWTH_BOUND = 160 * 2**20


def merge(
    a: list[tuple[bytes | None, bytes, str | None]],
    b: list[tuple[bytes | None, bytes, str | None]],
    seed: int,
) -> list[tuple[bytes | None, bytes, str | None]]:
    """A random interleaving that keeps each list's own order (per-key order of the valid)."""
    rng = random.Random(seed)
    out, i, j = [], 0, 0
    while i < len(a) or j < len(b):
        if j == len(b) or (i < len(a) and rng.random() < len(a) / (len(a) + len(b))):
            out.append(a[i])
            i += 1
        else:
            out.append(b[j])
            j += 1
    return out


def produce_with_positions(
    bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes, str | None]]
) -> list[tuple[int, int]]:
    """Produce in order; the (partition, offset) of each record, from delivery reports."""
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "partitioner": "murmur2_random",
            "message.max.bytes": 2_000_000,
            "linger.ms": 5,
        }
    )
    where: list[tuple[int, int]] = [(-1, -1)] * len(records)
    errors: list[str] = []

    def delivered(i: int) -> Callable[[Any, Any], None]:
        def cb(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                where[i] = (msg.partition(), msg.offset())

        return cb

    for i, (key, value, _cls) in enumerate(records):
        while True:
            try:
                p.produce(topic, value, key=key, on_delivery=delivered(i))
                break
            except BufferError:
                p.poll(0.1)
        p.poll(0)
    assert p.flush(60) == 0
    assert not errors, errors[:3]
    return where


@pytest.mark.timeout(600)
@pytest.mark.parametrize("engine", ENGINES)
def test_ten_thousand_bad_records_among_valid_traffic(live: Live, engine: str) -> None:
    """10,000 bad records of every class mixed into ~5,000 valid events: the worker never
    exits, each bad record is in the DLQ once with its bytes, key, reason and source
    partition/offset, no 'internal error', the findings equal an audit of the valid events
    alone, no revision twice, and the worker's RSS grows by less than 160 MiB."""
    h = live(partitions=3, engine=engine)
    valid = [(k, v, None) for k, v in h.scenario_events(n_keys=400, epochs=4)]
    keys = sorted({k.decode() for k, _v, _c in valid if k is not None})
    bad = [(k, v, c) for k, v, c in bad_records(10_000, keys)]
    assert {c for _k, _v, c in bad} == set(BAD_CLASSES)
    mixed: list[tuple[bytes | None, bytes, str | None]] = merge(valid, bad, seed=3)

    w = h.start()
    w.wait_ready()
    rss_idle = w.rss_bytes()
    peak = [rss_idle]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], w.rss_bytes())
            time.sleep(0.2)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        where = produce_with_positions(h.bootstrap, h.events, mixed)
        h.wait_all_committed(timeout=300)
    finally:
        done.set()
        sampler.join()
    assert w.proc.poll() is None, f"worker exited: {w.tail()}"
    assert w.health()["ok"]

    # Every bad record, once, with its bytes, key, reason and source.
    expected = {
        where[i]: (key, value, cls) for i, (key, value, cls) in enumerate(mixed) if cls is not None
    }
    dead = h.read_with_headers(h.dlq)
    positions = Counter(
        (int(hd["fencewatch-source-partition"]), int(hd["fencewatch-source-offset"]))
        for _k, _v, hd in dead
    )
    assert [p for p, n in positions.items() if n > 1] == []
    assert set(positions) == set(expected)
    reasons: Counter[str] = Counter()
    for key, value, hd in dead:
        pos = (int(hd["fencewatch-source-partition"]), int(hd["fencewatch-source-offset"]))
        want_key, want_value, cls = expected[pos]
        assert (key, value) == (want_key, want_value), cls
        assert hd["fencewatch-source-topic"] == h.events
        assert hd["fencewatch-error-reason"], cls
        assert hd["fencewatch-error-reason"] != "internal error", (cls, value[:80])
        reasons[cls] += 1
    assert set(reasons) == set(BAD_CLASSES)

    # The valid events' findings: what the core gives for them alone, same positions.
    replay = Replay()
    valid_at = sorted(
        (where[i], key, value) for i, (key, value, cls) in enumerate(mixed) if cls is None
    )
    for (partition, offset), key, value in valid_at:
        replay.feed(value, key=key, offset=offset, source=f"{h.events}/{partition}")
    assert replay.invalid_count == 0
    audit_valid = {f.finding_id: f.to_dict() for f in replay.latest_findings()}
    latest, seen = h.live_findings()
    assert [x for x, n in Counter(seen).items() if n > 1] == []
    assert len(audit_valid) > 100
    assert latest == audit_valid

    growth = peak[0] - rss_idle
    print(
        f"bad-input volume: {len(bad)} bad + {len(valid)} valid records; RSS idle "
        f"{rss_idle / 2**20:.0f} MiB, peak {peak[0] / 2**20:.0f} MiB (+{growth / 2**20:.0f})"
    )
    assert growth < RSS_GROWTH_BOUND
