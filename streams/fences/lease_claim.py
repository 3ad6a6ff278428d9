"""Epochs allocated elsewhere: claim one in the lease table, so the fences
compare against it.

Some runtimes already number their owners: Temporal gives every attempt of
an activity the next ``attempt`` and accepts completion only from the current
one. :func:`claim_epoch` records such an epoch as the key's current epoch in
the SQL lease store, in one transaction under the key's row lock, as long as
it is higher than every epoch recorded before; from then on
:class:`~streams.fences.sink.FencedSink` (``consult_leases``) and the outbox
refuse the lower epochs, and the stamps tell the displaced owner it is stale.

Unlike :meth:`SqlLeaseStore.acquire
<streams.fences.lease_sql.SqlLeaseStore.acquire>`, a claim never waits for an
unexpired holder: the runtime that allocated the epoch has already decided
the previous owner is gone (that is what its higher number says), and
refusing the new owner would only stop the work. The lease it grants is
renewed and released as any other (``renew``, ``release``), so an owner made
from it behaves like one from ``reporter.own``.
"""

from __future__ import annotations

from streams.core.records import MAX_INT63
from streams.errors import LeaseLost
from streams.fences.lease import Lease, check_lease_args
from streams.fences.lease_sql import SqlLeaseStore, lock_lease_row, publish_grant, write_grant

__all__ = ["claim_epoch"]


def claim_epoch(
    store: SqlLeaseStore,
    key: str,
    epoch: int,
    worker_id: str,
    ttl: float,
    *,
    attrs: dict[str, object] | None = None,
) -> Lease:
    """Make ``epoch`` (allocated by another authority) the current epoch of
    ``key``, held by ``worker_id`` for ``ttl`` seconds of store time.

    Raises :class:`~streams.errors.LeaseLost` when ``epoch`` is not higher
    than the key's current epoch (a lower or equal number arrived after a
    higher one: this owner is stale before it starts), ValueError for an
    epoch the contract refuses. When the store has a publisher, the
    ``lease_acquired`` event (``attrs`` added to ``ttl_s``) is published as
    :meth:`SqlLeaseStore.acquire` does (a failure: LeaseUnpublished)."""
    check_lease_args(key, worker_id, ttl)
    if isinstance(epoch, bool) or not isinstance(epoch, int) or not 1 <= epoch <= MAX_INT63:
        raise ValueError(f"epoch must be an integer in 1..2^63-1, got {epoch!r}")
    p = store.prefix
    with store.db.transaction() as tx:
        current, _, _, revision, _ = lock_lease_row(tx, p, key)
        if epoch <= current:
            raise LeaseLost(
                key, epoch, current, f"epoch {current} was claimed before epoch {epoch} arrived"
            )
        if revision >= MAX_INT63:
            raise OverflowError(f"revision of {key!r} would exceed 2^63-1")
        lease = write_grant(tx, p, key, epoch, worker_id, revision + 1, tx.now() + ttl)
    publish_grant(store, lease, {"ttl_s": ttl, **(attrs or {})})
    return lease
