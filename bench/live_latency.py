"""Latency from produce to finding visible to a read_committed consumer, at a
steady input rate, with one exactly-once worker; next to a limit measured in
the same run: a bare confluent-kafka exactly-once relay (consume, produce each
record to an output topic, commit the transaction with the offsets every
commit interval), which is what any exactly-once processor pays at that
commit interval on this broker.

    .venv/bin/python bench/live_latency.py [--rate 2000] [--seconds 20] [--commit-interval 0.1]
        [--runs 3] [--broker-warmup 15] [--engines faust,rdkafka]

Every measured event is a stale checkpoint of its own workflow (prepared
before the measurement), so each raises exactly one new finding. Targets:
p99 no longer than the bare relay's p99 at the same rate and commit interval;
p99 <= 250 ms at 2,000 events/s. Each engine (``--engines``) is a side of its
own, judged against the same relay runs.

The sides are measured the same way, ``--runs`` times (3), the order
rotating, each side a fresh process over fresh topics: the relay in a
process of its own (as the worker is), the paced load generator in another
(:class:`live_support.LoadGenerator`), and the read_committed reader that
stamps what it sees alone in this one. Each side first gets ``--warmup``
seconds of unmeasured traffic at the same rate, the measurement starting once
all of it is visible, and before the first run a freshly started broker gets
``--broker-warmup`` seconds of relay traffic that is not counted (its
transaction coordinator loads, its JIT compiles the request path). Every
figure is the median of the runs with each run's value beside it.

Why the relay's p99 moved from 0.2 s to 6 s between runs (docs/live.md,
"Latency: why the figures moved"): each run also prints, per side, the
broker's produce acknowledgement latency (ack), what the side adds after the
ack, its transaction commit times (relay), how far the load generator fell
behind its schedule, the load average, and whether latency grew over the
window (a side that is not keeping up: its p99 is a backlog that grows with
``--seconds``, not a latency). The ack was most of every p99 while the
generator produced with ``linger.ms`` 0 (live_support.GENERATOR, docs/live.md).
"""
# make-bench: --rate 2000 --seconds 20

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from live_support import (
    FirstSeen,
    LoadGenerator,
    RelayProcess,
    Worker,
    add_engines_arg,
    bootstrap,
    chosen_engines,
    create_topics,
    handovers,
    key_value,
    names,
    produce_all,
    producer,
    stale_progress,
    worker_env,
)
from results import Figure, add_json_arg, add_paced_args, emit


@dataclass(frozen=True, slots=True)
class Side:
    """One side's measurement in one run: latencies (ms, sorted) and what
    explains an outlier."""

    lat: list[float]
    rate: float
    behind_ms: float
    load: float
    #: produce -> broker ack (ms, sorted): the broker's share before any processing.
    ack: list[float]
    #: broker ack -> visible (ms, sorted): what the side adds once the record is in the log.
    after_ack: list[float]
    #: median latency of the last quarter of the keys minus the first quarter's (ms):
    #: a queue building up over the window (the side was not keeping up).
    growth: float
    #: Records not visible when the wait ended (counted as visible then).
    unseen: int = 0
    commits: dict[str, float] | None = None

    def pct(self, q: float) -> float:
        return pct(self.lat, q)

    @property
    def saturated(self) -> bool:
        """Latency grew over the window by more than its own first-quarter
        median and by over 250 ms: a backlog, not a steady latency."""
        return self.growth > max(250.0, self.pct(0.5) / 2)

    def line(self, n: int) -> str:
        text = (
            f"p50 {self.pct(0.5):6.0f}  p90 {self.pct(0.9):6.0f}  p99 {self.pct(0.99):6.0f}  "
            f"max {self.lat[-1]:6.0f} ms; seen {n - self.unseen}/{n}"
            + (
                " (the rest counted as seen at the end of the wait: a lower bound)"
                if self.unseen
                else ""
            )
            + f"; input {self.rate:,.0f}/s, "
            f"generator behind schedule at worst {self.behind_ms:.0f} ms; load {self.load:.2f}; "
            f"broker ack p50 {pct(self.ack, 0.5):.0f} p99 {pct(self.ack, 0.99):.0f} ms, "
            f"ack -> visible p50 {pct(self.after_ack, 0.5):.0f} "
            f"p99 {pct(self.after_ack, 0.99):.0f} ms; "
            f"latency grew {self.growth:+.0f} ms over the window"
            + (" (SATURATED: a backlog, not a latency)" if self.saturated else "")
        )
        if self.commits:
            c = self.commits
            if c.get("bucketed"):
                text += (
                    f"; worker commits {c['commits']:.0f}, mean {c['mean']:.1f} ms, p50 <= "
                    f"{c['p50']:g} p99 <= {c['p99']:g} ms (its histogram's buckets)"
                )
            else:
                text += (
                    f"; relay commits {c['commits']:.0f}, mean {c['mean']:.1f} p50 "
                    f"{c['p50']:.0f} p99 {c['p99']:.0f} max {c['max']:.0f} ms"
                )
        return text


