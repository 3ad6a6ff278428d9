"""The cost of exactly-once (issue 46 item 2): the rdkafka worker with
exactly-once and with ``--at-least-once`` (``FENCEWATCH_EXACTLY_ONCE=false``),
at commit intervals 0.1 s and 1 s, on the same topic in the same run.

    .venv/bin/python bench/live_eos_cost.py [--keys 100000] [--repeat 3]

Each round runs the four workers (each its own group, from the topic's
start) in a rotating order; a figure is the median of its per-round ratios,
exactly-once over at-least-once at the same interval. The workload is
``bench/live_throughput.py``'s (800,000 events, blocks of 1,000 keys): long
enough for a few 1 s commits inside the 10 %-90 % window.

Target (issue 46): exactly-once >= 0.9 x at-least-once at 0.1 s. Published
anchors for comparison: Kafka Streams loses 15-30 % of its throughput at a
100 ms commit interval (Confluent), quix-streams "at worst 10 %" at 5 s.
"""
# make-bench: --repeat 3

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from live_support import bootstrap, create_topics, names, produce_all, producer, worker_env
from live_throughput import DEFAULT_KEYS, interleaved, worker_rate
from results import Figure, add_json_arg, emit, paired_rates, rotations

#: The commit intervals compared (s); the target is the first's.
INTERVALS = ("0.1", "1")


def contender(eos: bool, interval: str) -> str:
    return f"{'eos' if eos else 'alo'}@{interval}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=DEFAULT_KEYS)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3, help="rounds of the four workers")
    add_json_arg(ap)
    args = ap.parse_args()
    bs = bootstrap()
    events, findings, dlq, app_id = names("bench-eos")
    create_topics(bs, [events, findings, dlq], args.partitions)
    t0 = time.monotonic()
    total = produce_all(producer(bs), events, interleaved(args.keys, args.epochs))
    print(f"produced {total:,} events in {time.monotonic() - t0:.1f} s")

    def run(name: str) -> float:
        mode, interval = name.split("@")
        env = worker_env(
            events,
            findings,
            dlq,
            f"{app_id}-{mode}-{uuid.uuid4().hex[:6]}",
            FENCEWATCH_ENGINE="rdkafka",
            FENCEWATCH_COMMIT_INTERVAL=interval,
            FENCEWATCH_EXACTLY_ONCE="true" if mode == "eos" else "false",
        )
        return worker_rate(bs, env, total)

    contenders = [contender(eos, i) for i in INTERVALS for eos in (True, False)]
    rounds: list[dict[str, float]] = []
    load: list[float] = []
    for order in rotations(contenders, args.repeat):
        load.append(os.getloadavg()[0])
        rates = {name: run(name) for name in order}
        rounds.append(rates)
        print("round " + ", ".join(f"{n} {rates[n]:,.0f}/s" for n in order), flush=True)
    load.append(os.getloadavg()[0])
    figures = []
    for interval in INTERVALS:
        pr = paired_rates(rounds, contender(True, interval), contender(False, interval))
        how = (
            f"{total:,} events, {args.keys:,} keys, {args.partitions} partitions, memory "
            f"store; median of {len(rounds)} rounds of the four workers (exactly-once and "
            f"at-least-once at 0.1 s and 1 s, rotating order, each its own group from the "
            f"topic's start); load average (1 min) {min(load):.1f}-{max(load):.1f} on "
            f"{os.cpu_count()} cores"
        )
        figures.append(
            Figure(
                f"live throughput exactly-once / at-least-once, commit interval {interval} s, "
                "rdkafka engine",
                pr.value,
                "events/s",
                f"the same worker with --at-least-once, commit interval {interval} s",
                pr.limit,
                "ratio >= 0.9" if interval == INTERVALS[0] else None,
                how,
                runs=pr.runs,
                limit_runs=pr.limit_runs,
                paired_ratio=pr.ratio,
            )
        )
        print(f"exactly-once / at-least-once at {interval} s: {pr.ratio:.2f}")
    emit(args.json, figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
