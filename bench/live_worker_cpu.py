"""CPU per event of one rdkafka worker's engine process over a topic of many
live keys (issue 46), and of the broker in the same run; optionally against
another build of fencewatch, alternated round by round.

    .venv/bin/python bench/live_worker_cpu.py [--keys 25000] [--block 25000]
        [--rounds 3] [--baseline /path/to/other/checkout]
        [--variant NAME:KEY=VALUE[,KEY=VALUE]] [--perf out.data]

The workload is ``bench/live_peer.py``'s: ``--keys`` keys of 8 events (2
epochs), round-robin over blocks of ``--block`` keys (default: all live at
once), 4 partitions, commit interval 0.1 s. Each run is a fresh worker (its
own group, from the topic's start); the CPU is the engine process's user +
system time (``/proc/<pid>/stat``, every thread: the loop, librdkafka's, the
commit thread) from its first ready /health answer until it has processed
every event, divided by the events; the loop thread's is that of the
thread that used the most. CPU per event moves less with the
machine's load than the rate does, which is why this bench exists: a change
to the engine's per-event cost is measured here, its throughput in
``bench/live_throughput.py`` and ``bench/live_peer.py``.

``--baseline DIR``: each round also runs a worker from that checkout (its
working directory, so ``python -m streams`` imports that ``streams``
package: a ``git worktree`` of the commit to compare with, its compiled
modules built or copied in); the figures are the medians of each side and
of the per-round ratios. ``--variant``: a worker of this checkout with
those environment variables (``FENCEWATCH_STATE_CACHE_KEYS=50000``...).
``--perf FILE``: ``perf record`` of the first run's engine process (or, for a
``FILE.txt``, ``py-spy record --native``'s collapsed stacks: py-spy installed
beside the interpreter, not a dependency).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from live_support import REPO, bootstrap, create_topics, names, produce_all, producer, worker_env
from live_throughput import interleaved, processed_samples, sustained

from tests.support.worker import WorkerProcess


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (every thread)."""
    return cpu_seconds_of(Path(f"/proc/{pid}/stat"))


def thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds of each thread of process ``pid`` so far."""
    out: dict[int, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out[int(task.name)] = cpu_seconds_of(task / "stat")
        except (OSError, ValueError):
            continue  # a thread that ended meanwhile
    return out


def cpu_seconds_of(stat: Path) -> float:
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def broker_pid() -> int | None:
    """The private broker's pid (``scripts/with-services`` writes it), if known."""
    where = os.environ.get("FENCEWATCH_KAFKA_DIR")
    try:
        return int((Path(where) / "pid").read_text()) if where else None
    except (OSError, ValueError):
        return None


Run = tuple[float, float, float, float | None]


class _Worker(WorkerProcess):
    """``live_support.Worker`` started in ``cwd``: ``python -m streams`` puts
    its working directory first on ``sys.path``, so that checkout's
    ``streams`` is the one it runs (``PYTHONPATH`` alone does not do it)."""

    def __init__(self, bs: str, env: dict[str, str], log: Path, cwd: Path) -> None:
        full = {"FENCEWATCH_LOG_LEVEL": "warning", **env, "FENCEWATCH_BOOTSTRAP_SERVERS": bs}
        super().__init__(full, log, cwd=cwd)


