"""Restore time of the state table after a restart, and resident memory per
key, for a changelog holding N keys.

    .venv/bin/python bench/live_restore.py [--keys 1000000] [--partitions 4]

The changelog is written the way the worker writes it (transactions, one
state per key, a realistic ~700-byte state of a key after two clean
handovers), then a worker is started on it. Targets: restore >= 100,000
changelog records/s; <= 1 KiB resident per idle key.
"""
# make-bench: --keys 300000

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from live_support import (
    Worker,
    bootstrap,
    create_topics,
    key_events,
    names,
    produce_one,
    worker_env,
)
from results import Figure, add_json_arg, emit

from streams.core import Detector, parse_event


def state_blob() -> bytes:
    det = Detector()
    st = det.new_state()
    for i, (k, v) in enumerate(key_events(1, 2)):
        det.process(st, parse_event(v, key=k), i)
    return st.to_bytes()


def write_changelog(bs: str, topic: str, n: int, blob: bytes) -> float:
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": bs,
            "transactional.id": f"{topic}-loader",
            "partitioner": "murmur2_random",
            "linger.ms": 20,
            "queue.buffering.max.messages": 500_000,
        }
    )
    p.init_transactions(30)
    p.begin_transaction()
    start = time.monotonic()
    for i in range(n):
        produce_one(p, topic, blob, f"tenant-{i % 97}/export/{i:07d}".encode())
        if i and i % 100_000 == 0:
            p.commit_transaction(60)
            p.begin_transaction()
    p.commit_transaction(120)
    return time.monotonic() - start


_TS = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]")


def log_time(log: Path, needle: str) -> datetime | None:
    for line in log.read_text(errors="replace").splitlines():
        if needle in line:
            m = _TS.match(line)
            if m:
                return datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f")
    return None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    add_json_arg(ap)
    args = ap.parse_args()
    bs = bootstrap()
    events, findings, dlq, app_id = names("bench-restore")
    changelog = f"{app_id}-owner-state-changelog"
    create_topics(bs, [events, findings, dlq], args.partitions)
    create_topics(bs, [changelog], args.partitions, {"cleanup.policy": "compact"})
    blob = state_blob()
    with tempfile.TemporaryDirectory() as tmp:
        # Baseline: the same worker over an empty changelog (another app id).
        e2, f2, d2, a2 = names("bench-restore-empty")
        create_topics(bs, [e2, f2, d2], args.partitions)
        base = Worker(
            bs, worker_env(e2, f2, d2, a2, FENCEWATCH_DATA_DIR=tmp + "/b"), Path(tmp) / "base.log"
        )
        base.wait_ready()
        time.sleep(2)
        rss0 = base.rss_bytes()
        base.stop()
        took = write_changelog(bs, changelog, args.keys, blob)
        print(f"wrote {args.keys:,} changelog records ({len(blob)} B state each) in {took:.1f} s")
        log = Path(tmp) / "w.log"
        w = Worker(
            bs,
            worker_env(
                events,
                findings,
                dlq,
                app_id,
                FENCEWATCH_DATA_DIR=tmp + "/w",
                FENCEWATCH_LOG_LEVEL="info",
            ),
            log,
        )
        try:
            w.wait_ready(timeout=900)
            ready = w.ready_after
            assert ready is not None
            time.sleep(2)
            rss = w.rss_bytes()
            keys = (w.health() or {}).get("processed")
            metrics = w.metrics()
        finally:
            w.stop()
        saved = Path(tempfile.gettempdir()) / f"{app_id}.log"
        saved.write_bytes(log.read_bytes())
        log = saved
    m = re.search(r"^fencewatch_state_keys (\S+)", metrics, re.M)
    in_table = int(float(m.group(1))) if m else -1
    # The memory store loads the changelog directly before faust's recovery
    # starts (streams/live/fast_restore.py); RocksDB goes through faust.
    t_start = log_time(log, "fast restore: reading") or log_time(
        log, "Highwater for active changelog"
    )
    t_read = log_time(log, "fast restore: loaded") or log_time(
        log, "Done reading from changelog topics"
    )
    t_done = log_time(log, "Recovery complete")
    direct = re.search(
        r"fast restore: loaded (\d+) changelog records .* directly in (\S+) s",
        log.read_text(errors="replace"),
    )
    print(f"keys in table after restore: {in_table:,} (processed events {keys})")
    print(f"worker start to ready: {ready:.1f} s")
    if direct:
        n, secs = int(direct.group(1)), float(direct.group(2))
        print(
            f"direct load (confluent-kafka): {n:,} records in {secs:.2f} s = "
            f"{n / secs:,.0f} records/s"
        )
    if t_start and t_done:
        total = (t_done - t_start).total_seconds()
        print(
            f"recovery (start of reading -> Recovery complete): {total:.1f} s = "
            f"{args.keys / total:,.0f} records/s; ratio to 100,000/s: "
            f"{args.keys / total / 100_000:.2f}"
        )
    if t_start and t_read:
        reading = (t_read - t_start).total_seconds()
        print(
            f"  of which reading the changelog: {reading:.1f} s"
            + (
                ""
                if direct
                else " (includes faust's fixed 2 x 5 s wait for the trailing transaction marker)"
            )
        )
    per_key = (rss - rss0) / args.keys
    print(
        f"RSS {rss / 2**20:.0f} MiB vs {rss0 / 2**20:.0f} MiB empty: {per_key:.0f} B per key; "
        f"ratio to 1 KiB: {per_key / 1024:.2f}"
    )
    figures = []
    if direct:
        n, secs = int(direct.group(1)), float(direct.group(2))
        figures.append(
            Figure(
                "state restore, memory store (direct load)",
                n / secs,
                "records/s",
                None,
                None,
                "value >= 100000",
                f"{args.keys:,} keys, {len(blob)} B state each",
            )
        )
    if t_start and t_done:
        total = (t_done - t_start).total_seconds()
        figures.append(
            Figure(
                "state restore to recovery complete",
                args.keys / total,
                "records/s",
                None,
                None,
                None,
                f"{args.keys:,} keys; includes faust's recovery",
            )
        )
    figures.append(
        Figure(
            "resident memory per idle key",
            per_key,
            "bytes",
            None,
            None,
            "value <= 1024",
            f"RSS after restore minus an empty worker's, over {args.keys:,} keys",
        )
    )
    emit(args.json, figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
