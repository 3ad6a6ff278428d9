"""The outbox producer: one owner's staged effects, published in Kafka
transactions fenced like ``ProducerFencedException``.

The ``transactional.id`` is derived from the workflow key, so a newer owner's
``init_transactions()`` fences the older producer, whose next commit fails with
librdkafka's ``_FENCED``; that becomes :class:`~streams.errors.StaleOwner`
plus an ``effect_rejected`` event. Kafka is latest-init-wins, so the producer
refuses to initialize unless the lease store says its epoch is current, and
records its identity next to the owner epoch so an inversion (a lower epoch
initializing after a higher one) is detected and refused. See docs/fences.md.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from streams.core.records import Event, EventType
from streams.errors import StaleOwner
from streams.fences.db import Database, Tx, check_prefix
from streams.fences.lease import EventPublisher, check_lease_args
from streams.fences.lease_sql import SqlLeaseStore
from streams.fences.outbox.table import Outbox, StagedEffect, lease_problem
from streams.kafka.clients import TransactionalProducer
from streams.kafka.connection import KafkaConnection, require_connection
from streams.kafka.errors import ProducerFenced

__all__ = [
    "EFFECT_KEY_HEADER",
    "EPOCH_HEADER",
    "IDEMPOTENCY_HEADER",
    "WORKER_HEADER",
    "OutboxProducer",
    "OutboxSettings",
    "transactional_id_for",
]

EPOCH_HEADER = "fencewatch-epoch"
IDEMPOTENCY_HEADER = "fencewatch-idempotency-key"
EFFECT_KEY_HEADER = "fencewatch-effect-key"
WORKER_HEADER = "fencewatch-worker"


def transactional_id_for(workflow_key: str, prefix: str = "fencewatch-outbox-") -> str:
    """The Kafka ``transactional.id`` of every owner of ``workflow_key``: one
    per key, so the owners of one key fence each other and nobody else."""
    return prefix + hashlib.sha256(workflow_key.encode("utf-8")).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class OutboxSettings:
    """How the producer reaches Kafka: ``connection`` is the brokers and
    their security (:class:`~streams.kafka.connection.KafkaConnection`, e.g.
    ``KafkaConnection.from_env()``). ``batch_size`` bounds the rows (and so
    the messages) in one Kafka transaction."""

    connection: KafkaConnection
    topic: str
    transactional_id_prefix: str = "fencewatch-outbox-"
    transaction_timeout_ms: int = 60_000
    op_timeout_s: float = 30.0
    batch_size: int = 100
    check_each_batch: bool = True
    extra: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        require_connection(self.connection, "OutboxSettings.connection")

    @property
    def bootstrap_servers(self) -> str:
        """Deprecated: ``connection.bootstrap_servers`` (the field's old name)."""
        return self.connection.bootstrap_servers


class OutboxProducer:
    """Publishes one owner's staged effects in Kafka transactions.

    Call :meth:`init` once, then :meth:`publish_pending` as often as needed.
    A crash between a Kafka commit and marking the rows sent leaves them
    staged; the next producer of this owner republishes them with the same
    idempotency keys, and :class:`EffectApplier` applies each only once.
    """

    def __init__(
        self,
        db: Database,
        settings: OutboxSettings,
        *,
        workflow_key: str,
        epoch: int,
        worker_id: str,
        prefix: str = "fw_",
        publisher: EventPublisher | None = None,
    ) -> None:
        check_lease_args(workflow_key, worker_id)
        if not 1 <= settings.batch_size <= 10_000:
            raise ValueError("batch_size must be in 1..10000")
        self.db = db
        self.settings = settings
        self.workflow_key = workflow_key
        self.epoch = epoch
        self.worker_id = worker_id
        self.prefix = check_prefix(prefix)
        self.publisher = publisher
        self.outbox = Outbox(db, prefix=prefix)
        self._leases = SqlLeaseStore(db, prefix=prefix)
        self.transactional_id = transactional_id_for(workflow_key, settings.transactional_id_prefix)
        self._producer: TransactionalProducer | None = None
        self._fenced = False
        #: Times this owner found itself fenced while its lease was still
        #: current (a stale worker's init slipped in) and took the id back.
        self.inversions = 0

    # -- initialization ---------------------------------------------------

    def init(self) -> None:
        """Confirm the lease, initialize the Kafka transactional producer,
        then record the identity; refuse (StaleOwner) at any sign that this
        owner is not current, before it could publish anything."""
        if self._producer is not None:
            raise RuntimeError("init() was already called")
        p, key = self.prefix, self.workflow_key
        with self.db.transaction() as tx:
            problem = lease_problem(tx, p, key, self.epoch, self.worker_id)
            if problem is None:
                problem = self._newer_identity(tx)
        if problem is not None:
            raise StaleOwner(key, self.epoch, self._current(), f"refusing to initialize: {problem}")
        conf: dict[str, Any] = {
            "transaction.timeout.ms": self.settings.transaction_timeout_ms,
            **self.settings.extra,
        }
        producer = TransactionalProducer(
            self.settings.connection,
            self.transactional_id,
            settings=conf,
            op_timeout_s=self.settings.op_timeout_s,
        )
        producer.init()
        # Kafka just fenced every earlier producer of this key. If a newer
        # owner acquired the lease (or initialized) meanwhile, we may have
        # fenced the rightful owner: refuse before publishing anything, and
        # leave the rows of lower epochs to no one.
        with self.db.transaction() as tx:
            problem = lease_problem(tx, p, key, self.epoch, self.worker_id)
            if problem is None:
                recorded = tx.run(
                    f"INSERT INTO {p}producers (workflow_key, owner_epoch, worker_id,"
                    " transactional_id, initialized_at) VALUES (?, ?, ?, ?, ?)"
                    " ON CONFLICT (workflow_key) DO UPDATE SET owner_epoch = excluded.owner_epoch,"
                    " worker_id = excluded.worker_id, transactional_id = excluded.transactional_id,"
                    " initialized_at = excluded.initialized_at"
                    f" WHERE {p}producers.owner_epoch <= excluded.owner_epoch",
                    (key, self.epoch, self.worker_id, self.transactional_id, tx.now()),
                )
                if recorded != 1:
                    problem = "producer identity inversion: a higher epoch initialized first"
                else:
                    tx.run(
                        f"UPDATE {p}outbox SET status = 'superseded' WHERE workflow_key = ?"
                        " AND epoch < ? AND status = 'staged'",
                        (key, self.epoch),
                    )
        if problem is not None:
            producer.close()
            raise StaleOwner(key, self.epoch, self._current(), f"after initializing: {problem}")
        self._producer = producer

    def _newer_identity(self, tx: Tx) -> str | None:
        rows = tx.query(
            f"SELECT owner_epoch FROM {self.prefix}producers WHERE workflow_key = ?",
            (self.workflow_key,),
        )
        if rows and int(rows[0][0]) > self.epoch:
            return f"a producer of epoch {int(rows[0][0])} is already initialized"
        return None

    def _current(self) -> int:
        return self._leases.current_epoch(self.workflow_key)

    # -- publishing -------------------------------------------------------

    def publish_pending(self) -> int:
        """Publish up to ``batch_size`` staged rows in one Kafka transaction and
        mark them sent; returns how many. Raises StaleOwner when this owner
        was displaced or its producer fenced by a newer owner (after marking
        the batch ``fenced`` and reporting each row as ``effect_rejected``),
        BrokerError for other Kafka failures (the transaction is aborted, the
        rows stay staged for a retry)."""
        producer = self._producer
        if producer is None:
            raise RuntimeError("call init() first")
        if self._fenced:
            raise StaleOwner(self.workflow_key, self.epoch, None, "producer already fenced")
        rows = self.outbox.pending(self.workflow_key, self.epoch, self.settings.batch_size)
        if not rows:
            return 0
        if self.settings.check_each_batch:
            with self.db.transaction() as tx:
                problem = lease_problem(
                    tx, self.prefix, self.workflow_key, self.epoch, self.worker_id
                )
            if problem is not None:
                self._reject(rows, problem)
        try:
            self._send(producer, rows)
        except ProducerFenced as exc:
            # Fenced. Either we are stale (a newer owner initialized), or a
            # stale worker slipped an init in past its lease check and fenced
            # us, the rightful owner: then take the transactional id back
            # once and resend (the idempotency keys make the resend safe).
            with self.db.transaction() as tx:
                problem = lease_problem(
                    tx, self.prefix, self.workflow_key, self.epoch, self.worker_id
                )
            if problem is not None:
                self._fenced = True
                self._reject(rows, f"Kafka fenced the producer ({exc.code}); {problem}")
            self.inversions += 1
            self.close()
            self.init()
            producer = self._producer
            assert producer is not None
            try:
                self._send(producer, rows)
            except ProducerFenced as exc2:
                self._fenced = True
                self._reject(rows, f"Kafka fenced the producer again ({exc2.code})")
        self._mark_sent(rows)
        return len(rows)

    def _send(self, producer: TransactionalProducer, rows: Sequence[StagedEffect]) -> None:
        """One Kafka transaction; on failure it is aborted (the rows stay
        staged) and the error raised: ProducerFenced when fenced."""
        producer.send(
            self.settings.topic,
            (
                (
                    row.workflow_key.encode("utf-8"),
                    row.payload,
                    [
                        (EPOCH_HEADER, str(row.epoch).encode()),
                        (IDEMPOTENCY_HEADER, row.idempotency_key.encode("utf-8")),
                        (EFFECT_KEY_HEADER, row.effect_key.encode("utf-8")),
                        (WORKER_HEADER, self.worker_id.encode("utf-8")),
                    ],
                )
                for row in rows
            ),
        )

    def _mark_sent(self, rows: Sequence[StagedEffect]) -> None:
        with self.db.transaction() as tx:
            now = tx.now()
            for row in rows:
                tx.run(
                    f"UPDATE {self.prefix}outbox SET status = 'sent', sent_at = ?"
                    " WHERE id = ? AND status = 'staged'",
                    (now, row.id),
                )

    def _reject(self, rows: Sequence[StagedEffect], reason: str) -> None:
        """Mark the rows fenced, report each as effect_rejected, raise StaleOwner."""
        with self.db.transaction() as tx:
            for row in rows:
                tx.run(
                    f"UPDATE {self.prefix}outbox SET status = 'fenced'"
                    " WHERE id = ? AND status = 'staged'",
                    (row.id,),
                )
        current: int | None = None
        for row in rows:
            stamp = self._leases.stamp(self.workflow_key, self.epoch)
            current = stamp.current_epoch
            if self.publisher is not None:
                self.publisher.publish(
                    Event(
                        EventType.EFFECT_REJECTED,
                        self.workflow_key,
                        self.epoch,
                        self.worker_id,
                        seq=stamp.seq,
                        effect_key=row.effect_key,
                        sink=f"kafka:{self.settings.topic}",
                        event_id=uuid.uuid4().hex,
                        attrs={"reason": reason, "idempotency_key": row.idempotency_key},
                    )
                )
        raise StaleOwner(self.workflow_key, self.epoch, current, reason)

    def close(self) -> None:
        """Drop the Kafka producer (an open transaction is aborted by Kafka's
        transaction timeout or by the next init of this transactional id)."""
        if self._producer is not None:
            self._producer.close()
            self._producer = None

    def __enter__(self) -> OutboxProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
