"""The rdkafka worker's batch logic with every key live at once (issue 46),
in process and deterministic: CPU µs per event, instructions per event
(callgrind) and a digest of everything it produced.

The workload is ``bench/live_peer.py``'s: ``--keys`` keys of 8 events (2
epochs), round-robin over all of them, so a key's next event comes
``--keys`` events later. It reaches :meth:`Processor.process_batch` the way
the rdkafka engine receives it: the records of each partition (crc32 of the
key, ``--partitions``) in offset order, taken in runs of 500-2,000 records
of one partition (what librdkafka's fetches return; a seeded generator picks
the lengths), in batches of ``MAX_BATCH``; status on, an LRU of
``--cache-keys`` decoded states, the table a dict written from
``outcome.states``, the worker's collector settings (``gc.freeze()``, then
``(GC_YOUNG, 10, 10)``). Every ``--commit-events`` events (a 0.1 s commit
at ~150,000 events/s) it does what the engine's commit does with the
deferred work: the latest status record per key is encoded (``value``).

``--stale-every N`` gives every N-th key a ninth event, a stale checkpoint
of its first epoch (a finding, a stale epoch in its status): a variant for
the digest, so that a change to the state, status or finding paths is
proved byte-identical on them too. 0 (the default) is live_peer's workload.

    .venv/bin/python bench/live_batch_keys.py [--keys 25000] [--repeat 3]
    .venv/bin/python bench/live_batch_keys.py --instructions [--keep DIR]

``--instructions`` runs this script twice under ``valgrind --tool=callgrind``
(the workload built and processed, and built only) and prints the
difference per event: a count the machine's load does not move, for judging
a change (docs/performance.md). ``--keep DIR`` keeps both callgrind files
(``callgrind_annotate --inclusive=yes DIR/full.out``); a later run with the
same DIR and workload reuses its ``build.out``.

The digest (blake2b) covers, in order, every ``(key, partition, value)`` of
``outcome.states``, every status record value encoded at a commit and every
finding's JSON: equal digests, byte-identical outputs.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from live_throughput import interleaved

from streams._native import native_summary
from streams.core import Detector
from streams.live.collector import GC_THRESHOLDS
from streams.live.processor import Processor, SourceRecord, StatusRecord
from streams.live.rdkafka.engine import MAX_BATCH
from streams.live.rdkafka.run import GC_YOUNG

#: The worker's thresholds: tune_collector's, then the rdkafka engine's young generation.
WORKER_GC = (GC_YOUNG, *GC_THRESHOLDS[1:])
#: Runs of one partition's records, as librdkafka's fetches return them.
RUN_MIN, RUN_MAX = 500, 2_000


def events(keys: int, stale_every: int) -> Iterator[tuple[bytes, bytes]]:
    """live_peer's events (every key live), plus the stale checkpoints."""
    yield from interleaved(keys, 2, block=keys)
    if stale_every:
        for k in range(0, keys, stale_every):
            wkey = f"tenant-{k % 97}/export/{k:07d}"
            yield (
                wkey.encode(),
                (
                    f'{{"type": "progress", "workflow_key": "{wkey}", "epoch": 1, '
                    f'"worker_id": "worker-1", "seq": 9, "event_id": "{wkey}#9"}}'
                ).encode(),
            )


def consumed(keys: int, partitions: int, stale_every: int, seed: int) -> list[SourceRecord]:
    """The records in the order the engine's consume() hands them over."""
    per: list[list[tuple[bytes, bytes]]] = [[] for _ in range(partitions)]
    for key, value in events(keys, stale_every):
        per[zlib.crc32(key) % partitions].append((key, value))
    rng = random.Random(seed)
    pos = [0] * partitions
    out: list[SourceRecord] = []
    p = 0
    while any(pos[i] < len(per[i]) for i in range(partitions)):
        if pos[p] < len(per[p]):
            n = rng.randint(RUN_MIN, RUN_MAX)
            for offset in range(pos[p], min(pos[p] + n, len(per[p]))):
                key, value = per[p][offset]
                # Timestamps rise with consumption, as the producer wrote them.
                out.append(SourceRecord("events", p, offset, key, value, 1_000 + len(out)))
            pos[p] = min(pos[p] + n, len(per[p]))
        p = (p + 1) % partitions
    return out


