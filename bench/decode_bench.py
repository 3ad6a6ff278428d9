"""Decode and validate: CPU time per event of the ways to turn one JSON line
into a validated :class:`~streams.core.records.Event`, against a bare
``orjson.loads`` loop over the same lines, measured in the same run.

* ``orjson.loads`` alone (the floor: parsing into a dict, nothing checked);
* ``msgspec.json.decode`` into a dict (the other parser, nothing checked);
* ``orjson.loads`` + the field-by-field validator (``validate._explain``):
  "a leaner validator over orjson", building the record from the dict;
* a msgspec Struct decoder straight into ``Event`` (types and limits checked
  in C), alone;
* :func:`streams.core.validate.parse_event`: the msgspec decoder plus the
  rules its annotations cannot state (what the audit and the live worker run).

CPU time of this process (``time.process_time``), not wall time: the machine
is shared, and other load counts far less in CPU time. The methods alternate
within each round and the figure is the median over rounds of the per-round
ratio to the bare loop.

    .venv/bin/python bench/decode_bench.py [--events 100000] [--repeat 7]
"""
# make-bench: --repeat 7

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

from audit_bench import bench_file
from results import Figure, add_json_arg, emit

from streams._native import native_summary
from streams.core.records import Event
from streams.core.validate import _explain, parse_event


def _loop(fn: Callable[[bytes], Any], lines: list[bytes]) -> float:
    """CPU seconds of ``fn`` over every line (results dropped at once)."""
    gc.collect()
    t0 = time.process_time()
    for line in lines:
        fn(line)
    return time.process_time() - t0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=7)
    add_json_arg(ap)
    args = ap.parse_args()
    lines = bench_file(args.events).read_bytes().splitlines()
    n = len(lines)
    struct_decode = msgspec.json.Decoder(Event).decode
    dict_decode = msgspec.json.Decoder().decode
    loads = orjson.loads
    methods: dict[str, Callable[[bytes], Any]] = {
        "orjson.loads (bare)": loads,
        "msgspec.json.decode to a dict": dict_decode,
        "orjson.loads + field validator": lambda b: _explain(loads(b), None),
        "msgspec Struct decode to Event": struct_decode,
        "parse_event (Struct decode + rules)": parse_event,
    }
    for fn in methods.values():  # warm-up
        _loop(fn, lines[: n // 10])
    per: dict[str, list[float]] = {name: [] for name in methods}
    ratios: dict[str, list[float]] = {name: [] for name in methods}
    for _ in range(args.repeat):
        times = {name: _loop(fn, lines) for name, fn in methods.items()}
        base = times["orjson.loads (bare)"]
        for name, t in times.items():
            per[name].append(t / n * 1e6)
            ratios[name].append(t / base)
    print(f"{n:,} events ({bench_file(args.events).name}); core {native_summary()}; CPU time")
    for name in methods:
        print(
            f"  {name:38s} {statistics.median(per[name]):6.3f} µs/event  "
            f"x{statistics.median(ratios[name]):5.2f} of bare  "
            f"(ratios {min(ratios[name]):.2f}-{max(ratios[name]):.2f})"
        )
    note = f"{n:,} events, CPU time, median of {args.repeat} rounds; core {native_summary()}"
    bare_us = statistics.median(per["orjson.loads (bare)"])
    figures = [
        Figure(
            f"decode+validate per event: {name}",
            statistics.median(per[name]),
            "µs/event",
            "bare orjson.loads loop over the same lines",
            bare_us,
            None,
            f"{note}; median per-round ratio {statistics.median(ratios[name]):.2f}",
        )
        for name in methods
        if name != "orjson.loads (bare)"
    ]
    emit(args.json, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
