"""Latency from produce to finding visible to a read_committed consumer, at a
steady input rate, with one exactly-once worker; next to a limit measured in
the same run: a bare confluent-kafka exactly-once relay (consume, produce each
record to an output topic, commit the transaction with the offsets every
commit interval), which is what any exactly-once processor pays at that
commit interval on this broker.

    .venv/bin/python bench/live_latency.py [--rate 2000] [--seconds 20] [--commit-interval 0.1]

Every measured event is a stale checkpoint of its own workflow (prepared
before the measurement), so each raises exactly one new finding. Target:
p99 <= 250 ms at 2,000 events/s.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from live_support import (
    FirstSeen,
    Worker,
    bootstrap,
    create_topics,
    doc,
    names,
    produce_all,
    producer,
    worker_env,
)


def drive(
    bs: str,
    in_topic: str,
    out_topic: str,
    keys: list[str],
    rate: int,
    partitions: int,
    value: Callable[[str], bytes],
) -> tuple[list[float], float]:
    """Produce one record per key at ``rate`` to ``in_topic``; latency (ms)
    until a record with that key is visible on ``out_topic``; actual rate."""
    sent: dict[str, float] = {}
    out = FirstSeen(bs, out_topic, partitions, f"lat-{out_topic}")
    p = producer(bs, **{"linger.ms": 0})
    start = time.monotonic()
    for i, k in enumerate(keys):
        due = start + i / rate
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        p.produce(in_topic, value(k), key=k.encode())
        sent[k] = time.monotonic()
        p.poll(0)
    p.flush(30)
    actual = len(keys) / (time.monotonic() - start)
    out.wait_for(len(keys), 30)
    out.close()
    seen = out.seen
    return sorted((seen[k] - sent[k]) * 1000 for k in keys if k in seen), actual


class BareRelay:
    """confluent-kafka consume -> produce -> transactional commit with the
    offsets every ``interval`` s (read_committed input): the exactly-once
    floor."""

    def __init__(self, bs: str, src: str, dst: str, partitions: int, interval: float) -> None:
        from confluent_kafka import Consumer, Producer, TopicPartition

        self.c = Consumer(
            {
                "bootstrap.servers": bs,
                "group.id": f"bare-{src}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 10,
            }
        )
        self.c.assign([TopicPartition(src, q, 0) for q in range(partitions)])
        self.p = Producer(
            {"bootstrap.servers": bs, "transactional.id": f"bare-{src}", "linger.ms": 0}
        )
        self.dst, self.interval = dst, interval
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run)

    def run(self) -> None:
        from confluent_kafka import TopicPartition

        p, c = self.p, self.c
        p.init_transactions(30)
        p.begin_transaction()
        positions: dict[tuple[str, int], int] = {}
        last = time.monotonic()
        while not self.stop.is_set():
            for m in c.consume(500, 0.005):
                if m.error() is None:
                    p.produce(self.dst, m.value(), key=m.key(), partition=m.partition())
                    positions[m.topic(), m.partition()] = m.offset() + 1
            p.poll(0)
            if positions and time.monotonic() - last >= self.interval:
                offsets = [TopicPartition(t, q, o) for (t, q), o in positions.items()]
                p.send_offsets_to_transaction(offsets, c.consumer_group_metadata(), 30)
                p.commit_transaction(30)
                p.begin_transaction()
                positions.clear()
                last = time.monotonic()
        p.abort_transaction(30)
        c.close()


def pct(lat: list[float], q: float) -> float:
    return lat[min(len(lat) - 1, int(q * len(lat)))]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=int, default=2000)
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--commit-interval", default="0.1")
    ap.add_argument("--no-limit", action="store_true", help="skip the bare relay")
    args = ap.parse_args()
    bs = bootstrap()
    n = args.rate * args.seconds
    interval = float(args.commit_interval)

    bare: list[float] = []
    if not args.no_limit:
        src, dst, _dlq, _app = names("bench-lat-bare")
        create_topics(bs, [src, dst], args.partitions)
        relay = BareRelay(bs, src, dst, args.partitions, interval)
        relay.thread.start()
        try:
            bare_keys = [f"bare/{i:07d}" for i in range(n)]
            bare, _ = drive(bs, src, dst, bare_keys, args.rate, args.partitions, str.encode)
        finally:
            relay.stop.set()
            relay.thread.join()

    events, findings, dlq, app_id = names("bench-lat")
    create_topics(bs, [events, findings, dlq], args.partitions)
    keys = [f"lat/{i:07d}" for i in range(n)]

    def preamble():
        for k in keys:
            yield k.encode(), doc(k, "lease_acquired", 1, "old", 1)
            yield k.encode(), doc(k, "lease_acquired", 2, "new", 2)

    produce_all(producer(bs), events, preamble())
    with tempfile.TemporaryDirectory() as tmp:
        env = worker_env(
            events,
            findings,
            dlq,
            app_id,
            FENCEWATCH_DATA_DIR=tmp,
            FENCEWATCH_COMMIT_INTERVAL=args.commit_interval,
        )
        w = Worker(bs, env, Path(tmp) / "w.log")
        try:
            w.wait_ready()
            while (w.health() or {}).get("processed", 0) < 2 * n:
                time.sleep(0.2)
            lat, actual = drive(
                bs,
                events,
                findings,
                keys,
                args.rate,
                args.partitions,
                lambda k: doc(k, "progress", 1, "old", 3),
            )
        finally:
            w.stop()
    if not lat:
        print("no findings seen")
        return 1
    print(
        f"input rate {actual:,.0f} events/s for {args.seconds} s, commit interval "
        f"{args.commit_interval} s; findings seen {len(lat)}/{n}"
    )
    if bare:
        print(
            f"bare exactly-once relay (same rate and commit interval): p50 {pct(bare, 0.5):.0f}  "
            f"p90 {pct(bare, 0.9):.0f}  p99 {pct(bare, 0.99):.0f} ms"
        )
    print(
        f"latency ms: p50 {pct(lat, 0.5):.0f}  p90 {pct(lat, 0.9):.0f}  p99 {pct(lat, 0.99):.0f}  "
        f"max {lat[-1]:.0f}; p99/target(250 ms) = {pct(lat, 0.99) / 250:.2f}"
        + (f"; p99/bare relay p99 = {pct(lat, 0.99) / pct(bare, 0.99):.2f}" if bare else "")
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
