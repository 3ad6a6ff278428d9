"""Cost of the fences per call, against a bare write in the same database.

    .venv/bin/python bench/fences_bench.py [--n 2000] [--dsn postgresql://...]

For SQLite (a temp file, WAL) and, with --dsn or FENCEWATCH_PG_DSN, PostgreSQL:
the lease store's acquire (a new key each time) and stamp, and the fenced
sink's apply (compare + write in one transaction), each next to the limit
measured in the same run: one bare ``INSERT`` in its own transaction through
the same connection layer. Prints microseconds per call and the ratio.
"""
# make-bench: --n 2000

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from results import Figure, add_json_arg, emit

from streams.fences import FencedSink, SqlLeaseStore, open_database


def _per_call(n: int, fn: Callable[[int], object]) -> float:
    start = time.perf_counter()
    for i in range(n):
        fn(i)
    return (time.perf_counter() - start) / n * 1e6


def run(url: str, n: int) -> list[Figure]:
    db = open_database(url)
    prefix = f"b{uuid.uuid4().hex[:8]}_"
    leases = SqlLeaseStore(db, prefix=prefix)
    sink = FencedSink(db, name="bench", prefix=prefix)
    with db.transaction() as tx:
        tx.run(
            f"CREATE TABLE {prefix}bare (k TEXT PRIMARY KEY, v BYTEA)"
            if db.dialect == "postgres"
            else f"CREATE TABLE {prefix}bare (k TEXT PRIMARY KEY, v BLOB)"
        )

    def bare(i: int) -> None:
        with db.transaction() as tx:
            tx.run(f"INSERT INTO {prefix}bare (k, v) VALUES (?, ?)", (f"k{i}", b"x" * 64))

    run_id = uuid.uuid4().hex[:6]
    keys = [f"wf-{run_id}-{i}" for i in range(n)]
    epochs: dict[str, int] = {}

    def acquire(i: int) -> None:
        epochs[keys[i]] = leases.acquire(keys[i], "bench", ttl=60).epoch

    def stamp(i: int) -> None:
        leases.stamp(keys[i], epochs[keys[i]])

    def apply(i: int) -> None:
        sink.apply(keys[i], epochs[keys[i]], "effect", b"x" * 64)

    base = _per_call(n, bare)
    print(f"{db.dialect}: bare INSERT transaction {base:8.1f} µs/call (the limit)")
    out = []
    for name, fn in (("acquire", acquire), ("stamp", stamp), ("apply (fenced)", apply)):
        t = _per_call(n, fn)
        print(f"{db.dialect}: {name:<22} {t:8.1f} µs/call  ({t / base:.2f}x the bare write)")
        out.append(
            Figure(
                f"{db.dialect} lease store / fenced sink: {name}",
                t,
                "µs/call",
                "a bare one-row INSERT transaction, same connection",
                base,
                None,
                f"{n} calls",
            )
        )
    db.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--dsn", default=os.environ.get("FENCEWATCH_PG_DSN"))
    add_json_arg(ap)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        figures = run(f"sqlite:///{Path(tmp) / 'bench.db'}", args.n)
    if args.dsn:
        figures += run(args.dsn, args.n)
    else:
        print("postgresql: skipped (give --dsn or FENCEWATCH_PG_DSN)")
    emit(args.json, figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
