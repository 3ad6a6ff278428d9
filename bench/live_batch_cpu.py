"""CPU time per event of the live processor's batch logic alone, no broker:
``Processor.process_batch`` over the events of ``bench/live_throughput.py``
(25,000 keys, interleaved), in batches of ``MAX_BATCH`` against a dict store,
with the status topic off and on, under the worker's garbage-collector
thresholds (``streams.live.runner.GC_THRESHOLDS``) and under Python's default
ones, measured in the same run (settings alternate; CPU time of this process,
so other load on the machine counts less than in the wall-clock benches).

It shows what the live worker's Python logic costs per event before any
Kafka I/O, and why the worker raises the young generation's threshold.

A second measurement takes long-lived workflows: ``LONG_KEYS`` keys that
already hold ``LONG_EVENTS`` events each (two epochs, the second owner's
checkpoints), then one more checkpoint per key per batch, every key's status
record read after each batch (what a worker at a low rate does: a
transaction per batch). Status on against off shows whether the status
work grows with the evidence a key holds (it did: docs/performance.md).

    .venv/bin/python bench/live_batch_cpu.py [--keys 25000] [--repeat 3]
"""
# make-bench: --repeat 3

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from live_support import doc
from live_throughput import interleaved
from results import Figure, add_json_arg, emit

from streams.core import Detector
from streams.live.faust.app import MAX_BATCH
from streams.live.processor import Processor, SourceRecord
from streams.live.runner import GC_THRESHOLDS

DEFAULT_GC = (700, 10, 10)
PARTITIONS = 4


def records(keys: int, epochs: int) -> list[SourceRecord]:
    out = []
    for i, (key, value) in enumerate(interleaved(keys, epochs)):
        out.append(SourceRecord("events", zlib.crc32(key) % PARTITIONS, i, key, value, 1_000 + i))
    return out


def cpu_per_event(recs: list[SourceRecord], *, status: bool, thresholds: tuple[int, ...]) -> float:
    """CPU µs per event of processing ``recs`` in batches, a fresh processor and store."""
    processor = Processor(
        Detector(), findings_topic="f", dlq_topic="d", status_topic="s" if status else None
    )
    store: dict[bytes, bytes] = {}
    old = gc.get_threshold()
    gc.collect()
    gc.freeze()  # as the worker does after start-up
    gc.set_threshold(*thresholds)
    try:
        t0 = time.process_time()
        for i in range(0, len(recs), MAX_BATCH):
            outcome = processor.process_batch(recs[i : i + MAX_BATCH], store.get)
            for key, _partition, blob in outcome.states:
                store[key] = blob
        elapsed = time.process_time() - t0
    finally:
        gc.set_threshold(*old)
        gc.unfreeze()
    return elapsed / len(recs) * 1e6


LONG_KEYS = 50
LONG_EVENTS = 1_000
LONG_ROUNDS = 200


def long_key_cpu(*, status: bool) -> float:
    """CPU µs per event of :data:`LONG_ROUNDS` batches of one checkpoint per
    key, over keys that hold :data:`LONG_EVENTS` events each."""
    processor = Processor(
        Detector(), findings_topic="f", dlq_topic="d", status_topic="s" if status else None
    )
    store: dict[bytes, bytes] = {}
    keys = [f"tenant-{k}/long/{k:04d}" for k in range(LONG_KEYS)]
    kinds = {1: ("lease_acquired", 1), 2: ("lease_acquired", 2)}

    def batch(seq: int) -> list[SourceRecord]:
        kind, epoch = kinds.get(seq, ("progress", 2))
        return [
            SourceRecord(
                "events",
                k % PARTITIONS,
                seq,
                key.encode(),
                doc(key, kind, epoch, f"w{epoch}", seq),
                seq,
            )
            for k, key in enumerate(keys)
        ]

    def run(batches: list[list[SourceRecord]]) -> None:
        for recs in batches:
            outcome = processor.process_batch(recs, store.get)
            for key, _partition, blob in outcome.states:
                store[key] = blob
            for records in outcome.status.values():
                for record in records:
                    record.value  # noqa: B018 -- encoded, as the engine's commit does

    run([batch(seq) for seq in range(1, LONG_EVENTS + 1)])
    # Built before the clock starts: only the batch logic is timed.
    timed = [batch(seq) for seq in range(LONG_EVENTS + 1, LONG_EVENTS + 1 + LONG_ROUNDS)]
    gc.collect()
    t0 = time.process_time()
    run(timed)
    return (time.process_time() - t0) / (LONG_KEYS * LONG_ROUNDS) * 1e6


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=25_000)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    add_json_arg(ap)
    args = ap.parse_args()
    recs = records(args.keys, args.epochs)
    settings = [(s, t) for s in (False, True) for t in (DEFAULT_GC, GC_THRESHOLDS)]
    cpu_per_event(recs[: len(recs) // 4], status=True, thresholds=GC_THRESHOLDS)  # warm-up
    runs: dict[tuple[bool, tuple[int, ...]], list[float]] = {k: [] for k in settings}
    for _ in range(args.repeat):
        for status, thresholds in settings:
            runs[status, thresholds].append(
                cpu_per_event(recs, status=status, thresholds=thresholds)
            )
    med = {k: statistics.median(v) for k, v in runs.items()}
    for (status, thresholds), us in med.items():
        print(
            f"status {'on ' if status else 'off'} gc {thresholds}: {us:6.2f} CPU µs/event "
            f"({1e6 / us:,.0f} events/s of one core)"
        )
    note = (
        f"{len(recs):,} events, {args.keys:,} keys, batches of {MAX_BATCH}, median of {args.repeat}"
    )
    figures = []
    for status in (False, True):
        label = "on" if status else "off"
        figures.append(
            Figure(
                f"live batch logic CPU per event, status {label}, worker gc {GC_THRESHOLDS}",
                med[status, GC_THRESHOLDS],
                "µs/event",
                f"the same with Python's default gc thresholds {DEFAULT_GC}",
                med[status, DEFAULT_GC],
                None if status else "value <= 6",  # issue 24: status off <= 6 µs
                note,
            )
        )
    figures.append(
        Figure(
            "live batch logic CPU per event, status on (worker gc)",
            med[True, GC_THRESHOLDS],
            "µs/event",
            "the same with the status topic off",
            med[False, GC_THRESHOLDS],
            None,
            note,
        )
    )
    long_runs: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(args.repeat):
        for status in (False, True):
            long_runs[status].append(long_key_cpu(status=status))
    long_on, long_off = (statistics.median(long_runs[s]) for s in (True, False))
    print(
        f"keys holding {LONG_EVENTS:,} events, batches of one event per key: status on "
        f"{long_on:.2f}, off {long_off:.2f} CPU µs/event"
    )
    figures.append(
        Figure(
            f"live batch logic CPU per event, status on, keys holding {LONG_EVENTS:,} events",
            long_on,
            "µs/event",
            "the same with the status topic off",
            long_off,
            None,
            f"{LONG_KEYS} keys, {LONG_ROUNDS} batches of one checkpoint per key, every status "
            f"record encoded after its batch; median of {args.repeat}",
            runs=long_runs[True],
            limit_runs=long_runs[False],
        )
    )
    emit(args.json, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
