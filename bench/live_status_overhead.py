"""The live worker's throughput with the status topic on, as a ratio to the
same build with it off (``FENCEWATCH_STATUS=false``), in the same run over
the same topic: worker runs alternate off, on, off, on, ... (a fresh consumer
group each, so each reads the whole topic) and the medians are compared.

    .venv/bin/python bench/live_status_overhead.py [--keys 25000] [--repeat 2]

Target: status on >= 0.85 x status off (issue 10).
"""
# make-bench: --repeat 2

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from live_support import bootstrap, create_topics, names, produce_all, producer, worker_env
from live_throughput import interleaved, worker_rate
from results import Figure, add_json_arg, emit


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=25_000)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=2, help="worker runs per setting")
    add_json_arg(ap)
    args = ap.parse_args()
    bs = bootstrap()
    events, findings, dlq, app_id = names("bench-status")
    create_topics(bs, [events, findings, dlq], args.partitions)
    t0 = time.monotonic()
    total = produce_all(producer(bs), events, interleaved(args.keys, args.epochs))
    print(f"produced {total} events in {time.monotonic() - t0:.1f} s")
    rates: dict[bool, list[float]] = {False: [], True: []}
    for run in range(args.repeat):
        for status in (False, True):
            env = worker_env(
                events,
                findings,
                dlq,
                f"{app_id}-{run}-{'on' if status else 'off'}",
                FENCEWATCH_STATUS="true" if status else "false",
            )
            rate = worker_rate(bs, env, total)
            rates[status].append(rate)
            print(f"status {'on ' if status else 'off'}: {rate:,.0f} events/s")
    on, off = statistics.median(rates[True]), statistics.median(rates[False])
    print(f"status on / off: {on:,.0f} / {off:,.0f} events/s = {on / off:.2f} (target >= 0.85)")
    emit(
        args.json,
        [
            Figure(
                "live processor throughput with the status topic on",
                on,
                "events/s",
                "the same worker with the status topic off",
                off,
                "ratio >= 0.85",
                f"median of {args.repeat} runs each, alternating; {total:,} events, "
                f"{args.keys:,} keys, {args.partitions} partitions, exactly-once",
            )
        ],
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
