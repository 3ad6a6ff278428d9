"""The outbox table: effects staged under the owner's epoch, waiting to leave
through Kafka.

:meth:`Outbox.stage` inserts the effect inside the same database transaction
that compares the owner's epoch with the lease table (shared lock on the lease
row), so a displaced owner cannot even stage. The lease checks the producer
makes before and after touching Kafka live here too: they read the same tables.
"""

from __future__ import annotations

from dataclasses import dataclass

from streams.fences.db import Database, Tx
from streams.fences.lease_sql import read_lease_epoch
from streams.fences.sink import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    EffectTable,
    Receipt,
    ReceiptStatus,
)

__all__ = ["Outbox", "StagedEffect", "lease_problem"]


@dataclass(frozen=True, slots=True)
class StagedEffect:
    """One outbox row waiting to be published."""

    id: int
    workflow_key: str
    epoch: int
    effect_key: str
    idempotency_key: str
    payload: bytes


class Outbox(EffectTable):
    """Stages effects for the current owner (the lease table must live in the
    same database under the same prefix: the compare is a local read)."""

    def __init__(
        self,
        db: Database,
        *,
        prefix: str = "fw_",
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    ) -> None:
        super().__init__(db, prefix=prefix, max_payload_bytes=max_payload_bytes)

    def stage(
        self,
        workflow_key: str,
        epoch: int,
        effect_key: str,
        payload: bytes,
        *,
        idempotency_key: str | None = None,
    ) -> Receipt:
        """Stage the effect if ``epoch`` is the key's current epoch: ``committed``
        means staged, ``duplicate`` that this idempotency key is already in the
        outbox, ``rejected`` that the epoch is stale (nothing staged)."""
        idem = self._check(workflow_key, epoch, effect_key, payload, idempotency_key)
        p = self.prefix
        with self.db.transaction() as tx:
            current = read_lease_epoch(tx, p, workflow_key, share_lock=True)
            if epoch != current:
                reason = "stale_epoch" if epoch < current else "unknown_epoch"
                return Receipt(
                    "rejected", workflow_key, epoch, effect_key, idem, current, "outbox", reason
                )
            written = tx.run(
                f"INSERT INTO {p}outbox (workflow_key, epoch, effect_key, idempotency_key,"
                " payload, status, staged_at) VALUES (?, ?, ?, ?, ?, 'staged', ?)"
                " ON CONFLICT (workflow_key, idempotency_key) DO NOTHING",
                (workflow_key, epoch, effect_key, idem, bytes(payload), tx.now()),
            )
        status: ReceiptStatus = "committed" if written == 1 else "duplicate"
        return Receipt(status, workflow_key, epoch, effect_key, idem, current, "outbox")

    def pending(self, workflow_key: str, epoch: int, limit: int) -> list[StagedEffect]:
        """Staged, unsent rows of this owner, oldest first."""
        with self.db.transaction() as tx:
            rows = tx.query(
                f"SELECT id, workflow_key, epoch, effect_key, idempotency_key, payload"
                f" FROM {self.prefix}outbox WHERE workflow_key = ? AND epoch = ?"
                " AND status = 'staged' ORDER BY id LIMIT ?",
                (workflow_key, epoch, limit),
            )
        return [StagedEffect(int(r[0]), r[1], int(r[2]), r[3], r[4], bytes(r[5])) for r in rows]

    def statuses(self, workflow_key: str) -> dict[str, str]:
        """Idempotency key to row status (``staged``, ``sent``, ``fenced``,
        ``superseded``), for inspection and tests."""
        with self.db.transaction() as tx:
            rows = tx.query(
                f"SELECT idempotency_key, status FROM {self.prefix}outbox WHERE workflow_key = ?",
                (workflow_key,),
            )
        return {r[0]: r[1] for r in rows}


def lease_problem(tx: Tx, prefix: str, key: str, epoch: int, worker_id: str) -> str | None:
    """Why this owner may not act now (None when it holds the current lease)."""
    rows = tx.query(
        f"SELECT epoch, holder, expires_at FROM {prefix}leases WHERE workflow_key = ?"
        f"{tx.for_share}",
        (key,),
    )
    if not rows:
        return "no lease was ever granted for this key"
    current, holder, expires_at = int(rows[0][0]), rows[0][1], float(rows[0][2])
    if current != epoch:
        return f"epoch {epoch} is not current (current is {current})"
    if holder != worker_id:
        return f"the lease is not held by {worker_id!r}"
    if expires_at <= tx.now():
        return "the lease expired by the store's clock"
    return None
