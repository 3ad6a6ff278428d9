#!/usr/bin/env python3
"""A minimal agent worker: acquire a lease, checkpoint, apply one effect
through a fenced (or, for contrast, unfenced) sink, release.

    KAFKA_BOOTSTRAP=127.0.0.1:9092 python examples/agent_worker.py \
        --db .run/agent.db --key tenant/export/2026-07-26 --worker alpha \
        --effect release-index [--steps 3] [--step-seconds 1] [--ttl 5] [--unfenced]

Run two of them against the same --db (the lease store and the sink share
it): the second waits for the lease, takes over at the next epoch, and the
first one's late effect — if it was paused past its TTL (kill -STOP / -CONT)
— is refused by the fenced sink. Every step is reported to `ownership.events`
(`--topic` to change), where `fencewatch` classifies it. Exit status: 0 when
the effect is in place, 3 when the sink refused it as stale, 2 on errors.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from streams.errors import FencewatchError, LeaseHeld
from streams.fences import FencedSink, SqlLeaseStore, UnfencedSink, open_database
from streams.fences.sink import EffectSink
from streams.sdk import OwnershipReporter, ReporterSettings


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092"))
    ap.add_argument("--topic", default="ownership.events")
    ap.add_argument("--db", default=".run/agent.db", help="SQLite file (or postgresql:// DSN)")
    ap.add_argument("--key", default="tenant/export/2026-07-26")
    ap.add_argument("--worker", required=True)
    ap.add_argument("--effect", default="release-index")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--step-seconds", type=float, default=0.5)
    ap.add_argument("--ttl", type=float, default=5.0)
    ap.add_argument("--wait-seconds", type=float, default=60.0, help="give up acquiring after")
    ap.add_argument("--unfenced", action="store_true", help="use the naive sink (demo baseline)")
    return ap.parse_args(argv)


def log(worker: str, text: str) -> None:
    print(f"[{worker}] {text}", flush=True)


def run(args: argparse.Namespace) -> int:
    db = open_database(args.db)
    leases = SqlLeaseStore(db)
    sink: EffectSink = UnfencedSink(db) if args.unfenced else FencedSink(db, name="ledger")
    settings = ReporterSettings(args.bootstrap, args.worker, topic=args.topic)
    with OwnershipReporter(settings, leases=leases) as reporter:
        leases.publisher = reporter  # the store publishes lease_acquired itself
        deadline = time.monotonic() + args.wait_seconds
        while True:
            try:
                lease = leases.acquire(args.key, args.worker, ttl=args.ttl)
                break
            except LeaseHeld as held:
                if time.monotonic() > deadline:
                    log(args.worker, f"gave up: {held}")
                    return 2
                time.sleep(0.2)
        log(args.worker, f"acquired {args.key} at epoch {lease.epoch} (seq {lease.seq})")
        for step in range(1, args.steps + 1):
            time.sleep(args.step_seconds)  # the work; SIGSTOP here to play a stalled worker
            report = reporter.progress(args.key, lease.epoch, attrs={"step": step})
            state = "current" if report.current else f"DISPLACED by epoch {report.current_epoch}"
            log(args.worker, f"checkpoint {step} (seq {report.event.seq}): {state}")
        # A well-behaved worker would stop once displaced; this one carries on
        # to show what the sink does with a late effect.
        receipt = reporter.apply_effect(
            sink, args.key, lease.epoch, args.effect, f"{args.worker}@{lease.epoch}".encode()
        )
        log(
            args.worker,
            f"effect {args.effect!r}: {receipt.status}"
            + (
                f" ({receipt.reason}, current epoch {receipt.current_epoch})"
                if receipt.reason
                else ""
            ),
        )
        reporter.release(lease)
    db.close()
    return 3 if receipt.status == "rejected" else 0


def main() -> int:
    args = parse_args()
    try:
        return run(args)
    except FencewatchError as exc:
        print(f"[{args.worker}] error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
