"""The file audit from the installed compiled wheel beside the checkout's (issue 44).

A pip user runs the compiled platform wheel (``python -m build`` with the mypyc
hook), installed non-editable into its own virtualenv; the README's audit
figures come from the checkout (the core compiled in place by
scripts/build-native). This times the same audit as ``bench/audit_bench.py``
(validation + detector + latest findings + JSON report, the collector off) on
the same generated file, in two child processes started alternately, one
pair after the other:

* checkout:  this interpreter (the dev venv; streams from the checkout);
* installed: ``python -I`` of a fresh venv holding the compiled wheel
  (built once per source hash and cached: tests/support/installed.py).

Each child warms up once, then times ``--repeat`` audits in CPU time
(``time.process_time``). The ratio is installed / checkout time per pair,
its median over ``--pairs`` pairs; target: within 10 % (ratio <= 1.1).
Both children must report the compiled detector, or the run fails. Usage:
    python bench/installed_audit.py [--events N] [--pairs P] [--repeat R] [--json FILE]
"""
# make-bench: --pairs 5 --repeat 3

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support: the wheel

from audit_bench import bench_file
from results import Figure, add_json_arg, emit

from tests.support.installed import compiled_wheel, install

#: Run in each child: the audit path of bench/audit_bench.py, with the
#: installed API only; prints the detector, the CPU seconds of each timed
#: audit and the findings as one JSON object.
CHILD = """
import gc, json, sys, time
import streams
from streams._native import native_summary
from streams.audit.files import batch_gc, run_files
from streams.core.replay import Replay
from streams.report import render_json

path, repeat = sys.argv[1], int(sys.argv[2])

def audit():
    t0 = time.process_time()
    replay = Replay()
    with batch_gc():
        with open(path, "rb") as fh:
            run_files(replay, [(path, fh)], strict=False)
        render_json(replay)
    return time.process_time() - t0, len(replay.latest)

audit()  # warm-up: imports, allocator arenas
times = []
for _ in range(repeat):
    gc.collect()
    seconds, findings = audit()
    times.append(seconds)
print(json.dumps({"detector": native_summary(), "streams": streams.__file__,
                  "times": times, "findings": findings}))
"""


def child(python: list[str], path: Path, repeat: int) -> dict[str, object]:
    proc = subprocess.run(
        [*python, "-c", CHILD, str(path), str(repeat)],
        capture_output=True, text=True, timeout=900, cwd=tempfile.gettempdir(),
    )  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"installed_audit: {python[0]} failed:\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.splitlines()[-1])
    if result["detector"] != "compiled":
        raise SystemExit(
            f"installed_audit: {result['streams']} runs the {result['detector']} detector, "
            "not the compiled one (make native / the wheel's build)"
        )
    return dict(result)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=3)
    add_json_arg(ap)
    args = ap.parse_args()
    path = bench_file(args.events)
    n = sum(1 for _ in path.open("rb"))
    wheel = compiled_wheel()
    with tempfile.TemporaryDirectory(prefix="fencewatch-installed-bench-") as tmp:
        bin_dir = install(wheel, Path(tmp) / "venv", "kafka")
        checkout = [sys.executable]
        installed = [str(bin_dir / "python"), "-I"]  # neither the checkout nor bench/ on sys.path
        pairs: list[tuple[float, float]] = []
        where: dict[str, str] = {}
        for i in range(args.pairs):
            # Alternating which goes first, so a drift in the machine's speed hits both.
            order = [("checkout", checkout), ("installed", installed)]
            got = {name: child(py, path, args.repeat) for name, py in order[:: 1 - 2 * (i % 2)]}
            for name, result in got.items():
                where[name] = str(result["streams"])
            c = statistics.median(got["checkout"]["times"])  # type: ignore[arg-type]
            w = statistics.median(got["installed"]["times"])  # type: ignore[arg-type]
            pairs.append((c, w))
    checkout_t = statistics.median(c for c, _ in pairs)
    installed_t = statistics.median(w for _, w in pairs)
    ratio = statistics.median(w / c for c, w in pairs)
    print(f"file: {path} ({n} events); wheel: {wheel.name}")
    print(f"checkout  ({where['checkout']}): {n / checkout_t:12,.0f} events/s (median)")
    print(f"installed ({where['installed']}): {n / installed_t:12,.0f} events/s (median)")
    print(f"ratio installed/checkout time: {ratio:.3f} (median of {args.pairs} pairs; "
          "target <= 1.1)")  # fmt: skip
    emit(
        args.json,
        [
            Figure(
                "file audit time per event, installed compiled wheel",
                installed_t / n * 1e6,
                "µs/event",
                "the same audit from the checkout (core compiled in place)",
                checkout_t / n * 1e6,
                "ratio <= 1.1",
                f"{n:,} events; {args.pairs} pairs of child processes started alternately, "
                f"each the median of {args.repeat} audits after a warm-up; the wheel "
                f"{wheel.name} in a fresh venv (python -I); the ratio is the median of the "
                f"per-pair ratios (of the medians: {installed_t / checkout_t:.3f})",
                runs=[w / n * 1e6 for _, w in pairs],
                limit_runs=[c / n * 1e6 for c, _ in pairs],
                paired_ratio=ratio,
            ),
        ],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
