"""The lease store on SQL: one implementation, run on SQLite or PostgreSQL
through the database port.

Each operation is one transaction that locks the key's lease row (SQLite:
``BEGIN IMMEDIATE``; PostgreSQL: ``SELECT ... FOR UPDATE``), reads the store
clock after taking the lock, and writes. So two acquirers never see the same
epoch, and a lease's expiry is decided by the store, never by a worker.
"""

from __future__ import annotations

import uuid
from typing import Any

from streams.core.records import MAX_INT63, Event, EventType
from streams.errors import BrokerError, LeaseHeld, LeaseLost
from streams.fences.db import Database, Tx, check_prefix
from streams.fences.lease import (
    EventPublisher,
    Lease,
    LeaseUnpublished,
    Stamp,
    check_lease_args,
    grant_attrs,
)
from streams.fences.schema import ensure_schema

__all__ = ["SqlLeaseStore", "lock_lease_row", "publish_grant", "write_grant"]


def lock_lease_row(tx: Tx, prefix: str, key: str) -> tuple[int, str | None, float, int, int]:
    """Lock the key's lease row for this transaction, creating it if absent.

    Returns ``(epoch, holder, expires_at, revision, acquired_seq)``.
    """
    select = (
        f"SELECT epoch, holder, expires_at, revision, acquired_seq FROM {prefix}leases"
        f" WHERE workflow_key = ?{tx.for_update}"
    )
    rows = tx.query(select, (key,))
    if not rows:
        # First use of the key (the row is never deleted afterwards, so renewals
        # and stamps skip this round trip). Concurrent creators both succeed:
        # DO NOTHING, then the lock below serializes them.
        tx.run(
            f"INSERT INTO {prefix}leases (workflow_key, epoch, holder, expires_at, revision,"
            " acquired_seq) VALUES (?, 0, NULL, 0, 0, 0) ON CONFLICT (workflow_key) DO NOTHING",
            (key,),
        )
        rows = tx.query(select, (key,))
    epoch, holder, expires_at, revision, acquired_seq = rows[0]
    return int(epoch), holder, float(expires_at), int(revision), int(acquired_seq)


def read_lease_epoch(tx: Tx, prefix: str, key: str, *, share_lock: bool) -> int:
    """The key's current epoch inside ``tx`` (0 if the key never had a lease);
    with ``share_lock`` an acquisition cannot commit until ``tx`` ends."""
    lock = tx.for_share if share_lock else ""
    rows = tx.query(f"SELECT epoch FROM {prefix}leases WHERE workflow_key = ?{lock}", (key,))
    return int(rows[0][0]) if rows else 0