def drive(
    bs: str,
    in_topic: str,
    out_topic: str,
    warm: list[str],
    keys: list[str],
    rate: int,
    partitions: int,
    value: Callable[[str], bytes],
) -> Side:
    """Produce one record per key at ``rate`` to ``in_topic`` (from a process
    of its own); latency (ms) until a record with that key is visible on
    ``out_topic`` to a read_committed reader in this process.

    ``warm`` keys go first, at the same rate, and are not measured: the
    measurement starts once all of them are visible, so neither the
    processor under test (the relay or the worker) nor the reader is in its
    first fetches, connections or transactions."""
    out = FirstSeen(bs, out_topic, partitions, f"lat-{out_topic}")
    gen = LoadGenerator(bs, in_topic, warm, keys, rate, value)
    try:
        if not gen.warm_sent(120):
            raise RuntimeError("the load generator did not send its warm-up")
        out.wait_for(len(warm), 60)
        if len(out.seen) < len(warm):
            raise RuntimeError(f"warm-up: {len(out.seen)}/{len(warm)} visible after 60 s")
        load = os.getloadavg()[0]
        gen.go()
        sent, acked, behind, actual = gen.result(len(keys) / rate + 120)
        out.wait_for(len(warm) + len(keys), 30)
        gave_up = time.monotonic()
    finally:
        gen.close()
        out.close()
    # A record not visible when the wait ended counts as visible then: a
    # lower bound, never left out (leaving the slowest out would lower p99).
    seen = out.seen
    if not seen:
        raise RuntimeError(f"nothing visible on {out_topic}")
    by_key = [(seen.get(k, gave_up) - t) * 1000 for k, t in zip(keys, sent, strict=True)]
    q = max(1, len(by_key) // 4)
    growth = statistics.median(by_key[-q:]) - statistics.median(by_key[:q])
    ack = sorted((a - t) * 1000 for a, t in zip(acked, sent, strict=True) if not math.isnan(a))
    after = sorted(
        (seen.get(k, gave_up) - a) * 1000
        for k, a in zip(keys, acked, strict=True)
        if not math.isnan(a)
    )
    nan = [math.nan]
    unseen = sum(1 for k in keys if k not in seen)
    return Side(sorted(by_key), actual, behind, load, ack or nan, after or nan, growth, unseen)


def pct(lat: list[float], q: float) -> float:
    return lat[min(len(lat) - 1, int(q * len(lat)))]


def relay_side(bs: str, args: argparse.Namespace, tag: str, seconds: float) -> Side:
    """The bare relay (a fresh process, fresh topics) at the rate, ``seconds`` long."""
    src, dst, _dlq, _app = names(f"bench-lat-bare-{tag}")
    create_topics(bs, [src, dst], args.partitions)
    relay = RelayProcess(bs, src, dst, args.partitions, float(args.commit_interval))
    commits = None
    try:
        side = drive(
            bs,
            src,
            dst,
            [f"bare-warm/{i:07d}" for i in range(int(args.rate * args.warmup))],
            [f"bare/{i:07d}" for i in range(int(args.rate * seconds))],
            args.rate,
            args.partitions,
            key_value,
        )
    finally:
        commits = relay.close()
    return dataclasses.replace(side, commits=commits)


def worker_side(bs: str, args: argparse.Namespace, tag: str, engine: str) -> Side:
    """One worker of ``engine`` (a fresh process, fresh topics and state) at the rate."""
    w = int(args.rate * args.warmup)
    n = args.rate * args.seconds
    events, findings, dlq, app_id = names(f"bench-lat-{engine}-{tag}")
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
            FENCEWATCH_ENGINE=engine,
        )
        worker = Worker(bs, env, Path(tmp) / "w.log")
        try:
            worker.wait_ready()
            # The preamble processed: the group has joined and settled, and
            # the measured events meet warm state, not a restore.
            while (worker.health() or {}).get("processed", 0) < 2 * (w + n):
                time.sleep(0.2)
            before = commit_histogram(worker.metrics())
            side = drive(
                bs, events, findings, warm, keys, args.rate, args.partitions, stale_progress
            )
            after = commit_histogram(worker.metrics())
            return dataclasses.replace(side, commits=histogram_summary(before, after))
        finally:
            worker.stop()


