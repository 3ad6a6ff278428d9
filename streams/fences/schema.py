"""The fences' tables, created on first use under a table-name prefix.

One prefix is one independent set of tables (tests give each test its own).
The lease store, the fenced sink and the outbox can share a database and
prefix; the sink and the outbox then compare against the lease table inside
their own transaction.
"""

from __future__ import annotations

from streams.fences.db import Database, Dialect, check_prefix

__all__ = ["ensure_schema"]

_TYPES: dict[Dialect, dict[str, str]] = {
    "sqlite": {
        "int": "INTEGER",
        "real": "REAL",
        "blob": "BLOB",
        "id": "INTEGER PRIMARY KEY AUTOINCREMENT",
    },
    "postgres": {
        "int": "BIGINT",
        "real": "DOUBLE PRECISION",
        "blob": "BYTEA",
        "id": "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
    },
}

# `epoch` in leases is the highest epoch ever allocated for the key (it never
# goes down); `holder` is NULL once released; `revision` is the per-key counter
# that hands out authoritative seqs.
_DDL = (
    """CREATE TABLE IF NOT EXISTS {p}leases (
        workflow_key TEXT PRIMARY KEY,
        epoch {int} NOT NULL,
        holder TEXT,
        expires_at {real} NOT NULL,
        revision {int} NOT NULL,
        acquired_seq {int} NOT NULL
    )""",
    # The destination's own memory of the highest epoch it has seen per key.
    """CREATE TABLE IF NOT EXISTS {p}fences (
        sink TEXT NOT NULL,
        workflow_key TEXT NOT NULL,
        epoch {int} NOT NULL,
        revision {int} NOT NULL,
        PRIMARY KEY (sink, workflow_key)
    )""",
    """CREATE TABLE IF NOT EXISTS {p}effects (
        sink TEXT NOT NULL,
        workflow_key TEXT NOT NULL,
        idempotency_key TEXT NOT NULL,
        effect_key TEXT NOT NULL,
        epoch {int} NOT NULL,
        fence_revision {int} NOT NULL,
        payload {blob} NOT NULL,
        applied_at {real} NOT NULL,
        PRIMARY KEY (sink, workflow_key, idempotency_key)
    )""",
    # The unfenced baseline appends every write: no epoch, no idempotency.
    """CREATE TABLE IF NOT EXISTS {p}unfenced_effects (
        id {id},
        sink TEXT NOT NULL,
        workflow_key TEXT NOT NULL,
        effect_key TEXT NOT NULL,
        epoch {int} NOT NULL,
        payload {blob} NOT NULL,
        applied_at {real} NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS {p}outbox (
        id {id},
        workflow_key TEXT NOT NULL,
        epoch {int} NOT NULL,
        effect_key TEXT NOT NULL,
        idempotency_key TEXT NOT NULL,
        payload {blob} NOT NULL,
        status TEXT NOT NULL,
        staged_at {real} NOT NULL,
        sent_at {real},
        UNIQUE (workflow_key, idempotency_key)
    )""",
    "CREATE INDEX IF NOT EXISTS {p}outbox_pending ON {p}outbox (workflow_key, status, id)",
    # Staged promotion: output written under (key, epoch), invisible until one
    # transaction of the current owner moves it to {p}promoted.
    """CREATE TABLE IF NOT EXISTS {p}staged (
        sink TEXT NOT NULL,
        workflow_key TEXT NOT NULL,
        epoch {int} NOT NULL,
        idempotency_key TEXT NOT NULL,
        effect_key TEXT NOT NULL,
        payload {blob} NOT NULL,
        staged_at {real} NOT NULL,
        PRIMARY KEY (sink, workflow_key, epoch, idempotency_key)
    )""",
    """CREATE TABLE IF NOT EXISTS {p}promoted (
        sink TEXT NOT NULL,
        workflow_key TEXT NOT NULL,
        idempotency_key TEXT NOT NULL,
        effect_key TEXT NOT NULL,
        epoch {int} NOT NULL,
        promotion_revision {int} NOT NULL,
        payload {blob} NOT NULL,
        promoted_at {real} NOT NULL,
        PRIMARY KEY (sink, workflow_key, idempotency_key)
    )""",
    # The Kafka producer identity last initialized for a key, next to the owner
    # epoch that initialized it: an init by a lower epoch is an inversion.
    """CREATE TABLE IF NOT EXISTS {p}producers (
        workflow_key TEXT PRIMARY KEY,
        owner_epoch {int} NOT NULL,
        worker_id TEXT NOT NULL,
        transactional_id TEXT NOT NULL,
        initialized_at {real} NOT NULL
    )""",
)


def ensure_schema(db: Database, prefix: str) -> None:
    """Create the tables for ``prefix`` if they do not exist (idempotent, and
    safe when several processes start at once)."""
    check_prefix(prefix)
    types = _TYPES[db.dialect]
    with db.transaction() as tx:
        if tx.dialect == "postgres":
            # Concurrent CREATE TABLE IF NOT EXISTS can still collide in the
            # catalog; serialize schema creation per prefix.
            tx.query("SELECT pg_advisory_xact_lock(hashtext(?))", ("fencewatch:" + prefix,))
        for ddl in _DDL:
            tx.run(ddl.format(p=prefix, **types))
