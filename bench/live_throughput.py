"""Sustained events/s of one live worker with exactly-once on, next to a bare
confluent-kafka consume loop over the same topic (same run, same broker).

    .venv/bin/python bench/live_throughput.py [--keys 25000] [--partitions 4]

Target: >= 20,000 events/s per worker.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from live_support import (
    Worker,
    bootstrap,
    create_topics,
    key_events,
    names,
    produce_all,
    producer,
    worker_env,
)


def bare_consume(bs: str, topic: str, partitions: int, total: int) -> float:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": "bench-bare",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    n = 0
    start = time.monotonic()
    while n < total:
        for m in c.consume(1000, 1.0):
            if m.error() is None:
                n += 1
    elapsed = time.monotonic() - start
    c.close()
    return total / elapsed


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=25_000)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--commit-interval", default="0.2")
    ap.add_argument("--at-least-once", action="store_true")
    args = ap.parse_args()
    bs = bootstrap()
    events, findings, dlq, app_id = names("bench-tput")
    create_topics(bs, [events, findings, dlq], args.partitions)

    def gen():  # interleave keys: round-robin over blocks of keys
        block = 1000
        for start in range(0, args.keys, block):
            iters = [
                key_events(k, args.epochs) for k in range(start, min(start + block, args.keys))
            ]
            while iters:
                nxt = []
                for it in iters:
                    rec = next(it, None)
                    if rec is not None:
                        yield rec
                        nxt.append(it)
                iters = nxt

    t0 = time.monotonic()
    total = produce_all(producer(bs), events, gen())
    print(f"produced {total} events in {time.monotonic() - t0:.1f} s")
    bare = bare_consume(bs, events, args.partitions, total)
    print(f"bare confluent-kafka consume loop: {bare:,.0f} events/s")

    extra = {"FENCEWATCH_COMMIT_INTERVAL": args.commit_interval}
    if args.at_least_once:
        extra["FENCEWATCH_EXACTLY_ONCE"] = "false"
    with tempfile.TemporaryDirectory() as tmp:
        extra["FENCEWATCH_DATA_DIR"] = tmp
        w = Worker(bs, worker_env(events, findings, dlq, app_id, **extra), Path(tmp) / "w.log")
        try:
            w.wait_ready()
            samples: list[tuple[float, int]] = []
            while True:
                h = w.health() or {}
                n = int(h.get("processed", 0))
                samples.append((time.monotonic(), n))
                if n >= total:
                    break
                time.sleep(0.25)
            # Sustained: between 10 % and 90 % of the stream.
            lo = next(s for s in samples if s[1] >= total * 0.1)
            hi = next(s for s in samples if s[1] >= total * 0.9)
            rate = (hi[1] - lo[1]) / (hi[0] - lo[0])
            mode = "at-least-once" if args.at_least_once else "exactly-once"
            print(
                f"live worker ({mode}, commit interval {args.commit_interval} s): "
                f"{rate:,.0f} events/s sustained"
            )
            print(
                f"ratio worker/bare: {rate / bare:.3f}; ratio to the 20,000/s target: "
                f"{rate / 20_000:.2f}"
            )
        finally:
            w.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
