"""Fences at the destination: the epoch lease store, the compare-and-set sink,
the staged-promotion sink, and (in :mod:`streams.fences.outbox`, which needs
Kafka) the transactional outbox fenced like ``ProducerFencedException``.

Typical use, one database for the lease store and the sink::

    db = open_database("sqlite:///.run/fences.db")
    leases = SqlLeaseStore(db)
    sink = FencedSink(db, name="ledger")
    lease = leases.acquire("tenant/export/2026-07-26", "worker-a", ttl=30)
    receipt = sink.apply(lease.key, lease.epoch, "release-index", b"{...}")
"""

from __future__ import annotations

from streams.fences.connect import open_database
from streams.fences.db import Database, Tx
from streams.fences.lease import EventPublisher, Lease, LeaseStore, LeaseUnpublished, Stamp
from streams.fences.lease_sql import SqlLeaseStore
from streams.fences.sink import AppliedEffect, EffectSink, FencedSink, Receipt, UnfencedSink
from streams.fences.staged import DisplacedRow, Promotion, StagedSink

__all__ = [
    "AppliedEffect",
    "Database",
    "DisplacedRow",
    "EffectSink",
    "EventPublisher",
    "FencedSink",
    "Lease",
    "LeaseStore",
    "LeaseUnpublished",
    "Promotion",
    "Receipt",
    "SqlLeaseStore",
    "StagedSink",
    "Stamp",
    "Tx",
    "UnfencedSink",
    "open_database",
]