def one_run(bs: str, env: dict[str, str], total: int, perf: str | None, cwd: Path = REPO) -> Run:
    """(events/s, engine process CPU µs/event, its loop thread's, broker
    CPU µs/event) of one worker (run from ``cwd``'s checkout, if given)."""
    bpid = broker_pid()
    with tempfile.TemporaryDirectory() as tmp:
        w = _Worker(bs, {**env, "FENCEWATCH_DATA_DIR": tmp}, Path(tmp) / "w.log", cwd)
        try:
            w.wait_ready()
            pid = w.engine_pid()
            rec = None
            if perf:
                # FILE.txt: py-spy's collapsed stacks (Python and native
                # frames, the engine thread's own); else a perf record.
                cmd = (
                    [str(Path(sys.executable).with_name("py-spy")), "record", "--native",
                     "-r", "250", "-f", "raw", "--gil", "-o", perf, "-p", str(pid)]
                    if perf.endswith(".txt")
                    else ["perf", "record", "-F", "1999", "-g", "-p", str(pid), "-o", perf]
                )  # fmt: skip
                rec = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            c0, b0 = cpu_seconds(pid), cpu_seconds(bpid) if bpid else 0.0
            t0 = thread_cpu(pid)
            samples = processed_samples(w, total)
            engine = (cpu_seconds(pid) - c0) / total * 1e6
            # The loop's thread: the one that used the most CPU meanwhile
            # (Python 3.11 does not name its threads for the OS).
            t1 = thread_cpu(pid)
            loop = max(t1[t] - t0.get(t, 0.0) for t in t1) / total * 1e6
            broker = (cpu_seconds(bpid) - b0) / total * 1e6 if bpid else None
            if rec is not None:
                rec.send_signal(2)
                rec.wait()
            return sustained(samples, total), engine, loop, broker
        finally:
            w.stop()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=25_000)
    ap.add_argument("--block", type=int, default=None, help="keys live at once (default: all)")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--commit-interval", default="0.1")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--baseline", type=Path, default=None, help="another checkout to compare")
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME:KEY=VALUE[,KEY=VALUE]",
        help="also run a worker with these environment variables (repeatable)",
    )
    ap.add_argument("--perf", default=None, help="perf record the first run into this file")
    args = ap.parse_args()
    if args.baseline is not None and not (args.baseline / "streams" / "__init__.py").is_file():
        print(f"live_worker_cpu: no streams package under {args.baseline}", file=sys.stderr)
        return 2
    bs = bootstrap()
    events, findings, dlq, app_id = names("bench-cpu")
    create_topics(bs, [events, findings, dlq], args.partitions)
    block = args.block or args.keys
    total = produce_all(producer(bs), events, interleaved(args.keys, args.epochs, block))
    print(f"produced {total:,} events of {args.keys:,} keys ({block:,} live at once)", flush=True)
    builds: dict[str, tuple[dict[str, str], Path]] = {"this": ({}, REPO)}
    if args.baseline is not None:
        builds["baseline"] = ({}, args.baseline.resolve())
    for spec in args.variant:
        name, _, assignments = spec.partition(":")
        builds[name] = (dict(kv.split("=", 1) for kv in assignments.split(",") if kv), REPO)
    runs: dict[str, list[Run]] = {name: [] for name in builds}
    perf = args.perf
    for rnd in range(args.rounds):
        # Rotate which build goes first: load that drifts is shared.
        names_ = list(builds)
        k = rnd % len(names_)
        order = names_[k:] + names_[:k]
        line = []
        for name in order:
            env = worker_env(
                events,
                findings,
                dlq,
                f"{app_id}-{uuid.uuid4().hex[:6]}",
                FENCEWATCH_ENGINE="rdkafka",
                FENCEWATCH_COMMIT_INTERVAL=args.commit_interval,
                **builds[name][0],
            )
            run = one_run(bs, env, total, perf, builds[name][1])
            perf = None
            runs[name].append(run)
            rate, engine, loop, broker = run
            line.append(
                f"{name} {rate:,.0f}/s engine {engine:.2f} µs/ev (loop {loop:.2f})"
                + (f" broker {broker:.2f}" if broker is not None else "")
            )
        print(f"round {rnd} (load {os.getloadavg()[0]:.1f}): " + "; ".join(line), flush=True)
    for name, rs in runs.items():
        print(
            f"{name}: median {statistics.median(r[0] for r in rs):,.0f}/s, engine "
            f"{statistics.median(r[1] for r in rs):.2f} CPU µs/event "
            f"({', '.join(f'{r[1]:.2f}' for r in rs)}), its loop thread "
            f"{statistics.median(r[2] for r in rs):.2f}"
        )
    first = next(iter(runs.values()))
    for name, rs in list(runs.items())[1:]:
        cpu = [b[1] / a[1] for a, b in zip(first, rs, strict=True)]
        loop = [b[2] / a[2] for a, b in zip(first, rs, strict=True)]
        rate = [b[0] / a[0] for a, b in zip(first, rs, strict=True)]
        print(
            f"{name} / this: engine CPU per event {statistics.median(cpu):.3f} "
            f"({', '.join(f'{c:.2f}' for c in cpu)}), loop thread "
            f"{statistics.median(loop):.3f}, rate {statistics.median(rate):.3f} "
            f"({', '.join(f'{r:.2f}' for r in rate)})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
