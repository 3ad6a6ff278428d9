"""Staged promotion: output written under ``(key, epoch)``, made visible by one
transaction of the current owner.

The third boundary of the design, for destinations where a worker produces
many rows (a report, an index, a batch of records) that must appear together
or not at all: :meth:`StagedSink.stage` writes each row under the owner's
epoch into a staging table nobody reads; :meth:`StagedSink.promote` moves all
rows of that epoch into the visible table in **one** transaction that first
compares the epoch with the lease table (shared lock on the lease row, after
the sink's own fence row, the lock order the fenced sink uses). A displaced
epoch's promotion is refused, so its staged rows never become visible;
:meth:`StagedSink.displaced` lists them and :meth:`StagedSink.discard` turns
them into rejected receipts for the evidence.

The staging and visible tables must live in the lease store's database under
the same prefix: the compare is a local read inside the promotion.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from streams.fences.db import Database
from streams.fences.lease import check_lease_args
from streams.fences.lease_sql import read_lease_epoch
from streams.fences.sink import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    AppliedEffect,
    EffectTable,
    Receipt,
    ReceiptStatus,
    check_sink_name,
    lock_fence_row,
)

__all__ = ["DisplacedRow", "Promotion", "StagedSink"]


@dataclass(frozen=True, slots=True)
class Promotion:
    """The answer of :meth:`StagedSink.promote`: one receipt per staged row —
    ``committed`` (now visible), ``duplicate`` (its idempotency key was already
    visible from an earlier promotion: not written again) or ``rejected``
    (the epoch is not current: nothing moved)."""

    status: Literal["promoted", "rejected"]
    workflow_key: str
    epoch: int
    current_epoch: int
    receipts: tuple[Receipt, ...]
    reason: str | None = None

    @property
    def promoted(self) -> tuple[str, ...]:
        """Idempotency keys made visible by this promotion."""
        return tuple(r.idempotency_key for r in self.receipts if r.status == "committed")


@dataclass(frozen=True, slots=True)
class DisplacedRow:
    """A staged row of an epoch lower than the key's current one: never visible."""

    workflow_key: str
    epoch: int
    idempotency_key: str
    effect_key: str
    current_epoch: int


