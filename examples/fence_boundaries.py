#!/usr/bin/env python3
"""The five boundaries of docs/fences.md, each as a small runnable story:
an old owner (epoch 1) is displaced by a new one (epoch 2) and then tries its
effect anyway; what the destination does about it depends on the boundary.

    python examples/fence_boundaries.py cas            # compare-and-set fence
    python examples/fence_boundaries.py idempotency    # idempotency key
    python examples/fence_boundaries.py staged         # staged promotion
    FENCEWATCH_BOOTSTRAP_SERVERS=127.0.0.1:9092 \\
    python examples/fence_boundaries.py outbox         # transactional outbox (needs Kafka)
    python examples/fence_boundaries.py reconcile      # reconcile by effect key + human review
    python examples/fence_boundaries.py all            # every one that can run here

Each uses a throwaway SQLite database (pass --db postgresql://... to use
PostgreSQL instead) and prints what the destination answered.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import uuid
from pathlib import Path

from fencewatch import (
    Database,
    FencedSink,
    SqlLeaseStore,
    StagedSink,
    UnfencedSink,
    open_database,
)

KEY = "tenant/fences-export/2026-07-26"


def _takeover(leases: SqlLeaseStore, key: str) -> tuple[int, int]:
    """alpha holds epoch 1, lets go (or is paused past its TTL); beta takes epoch 2."""
    old = leases.acquire(key, "alpha", ttl=30)
    leases.release(key, old.epoch, "alpha")
    new = leases.acquire(key, "beta", ttl=30)
    return old.epoch, new.epoch


def cas(db: Database, prefix: str) -> None:
    """1. Compare-and-set fence: the destination compares the epoch in the
    write's own transaction and refuses the old one."""
    leases = SqlLeaseStore(db, prefix=prefix)
    sink = FencedSink(db, name="ledger", prefix=prefix)
    old, new = _takeover(leases, KEY)
    late = sink.apply(KEY, old, "release-index", b"from alpha")
    why = f"{late.reason}, current {late.current_epoch}"
    print(f"alpha (epoch {old}) late write: {late.status} ({why})")
    ok = sink.apply(KEY, new, "release-index", b"from beta")
    print(f"beta  (epoch {new}) write:      {ok.status}")
    print(f"rows: {[(e.epoch, e.payload) for e in sink.effects(KEY)]}")


def idempotency(db: Database, prefix: str) -> None:
    """2. Idempotency key: the destination cannot compare epochs (a payment
    API with an Idempotency-Key header, a table with a unique key), but keeps
    one effect per key: whoever repeats a key, old owner or retry, writes
    nothing. It does not stop a stale owner's effect under a *new* key."""
    leases = SqlLeaseStore(db, prefix=prefix)
    table = prefix + "charges"
    with db.transaction() as tx:
        tx.run(f"CREATE TABLE {table} (idempotency_key TEXT PRIMARY KEY, amount TEXT)")

    def charge(key: str, amount: str) -> str:
        # What the provider does with an Idempotency-Key: the first one wins.
        with db.transaction() as tx:
            n = tx.run(
                f"INSERT INTO {table} VALUES (?, ?) ON CONFLICT (idempotency_key) DO NOTHING",
                (key, amount),
            )
        return "committed" if n == 1 else "duplicate"

    old, new = _takeover(leases, KEY)
    print(f"beta  (epoch {new}) charges invoice-42:      {charge('invoice-42', '100 EUR')}")
    print(f"alpha (epoch {old}) charges invoice-42 late: {charge('invoice-42', '100 EUR')}")
    print(
        f"alpha (epoch {old}) charges invoice-43 late: {charge('invoice-43', '5 EUR')}"
        "  <- a new key is not stopped: pair it with a fence or reconcile"
    )
    with db.transaction() as tx:
        print(f"charges: {tx.query(f'SELECT idempotency_key, amount FROM {table}')}")


def staged(db: Database, prefix: str) -> None:
    """3. Staged promotion: both owners write their output under their epoch;
    only the current owner's promotion makes its rows visible, all at once."""
    leases = SqlLeaseStore(db, prefix=prefix)
    sink = StagedSink(db, name="report", prefix=prefix)
    old_lease = leases.acquire(KEY, "alpha", ttl=30)
    for part in ("p1", "p2"):
        sink.stage(KEY, old_lease.epoch, part, f"alpha {part}".encode())
    leases.release(KEY, old_lease.epoch, "alpha")  # alpha stalls before promoting
    new = leases.acquire(KEY, "beta", ttl=30).epoch
    for part in ("p1", "p2", "p3"):
        sink.stage(KEY, new, part, f"beta {part}".encode())
    print(f"beta (epoch {new}) promotes: {sink.promote(KEY, new).promoted}")
    late = sink.promote(KEY, old_lease.epoch)
    print(f"alpha (epoch {old_lease.epoch}) promotes late: {late.status} ({late.reason})")
    print(f"visible: {[(r.epoch, r.payload.decode()) for r in sink.visible(KEY)]}")
    print(f"displaced, never visible: {[(d.epoch, d.effect_key) for d in sink.displaced(KEY)]}")


