"""The transactional outbox, fenced like Kafka's ``ProducerFencedException``.

Three parts:

* :class:`Outbox` stages an effect in the outbox table inside the same
  database transaction that compares the owner's epoch with the lease table:
  a displaced owner cannot even stage.
* :class:`OutboxProducer` publishes one owner's staged effects to the effects
  topic inside Kafka transactions. Its ``transactional.id`` is derived from the
  workflow key, so a newer owner's ``init_transactions()`` fences the older
  producer, whose next commit fails with librdkafka's ``_FENCED``; that becomes
  :class:`~streams.errors.StaleOwner` plus an ``effect_rejected`` event. Kafka
  is latest-init-wins, so the producer refuses to initialize unless the lease
  store says its epoch is current, and records its identity next to the owner
  epoch so an inversion (a lower epoch initializing after a higher one) is
  detected and refused.
* :class:`EffectApplier` is the consuming-side fence: it applies an effect
  message through a :class:`~streams.fences.sink.FencedSink` only if the epoch
  in its header is current, and the idempotency key in its header makes a
  redelivered or republished message a no-op.

See docs/fences.md for the race between the lease check and the producer
initialization, and why the consuming fence closes it.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any, Protocol

from confluent_kafka import KafkaError, KafkaException, Producer

from streams.core.records import MAX_INT63, Event, EventType
from streams.errors import BrokerError, StaleOwner
from streams.fences.db import Database, Tx, check_prefix
from streams.fences.lease import EventPublisher, check_lease_args
from streams.fences.lease_sql import SqlLeaseStore
from streams.fences.sink import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    EffectTable,
    FencedSink,
    Receipt,
    ReceiptStatus,
    check_effect_args,
)

__all__ = [
    "EPOCH_HEADER",
    "IDEMPOTENCY_HEADER",
    "EffectApplier",
    "EffectMessage",
    "InvalidEffectMessage",
    "Outbox",
    "OutboxProducer",
    "OutboxSettings",
    "StagedEffect",
    "transactional_id_for",
]

EPOCH_HEADER = "fencewatch-epoch"
IDEMPOTENCY_HEADER = "fencewatch-idempotency-key"
EFFECT_KEY_HEADER = "fencewatch-effect-key"
WORKER_HEADER = "fencewatch-worker"

# librdkafka reports a fenced transactional producer as the fatal _FENCED;
# brokers may also answer PRODUCER_FENCED or INVALID_PRODUCER_EPOCH first.
_FENCED_CODES = frozenset(
    {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}
)


def transactional_id_for(workflow_key: str, prefix: str = "fencewatch-outbox-") -> str:
    """The Kafka ``transactional.id`` of every owner of ``workflow_key``: one
    per key, so the owners of one key fence each other and nobody else."""
    return prefix + hashlib.sha256(workflow_key.encode("utf-8")).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class OutboxSettings:
    """How the producer reaches Kafka. ``batch_size`` bounds the rows (and so
    the messages) in one Kafka transaction."""

    bootstrap_servers: str
    topic: str
    transactional_id_prefix: str = "fencewatch-outbox-"
    transaction_timeout_ms: int = 60_000
    op_timeout_s: float = 30.0
    batch_size: int = 100
    check_each_batch: bool = True
    extra: Mapping[str, str] = field(default_factory=dict)


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
            current = _lease_epoch(tx, p, workflow_key)
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


def _lease_epoch(tx: Tx, prefix: str, key: str) -> int:
    rows = tx.query(
        f"SELECT epoch FROM {prefix}leases WHERE workflow_key = ?{tx.for_share}", (key,)
    )
    return int(rows[0][0]) if rows else 0


def _lease_problem(tx: Tx, prefix: str, key: str, epoch: int, worker_id: str) -> str | None:
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
        self._producer: Producer | None = None
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
            problem = _lease_problem(tx, p, key, self.epoch, self.worker_id)
            if problem is None:
                problem = self._newer_identity(tx)
        if problem is not None:
            raise StaleOwner(key, self.epoch, self._current(), f"refusing to initialize: {problem}")
        conf: dict[str, Any] = {
            "bootstrap.servers": self.settings.bootstrap_servers,
            "transactional.id": self.transactional_id,
            "enable.idempotence": True,
            "acks": "all",
            "transaction.timeout.ms": self.settings.transaction_timeout_ms,
            **self.settings.extra,
        }
        producer = Producer(conf)
        try:
            producer.init_transactions(self.settings.op_timeout_s)
        except KafkaException as exc:
            raise _broker_error(exc, "init_transactions") from exc
        # Kafka just fenced every earlier producer of this key. If a newer
        # owner acquired the lease (or initialized) meanwhile, we may have
        # fenced the rightful owner: refuse before publishing anything, and
        # leave the rows of lower epochs to no one.
        with self.db.transaction() as tx:
            problem = _lease_problem(tx, p, key, self.epoch, self.worker_id)
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
            _close_quietly(producer)
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
                problem = _lease_problem(
                    tx, self.prefix, self.workflow_key, self.epoch, self.worker_id
                )
            if problem is not None:
                self._reject(rows, problem)
        try:
            self._send(producer, rows)
        except KafkaException as exc:
            if not _is_fenced(exc):
                raise self._abort(producer, exc) from exc
            # Fenced. Either we are stale (a newer owner initialized), or a
            # stale worker slipped an init in past its lease check and fenced
            # us, the rightful owner: then take the transactional id back
            # once and resend (the idempotency keys make the resend safe).
            with self.db.transaction() as tx:
                problem = _lease_problem(
                    tx, self.prefix, self.workflow_key, self.epoch, self.worker_id
                )
            if problem is not None:
                self._fenced = True
                self._reject(rows, f"Kafka fenced the producer ({_code_name(exc)}); {problem}")
            self.inversions += 1
            self.close()
            self.init()
            producer = self._producer
            assert producer is not None
            try:
                self._send(producer, rows)
            except KafkaException as exc2:
                if _is_fenced(exc2):
                    self._fenced = True
                    self._reject(rows, f"Kafka fenced the producer again ({_code_name(exc2)})")
                raise self._abort(producer, exc2) from exc2
        self._mark_sent(rows)
        return len(rows)

    def _abort(self, producer: Producer, exc: KafkaException) -> BrokerError:
        err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
        if err is not None and err.txn_requires_abort():
            # The rows stay staged either way.
            with suppress(KafkaException):
                producer.abort_transaction(self.settings.op_timeout_s)
        return _broker_error(exc, "transaction")

    def _send(self, producer: Producer, rows: Sequence[StagedEffect]) -> None:
        producer.begin_transaction()
        for row in rows:
            producer.produce(
                self.settings.topic,
                value=row.payload,
                key=row.workflow_key.encode("utf-8"),
                headers=[
                    (EPOCH_HEADER, str(row.epoch).encode()),
                    (IDEMPOTENCY_HEADER, row.idempotency_key.encode("utf-8")),
                    (EFFECT_KEY_HEADER, row.effect_key.encode("utf-8")),
                    (WORKER_HEADER, self.worker_id.encode("utf-8")),
                ],
            )
        producer.commit_transaction(self.settings.op_timeout_s)

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
            _close_quietly(self._producer)
            self._producer = None

    def __enter__(self) -> OutboxProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _is_fenced(exc: KafkaException) -> bool:
    err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    return err is not None and err.code() in _FENCED_CODES


def _code_name(exc: KafkaException) -> str:
    err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    return err.name() if err is not None else "unknown"


def _close_quietly(producer: Producer) -> None:
    with suppress(KafkaException):  # closing: nothing left to report to
        producer.flush(0)


def _broker_error(exc: KafkaException, what: str) -> BrokerError:
    err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    if err is None:
        return BrokerError(f"{what}: {exc}")
    return BrokerError(f"{what}: {err.str()}", code=err.name(), retriable=bool(err.retriable()))


# -- the consuming side ---------------------------------------------------------


class InvalidEffectMessage(ValueError):
    """An effects-topic message without valid fencewatch headers."""


@dataclass(frozen=True, slots=True)
class EffectMessage:
    workflow_key: str
    epoch: int
    effect_key: str
    idempotency_key: str
    payload: bytes


class _Message(Protocol):
    def key(self) -> bytes | None: ...
    def value(self) -> bytes | None: ...
    def headers(self) -> list[tuple[str, bytes | None]] | None: ...


def parse_effect_message(msg: _Message) -> EffectMessage:
    """Read key, payload and the fencewatch headers; InvalidEffectMessage on anything off."""
    raw_key = msg.key()
    if not raw_key:
        raise InvalidEffectMessage("message has no key (the workflow key)")
    try:
        key = raw_key.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidEffectMessage("message key is not UTF-8") from None
    headers: dict[str, bytes] = {}
    for name, value in msg.headers() or []:
        if value is not None and name not in headers:
            headers[name] = value
    try:
        epoch_text = headers[EPOCH_HEADER].decode("ascii")
        idem = headers[IDEMPOTENCY_HEADER].decode("utf-8")
        effect_key = headers.get(EFFECT_KEY_HEADER, headers[IDEMPOTENCY_HEADER]).decode("utf-8")
    except KeyError as exc:
        raise InvalidEffectMessage(f"missing header {exc.args[0]}") from None
    except UnicodeDecodeError:
        raise InvalidEffectMessage("a fencewatch header is not valid text") from None
    if not epoch_text.isdigit() or len(epoch_text) > 19 or int(epoch_text) > MAX_INT63:
        raise InvalidEffectMessage(f"{EPOCH_HEADER} is not an integer in [0, 2^63): {epoch_text!r}")
    return EffectMessage(key, int(epoch_text), effect_key, idem, msg.value() or b"")


class EffectApplier:
    """Applies effect messages through a fenced sink, only while their epoch is
    current. With ``leases`` (a lease store the applier can read), the sink
    is first advanced to the key's current epoch, so even the first message of
    a displaced owner after a takeover is refused; without it, the sink's own
    memory of the highest epoch it applied is the fence."""

    def __init__(self, sink: FencedSink, *, leases: SqlLeaseStore | None = None) -> None:
        self.sink = sink
        self.leases = leases

    def apply_message(self, msg: _Message) -> Receipt:
        """Apply one message; raises InvalidEffectMessage for a malformed one
        (the caller dead-letters it) and the sink's errors as StoreError."""
        em = parse_effect_message(msg)
        try:
            check_effect_args(
                em.workflow_key, em.epoch, em.effect_key, em.payload, self.sink.max_payload_bytes
            )
        except ValueError as exc:
            raise InvalidEffectMessage(str(exc)) from None
        if self.leases is not None:
            current = self.leases.current_epoch(em.workflow_key)
            if current > 0:
                self.sink.advance(em.workflow_key, current)
        return self.sink.apply(
            em.workflow_key,
            em.epoch,
            em.effect_key,
            em.payload,
            idempotency_key=em.idempotency_key,
        )