class SqlLeaseStore:
    """:class:`~streams.fences.lease.LeaseStore` on a SQL database.

    ``publisher``, when given, receives a ``lease_acquired`` event after each
    acquisition commits (its ``seq`` is the acquisition's store revision). If
    publishing fails, the lease is still held: the publisher's
    :class:`~streams.errors.BrokerError` is raised as
    :class:`~streams.fences.lease.LeaseUnpublished`, which carries the lease,
    so the caller can retry the evidence.
    """

    def __init__(
        self, db: Database, *, prefix: str = "fw_", publisher: EventPublisher | None = None
    ) -> None:
        self.db = db
        self.prefix = check_prefix(prefix)
        self.publisher = publisher
        ensure_schema(db, prefix)

    def acquire(self, key: str, worker_id: str, ttl: float) -> Lease:
        return self._grant(key, worker_id, ttl, take_over=False)

    def take_over(self, key: str, worker_id: str, ttl: float) -> Lease:
        """Allocate the next epoch and grant it to ``worker_id`` even while
        another worker holds an unexpired lease: that holder is displaced (its
        next renew or stamp says so). For an authority outside the store that
        has already handed the work on, e.g. a broker redelivering a message
        after its visibility timeout (``lease_acquired`` then carries
        ``attrs.take_over = true``)."""
        return self._grant(key, worker_id, ttl, take_over=True)

    def _grant(self, key: str, worker_id: str, ttl: float, *, take_over: bool) -> Lease:
        check_lease_args(key, worker_id, ttl)
        p = self.prefix
        with self.db.transaction() as tx:
            epoch, holder, expires_at, revision, _ = lock_lease_row(tx, p, key)
            now = tx.now()
            # A take-over grants the key over a live holder: the broker (or
            # another authority) already handed the work on.
            if holder is not None and holder != worker_id and expires_at > now and not take_over:
                raise LeaseHeld(key, holder, epoch, expires_at)
            if epoch >= MAX_INT63 or revision >= MAX_INT63:
                raise OverflowError(f"epoch or revision of {key!r} would exceed 2^63-1")
            lease = write_grant(tx, p, key, epoch + 1, worker_id, revision + 1, now + ttl)
        publish_grant(self, lease, grant_attrs(ttl, take_over=take_over))
        return lease

    def renew(self, key: str, epoch: int, worker_id: str, ttl: float) -> Lease:
        check_lease_args(key, worker_id, ttl)
        p = self.prefix
        with self.db.transaction() as tx:
            # Fast path, one statement (renewals are the hot loop of every
            # owner): extend only if this worker holds this epoch unexpired
            # by the store's clock, read by the statement itself.
            now_sql, now_args = tx.now_sql()
            rows = tx.query(
                f"UPDATE {p}leases SET expires_at = {now_sql} + ? WHERE workflow_key = ?"
                f" AND epoch = ? AND holder = ? AND expires_at > {now_sql}"
                " RETURNING expires_at, acquired_seq",
                (*now_args, ttl, key, epoch, worker_id, *now_args),
            )
            if rows:
                return Lease(key, epoch, worker_id, int(rows[0][1]), float(rows[0][0]))
            # Lost: find out why, under the row lock.
            cur, holder, expires_at, _, acquired_seq = lock_lease_row(tx, p, key)
            now = tx.now()
            reason = _lost_reason(epoch, worker_id, cur, holder, expires_at, now)
            if reason is not None:
                raise LeaseLost(key, epoch, cur, reason)
            # Not lost after all (the clock moved between the two reads).
            tx.run(f"UPDATE {p}leases SET expires_at = ? WHERE workflow_key = ?", (now + ttl, key))
        return Lease(key, epoch, worker_id, acquired_seq, now + ttl)

    def release(self, key: str, epoch: int, worker_id: str) -> Stamp:
        check_lease_args(key, worker_id)
        p = self.prefix
        with self.db.transaction() as tx:
            cur, holder, _, revision, _ = lock_lease_row(tx, p, key)
            seq = revision + 1
            if cur == epoch and holder == worker_id:
                tx.run(
                    f"UPDATE {p}leases SET holder = NULL, expires_at = 0, revision = ?"
                    " WHERE workflow_key = ?",
                    (seq, key),
                )
            else:
                tx.run(f"UPDATE {p}leases SET revision = ? WHERE workflow_key = ?", (seq, key))
        return Stamp(seq, cur == epoch, cur)

    def stamp(self, key: str, epoch: int) -> Stamp:
        check_lease_args(key)
        p = self.prefix
        with self.db.transaction() as tx:
            cur, _, _, revision, _ = lock_lease_row(tx, p, key)
            seq = revision + 1
            tx.run(f"UPDATE {p}leases SET revision = ? WHERE workflow_key = ?", (seq, key))
        return Stamp(seq, cur == epoch, cur)

    def current_epoch(self, key: str) -> int:
        check_lease_args(key)
        with self.db.transaction() as tx:
            return read_lease_epoch(tx, self.prefix, key, share_lock=False)

    def holder(self, key: str) -> tuple[int, str | None, float]:
        """``(epoch, holder, expires_at)`` as stored (diagnostics and tests)."""
        check_lease_args(key)
        with self.db.transaction() as tx:
            rows: list[tuple[Any, ...]] = tx.query(
                f"SELECT epoch, holder, expires_at FROM {self.prefix}leases WHERE workflow_key = ?",
                (key,),
            )
        if not rows:
            return 0, None, 0.0
        return int(rows[0][0]), rows[0][1], float(rows[0][2])

    def close(self) -> None:
        self.db.close()


def _lost_reason(
    epoch: int, worker_id: str, cur: int, holder: str | None, expires_at: float, now: float
) -> str | None:
    if cur != epoch:
        return f"displaced by epoch {cur}" if cur > epoch else f"epoch {epoch} was never granted"
    if holder is None:
        return "released"
    if holder != worker_id:
        return f"held by {holder!r}"
    if expires_at <= now:
        return "expired by the store's clock"
    return None


def write_grant(
    tx: Tx, prefix: str, key: str, epoch: int, worker_id: str, seq: int, expires: float
) -> Lease:
    """Write a grant of ``epoch`` to ``worker_id`` into the locked lease row
    (its revision and acquisition seq both ``seq``): the one statement every
    way to a new epoch shares (acquire, take over, claim)."""
    tx.run(
        f"UPDATE {prefix}leases SET epoch = ?, holder = ?, expires_at = ?, revision = ?,"
        " acquired_seq = ? WHERE workflow_key = ?",
        (epoch, worker_id, expires, seq, seq, key),
    )
    return Lease(key, epoch, worker_id, seq, expires)


def publish_grant(store: SqlLeaseStore, lease: Lease, attrs: dict[str, Any]) -> None:
    """Publish the grant's ``lease_acquired`` when the store publishes
    (``store.publisher``); :class:`LeaseUnpublished` when the broker refuses it."""
    if store.publisher is None:
        return
    event = Event(
        EventType.LEASE_ACQUIRED,
        lease.key,
        lease.epoch,
        lease.worker_id,
        seq=lease.seq,
        event_id=uuid.uuid4().hex,
        attrs=attrs,
    )
    try:
        store.publisher.publish(event)
    except BrokerError as exc:
        raise LeaseUnpublished(lease, exc) from exc