def commit_histogram(text: str) -> dict[str, float]:
    """The worker's ``fencewatch_commit_seconds`` histogram from its /metrics
    text: cumulative bucket counts by upper bound (``le``), ``count``, ``sum``."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != "fencewatch_commit_seconds":
            continue
        for sample in family.samples:
            if sample.name.endswith("_bucket"):
                out[sample.labels["le"]] = sample.value
            elif sample.name.endswith(("_count", "_sum")):
                out[sample.name.rsplit("_", 1)[1]] = sample.value
    return out


def histogram_summary(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """The commits between two snapshots: count, mean (ms), and the bucket
    bounds (ms) holding the median and the 99th percentile (a histogram gives
    no finer p50/p99 than its buckets)."""
    n = after.get("count", 0.0) - before.get("count", 0.0)
    if n <= 0:
        return {"commits": 0, "mean": 0.0, "p50": 0.0, "p99": 0.0, "bucketed": 1}
    mean = (after.get("sum", 0.0) - before.get("sum", 0.0)) / n * 1000
    bounds = sorted((float(le), after[le] - before.get(le, 0.0)) for le in after if le[0].isdigit())

    def bound(q: float) -> float:
        for le, cumulative in bounds:
            if cumulative >= q * n:
                return le * 1000
        return float("inf")

    return {"commits": n, "mean": mean, "p50": bound(0.5), "p99": bound(0.99), "bucketed": 1}


def spread(values: list[float]) -> str:
    return " / ".join(f"{v:.0f}" for v in values)


def main() -> int:
    ap = argparse.ArgumentParser()
    add_paced_args(ap)
    ap.add_argument("--warmup", type=float, default=2.0, help="seconds of unmeasured traffic first")
    ap.add_argument("--runs", type=int, default=3, help="measured runs of each side")
    ap.add_argument(
        "--broker-warmup",
        type=float,
        default=15.0,
        help="seconds of relay traffic before the first run, not counted (0: none)",
    )
    ap.add_argument("--no-limit", action="store_true", help="skip the bare relay")
    add_engines_arg(ap)
    add_json_arg(ap)
    args = ap.parse_args()
    engines = chosen_engines(ap, args)
    bs = bootstrap()
    n = args.rate * args.seconds

    if args.broker_warmup > 0 and not args.no_limit:
        # A freshly started broker runs its first minute of transactions
        # interpreted (the JIT has not compiled its request path yet): the
        # first side measured would pay for it, and that side was always the relay.
        first = relay_side(bs, args, "brokerwarm", args.broker_warmup)
        warm_n = int(args.rate * args.broker_warmup)
        print(f"broker warm-up (not counted), relay: {first.line(warm_n)}", flush=True)

    relays: list[Side] = []
    workers: dict[str, list[Side]] = {e: [] for e in engines}
    sides = ([] if args.no_limit else ["relay"]) + engines
    for run in range(args.runs):
        # Rotate which side goes first, so drift in the machine's load over
        # the runs falls on every side.
        order = sides[run % len(sides) :] + sides[: run % len(sides)]
        for side in order:
            if side == "relay":
                relays.append(relay_side(bs, args, f"r{run}", args.seconds))
                print(f"run {run + 1} relay:  {relays[-1].line(n)}", flush=True)
            else:
                workers[side].append(worker_side(bs, args, f"r{run}", side))
                print(f"run {run + 1} {side} worker: {workers[side][-1].line(n)}", flush=True)

    def med(sides: list[Side], q: float) -> float:
        return statistics.median(s.pct(q) for s in sides)

    def med_after(sides: list[Side]) -> float:
        return statistics.median(pct(s.after_ack, 0.99) for s in sides)

    b99 = [s.pct(0.99) for s in relays]
    everyone = [s for e in engines for s in workers[e]] + relays
    loads = [s.load for s in everyone]
    setting = (
        f"{args.rate:,} events/s for {args.seconds} s, commit interval {args.commit_interval} s, "
        f"{args.partitions} partitions, after {args.warmup:g} s of warm-up per side"
        + (f" and {args.broker_warmup:g} s of broker warm-up" if relays else "")
        + f"; median of {args.runs} runs (each side a fresh process and topics, the order "
        f"rotating), spread in runs; load average {min(loads):.1f}-{max(loads):.1f}"
    )
    saturated = [
        f"{e} worker run {i + 1}" for e in engines for i, s in enumerate(workers[e]) if s.saturated
    ] + [f"relay run {i + 1}" for i, s in enumerate(relays) if s.saturated]
    if saturated:
        setting += f"; SATURATED (latency grew over the window): {', '.join(saturated)}"
    short = [s.unseen for s in everyone if s.unseen]
    if short:
        setting += (
            f"; {sum(short)} records not visible within 30 s of the last send, counted as "
            "visible then (the figures are lower bounds)"
        )
    acks = [pct(s.ack, 0.99) for s in everyone]
    setting += f"; broker ack p99 {min(acks):.0f}-{max(acks):.0f} ms"
    if relays:
        setting += (
            "; relay commit p99 "
            + " / ".join(f"{s.commits['p99']:.0f}" if s.commits else "?" for s in relays)
            + " ms"
        )
    relay_name = "bare exactly-once relay, same rate and commit interval"
    figures = []
    for engine in engines:
        ws = workers[engine]
        w99 = [s.pct(0.99) for s in ws]
        print(
            f"{engine} engine, {args.runs} runs of {args.seconds} s at {args.rate}/s, commit "
            f"interval {args.commit_interval} s: worker p99 {spread(w99)} ms (median "
            f"{med(ws, 0.99):.0f})"
            + (f"; relay p99 {spread(b99)} ms (median {med(relays, 0.99):.0f})" if relays else "")
            + (
                "; p99 ratio per run "
                + " / ".join(f"{w / b:.2f}" for w, b in zip(w99, b99, strict=True))
                if relays
                else ""
            ),
            flush=True,
        )
        # The faust engine keeps the figure names results.json has always had.
        tag = "" if engine == "faust" else f", {engine} engine"
        for label, q, target in (
            ("p99", 0.99, "ratio <= 1"),
            ("p90", 0.9, None),
            ("p50", 0.5, None),
        ):
            figures.append(
                Figure(
                    f"produce -> finding visible {label}{tag}",
                    med(ws, q),
                    "ms",
                    f"{relay_name} ({label})" if relays else None,
                    med(relays, q) if relays else None,
                    target if relays else None,
                    setting,
                    runs=[s.pct(q) for s in ws],
                    limit_runs=[s.pct(q) for s in relays] if relays else None,
                )
            )
        figures.append(
            Figure(
                f"broker ack -> finding visible p99{tag}",
                med_after(ws),
                "ms",
                f"{relay_name}, broker ack -> visible (p99)" if relays else None,
                med_after(relays) if relays else None,
                None,
                setting + "; from the broker's acknowledgement of each produced record, so "
                "the broker's own produce latency (shared by both sides) is left out",
                runs=[pct(s.after_ack, 0.99) for s in ws],
                limit_runs=[pct(s.after_ack, 0.99) for s in relays] if relays else None,
            )
        )
        figures.append(
            Figure(
                f"produce -> finding visible p99 (absolute){tag}",
                med(ws, 0.99),
                "ms",
                None,
                None,
                "value <= 250",
                setting,
                runs=w99,
            )
        )
    emit(args.json, figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