def outbox(db: Database, prefix: str) -> None:
    """4. Transactional outbox: effects leave through Kafka transactions that a
    newer owner fences; the consumer re-checks the epoch before applying."""
    from fencewatch import EffectApplier, KafkaConnection, Outbox, OutboxProducer, OutboxSettings

    if not os.environ.get("FENCEWATCH_BOOTSTRAP_SERVERS"):
        raise SystemExit(
            "outbox: set FENCEWATCH_BOOTSTRAP_SERVERS (fencewatch local start prints it)"
        )
    connection = KafkaConnection.from_env()  # FENCEWATCH_* (TLS, SASL too)
    bootstrap = connection.bootstrap_servers
    topic = f"fence-boundaries-{uuid.uuid4().hex[:8]}"
    leases = SqlLeaseStore(db, prefix=prefix)
    box = Outbox(db, prefix=prefix)
    old, new = _takeover(leases, KEY)
    print(f"alpha (epoch {old}) stages late: {box.stage(KEY, old, 'notify', b'a').status}")
    print(f"beta  (epoch {new}) stages:      {box.stage(KEY, new, 'notify', b'b').status}")
    settings = OutboxSettings(connection, topic)
    with OutboxProducer(
        db, settings, workflow_key=KEY, epoch=new, worker_id="beta", prefix=prefix
    ) as producer:
        producer.init()
        print(f"beta publishes {producer.publish_pending()} effect(s) in one Kafka transaction")
    applier = EffectApplier(FencedSink(db, name="downstream", prefix=prefix), leases=leases)
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": topic,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([topic])
    msg = None
    while msg is None or msg.error():
        msg = consumer.poll(10)
    print(f"the consumer applies it: {applier.apply_message(msg).status}")
    consumer.close()


def reconcile(db: Database, prefix: str) -> None:
    """5. Reconcile by effect key, with human review: the destination can do
    nothing (an email, an API without idempotency). Both owners report their
    effect with the same effect key; the detector flags the conflict; a person
    checks the destination and records the verified outcome."""
    import orjson

    from streams.cli import main as cli

    leases = SqlLeaseStore(db, prefix=prefix)
    sink = UnfencedSink(db, name="email", prefix=prefix)
    old, new = _takeover(leases, KEY)
    events = [
        {
            "type": "lease_acquired",
            "workflow_key": KEY,
            "epoch": old,
            "worker_id": "alpha",
            "seq": 1,
        },
        {
            "type": "lease_acquired",
            "workflow_key": KEY,
            "epoch": new,
            "worker_id": "beta",
            "seq": 3,
        },
    ]
    seq = 4
    for epoch, worker in ((new, "beta"), (old, "alpha")):
        sink.apply(KEY, epoch, "welcome-email", b"hello")
        for etype in ("effect_attempted", "effect_committed"):
            events.append(
                {
                    "type": etype,
                    "workflow_key": KEY,
                    "epoch": epoch,
                    "worker_id": worker,
                    "seq": seq,
                    "effect_key": "welcome-email",
                    "sink": "email",
                }
            )
            seq += 1
    print(f"emails sent: {sink.count(KEY, 'welcome-email')} (nothing could stop the second)")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "evidence.jsonl"
        path.write_bytes(b"\n".join(orjson.dumps(e) for e in events) + b"\n")
        cli(["audit", str(path)])
        # `fencewatch verify` checks the effect's evidence is on the events
        # topic: with a broker, put it there (as the SDK would have), so the
        # line below works as printed.
        published = bool(os.environ.get("FENCEWATCH_BOOTSTRAP_SERVERS"))
        if published:
            cli(["publish", str(path)])
    print("a person checks the mailbox, then records the outcome for the current epoch:")
    print(
        f"  fencewatch verify --workflow {KEY} --effect welcome-email --by alice "
        f"--epoch {new} --note 'customer got two emails; apology sent'"
    )
    if not published:
        print("  (against a broker holding this evidence: FENCEWATCH_BOOTSTRAP_SERVERS=... "
              "publishes it to ownership.events first)")  # fmt: skip


STORIES = {
    "cas": cas,
    "idempotency": idempotency,
    "staged": staged,
    "outbox": outbox,
    "reconcile": reconcile,
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("story", choices=[*STORIES, "all"])
    ap.add_argument("--db", help="database URL (default: a throwaway SQLite file)")
    args = ap.parse_args()
    names = list(STORIES) if args.story == "all" else [args.story]
    if args.story == "all" and not os.environ.get("FENCEWATCH_BOOTSTRAP_SERVERS"):
        names.remove("outbox")
    with tempfile.TemporaryDirectory() as tmp:
        db = open_database(args.db or f"sqlite:///{Path(tmp) / 'boundaries.db'}")
        for name in names:
            print(f"== {name}")
            STORIES[name](db, f"ex{uuid.uuid4().hex[:6]}_")
            print()
        db.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
