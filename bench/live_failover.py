"""Failover time: two exactly-once workers share the partitions under a steady
input; one is killed with SIGKILL, or frozen with SIGSTOP; how long until
findings of its partitions are visible again (read_committed), now produced
by the survivor.

    .venv/bin/python bench/live_failover.py [--rate 300] [--before 8] [--after 40]
        [--session-timeout 10] [--heartbeat-interval 3] [--engines faust,rdkafka]
        [--modes kill,freeze]

A frozen worker is the case the product exists for (a GC pause, a suspended
VM): unlike a killed one it still holds its TCP connections and its open
transaction, which stays open until the broker's transaction timeout aborts
it. A survivor that waited for that transaction (for instance to restore a
changelog written inside it) would take over only after the timeout; the
freeze mode measures whether it does. The frozen worker is thawed (SIGCONT)
after the measurement and then stopped.

Every measured event is a stale checkpoint of its own workflow (prepared
before the measurement), so each raises exactly one finding; its source
partition is known from the producer's delivery report. Reported per
partition of the killed worker: the time from the kill to the first finding
visible for an event of that partition produced after the kill. The docs'
derived bound is session timeout + rebalance + restore. Each engine
(``--engines``) is measured in turn, on topics of its own.
"""
# make-bench:

from __future__ import annotations

import argparse
import itertools
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from live_support import (
    GENERATOR,
    FirstSeen,
    Worker,
    add_engines_arg,
    bootstrap,
    chosen_engines,
    create_topics,
    doc,
    handovers,
    names,
    produce_all,
    producer,
    worker_env,
)
from results import Figure, add_json_arg, emit

#: --modes: the signal that takes a worker out, and how the output names it.
MODES = {
    "kill": (signal.SIGKILL, "kill -9"),
    "freeze": (signal.SIGSTOP, "a freeze (SIGSTOP)"),
}


def failover(args: argparse.Namespace, bs: str, engine: str, mode: str) -> float | None:
    """Seconds from the kill (``mode`` "kill") or the freeze ("freeze") to
    the slowest victim partition's first finding (``None`` if a partition
    never came back), two workers of ``engine``."""
    sig, what = MODES[mode]
    events, findings, dlq, app_id = names(f"bench-failover-{engine}-{mode}")
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
            "FENCEWATCH_ENGINE": engine,
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
                raise SystemExit(f"{engine}: workers did not split the partitions and catch up")
            victim = set((a.health() or {}).get("partitions", []))
            out = FirstSeen(bs, findings, args.partitions, f"failover-{engine}-{mode}")
            seen = out.seen
            # As an agent's reporter sends (live_support.GENERATOR): the
            # latency bench found linger.ms 0 backing the broker up.
            p = producer(bs, **GENERATOR)
            start = time.monotonic()
            killed_at = 0.0
            for i, k in enumerate(keys):
                due = start + i / args.rate
                if not killed_at and due - start >= args.before:
                    a.proc.send_signal(sig)
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
            if sig == signal.SIGSTOP and a.proc.poll() is None:
                a.proc.send_signal(signal.SIGCONT)  # so that it can stop
            for w in workers:
                w.stop()
    print(
        f"{engine} engine: input {args.rate}/s, {what} after {args.before:.0f} s; session "
        f"timeout {args.session_timeout} s, heartbeat {args.heartbeat_interval} s; findings seen "
        f"{len(seen)}/{n}"
    )
    firsts: dict[int, float] = {}
    for k, (t, part) in sent.items():
        # Events produced after the kill: only the survivor can process them.
        if part in victim and k in seen and t >= killed_at:
            firsts[part] = min(firsts.get(part, float("inf")), seen[k] - killed_at)
    for part in sorted(victim):
        shown = f"{firsts[part]:.1f} s" if part in firsts else "never"
        print(f"victim partition {part}: first finding visible {shown} after {what}")
    # The survivor's own partitions may stop too (an eager rebalance revokes all).
    gaps = []
    times = sorted(seen[k] for k, (_t, part) in sent.items() if part not in victim and k in seen)
    for x, y in itertools.pairwise(times):
        if y >= killed_at:
            gaps.append(y - x)
    if gaps:
        print(
            f"survivor's own partitions: longest pause in findings after {what} {max(gaps):.1f} s"
        )
    if firsts and len(firsts) == len(victim):
        took = max(firsts.values())
        print(f"{engine} engine: failover time after {what} (slowest partition): {took:.1f} s")
        return took
    return None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=int, default=300)
    ap.add_argument("--before", type=float, default=8.0, help="seconds of input before the kill")
    ap.add_argument("--after", type=float, default=40.0, help="seconds of input after the kill")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--session-timeout", default="10")
    ap.add_argument("--heartbeat-interval", default="3")
    ap.add_argument(
        "--modes",
        default="kill,freeze",
        help="comma-separated: kill (SIGKILL) and/or freeze (SIGSTOP, thawed afterwards)",
    )
    add_engines_arg(ap)
    add_json_arg(ap)
    args = ap.parse_args()
    engines = chosen_engines(ap, args)
    bs = bootstrap()
    figures = []
    failed = []
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or set(modes) - MODES.keys():
        ap.error(f"--modes takes {' and/or '.join(MODES)}")
    for mode in modes:
        for engine in engines:
            took = failover(args, bs, engine, mode)
            if took is None:
                failed.append(f"{engine} ({mode})")
                continue
            # The faust engine's kill figure keeps the name results.json has always had.
            tag = "" if engine == "faust" else f", {engine} engine"
            figures.append(
                Figure(
                    f"failover after {MODES[mode][1]} (slowest partition){tag}",
                    took,
                    "s",
                    "the session timeout (the group cannot notice sooner)",
                    float(args.session_timeout),
                    None,
                    f"input {args.rate}/s, heartbeat {args.heartbeat_interval} s, two workers",
                    limit_kind="configured",
                )
            )
    emit(args.json, figures)
    if failed:
        print(f"no failover measured for: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
