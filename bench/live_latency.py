"""Latency from produce to finding visible to a read_committed consumer, at a
steady input rate, with one exactly-once worker; next to a limit measured in
the same run: a bare confluent-kafka exactly-once relay (consume, produce each
record to an output topic, commit the transaction with the offsets every
commit interval), which is what any exactly-once processor pays at that
commit interval on this broker.

    .venv/bin/python bench/live_latency.py [--rate 2000] [--seconds 20] [--commit-interval 0.1]

Every measured event is a stale checkpoint of its own workflow (prepared
before the measurement), so each raises exactly one new finding. Targets:
p99 no longer than the bare relay's p99 at the same rate and commit interval;
p99 <= 250 ms at 2,000 events/s.
"""
# make-bench: --rate 2000 --seconds 20

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from live_support import (
    BareRelay,
    FirstSeen,
    Worker,
    bootstrap,
    create_topics,
    doc,
    handovers,
    names,
    produce_all,
    producer,
    worker_env,
)
from results import Figure, add_json_arg, emit


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


def pct(lat: list[float], q: float) -> float:
    return lat[min(len(lat) - 1, int(q * len(lat)))]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=int, default=2000)
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--commit-interval", default="0.1")
    ap.add_argument("--no-limit", action="store_true", help="skip the bare relay")
    add_json_arg(ap)
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

    produce_all(producer(bs), events, handovers(keys))
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
    setting = (
        f"{actual:,.0f} events/s for {args.seconds} s, commit interval {args.commit_interval} s, "
        f"{args.partitions} partitions; findings seen {len(lat)}/{n}"
    )
    relay_name = "bare exactly-once relay, same rate and commit interval"
    figures = [
        Figure(
            "produce -> finding visible p99",
            pct(lat, 0.99),
            "ms",
            relay_name + " (p99)" if bare else None,
            pct(bare, 0.99) if bare else None,
            "ratio <= 1" if bare else None,
            setting,
        ),
        Figure(
            "produce -> finding visible p50",
            pct(lat, 0.5),
            "ms",
            relay_name + " (p50)" if bare else None,
            pct(bare, 0.5) if bare else None,
            None,
            setting,
        ),
        Figure(
            "produce -> finding visible p99 (absolute)",
            pct(lat, 0.99),
            "ms",
            None,
            None,
            "value <= 250",
            setting,
        ),
    ]
    emit(args.json, figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
