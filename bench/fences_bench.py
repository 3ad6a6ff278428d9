"""Cost of the fences, against bare SQL on the same database in the same run.

    .venv/bin/python bench/fences_bench.py [--n 2000] [--leases 1000]
        [--seconds 5] [--rows 10] [--dsn postgresql://...]

For SQLite (a temp file, WAL) and, with --dsn or FENCEWATCH_PG_DSN, PostgreSQL:

* per call: the lease store's acquire (a new key each time) and stamp, and the
  fenced sink's apply (compare + write in one transaction), next to one bare
  ``INSERT`` in its own transaction through the same connection layer;
* owner renewal: ``--leases`` leases held at once, renewed round-robin for
  ``--seconds`` by 1 thread (what one SDK keeper does) and by 4 threads:
  renewals per second the store sustains, next to a bare one-row ``UPDATE``
  transaction loop over as many rows with the same threads. With the SDK's
  default ``renew_fraction=1/3``, N leases need ``3N/ttl`` renewals/s, so the
  figure also gives the shortest TTL the store sustains for N leases;
* staged promotion: promoting ``--rows`` staged rows (one ``promote``: fence
  and lease compare, copy, delete), next to a bare two-table transaction that
  moves as many rows (``INSERT ... SELECT`` + ``DELETE``) without the compare.

Prints each figure with the same-run limit and the ratio. Timings on a shared
machine are noisy; compare the ratios, not the absolute figures.
"""
# make-bench: --n 2000 --leases 1000 --seconds 5 --rows 10

from __future__ import annotations

import argparse
import itertools
import os
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from results import Figure, add_json_arg, emit

from streams.fences import FencedSink, SqlLeaseStore, StagedSink, open_database
from streams.fences.db import Database

_BLOB = {"sqlite": "BLOB", "postgres": "BYTEA"}


def _close(db: Database, prefix: str) -> None:
    """Drop this run's tables (the PostgreSQL server is shared), then close."""
    if db.dialect == "postgres":
        with db.transaction() as tx:
            names = tx.query(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
                " AND starts_with(tablename, ?)",
                (prefix,),
            )
            for (name,) in names:
                tx.run(f'DROP TABLE IF EXISTS "{name}"')
    db.close()


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
    _close(db, prefix)
    return out


