"""Restore time of the state table after a restart, and resident memory per
key, for a changelog holding N keys.

    .venv/bin/python bench/live_restore.py [--keys 1000000] [--partitions 4]

The changelog is written the way the worker writes it (transactions, one
state per key, a realistic ~700-byte state of a key after two clean
handovers), then workers of each engine are started on it in turn
(``--repeat`` each, alternating). Targets (issue 24): restore >= 150,000
changelog records/s in each run; <= 1 KiB resident per idle key.
"""
# make-bench: --keys 300000 --repeat 3

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
    add_engines_arg,
    bootstrap,
    chosen_engines,
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


_RDKAFKA_RESTORED = re.compile(r"restored (\d+) changelog records .* in (\S+) s \(\S+ records/s\)")


def restore_run(
    bs: str, topics: tuple[str, str, str, str], engine: str, data_dir: str, log: Path
) -> dict[str, float | None]:
    """One worker of ``engine`` started on the written changelog: records/s of
    its direct changelog read, of start-of-reading -> ready (faust: Recovery
    complete), and its RSS once ready."""
    events, findings, dlq, app_id = topics
    env = worker_env(
        events,
        findings,
        dlq,
        app_id,
        FENCEWATCH_DATA_DIR=data_dir,
        FENCEWATCH_LOG_LEVEL="info",
        FENCEWATCH_ENGINE=engine,
    )
    w = Worker(bs, env, log)
    try:
        w.wait_ready(timeout=900)
        time.sleep(2)
        rss = float(w.rss_bytes())
        metrics = w.metrics()
    finally:
        w.stop()
    text = log.read_text(errors="replace")
    m = re.search(r"^fencewatch_state_keys (\S+)", metrics, re.M)
    out: dict[str, float | None] = {
        "rss": rss,
        "keys": float(m.group(1)) if m else None,
        "direct": None,
        "recovery": None,
    }
    if engine == "rdkafka":
        # The engine reads the changelog directly before it processes
        # anything: its restore is the whole recovery.
        found = _RDKAFKA_RESTORED.search(text)
        if found:
            n, secs = int(found.group(1)), float(found.group(2))
            out["direct"] = out["recovery"] = n / secs if secs > 0 else None
        return out
    # The faust memory store loads the changelog directly before faust's
    # recovery starts (streams/live/faust/fast_restore.py).
    t_start = log_time(log, "fast restore: reading") or log_time(
        log, "Highwater for active changelog"
    )
    t_done = log_time(log, "Recovery complete")
    direct = re.search(r"fast restore: loaded (\d+) changelog records .* directly in (\S+) s", text)
    if direct:
        n, secs = int(direct.group(1)), float(direct.group(2))
        out["direct"] = n / secs if secs > 0 else None
    if t_start and t_done:
        total = (t_done - t_start).total_seconds()
        n_keys = out["keys"] or 0.0
        out["recovery"] = n_keys / total if total > 0 and n_keys else None
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3, help="worker starts per engine")
    add_engines_arg(ap)
    add_json_arg(ap)
    args = ap.parse_args()
    engines = chosen_engines(ap, args)
    bs = bootstrap()
    events, findings, dlq, app_id = names("bench-restore")
    changelog = f"{app_id}-owner-state-changelog"
    create_topics(bs, [events, findings, dlq], args.partitions)
    create_topics(bs, [changelog], args.partitions, {"cleanup.policy": "compact"})
    blob = state_blob()
    runs: dict[str, list[dict[str, float | None]]] = {e: [] for e in engines}
    base_rss: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        # Baseline: each engine's worker over an empty changelog (another app id).
        for engine in engines:
            e2, f2, d2, a2 = names(f"bench-restore-empty-{engine}")
            create_topics(bs, [e2, f2, d2], args.partitions)
            env = worker_env(
                e2, f2, d2, a2, FENCEWATCH_DATA_DIR=f"{tmp}/b-{engine}", FENCEWATCH_ENGINE=engine
            )
            base = Worker(bs, env, Path(tmp) / f"base-{engine}.log")
            base.wait_ready()
            time.sleep(2)
            base_rss[engine] = float(base.rss_bytes())
            base.stop()
        took = write_changelog(bs, changelog, args.keys, blob)
        print(f"wrote {args.keys:,} changelog records ({len(blob)} B state each) in {took:.1f} s")
        # Runs alternate between the engines: load that drifts is shared.
        for run in range(args.repeat):
            for engine in engines:
                log = Path(tmp) / f"w-{engine}-{run}.log"
                r = restore_run(
                    bs, (events, findings, dlq, app_id), engine, f"{tmp}/w-{engine}-{run}", log
                )
                (Path(tempfile.gettempdir()) / f"{app_id}-{engine}-{run}.log").write_bytes(
                    log.read_bytes()
                )
                runs[engine].append(r)
                direct, recovery = r["direct"], r["recovery"]
                per_key = (float(r["rss"] or 0) - base_rss[engine]) / args.keys
                print(
                    f"{engine} engine, run {run + 1}: direct read "
                    + (f"{direct:,.0f} records/s" if direct else "n/a")
                    + ", to ready "
                    + (f"{recovery:,.0f} records/s" if recovery else "n/a")
                    + f", {per_key:,.0f} B resident per key; keys in table {r['keys']}"
                )
    figures = []
    for engine in engines:
        tag = "" if engine == "faust" else f", {engine} engine"
        direct_all = [r["direct"] for r in runs[engine] if r["direct"]]
        recovery_all = [r["recovery"] for r in runs[engine] if r["recovery"]]
        per_keys = [(float(r["rss"] or 0) - base_rss[engine]) / args.keys for r in runs[engine]]
        spread = ", ".join(f"{x:,.0f}" for x in direct_all)
        if direct_all:
            # "In each of three runs": the slowest run is the figure.
            figures.append(
                Figure(
                    f"state restore, memory store (direct load){tag}",
                    min(direct_all),
                    "records/s",
                    None,
                    None,
                    "value >= 150000",
                    f"{args.keys:,} keys, {len(blob)} B state each; slowest of "
                    f"{len(direct_all)} runs ({spread})",
                )
            )
        if recovery_all:
            figures.append(
                Figure(
                    f"state restore to recovery complete{tag}",
                    min(recovery_all),
                    "records/s",
                    None,
                    None,
                    None,
                    f"{args.keys:,} keys; slowest of {len(recovery_all)} runs ("
                    + ", ".join(f"{x:,.0f}" for x in recovery_all)
                    + ")"
                    + ("; includes faust's recovery" if engine == "faust" else ""),
                )
            )
        figures.append(
            Figure(
                f"resident memory per idle key{tag}",
                max(per_keys),
                "bytes",
                None,
                None,
                "value <= 1024",
                f"RSS after restore minus an empty {engine} worker's, over {args.keys:,} keys; "
                f"largest of {len(per_keys)} runs ("
                + ", ".join(f"{x:,.0f}" for x in per_keys)
                + ")",
            )
        )
    emit(args.json, figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
