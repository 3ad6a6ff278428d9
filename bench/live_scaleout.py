"""Live scale-out (issue 46 item 4): one rdkafka worker against two in one
group, on the same workload in the same run, with the machine's core count
and load average beside the ratio (the machine is shared, and the broker
runs on it too: two workers cannot have two cores to themselves).

    .venv/bin/python bench/live_scaleout.py [--keys 100000] [--repeat 3]

Each measurement gets a topic of its own whose events (``bench/
live_throughput.py``'s workload) are produced inside one transaction that
stays open until the workers are up and the group has settled (each worker
holding its share of the partitions): under read_committed they see nothing
before it commits, then everything at once. So a rebalance never falls
inside the measurement (the second worker joining after the first started
would revoke its partitions mid-stream). The rate is the workers' summed
``processed`` between 10 % and 90 % of the events. Rounds alternate the
order (1 then 2 workers, then 2 then 1); the figure is the median of the
per-round ratios.

Each worker runs in a session of its own (``Worker(own_session=True)``),
the single one too: with ``sched_autogroup_enabled`` = 1 the kernel shares
the CPU between sessions first, so two workers in the bench's session got
together what one process of it would while other sessions were busy, and
the ratio measured the other sessions' load. In their own sessions two
workers get two sessions' shares, as two services under systemd would. The
bench stops them in a ``finally`` (they no longer get the terminal's
Ctrl-C), and they die with it if it is killed (the guard's death signal).
The cores, the load average and whether autogroup is on are printed beside
the ratio and kept in the figure's note.
"""
# make-bench: --repeat 3

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from live_support import (
    Worker,
    autogroup,
    bootstrap,
    create_topics,
    machine_load,
    names,
    produce_all,
    producer,
    worker_env,
)
from live_throughput import DEFAULT_KEYS, SAMPLE_S, interleaved, sustained
from results import Figure, add_json_arg, emit, paired_rates, rotations

#: Bound of the held transaction: producing the events, starting the workers
#: and the group settling must fit in it (the broker's maximum is 15 min).
HOLD_TIMEOUT_MS = 300_000
#: How long the workers' assignment must stay the same before the commit.
SETTLED_S = 1.0


def held(bs: str, topic: str, partitions: int, keys: int, epochs: int) -> tuple[Any, int]:
    """``topic`` created and filled inside a transaction left open: the
    producer (call ``commit_transaction``) and the event count."""
    create_topics(bs, [topic], partitions)
    p = producer(
        bs, **{"transactional.id": f"hold-{topic}", "transaction.timeout.ms": HOLD_TIMEOUT_MS}
    )
    p.init_transactions(60)
    p.begin_transaction()
    return p, produce_all(p, topic, interleaved(keys, epochs))


def settled(workers: list[Worker], partitions: int) -> bool:
    """Every worker ready, and together holding each partition exactly once."""
    held_by: list[int] = []
    for w in workers:
        h = w.health()
        if not h or not h.get("ok") or h.get("recovering") or not h.get("partitions"):
            return False
        held_by.extend(h["partitions"])
    return sorted(held_by) == list(range(partitions))


def group_rate(bs: str, count: int, partitions: int, keys: int, epochs: int) -> float:
    """Sustained events/s of ``count`` workers in one group over a held topic."""
    events, findings, dlq, app_id = names(f"bench-scale{count}")
    txn, total = held(bs, events, partitions, keys, epochs)
    with contextlib.ExitStack() as stack:
        workers = []
        for i in range(count):
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            env = worker_env(events, findings, dlq, app_id, FENCEWATCH_ENGINE="rdkafka")
            w = Worker(
                bs, {**env, "FENCEWATCH_DATA_DIR": str(tmp)}, tmp / f"w{i}.log", own_session=True
            )
            # Stopped however the measurement ends (an error, Ctrl-C, which a
            # worker in its own session does not get).
            stack.callback(w.stop)
            workers.append(w)
        for w in workers:
            w.wait_ready()
        since = time.monotonic()
        deadline = since + 120
        while time.monotonic() - since < SETTLED_S:
            if time.monotonic() > deadline:
                raise SystemExit("live_scaleout: the group did not settle in 120 s")
            if not settled(workers, partitions):
                since = time.monotonic()
            time.sleep(0.05)
        txn.commit_transaction(60)
        samples: list[tuple[float, int]] = []
        while True:
            n = sum(int((w.health() or {}).get("processed", 0)) for w in workers)
            samples.append((time.monotonic(), n))
            if n >= total:
                break
            time.sleep(SAMPLE_S)
    return sustained(samples, total)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=DEFAULT_KEYS)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3, help="rounds of 1 and 2 workers")
    add_json_arg(ap)
    args = ap.parse_args()
    bs = bootstrap()
    total = args.keys * args.epochs * 4
    rounds: list[dict[str, float]] = []
    load: list[float] = []
    for order in rotations(["1", "2"], args.repeat):
        rates = {}
        for count in order:
            load.append(os.getloadavg()[0])
            rates[count] = group_rate(bs, int(count), args.partitions, args.keys, args.epochs)
        rounds.append(rates)
        print(
            f"round: 1 worker {rates['1']:,.0f}/s, 2 workers {rates['2']:,.0f}/s "
            f"({rates['2'] / rates['1']:.2f}); {machine_load()}",
            flush=True,
        )
    load.append(os.getloadavg()[0])
    pr = paired_rates(rounds, "2", "1")
    cores = os.cpu_count()
    how = (
        f"{total:,} events, {args.keys:,} keys, {args.partitions} partitions, exactly-once, "
        f"commit interval 0.1 s, memory store; median of {len(rounds)} rounds (order "
        f"alternating), the events of each measurement released at once (one transaction "
        f"committed once the group had settled), each worker in a session of its own; "
        f"{cores} cores shared with the broker, load average (1 min) "
        f"{min(load):.1f}-{max(load):.1f}, sched autogroup {autogroup()}"
    )
    print(f"2 workers / 1: {pr.ratio:.2f}; {machine_load()}\n{how}")
    emit(
        args.json,
        [
            Figure(
                "live throughput, 2 workers in one group, rdkafka engine",
                pr.value,
                "events/s",
                "1 worker, same workload and run",
                pr.limit,
                None,
                how,
                runs=pr.runs,
                limit_runs=pr.limit_runs,
                paired_ratio=pr.ratio,
            )
        ],
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