def _rate(threads: int, seconds: float, fn: Callable[[int], object], n: int) -> float:
    """Calls per second of ``fn(i)`` for ``i`` cycling over ``range(n)``,
    from ``threads`` threads sharing the cycle, for ``seconds``."""
    counter = itertools.count()
    done = [0] * threads
    stop = time.perf_counter() + seconds

    def loop(t: int) -> None:
        while time.perf_counter() < stop:
            fn(next(counter) % n)
            done[t] += 1

    start = time.perf_counter()
    workers = [threading.Thread(target=loop, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return sum(done) / (time.perf_counter() - start)


def renewals(url: str, leases_n: int, seconds: float) -> list[Figure]:
    """Renewals/s at ``leases_n`` concurrent leases vs a bare UPDATE loop."""
    db = open_database(url)
    prefix = f"r{uuid.uuid4().hex[:8]}_"
    store = SqlLeaseStore(db, prefix=prefix)
    run_id = uuid.uuid4().hex[:6]
    held = [store.acquire(f"wf-{run_id}-{i}", f"w{i}", ttl=3600) for i in range(leases_n)]
    with db.transaction() as tx:
        tx.run(f"CREATE TABLE {prefix}bare (k TEXT PRIMARY KEY, v BIGINT NOT NULL)")
        for i in range(leases_n):
            tx.run(f"INSERT INTO {prefix}bare (k, v) VALUES (?, 0)", (f"k{i}",))

    def renew(i: int) -> None:
        lease = held[i]
        store.renew(lease.key, lease.epoch, lease.worker_id, 3600)

    def bare(i: int) -> None:
        with db.transaction() as tx:
            tx.run(f"UPDATE {prefix}bare SET v = v + 1 WHERE k = ?", (f"k{i}",))

    out = []
    for threads in (1, 4):
        # Interleaved slices, so a load change on the shared machine hits
        # both loops alike.
        slices, limit, got = 5, 0.0, 0.0
        for _ in range(slices):
            limit += _rate(threads, seconds / slices, bare, leases_n) / slices
            got += _rate(threads, seconds / slices, renew, leases_n) / slices
        floor = 3 * leases_n / got
        print(
            f"{db.dialect}: {threads} thread(s), {leases_n} leases: {got:8.0f} renewals/s,"
            f" bare UPDATE {limit:8.0f}/s ({got / limit:.2f}x); shortest ttl for"
            f" {leases_n} leases at renew_fraction 1/3: {floor:.1f} s"
        )
        out.append(
            Figure(
                f"{db.dialect} owner renewals, {leases_n} leases, {threads} thread(s)",
                got,
                "renewals/s",
                "a bare one-row UPDATE transaction loop, same rows and threads",
                limit,
                None,
                f"{seconds:g} s each, interleaved; shortest sustainable ttl for {leases_n} leases"
                f" at renew_fraction 1/3: {floor:.1f} s",
            )
        )
    _close(db, prefix)
    return out


def promotion(url: str, n: int, rows: int) -> list[Figure]:
    """Latency of promote(``rows`` staged rows) vs a bare two-table move."""
    db = open_database(url)
    prefix = f"s{uuid.uuid4().hex[:8]}_"
    leases = SqlLeaseStore(db, prefix=prefix)
    sink = StagedSink(db, name="bench", prefix=prefix)
    blob = _BLOB[db.dialect]
    with db.transaction() as tx:
        for table in ("a", "b"):
            tx.run(
                f"CREATE TABLE {prefix}{table} (k TEXT NOT NULL, i BIGINT NOT NULL,"
                f" payload {blob} NOT NULL, PRIMARY KEY (k, i))"
            )
    run_id = uuid.uuid4().hex[:6]
    payload = b"x" * 64

    def timed(prepare: Callable[[int], object], act: Callable[[int], object]) -> float:
        total = 0.0
        for j in range(n):
            prepare(j)
            t0 = time.perf_counter()
            act(j)
            total += time.perf_counter() - t0
        return total / n * 1e6

    def bare_prepare(j: int) -> None:
        with db.transaction() as tx:
            for i in range(rows):
                tx.run(
                    f"INSERT INTO {prefix}a (k, i, payload) VALUES (?, ?, ?)", (f"k{j}", i, payload)
                )

    def bare_move(j: int) -> None:
        with db.transaction() as tx:
            tx.run(
                f"INSERT INTO {prefix}b (k, i, payload) SELECT k, i, payload FROM {prefix}a"
                " WHERE k = ?",
                (f"k{j}",),
            )
            tx.run(f"DELETE FROM {prefix}a WHERE k = ?", (f"k{j}",))

    epochs: dict[int, int] = {}

    def stage(j: int) -> None:
        key = f"wf-{run_id}-{j}"
        epochs[j] = leases.acquire(key, "bench", ttl=3600).epoch
        for i in range(rows):
            sink.stage(key, epochs[j], f"part-{i}", payload)

    def promote(j: int) -> None:
        sink.promote(f"wf-{run_id}-{j}", epochs[j])

    limit = timed(bare_prepare, bare_move)
    got = timed(stage, promote)
    print(
        f"{db.dialect}: promote {rows} rows {got:8.1f} µs, bare two-table move"
        f" {limit:8.1f} µs ({got / limit:.2f}x)"
    )
    _close(db, prefix)
    return [
        Figure(
            f"{db.dialect} staged promotion of {rows} rows",
            got,
            "µs/promotion",
            f"a bare two-table transaction moving {rows} rows (INSERT ... SELECT + DELETE)",
            limit,
            None,
            f"{n} promotions",
        )
    ]


def all_figures(url: str, args: argparse.Namespace) -> list[Figure]:
    return (
        run(url, args.n)
        + renewals(url, args.leases, args.seconds)
        + promotion(url, max(1, args.n // 4), args.rows)
    )


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--leases", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rows", type=int, default=10)
    ap.add_argument("--dsn", default=os.environ.get("FENCEWATCH_PG_DSN"))
    add_json_arg(ap)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        figures = all_figures(f"sqlite:///{Path(tmp) / 'bench.db'}", args)
    if args.dsn:
        figures += all_figures(args.dsn, args)
    else:
        print("postgresql: skipped (give --dsn or FENCEWATCH_PG_DSN)")
    emit(args.json, figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
