"""Produce -> webhook received: the whole alert path at a steady input rate.

One exactly-once ``fencewatch run`` worker and one ``fencewatch findings
--follow --webhook`` follower (both subprocesses, as deployed) on this
machine; a webhook receiver (http.server, keep-alive) in a process of its own
(as a real receiver is: not sharing an interpreter with the load generator
and the latency reader of this process), and the paced load generator in
another (:class:`live_support.LoadGenerator`, as in bench/live_latency.py),
after ``--warmup`` seconds of unmeasured traffic at the same rate. Every
measured event is a stale checkpoint of its own workflow, so each raises one
new finding, which the follower POSTs. Latency per event: from its produce
call to the receiver having the POST. Each run also prints the CPU seconds
the worker, the follower and the receiver used over the measured window (on
a 2-core host they compete for the same cores).

The limit, measured in the same run on the same events: produce -> finding
visible to a read_committed consumer of the findings topic (what
bench/live_latency.py measures), i.e. what the processor alone costs. The
ratio shows what the follower and the HTTP hop add.

    .venv/bin/python bench/findings_webhook.py [--rate 2000] [--seconds 20] [--runs 3]
        [--engines faust,rdkafka]

Target: webhook p99 <= 500 ms at 2,000 events/s, for each engine (the faust
engine's figures keep their old names; the rdkafka engine's end in ", rdkafka
engine"). Each figure is the median
of ``--runs`` runs (each a fresh worker, follower, receiver and topics) with
every run's value beside it; a finding not there when the wait ended counts
as arriving then (a lower bound) instead of being left out.
"""
# make-bench: --rate 2000 --seconds 20

from __future__ import annotations

import argparse
import asyncio
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

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from live_latency import pct
from live_support import (
    REPO,
    FirstSeen,
    LoadGenerator,
    Worker,
    add_engines_arg,
    bootstrap,
    chosen_engines,
    create_topics,
    handovers,
    names,
    produce_all,
    producer,
    stale_progress,
    worker_env,
)
from results import Figure, add_json_arg, add_paced_args, emit


class _Receiver(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection of the bench's webhook receiver:
    each POST's workflow key is stamped (monotonic) on arrival and answered
    200 at once.

    Why not tests/findings/receiver.py's http.server: it took ~300 CPU µs per
    POST (11.4-12.3 CPU s per 20 s run at 2,000/s), on the 2 cores that also
    run the worker, the follower and the broker, and a real receiver runs on
    a host of its own. This one measured 75-130 µs per POST (3.3-3.4 CPU s
    per run, mostly the event loop's cost per read); it understands only
    what the follower sends (a Content-Length body, no chunking)."""

    def __init__(self, first: dict[str, float], counter: list[int]) -> None:
        self.first, self.counter = first, counter
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        now = time.monotonic()
        answers = 0
        while True:
            head_end = self.buf.find(b"\r\n\r\n")
            if head_end < 0:
                break
            length = 0
            for line in bytes(self.buf[:head_end]).split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if len(self.buf) < head_end + 4 + length:
                break
            body = bytes(self.buf[head_end + 4 : head_end + 4 + length])
            del self.buf[: head_end + 4 + length]
            self.first.setdefault(str(orjson.loads(body)["workflow_key"]), now)
            self.counter[0] += 1
            answers += 1
        if answers and self.transport is not None:
            self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n" * answers)


def _receive(conn: Any, warm: int, n: int) -> None:
    """The receiver process: send its URL, then "warm" once ``warm`` posts
    arrived, then, once ``warm + n`` posts arrived (or on "stop"), each
    workflow key's first arrival time (monotonic, which is system-wide on
    Linux, so it compares with the load generator's) and the post count."""
    first: dict[str, float] = {}
    counter = [0]

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            lambda: _Receiver(first, counter), "127.0.0.1", 0, reuse_address=True
        )
        port = server.sockets[0].getsockname()[1]
        conn.send(f"http://127.0.0.1:{port}/hook")
        deadline = time.monotonic() + 600
        told = False
        while counter[0] < warm + n and time.monotonic() < deadline and not conn.poll(0):
            if not told and counter[0] >= warm:
                conn.send("warm")
                told = True
            await asyncio.sleep(0.05)
        server.close()
        if not told:
            conn.send("warm")

    asyncio.run(serve())
    conn.send((first, counter[0]))


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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
    behind_ms: float
    #: CPU seconds over the measured window: worker, follower, receiver.
    cpu: tuple[float, float, float]
    window_s: float

    def line(self, n: int) -> str:
        w, f, r = self.cpu
        return (
            f"webhook p50 {pct(self.hooked, 0.5):.0f} p90 {pct(self.hooked, 0.9):.0f} "
            f"p99 {pct(self.hooked, 0.99):.0f} max {self.hooked[-1]:.0f} ms; finding visible "
            f"p50 {pct(self.visible, 0.5):.0f} p99 {pct(self.visible, 0.99):.0f} ms; "
            f"input {self.rate:,.0f}/s, generator behind schedule at worst "
            f"{self.behind_ms:.0f} ms; posts {self.first_posts}/{n} "
            f"({self.posts - self.first_posts} repeated), visible {self.seen}/{n}; "
            f"CPU over the {self.window_s:.0f} s window: worker {w:.1f} s, follower {f:.1f} s, "
            f"receiver {r:.1f} s; load average {self.load:.1f}"
        )


def one_run(bs: str, args: argparse.Namespace, tag: str, engine: str) -> Run:
    """A fresh worker of ``engine``, follower and receiver over fresh topics."""
    n = args.rate * args.seconds
    events, findings, dlq, app_id = names(f"bench-hook-{engine}-{tag}")
    create_topics(bs, [events, findings, dlq], args.partitions)
    warm = [f"hook-warm/{i:07d}" for i in range(int(args.rate * args.warmup))]
    keys = [f"hook/{i:07d}" for i in range(n)]

    produce_all(producer(bs), events, handovers(warm + keys))
    ctx = multiprocessing.get_context("spawn")
    here, there = ctx.Pipe()
    receiver = ctx.Process(target=_receive, args=(there, len(warm), n), daemon=True)
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
            FENCEWATCH_ENGINE=engine,
        )
        w = Worker(bs, env, Path(tmp) / "w.log")
        follower_log = open(Path(tmp) / "follower.log", "wb")  # noqa: SIM115
        follower = subprocess.Popen(
            [sys.executable, "-m", "streams", "findings", "--bootstrap-servers", bs,
             "--topic", findings, "--follow", "--format", "jsonl", "--group", f"{app_id}-hook",
             "--webhook", url, "--dead-letter", str(Path(tmp) / "dead.jsonl")],
            cwd=REPO, stdout=subprocess.DEVNULL, stderr=follower_log,
        )  # fmt: skip
        gen: LoadGenerator | None = None
        try:
            w.wait_ready()
            while (w.health() or {}).get("processed", 0) < 2 * (len(warm) + n):
                time.sleep(0.2)
            seen = FirstSeen(bs, findings, args.partitions, f"lat-{findings}")
            gen = LoadGenerator(bs, events, warm, keys, args.rate, stale_progress)
            # Warm-up: the worker's first transactions, the follower's first
            # fetches and the receiver's connections are not measured.
            if not gen.warm_sent(120):
                raise RuntimeError("the load generator did not send its warm-up")
            seen.wait_for(len(warm), 60)
            if not here.poll(60) or here.recv() != "warm":
                raise RuntimeError("warm-up: the webhook posts did not arrive within 60 s")
            load = os.getloadavg()[0]
            pids = (w.engine_pid(), follower.pid, receiver.pid or 0)
            cpu0 = [_cpu_s(p) for p in pids]
            t0 = time.monotonic()
            gen.go()
            sent, _acked, behind, actual = gen.result(n / args.rate + 120)
            seen.wait_for(len(warm) + n, 60)
            seen_until = time.monotonic()
            seen.close()
            if not here.poll(120):
                here.send("stop")
            first_post, n_posts = here.recv()
            posted_until = time.monotonic()
            cpu = tuple(_cpu_s(p) - c for p, c in zip(pids, cpu0, strict=True))
            window = posted_until - t0
        finally:
            if gen is not None:
                gen.close()
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
    visible = sorted(
        (seen.seen.get(k, seen_until) - t) * 1000 for k, t in zip(keys, sent, strict=True)
    )
    hooked = sorted(
        (first_post.get(k, posted_until) - t) * 1000 for k, t in zip(keys, sent, strict=True)
    )
    first_measured = sum(1 for k in keys if k in first_post)
    seen_measured = sum(1 for k in keys if k in seen.seen)
    return Run(
        hooked,
        visible,
        actual,
        n_posts - len(warm),
        first_measured,
        seen_measured,
        load,
        behind,
        (cpu[0], cpu[1], cpu[2]),
        window,
    )


