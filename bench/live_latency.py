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

Both sides are measured the same way: the relay runs in a process of its own
(as the worker does), and each side first gets ``--warmup`` seconds of
unmeasured traffic at the same rate, the measurement starting once all of it
is visible (until 2026-12-01 the relay was a thread of this process, sharing
the interpreter with the load generator and the reader, and started cold:
its first records' wait for its start-up counted in its p99).
"""
# make-bench: --rate 2000 --seconds 20

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from live_support import (
    FirstSeen,
    RelayProcess,
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


def _paced(
    p: Any, topic: str, keys: list[str], rate: int, value: Callable[[str], bytes]
) -> dict[str, float]:
    """Produce one record per key at ``rate``; the time each was handed to the client."""
    sent: dict[str, float] = {}
    start = time.monotonic()
    for i, k in enumerate(keys):
        delay = start + i / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        p.produce(topic, value(k), key=k.encode())
        sent[k] = time.monotonic()
        p.poll(0)
    p.flush(30)
    return sent


def drive(
    bs: str,
    in_topic: str,
    out_topic: str,
    warm: list[str],
    keys: list[str],
    rate: int,
    partitions: int,
    value: Callable[[str], bytes],
) -> tuple[list[float], float]:
    """Produce one record per key at ``rate`` to ``in_topic``; latency (ms)
    until a record with that key is visible on ``out_topic``; actual rate.

    ``warm`` keys go first, at the same rate, and are not measured: the
    measurement starts once all of them are visible, so neither the
    processor under test (the relay or the worker) nor the reader is in its
    first fetches, connections or transactions."""
    out = FirstSeen(bs, out_topic, partitions, f"lat-{out_topic}")
    p = producer(bs, **{"linger.ms": 0})
    try:
        _paced(p, in_topic, warm, rate, value)
        out.wait_for(len(warm), 60)
        start = time.monotonic()
        sent = _paced(p, in_topic, keys, rate, value)
        actual = len(keys) / (time.monotonic() - start)
        out.wait_for(len(warm) + len(keys), 30)
    finally:
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
    ap.add_argument("--warmup", type=float, default=2.0, help="seconds of unmeasured traffic first")
    ap.add_argument("--no-limit", action="store_true", help="skip the bare relay")
    add_json_arg(ap)
    args = ap.parse_args()
    bs = bootstrap()
    n = args.rate * args.seconds
    w = int(args.rate * args.warmup)
    interval = float(args.commit_interval)

    bare: list[float] = []
    if not args.no_limit:
        src, dst, _dlq, _app = names("bench-lat-bare")
        create_topics(bs, [src, dst], args.partitions)
        relay = RelayProcess(bs, src, dst, args.partitions, interval)
        try:
            bare_warm = [f"bare-warm/{i:07d}" for i in range(w)]
            bare_keys = [f"bare/{i:07d}" for i in range(n)]
            bare, _ = drive(
                bs, src, dst, bare_warm, bare_keys, args.rate, args.partitions, str.encode
            )
        finally:
            relay.close()

    events, findings, dlq, app_id = names("bench-lat")
    create_topics(bs, [events, findings, dlq], args.partitions)
    warm = [f"warm/{i:07d}" for i in range(w)]
    keys = [f"lat/{i:07d}" for i in range(n)]

    produce_all(producer(bs), events, handovers(warm + keys))
    with tempfile.TemporaryDirectory() as tmp:
        env = worker_env(
            events,
            findings,
            dlq,
            app_id,
            FENCEWATCH_DATA_DIR=tmp,
            FENCEWATCH_COMMIT_INTERVAL=args.commit_interval,
        )
        worker = Worker(bs, env, Path(tmp) / "w.log")
        try:
            worker.wait_ready()
            while (worker.health() or {}).get("processed", 0) < 2 * (w + n):
                time.sleep(0.2)
            lat, actual = drive(
                bs,
                events,
                findings,
                warm,
                keys,
                args.rate,
                args.partitions,
                lambda k: doc(k, "progress", 1, "old", 3),
            )
        finally:
            worker.stop()
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
        f"{args.partitions} partitions, after {args.warmup:g} s of warm-up; "
        f"findings seen {len(lat)}/{n}"
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
