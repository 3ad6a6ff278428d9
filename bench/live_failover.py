"""Failover time: two exactly-once workers share the partitions under a steady
input; one is killed with SIGKILL; how long until findings of its partitions
are visible again (read_committed), now produced by the survivor.

    .venv/bin/python bench/live_failover.py [--rate 300] [--before 8] [--after 40]
        [--session-timeout 10] [--heartbeat-interval 3]

Every measured event is a stale checkpoint of its own workflow (prepared
before the measurement), so each raises exactly one finding; its source
partition is known from the producer's delivery report. Reported per
partition of the killed worker: the time from the kill to the first finding
visible for an event of that partition produced after the kill. The docs'
derived bound is session timeout + rebalance + restore.
"""
# make-bench:

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from live_support import (
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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=int, default=300)
    ap.add_argument("--before", type=float, default=8.0, help="seconds of input before the kill")
    ap.add_argument("--after", type=float, default=40.0, help="seconds of input after the kill")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--session-timeout", default="10")
    ap.add_argument("--heartbeat-interval", default="3")
    add_json_arg(ap)
    args = ap.parse_args()
    bs = bootstrap()
    events, findings, dlq, app_id = names("bench-failover")
    create_topics(bs, [events, findings, dlq], args.partitions)
    n = int(args.rate * (args.before + args.after))
    keys = [f"fo/{i:07d}" for i in range(n)]

    produce_all(producer(bs), events, handovers(keys))
    sent: dict[str, tuple[float, int]] = {}  # key -> (produce time, partition)
    with tempfile.TemporaryDirectory() as tmp:
        common = {
            "FENCEWATCH_COMMIT_INTERVAL": "0.1",
            "FENCEWATCH_SESSION_TIMEOUT": args.session_timeout,
            "FENCEWATCH_HEARTBEAT_INTERVAL": args.heartbeat_interval,
        }
        workers = []
        for name in ("a", "b"):
            env = worker_env(
                events, findings, dlq, app_id, FENCEWATCH_DATA_DIR=f"{tmp}/{name}", **common
            )
            workers.append(Worker(bs, env, Path(tmp) / f"{name}.log"))
        a, b = workers
        try:
            a.wait_ready()
            b.wait_ready()
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                ha, hb = a.health() or {}, b.health() or {}
                done = int(ha.get("processed", 0)) + int(hb.get("processed", 0))
                if ha.get("partitions") and hb.get("partitions") and done >= 2 * n:
                    break
                time.sleep(0.2)
            else:
                raise SystemExit("workers did not split the partitions and catch up")
            victim = set((a.health() or {}).get("partitions", []))
            out = FirstSeen(bs, findings, args.partitions, "failover")
            seen = out.seen
            p = producer(bs, **{"linger.ms": 0})
            start = time.monotonic()
            killed_at = 0.0
            for i, k in enumerate(keys):
                due = start + i / args.rate
                if not killed_at and due - start >= args.before:
                    a.proc.kill()
                    killed_at = time.monotonic()
                delay = due - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                t = time.monotonic()

                def delivered(err, msg, k=k, t=t):  # type: ignore[no-untyped-def]
                    if err is None:
                        sent[k] = (t, msg.partition())

                p.produce(
                    events, doc(k, "progress", 1, "old", 3), key=k.encode(), on_delivery=delivered
                )
                p.poll(0)
            p.flush(30)
            out.wait_for(n, 60)
            out.close()
        finally:
            for w in workers:
                w.stop()
    print(
        f"input {args.rate}/s, kill -9 after {args.before:.0f} s; session timeout "
        f"{args.session_timeout} s, heartbeat {args.heartbeat_interval} s; findings seen "
        f"{len(seen)}/{n}"
    )
    firsts: dict[int, float] = {}
    for k, (t, part) in sent.items():
        # Events produced after the kill: only the survivor can process them.
        if part in victim and k in seen and t >= killed_at:
            firsts[part] = min(firsts.get(part, float("inf")), seen[k] - killed_at)
    for part in sorted(victim):
        shown = f"{firsts[part]:.1f} s" if part in firsts else "never"
        print(f"killed worker's partition {part}: first finding visible {shown} after the kill")
    # The survivor's own partitions stop too: faust's rebalance revokes all.
    gaps = []
    times = sorted(seen[k] for k, (_t, part) in sent.items() if part not in victim and k in seen)
    for x, y in itertools.pairwise(times):
        if y >= killed_at:
            gaps.append(y - x)
    if gaps:
        print(
            f"survivor's own partitions: longest pause in findings after the kill {max(gaps):.1f} s"
        )
    if firsts and len(firsts) == len(victim):
        print(f"failover time (slowest partition): {max(firsts.values()):.1f} s")
        emit(
            args.json,
            [
                Figure(
                    "failover after kill -9 (slowest partition)",
                    max(firsts.values()),
                    "s",
                    "the session timeout (the group cannot notice sooner)",
                    float(args.session_timeout),
                    None,
                    f"input {args.rate}/s, heartbeat {args.heartbeat_interval} s, two workers",
                    limit_kind="configured",
                )
            ],
        )
        return 0
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