class StagedSink(EffectTable):
    """Stage under the epoch, promote in one current-owner transaction.

    ``name`` separates several staged sinks sharing one database. Rows are
    bounded by ``max_payload_bytes`` each; :meth:`promote` moves every row of
    the epoch at once, so bound what one owner stages per promotion yourself
    (the transaction holds the key's fence row while it copies).
    """

    def __init__(
        self,
        db: Database,
        *,
        name: str = "staged",
        prefix: str = "fw_",
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    ) -> None:
        self.name = check_sink_name(name)
        super().__init__(db, prefix=prefix, max_payload_bytes=max_payload_bytes)
        # The fence row is shared with no FencedSink of the same name.
        self._fence_id = "staged:" + name

    def stage(
        self,
        workflow_key: str,
        epoch: int,
        effect_key: str,
        payload: bytes,
        *,
        idempotency_key: str | None = None,
    ) -> Receipt:
        """Write one row under ``(workflow_key, epoch)``, invisible until promoted.
        ``committed`` means staged; ``duplicate`` that this epoch already staged
        the idempotency key; ``rejected`` that the epoch is already stale or was
        never granted (staging it would be wasted: it could never be promoted)."""
        idem = self._check(workflow_key, epoch, effect_key, payload, idempotency_key)
        p = self.prefix
        with self.db.transaction() as tx:
            # A shared lock on the fence row: a promotion (which takes it for
            # update) waits for this stage to commit, and a stage arriving
            # during a promotion waits for it, so a promotion's copy and its
            # delete see the same rows (PostgreSQL runs READ COMMITTED).
            lock_fence_row(tx, p, self._fence_id, workflow_key, share=True)
            granted = read_lease_epoch(tx, p, workflow_key, share_lock=False)
            if epoch != granted:
                reason = "stale_epoch" if epoch < granted else "unknown_epoch"
                return Receipt(
                    "rejected", workflow_key, epoch, effect_key, idem, granted, self.name, reason
                )
            written = tx.run(
                f"INSERT INTO {p}staged (sink, workflow_key, epoch, idempotency_key, effect_key,"
                " payload, staged_at) VALUES (?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (sink, workflow_key, epoch, idempotency_key) DO NOTHING",
                (self.name, workflow_key, epoch, idem, effect_key, bytes(payload), tx.now()),
            )
        status: ReceiptStatus = "committed" if written == 1 else "duplicate"
        return Receipt(status, workflow_key, epoch, effect_key, idem, granted, self.name)

    def promote(self, workflow_key: str, epoch: int) -> Promotion:
        """Move every staged row of ``(workflow_key, epoch)`` to the visible
        table in one transaction, only if ``epoch`` is the key's current epoch
        (the lease table's, read under a shared lock, and never below what this
        sink already promoted). A refused promotion moves nothing."""
        check_lease_args(workflow_key)
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ValueError(f"epoch must be a non-negative integer, got {epoch!r}")
        p, sink, fid = self.prefix, self.name, self._fence_id
        with self.db.transaction() as tx:
            # Lock order everywhere: fence row, then lease row (shared).
            stored, revision = lock_fence_row(tx, p, fid, workflow_key)
            granted = read_lease_epoch(tx, p, workflow_key, share_lock=True)
            current = max(stored, granted)
            rows = tx.query(
                f"SELECT s.idempotency_key, s.effect_key, v.idempotency_key FROM {p}staged s"
                f" LEFT JOIN {p}promoted v ON v.sink = s.sink AND v.workflow_key = s.workflow_key"
                " AND v.idempotency_key = s.idempotency_key"
                " WHERE s.sink = ? AND s.workflow_key = ? AND s.epoch = ?"
                " ORDER BY s.idempotency_key",
                (sink, workflow_key, epoch),
            )
            reason = None
            if epoch > granted:
                reason = "unknown_epoch"
            elif epoch < current:
                reason = "stale_epoch"
            if reason is not None:
                receipts = tuple(
                    Receipt("rejected", workflow_key, epoch, r[1], r[0], current, sink, reason)
                    for r in rows
                )
                return Promotion("rejected", workflow_key, epoch, current, receipts, reason)
            new_revision = revision + 1
            tx.run(
                f"INSERT INTO {p}promoted (sink, workflow_key, idempotency_key, effect_key, epoch,"
                " promotion_revision, payload, promoted_at)"
                " SELECT sink, workflow_key, idempotency_key, effect_key, epoch, ?, payload, ?"
                f" FROM {p}staged WHERE sink = ? AND workflow_key = ? AND epoch = ?"
                " ON CONFLICT (sink, workflow_key, idempotency_key) DO NOTHING",
                (new_revision, tx.now(), sink, workflow_key, epoch),
            )
            tx.run(
                f"DELETE FROM {p}staged WHERE sink = ? AND workflow_key = ? AND epoch = ?",
                (sink, workflow_key, epoch),
            )
            tx.run(
                f"UPDATE {p}fences SET epoch = ?, revision = ? WHERE sink = ? AND workflow_key = ?",
                (max(current, epoch), new_revision, fid, workflow_key),
            )
        receipts = tuple(
            Receipt(
                "duplicate" if r[2] is not None else "committed",
                workflow_key,
                epoch,
                r[1],
                r[0],
                epoch,
                sink,
            )
            for r in rows
        )
        return Promotion("promoted", workflow_key, epoch, epoch, receipts)

    def displaced(self, workflow_key: str | None = None) -> list[DisplacedRow]:
        """Staged rows of epochs below their key's current lease epoch (all keys
        when ``workflow_key`` is None): output no promotion will ever show."""
        p = self.prefix
        where, params = "s.sink = ?", [self.name]
        if workflow_key is not None:
            check_lease_args(workflow_key)
            where += " AND s.workflow_key = ?"
            params.append(workflow_key)
        with self.db.transaction() as tx:
            rows = tx.query(
                f"SELECT s.workflow_key, s.epoch, s.idempotency_key, s.effect_key, l.epoch"
                f" FROM {p}staged s JOIN {p}leases l ON l.workflow_key = s.workflow_key"
                f" WHERE {where} AND s.epoch < l.epoch"
                " ORDER BY s.workflow_key, s.epoch, s.idempotency_key",
                params,
            )
        return [DisplacedRow(r[0], int(r[1]), r[2], r[3], int(r[4])) for r in rows]

    def discard(self, workflow_key: str, epoch: int) -> list[Receipt]:
        """Delete the staged rows of a displaced epoch; returns one ``rejected``
        (``stale_epoch``) receipt per row, for the evidence
        (``reporter.effect_result(receipt)``). Refuses (ValueError) while the
        epoch is current: its owner may still promote."""
        check_lease_args(workflow_key)
        p = self.prefix
        with self.db.transaction() as tx:
            granted = read_lease_epoch(tx, p, workflow_key, share_lock=True)
            if epoch >= granted:
                raise ValueError(f"epoch {epoch} of {workflow_key!r} is not displaced")
            rows = tx.query(
                f"SELECT idempotency_key, effect_key FROM {p}staged"
                " WHERE sink = ? AND workflow_key = ? AND epoch = ? ORDER BY idempotency_key",
                (self.name, workflow_key, epoch),
            )
            tx.run(
                f"DELETE FROM {p}staged WHERE sink = ? AND workflow_key = ? AND epoch = ?",
                (self.name, workflow_key, epoch),
            )
        return [
            Receipt("rejected", workflow_key, epoch, r[1], r[0], granted, self.name, "stale_epoch")
            for r in rows
        ]

    def visible(self, workflow_key: str) -> list[AppliedEffect]:
        """The promoted rows of the key, in promotion order (``fence_revision``
        is the promotion's revision)."""
        check_lease_args(workflow_key)
        with self.db.transaction() as tx:
            rows = tx.query(
                f"SELECT workflow_key, idempotency_key, effect_key, epoch, promotion_revision,"
                f" payload FROM {self.prefix}promoted WHERE sink = ? AND workflow_key = ?"
                " ORDER BY promotion_revision, idempotency_key",
                (self.name, workflow_key),
            )
        return [AppliedEffect(r[0], r[1], r[2], int(r[3]), int(r[4]), bytes(r[5])) for r in rows]