def run(
    recs: list[SourceRecord], *, cache_keys: int, commit_events: int
) -> tuple[float, float, str]:
    """CPU µs per event of the batches, of the commits' status encoding, and
    the digest of the outputs; a fresh processor and table."""
    processor = Processor(
        Detector(), findings_topic="f", dlq_topic="d", status_topic="s", cache_keys=cache_keys
    )
    table: dict[bytes, bytes] = {}
    digest = hashlib.blake2b(digest_size=16)
    deferred: dict[bytes, StatusRecord] = {}
    changes: dict[tuple[bytes, int], bytes] = {}
    batch_s = commit_s = 0.0
    since = 0

    def commit() -> float:
        t0 = time.process_time()
        for sr in deferred.values():
            digest.update(sr.value)
        spent = time.process_time() - t0
        deferred.clear()
        changes.clear()
        return spent

    old = gc.get_threshold()
    gc.collect()
    gc.freeze()  # as the worker does after start-up
    gc.set_threshold(*WORKER_GC)
    try:
        for i in range(0, len(recs), MAX_BATCH):
            batch = recs[i : i + MAX_BATCH]
            t0 = time.process_time()
            outcome = processor.process_batch(batch, table.get)
            for key, partition, value in outcome.states:
                table[key] = value
                changes[key, partition] = value  # once per key per transaction
            for statuses in outcome.status.values():
                for sr in statuses:
                    deferred[sr.key] = sr
            batch_s += time.process_time() - t0
            for key, partition, value in outcome.states:
                digest.update(b"%s\x01%d\x01%s\x02" % (key, partition, value))
            for records in outcome.records.values():
                for r in records:
                    digest.update(r.value)
            since += len(batch)
            if since >= commit_events:
                commit_s += commit()
                since = 0
        commit_s += commit()
    finally:
        gc.set_threshold(*old)
        gc.unfreeze()
    n = len(recs)
    return batch_s / n * 1e6, commit_s / n * 1e6, digest.hexdigest()


def _totals(path: Path) -> int:
    for line in path.read_text().splitlines():
        if line.startswith(("totals:", "summary:")):
            return int(line.split()[1])
    raise SystemExit(f"no totals in {path}")


def instructions(argv: list[str], keep: Path | None) -> int:
    """Instructions per event under callgrind: a run that builds and processes
    the workload minus one that only builds it."""
    out = keep or Path(tempfile.mkdtemp(prefix="batch-keys-"))
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONHASHSEED": "0"}  # the same hashes, the same work
    counts = {}
    for name, extra in (("full", []), ("build", ["--build-only"])):
        build = out / "build.out"
        if name == "build" and keep is not None and build.exists() and build.stat().st_size:
            # The same workload built by the same harness: kept from an
            # earlier run in DIR (the core's import is a rounding error).
            counts[name] = _totals(out / "build.out")
            continue
        cmd = [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out / (name + '.out')}",
            sys.executable,
            __file__,
            *argv,
            "--repeat",
            "1",
            *extra,
        ]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"callgrind run failed: {done.stderr.strip().splitlines()[-1:]}")
        counts[name] = _totals(out / (name + ".out"))
        if name == "full":
            print(done.stdout.strip())
    return counts["full"] - counts["build"]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=25_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--cache-keys", type=int, default=10_000)
    ap.add_argument("--commit-events", type=int, default=15_000)
    ap.add_argument("--stale-every", type=int, default=0)
    ap.add_argument("--seed", type=int, default=46)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--instructions", action="store_true")
    ap.add_argument("--keep", type=Path)
    ap.add_argument("--build-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    workload = [
        f"--keys={args.keys}",
        f"--partitions={args.partitions}",
        f"--cache-keys={args.cache_keys}",
        f"--commit-events={args.commit_events}",
        f"--stale-every={args.stale_every}",
        f"--seed={args.seed}",
    ]
    if args.instructions:
        total = instructions(workload, args.keep)
        n = len(consumed(args.keys, args.partitions, args.stale_every, args.seed))
        print(f"{total / n:,.0f} instructions/event ({total:,} for {n:,} events)")
        return 0
    recs = consumed(args.keys, args.partitions, args.stale_every, args.seed)
    if args.build_only:
        return 0
    batch, commit, digests = [], [], set()
    for _ in range(args.repeat):
        b, c, d = run(recs, cache_keys=args.cache_keys, commit_events=args.commit_events)
        batch.append(b)
        commit.append(c)
        digests.add(d)
    if len(digests) != 1:
        raise SystemExit(f"runs differ: {sorted(digests)}")
    print(
        f"{len(recs):,} events, {args.keys:,} keys, cache {args.cache_keys:,}: "
        f"batch {statistics.median(batch):.2f} + commit status {statistics.median(commit):.2f} "
        f"CPU µs/event (median of {args.repeat}; batch runs {', '.join(f'{b:.2f}' for b in batch)})"
    )
    print(f"digest {digests.pop()}; core {native_summary()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
