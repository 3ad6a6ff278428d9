"""Fences at the destination: a compare-and-set sink that refuses stale epochs.

``FencedSink.apply`` runs one database transaction that locks the sink's epoch
row for the workflow key, compares, and writes the effect under its
idempotency key: a displaced owner's write is rejected with a receipt, and a
repeat is reported as a duplicate instead of being written twice. Because the
compare and the write share one atomic boundary, no interleaving of owners can
slip a stale write in between.

The sink remembers the highest epoch it has seen per key. A destination that
has not yet heard from the new owner would still take the old owner's write,
so either share the database with the lease store (``consult_leases=True``:
the lease row is read under a shared lock in the same transaction) or have the
new owner call :meth:`FencedSink.advance` right after acquiring.

``UnfencedSink`` is the naive baseline the split-brain demo contrasts with:
it writes whatever it is given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from streams.fences.db import Database, Tx, check_prefix
from streams.fences.lease import check_lease_args
from streams.fences.lease_sql import read_lease_epoch
from streams.fences.schema import ensure_schema

__all__ = [
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "MAX_EFFECT_KEY_CHARS",
    "AppliedEffect",
    "EffectSink",
    "EffectTable",
    "FencedSink",
    "Receipt",
    "ReceiptStatus",
    "UnfencedSink",
    "check_effect_args",
    "check_sink_name",
    "lock_fence_row",
]

DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024
MAX_EFFECT_KEY_CHARS = 1024

ReceiptStatus = Literal["committed", "duplicate", "rejected"]


@dataclass(frozen=True, slots=True)
class Receipt:
    """The destination's answer. ``current_epoch`` is the epoch the sink
    compared against (after the write, for a committed effect); ``reason``
    says why a write was rejected (``stale_epoch`` or ``unknown_epoch``)."""

    status: ReceiptStatus
    workflow_key: str
    epoch: int
    effect_key: str
    idempotency_key: str
    current_epoch: int
    sink: str
    reason: str | None = None

    @property
    def accepted(self) -> bool:
        """The effect is in place (written now or before)."""
        return self.status != "rejected"


@dataclass(frozen=True, slots=True)
class AppliedEffect:
    """One row of a sink's effect table (for inspection and tests)."""

    workflow_key: str
    idempotency_key: str
    effect_key: str
    epoch: int
    fence_revision: int
    payload: bytes


class EffectSink(Protocol):
    """Anything that applies an effect and answers with a receipt."""

    name: str

    def apply(
        self,
        workflow_key: str,
        epoch: int,
        effect_key: str,
        payload: bytes,
        *,
        idempotency_key: str | None = None,
    ) -> Receipt: ...


def check_effect_args(
    workflow_key: str,
    epoch: int,
    effect_key: str,
    payload: bytes,
    cap: int,
    idempotency_key: str | None = None,
) -> str:
    """Refuse what the sink cannot store or would turn into invalid evidence;
    return the idempotency key to use (default: the effect key, so one effect
    key is one effect per workflow)."""
    check_lease_args(workflow_key)
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        raise ValueError(f"epoch must be a non-negative integer, got {epoch!r}")
    if not isinstance(effect_key, str) or not 1 <= len(effect_key) <= MAX_EFFECT_KEY_CHARS:
        raise ValueError(f"effect key must be a string of 1-{MAX_EFFECT_KEY_CHARS} characters")
    if not isinstance(payload, bytes | bytearray):
        raise ValueError("payload must be bytes")
    if len(payload) > cap:
        raise ValueError(f"payload is {len(payload)} bytes, the limit is {cap}")
    idem = effect_key if idempotency_key is None else idempotency_key
    if not 1 <= len(idem) <= MAX_EFFECT_KEY_CHARS:
        raise ValueError(f"idempotency key must be 1-{MAX_EFFECT_KEY_CHARS} characters")
    return idem


def check_sink_name(name: str) -> str:
    if not isinstance(name, str) or not 1 <= len(name) <= 256:
        raise ValueError("sink name must be 1-256 characters")
    return name


def lock_fence_row(
    tx: Tx, prefix: str, sink: str, key: str, *, share: bool = False
) -> tuple[int, int]:
    """Create the sink's fence row for the key if absent and lock it (for
    update, or shared); returns ``(epoch, revision)``. Every sink locks its
    fence row before the lease row: one lock order, no deadlock."""
    tx.run(
        f"INSERT INTO {prefix}fences (sink, workflow_key, epoch, revision) VALUES (?, ?, 0, 0)"
        " ON CONFLICT (sink, workflow_key) DO NOTHING",
        (sink, key),
    )
    epoch, revision = tx.query(
        f"SELECT epoch, revision FROM {prefix}fences WHERE sink = ? AND workflow_key = ?"
        f"{tx.for_share if share else tx.for_update}",
        (sink, key),
    )[0]
    return int(epoch), int(revision)


class EffectTable:
    """What every effect store here shares: its database (schema ensured),
    the table prefix, the payload bound and the argument check."""

    def __init__(self, db: Database, *, prefix: str, max_payload_bytes: int) -> None:
        self.db = db
        self.prefix = check_prefix(prefix)
        self.max_payload_bytes = max_payload_bytes
        ensure_schema(db, prefix)

    def _check(
        self,
        workflow_key: str,
        epoch: int,
        effect_key: str,
        payload: bytes,
        idempotency_key: str | None,
    ) -> str:
        """:func:`check_effect_args` with this store's payload bound."""
        return check_effect_args(
            workflow_key, epoch, effect_key, payload, self.max_payload_bytes, idempotency_key
        )


