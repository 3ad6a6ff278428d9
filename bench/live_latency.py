"""Latency from produce to finding visible to a read_committed consumer, at a
steady input rate, with one exactly-once worker.

    .venv/bin/python bench/live_latency.py [--rate 2000] [--seconds 20]

Every measured event is a stale checkpoint of its own workflow (prepared
before the measurement), so each raises exactly one new finding. Target:
p99 <= 250 ms at 2,000 events/s.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from live_support import (
    Worker,
    bootstrap,
    create_topics,
    names,
    produce_all,
    producer,
    worker_env,
)


def doc(key: str, kind: str, epoch: int, worker: str, seq: int) -> bytes:
    return json.dumps(
        {"type": kind, "workflow_key": key, "epoch": epoch, "worker_id": worker, "seq": seq}
    ).encode()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=int, default=2000)
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--commit-interval", default="0.1")
    args = ap.parse_args()
    bs = bootstrap()
    events, findings, dlq, app_id = names("bench-lat")
    create_topics(bs, [events, findings, dlq], args.partitions)
    n = args.rate * args.seconds
    keys = [f"lat/{i:07d}" for i in range(n)]

    def preamble():
        for k in keys:
            yield k.encode(), doc(k, "lease_acquired", 1, "old", 1)
            yield k.encode(), doc(k, "lease_acquired", 2, "new", 2)

    produce_all(producer(bs), events, preamble())
    sent: dict[str, float] = {}
    seen: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        env = worker_env(events, findings, dlq, app_id, FENCEWATCH_DATA_DIR=tmp,
                         FENCEWATCH_COMMIT_INTERVAL=args.commit_interval)
        w = Worker(bs, env, Path(tmp) / "w.log")
        try:
            w.wait_ready()
            while (w.health() or {}).get("processed", 0) < 2 * n:
                time.sleep(0.2)
            from confluent_kafka import Consumer, TopicPartition

            # fetch.wait.max.ms: librdkafka's default (500 ms) would add the
            # reader's own fetch wait to what is measured.
            c = Consumer({"bootstrap.servers": bs, "group.id": "lat",
                          "isolation.level": "read_committed", "enable.auto.commit": False,
                          "fetch.wait.max.ms": 10})
            c.assign([TopicPartition(findings, p, 0) for p in range(args.partitions)])
            stop = threading.Event()

            def read() -> None:
                while not stop.is_set():
                    for m in c.consume(500, 0.1):
                        if m.error() is None:
                            seen.setdefault(m.key().decode(), time.monotonic())

            t = threading.Thread(target=read)
            t.start()
            p = producer(bs, **{"linger.ms": 0})
            start = time.monotonic()
            for i, k in enumerate(keys):
                due = start + i / args.rate
                delay = due - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                p.produce(events, doc(k, "progress", 1, "old", 3), key=k.encode())
                sent[k] = time.monotonic()
                p.poll(0)
            p.flush(30)
            actual = n / (time.monotonic() - start)
            deadline = time.monotonic() + 30
            while len(seen) < n and time.monotonic() < deadline:
                time.sleep(0.2)
            stop.set()
            t.join()
            c.close()
        finally:
            w.stop()
    lat = sorted((seen[k] - sent[k]) * 1000 for k in keys if k in seen)
    if not lat:
        print("no findings seen")
        return 1

    def pct(q: float) -> float:
        return lat[min(len(lat) - 1, int(q * len(lat)))]

    print(f"input rate {actual:,.0f} events/s for {args.seconds} s, commit interval "
          f"{args.commit_interval} s; findings seen {len(lat)}/{n}")
    print(f"latency ms: p50 {pct(0.5):.0f}  p90 {pct(0.9):.0f}  p99 {pct(0.99):.0f}  "
          f"max {lat[-1]:.0f}; p99/target(250 ms) = {pct(0.99) / 250:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