def main() -> int:
    ap = argparse.ArgumentParser()
    add_paced_args(ap)
    ap.add_argument("--runs", type=int, default=3, help="runs per engine, each a fresh worker")
    ap.add_argument("--warmup", type=float, default=2.0, help="seconds of unmeasured traffic first")
    add_engines_arg(ap)
    add_json_arg(ap)
    args = ap.parse_args()
    engines = chosen_engines(ap, args)
    bs = bootstrap()
    figures: list[Figure] = []
    for engine in engines:
        runs: list[Run] = []
        for i in range(args.runs):
            runs.append(one_run(bs, args, f"r{i}", engine))
            print(f"{engine} run {i + 1}: {runs[-1].line(args.rate * args.seconds)}", flush=True)
        figures += engine_figures(args, engine, runs)
    emit(args.json, figures)
    return 0


def engine_figures(args: argparse.Namespace, engine: str, runs: list[Run]) -> list[Figure]:
    """The p99 and p50 figures of ``engine``'s runs (printed too)."""
    n = args.rate * args.seconds

    def med(field: str, q: float) -> float:
        return statistics.median(pct(getattr(r, field), q) for r in runs)

    short = sum(n - r.first_posts for r in runs) + sum(n - r.seen for r in runs)
    setting = (
        f"{args.rate:,} events/s for {args.seconds} s, commit interval {args.commit_interval} s, "
        f"{args.partitions} partitions, {engine} engine, after {args.warmup:g} s of "
        f"warm-up; median of {args.runs} runs (each a fresh worker, "
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
        f"{engine} engine: produce -> webhook received p99 per run: "
        + " / ".join(f"{pct(r.hooked, 0.99):.0f}" for r in runs)
        + f" ms (median {med('hooked', 0.99):.0f}; target 500); finding visible p99 per run: "
        + " / ".join(f"{pct(r.visible, 0.99):.0f}" for r in runs)
        + " ms",
        flush=True,
    )
    limit_name = "produce -> finding visible on the findings topic, same run"
    # The faust engine keeps the figure names results.json has always had.
    tag = "" if engine == "faust" else f", {engine} engine"
    return [
        Figure(
            f"produce -> webhook received {label}{tag}",
            med("hooked", q),
            "ms",
            f"{limit_name} ({label})",
            med("visible", q),
            target,
            setting,
            runs=[pct(r.hooked, q) for r in runs],
            limit_runs=[pct(r.visible, q) for r in runs],
        )
        for label, q, target in (("p99", 0.99, "value <= 500"), ("p50", 0.5, None))
    ]


if __name__ == "__main__":
    raise SystemExit(main())