class FencedSink(EffectTable):
    """A destination table guarded by the epoch fence.

    ``name`` separates several sinks sharing one database; ``prefix`` selects
    the table set; ``consult_leases`` makes the lease table (same database,
    same prefix) part of the comparison, and refuses epochs never granted.
    """

    def __init__(
        self,
        db: Database,
        *,
        name: str = "default",
        prefix: str = "fw_",
        consult_leases: bool = True,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    ) -> None:
        self.name = check_sink_name(name)
        super().__init__(db, prefix=prefix, max_payload_bytes=max_payload_bytes)
        self.consult_leases = consult_leases

    def apply(
        self,
        workflow_key: str,
        epoch: int,
        effect_key: str,
        payload: bytes,
        *,
        idempotency_key: str | None = None,
    ) -> Receipt:
        """Compare ``epoch`` with the key's current epoch and, if it is not
        lower, write the effect once under ``idempotency_key`` (default: the
        effect key, so one effect key is one effect per workflow)."""
        idem = self._check(workflow_key, epoch, effect_key, payload, idempotency_key)
        p, sink = self.prefix, self.name

        def receipt(status: ReceiptStatus, current: int, reason: str | None = None) -> Receipt:
            return Receipt(status, workflow_key, epoch, effect_key, idem, current, sink, reason)

        with self.db.transaction() as tx:
            # Lock order everywhere: fence row, then lease row (shared).
            current, revision = lock_fence_row(tx, p, sink, workflow_key)
            if self.consult_leases:
                granted = read_lease_epoch(tx, p, workflow_key, share_lock=True)
                if epoch > granted:
                    return receipt("rejected", max(current, granted), "unknown_epoch")
                current = max(current, granted)
            if epoch < current:
                return receipt("rejected", current, "stale_epoch")
            new_revision = revision + 1
            written = tx.run(
                f"INSERT INTO {p}effects (sink, workflow_key, idempotency_key, effect_key, epoch,"
                " fence_revision, payload, applied_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (sink, workflow_key, idempotency_key) DO NOTHING",
                (
                    sink,
                    workflow_key,
                    idem,
                    effect_key,
                    epoch,
                    new_revision,
                    bytes(payload),
                    tx.now(),
                ),
            )
            tx.run(
                f"UPDATE {p}fences SET epoch = ?, revision = ? WHERE sink = ? AND workflow_key = ?",
                (max(current, epoch), new_revision, sink, workflow_key),
            )
        return receipt("committed" if written == 1 else "duplicate", max(current, epoch))

    def advance(self, workflow_key: str, epoch: int) -> int:
        """Raise the sink's stored epoch for the key to ``epoch`` (never lower
        it) without writing an effect; returns the stored epoch. A new owner
        calls this right after acquiring when the sink cannot consult the
        lease store, so a late write of the old owner is refused even before
        the new owner's first effect."""
        check_lease_args(workflow_key)
        p = self.prefix
        with self.db.transaction() as tx:
            stored, _ = lock_fence_row(tx, p, self.name, workflow_key)
            if stored < epoch:
                tx.run(
                    f"UPDATE {p}fences SET epoch = ? WHERE sink = ? AND workflow_key = ?",
                    (epoch, self.name, workflow_key),
                )
        return max(stored, epoch)

    def effects(self, workflow_key: str) -> list[AppliedEffect]:
        """The effects written for the key, in the order the fence admitted them."""
        with self.db.transaction() as tx:
            rows = tx.query(
                f"SELECT workflow_key, idempotency_key, effect_key, epoch, fence_revision, payload"
                f" FROM {self.prefix}effects WHERE sink = ? AND workflow_key = ?"
                " ORDER BY fence_revision",
                (self.name, workflow_key),
            )
        return [AppliedEffect(r[0], r[1], r[2], int(r[3]), int(r[4]), bytes(r[5])) for r in rows]


class UnfencedSink(EffectTable):
    """The naive destination (demo baseline only): no epoch compare, no
    idempotency; every call appends a row and answers ``committed``."""

    def __init__(
        self,
        db: Database,
        *,
        name: str = "unfenced",
        prefix: str = "fw_",
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    ) -> None:
        self.name = check_sink_name(name)
        super().__init__(db, prefix=prefix, max_payload_bytes=max_payload_bytes)

    def apply(
        self,
        workflow_key: str,
        epoch: int,
        effect_key: str,
        payload: bytes,
        *,
        idempotency_key: str | None = None,
    ) -> Receipt:
        idem = self._check(workflow_key, epoch, effect_key, payload, idempotency_key)
        with self.db.transaction() as tx:
            tx.run(
                f"INSERT INTO {self.prefix}unfenced_effects (sink, workflow_key, effect_key,"
                " epoch, payload, applied_at) VALUES (?, ?, ?, ?, ?, ?)",
                (self.name, workflow_key, effect_key, epoch, bytes(payload), tx.now()),
            )
        return Receipt("committed", workflow_key, epoch, effect_key, idem, epoch, self.name)

    def count(self, workflow_key: str, effect_key: str) -> int:
        """How many times the effect was written (tests, demo)."""
        with self.db.transaction() as tx:
            rows = tx.query(
                f"SELECT count(*) FROM {self.prefix}unfenced_effects"
                " WHERE sink = ? AND workflow_key = ? AND effect_key = ?",
                (self.name, workflow_key, effect_key),
            )
        return int(rows[0][0])
