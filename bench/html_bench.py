"""HTML report rendering at scale, against the JSON report of the same replay.

Two inputs, in one process and one run:

* the audit benchmark's file (100,000 events: 10,000 workflows, ~5% flagged):
  the page's overview, tables and up to 200 timelines;
* one workflow of 100,000 events with 50 takeovers, retained in full
  (``--max-events-per-key`` raised to hold it): the per-timeline cap
  (``MAX_MARKS``) is what keeps that page small.

For each, the time of ``render_html`` beside ``render_json`` of the same
replay (the limit: what any report of those findings costs), their ratio,
and the page size. Usage:
    python bench/html_bench.py [--events N] [--repeat R] [--json FILE]
"""
# make-bench: --repeat 5

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

import orjson
from audit_bench import bench_file
from results import Figure, add_json_arg, emit

from streams.audit.files import batch_gc, run_files
from streams.core.detector import Detector, DetectorConfig
from streams.core.replay import Replay
from streams.report import render_html, render_json

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.strategies import takeover_workflow


def _pair(replay: Replay, repeat: int) -> tuple[float, float, float, int]:
    """Median render times (html, json), median per-pair ratio, page bytes."""
    pairs = []
    size = 0
    with batch_gc():
        render_html(replay)
        render_json(replay)
        for _ in range(repeat):
            gc.collect()
            t0 = time.perf_counter()
            page = render_html(replay)
            t1 = time.perf_counter()
            render_json(replay)
            t2 = time.perf_counter()
            pairs.append((t1 - t0, t2 - t1))
            size = len(page.encode())
    html_t = statistics.median(h for h, _ in pairs)
    json_t = statistics.median(j for _, j in pairs)
    ratio = statistics.median(h / j for h, j in pairs)
    return html_t, json_t, ratio, size


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=5)
    add_json_arg(ap)
    args = ap.parse_args()
    path = bench_file(args.events)
    many = Replay()
    with batch_gc(), path.open("rb") as fh:
        run_files(many, [(str(path), fh)], strict=False)

    docs = takeover_workflow(n_events=args.events, takeovers=50)
    one = Replay(Detector(DetectorConfig(max_events_per_key=len(docs))))
    with batch_gc():
        for n, doc in enumerate(docs, 1):
            one.feed(orjson.dumps(doc), offset=n, source="bench", line=n)

    figures = []
    cases = (
        (f"{len(many.states):,} workflows", many),
        (f"one {len(docs):,}-event workflow", one),
    )
    for label, replay in cases:
        html_t, json_t, ratio, size = _pair(replay, args.repeat)
        s = replay.summary()
        note = (
            f"{s['events']:,} events, {s['workflows']:,} workflows, {s['findings']:,} findings; "
            f"page {size / 1e6:.2f} MB; median of {args.repeat} pairs, ratio {ratio:.2f}"
        )
        print(
            f"{label}: html {html_t * 1e3:8.1f} ms, json {json_t * 1e3:8.1f} ms, "
            f"ratio {ratio:.2f}x, page {size / 1e6:.2f} MB ({note})"
        )
        figures.append(
            Figure(
                f"HTML report render, {label}",
                html_t * 1e3,
                "ms",
                "JSON report of the same replay",
                json_t * 1e3,
                "ratio <= 2",
                note,
            )
        )
    emit(args.json, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
