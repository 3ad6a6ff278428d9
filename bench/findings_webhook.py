"""Produce -> webhook received: the whole alert path at a steady input rate.

One exactly-once ``fencewatch run`` worker and one ``fencewatch findings
--follow --webhook`` follower (both subprocesses, as deployed) on this
machine; a webhook receiver (http.server, keep-alive) in a process of its own
(as a real receiver is: not sharing an interpreter with the load generator
and the latency reader of this process). Every
measured event is a stale checkpoint of its own workflow, so each raises one
new finding, which the follower POSTs. Latency per event: from its produce
call to the receiver having the POST.

The limit, measured in the same run on the same events: produce -> finding
visible to a read_committed consumer of the findings topic (what
bench/live_latency.py measures), i.e. what the processor alone costs. The
ratio shows what the follower and the HTTP hop add.

    .venv/bin/python bench/findings_webhook.py [--rate 2000] [--seconds 20] [--runs 3]

Target: webhook p99 <= 500 ms at 2,000 events/s. Each figure is the median
of ``--runs`` runs (each a fresh worker, follower, receiver and topics) with
every run's value beside it; a finding not there when the wait ended counts
as arriving then (a lower bound) instead of being left out.
"""
# make-bench: --rate 2000 --seconds 20

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from live_latency import pct
from live_support import (
    REPO,
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
from results import Figure, add_json_arg, add_paced_args, emit

from tests.findings.receiver import webhook_receiver


def _receive(conn: Any, n: int) -> None:
    """The receiver process: send its URL, then, once ``n`` posts arrived (or
    on "stop"), each workflow key's first arrival time and the post count."""
    with webhook_receiver() as rx:
        conn.send(rx.url)
        deadline = time.monotonic() + 600
        while rx.count() < n and time.monotonic() < deadline and not conn.poll(0.05):
            pass
        with rx.lock:
            posts = list(rx.posts)
    first: dict[str, float] = {}
    for post in posts:
        first.setdefault(str(post.body["workflow_key"]), post.at)
    conn.send((first, len(posts)))


@dataclass(frozen=True, slots=True)
class Run:
    """One run: latencies (ms, sorted) to the webhook and to the findings topic."""

    hooked: list[float]
    visible: list[float]
    rate: float
    posts: int
    first_posts: int
    seen: int
    load: float

    def line(self, n: int) -> str:
        return (
            f"webhook p50 {pct(self.hooked, 0.5):.0f} p90 {pct(self.hooked, 0.9):.0f} "
            f"p99 {pct(self.hooked, 0.99):.0f} max {self.hooked[-1]:.0f} ms; finding visible "
            f"p50 {pct(self.visible, 0.5):.0f} p99 {pct(self.visible, 0.99):.0f} ms; "
            f"input {self.rate:,.0f}/s; posts {self.first_posts}/{n} "
            f"({self.posts - self.first_posts} repeated), visible {self.seen}/{n}; "
            f"load average {self.load:.1f}"
        )


def one_run(bs: str, args: argparse.Namespace, tag: str) -> Run:
    """A fresh worker, follower and receiver over fresh topics."""
    n = args.rate * args.seconds
    events, findings, dlq, app_id = names(f"bench-hook-{tag}")
    create_topics(bs, [events, findings, dlq], args.partitions)
    keys = [f"hook/{i:07d}" for i in range(n)]

    produce_all(producer(bs), events, handovers(keys))
    ctx = multiprocessing.get_context("spawn")
    here, there = ctx.Pipe()
    receiver = ctx.Process(target=_receive, args=(there, n), daemon=True)
    receiver.start()
    url = here.recv()
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
        follower_log = open(Path(tmp) / "follower.log", "wb")  # noqa: SIM115
        follower = subprocess.Popen(
            [sys.executable, "-m", "streams", "findings", "--bootstrap-servers", bs,
             "--topic", findings, "--follow", "--format", "jsonl", "--group", f"{app_id}-hook",
             "--webhook", url, "--dead-letter", str(Path(tmp) / "dead.jsonl")],
            cwd=REPO, stdout=subprocess.DEVNULL, stderr=follower_log,
        )  # fmt: skip
        try:
            w.wait_ready()
            while (w.health() or {}).get("processed", 0) < 2 * n:
                time.sleep(0.2)
            seen = FirstSeen(bs, findings, args.partitions, f"lat-{findings}")
            sent_mono: dict[str, float] = {}
            sent_wall: dict[str, float] = {}
            p = producer(bs, **{"linger.ms": 0})
            start = time.monotonic()
            for i, k in enumerate(keys):
                delay = start + i / args.rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                p.produce(events, doc(k, "progress", 1, "old", 3), key=k.encode())
                sent_mono[k] = time.monotonic()
                sent_wall[k] = time.time()
                p.poll(0)
            actual = n / (time.monotonic() - start)
            p.flush(30)
            load = os.getloadavg()[0]
            seen.wait_for(n, 60)
            seen_until = time.monotonic()
            seen.close()
            if not here.poll(120):
                here.send("stop")
            first_post, n_posts = here.recv()
            posted_until = time.time()
        finally:
            follower.terminate()
            follower.wait(30)
            follower_log.close()
            follower_tail = (Path(tmp) / "follower.log").read_text(errors="replace")[-500:]
            w.stop()
            receiver.join(10)
    if not first_post or not seen.seen:
        raise RuntimeError(
            f"no findings seen: {len(seen.seen)} visible, {len(first_post)} posted "
            f"({n_posts} posts); follower log: {follower_tail!r}"
        )
    # A finding not seen (or not posted) when the wait ended counts as seen
    # then: a lower bound, never left out of the percentiles.
    visible = sorted((seen.seen.get(k, seen_until) - sent_mono[k]) * 1000 for k in keys)
    hooked = sorted((first_post.get(k, posted_until) - sent_wall[k]) * 1000 for k in keys)
    return Run(hooked, visible, actual, n_posts, len(first_post), len(seen.seen), load)


def main() -> int:
    ap = argparse.ArgumentParser()
    add_paced_args(ap)
    ap.add_argument("--runs", type=int, default=3, help="runs, each with a fresh worker")
    add_json_arg(ap)
    args = ap.parse_args()
    bs = bootstrap()
    n = args.rate * args.seconds
    runs: list[Run] = []
    for i in range(args.runs):
        runs.append(one_run(bs, args, f"r{i}"))
        print(f"run {i + 1}: {runs[-1].line(n)}", flush=True)

    def med(field: str, q: float) -> float:
        return statistics.median(pct(getattr(r, field), q) for r in runs)

    short = sum(n - r.first_posts for r in runs) + sum(n - r.seen for r in runs)
    setting = (
        f"{args.rate:,} events/s for {args.seconds} s, commit interval {args.commit_interval} s, "
        f"{args.partitions} partitions; median of {args.runs} runs (each a fresh worker, "
        f"follower, receiver and topics), spread in runs; webhook posts "
        + " / ".join(f"{r.first_posts}/{n}" for r in runs)
        + ", findings visible "
        + " / ".join(f"{r.seen}/{n}" for r in runs)
        + (
            f" ({short} not there when the wait ended, counted as arriving then: lower bounds)"
            if short
            else ""
        )
        + f"; load average {min(r.load for r in runs):.1f}-{max(r.load for r in runs):.1f} "
        f"on {os.cpu_count()} CPUs"
    )
    print(setting)
    print(
        "produce -> webhook received p99 per run: "
        + " / ".join(f"{pct(r.hooked, 0.99):.0f}" for r in runs)
        + f" ms (median {med('hooked', 0.99):.0f}; target 500); finding visible p99 per run: "
        + " / ".join(f"{pct(r.visible, 0.99):.0f}" for r in runs)
        + " ms"
    )
    limit_name = "produce -> finding visible on the findings topic, same run"
    emit(
        args.json,
        [
            Figure(
                "produce -> webhook received p99",
                med("hooked", 0.99),
                "ms",
                limit_name + " (p99)",
                med("visible", 0.99),
                "value <= 500",
                setting,
                runs=[pct(r.hooked, 0.99) for r in runs],
                limit_runs=[pct(r.visible, 0.99) for r in runs],
            ),
            Figure(
                "produce -> webhook received p50",
                med("hooked", 0.5),
                "ms",
                limit_name + " (p50)",
                med("visible", 0.5),
                None,
                setting,
                runs=[pct(r.hooked, 0.5) for r in runs],
                limit_runs=[pct(r.visible, 0.5) for r in runs],
            ),
        ],
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
