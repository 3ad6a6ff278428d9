"""The agent SDK: report ownership evidence to Kafka, stamped by the lease store.

An :class:`OwnershipReporter` publishes SPEC §2 events to ``ownership.events``
keyed by workflow key, through an idempotent producer (``acks=all``), each
validated before it leaves the process and stamped with an authoritative
``seq`` from the lease store and a unique ``event_id``. It is also the lease
store's :class:`~streams.fences.lease.EventPublisher`, so ``lease_acquired``
can be published by the store itself.

The effect boundary::

    with reporter.effect(key, epoch, "release-index", sink="ledger") as fx:
        fx.record(sink.apply(key, epoch, "release-index", payload))

emits ``effect_attempted`` on entry and, from the sink's receipt,
``effect_committed`` (written) or ``effect_rejected`` (refused as stale, or
refused as a duplicate of an effect already in place: ``attrs.receipt`` says
which). If the block raises before a receipt is recorded the outcome is
unknown and only the attempt stands, which is what the detector should see.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import orjson

from streams.core.records import Event, EventType, event_to_dict
from streams.core.validate import to_event
from streams.errors import BrokerError, StoreError
from streams.fences.lease import Lease, LeaseStore, Stamp, check_lease_args
from streams.fences.sink import EffectSink, Receipt
from streams.kafka.clients import Producer
from streams.kafka.connection import KafkaConnection
from streams.kafka.topics import DEFAULT_EVENTS_TOPIC
from streams.sdk.hooks import observers

if TYPE_CHECKING:
    from streams.sdk.owner import Keeper, Owner

__all__ = ["EffectBoundary", "OwnershipReporter", "Report", "ReporterSettings"]

DEFAULT_TOPIC = DEFAULT_EVENTS_TOPIC
_MAX_KEPT_ERRORS = 20


@dataclass(frozen=True, slots=True)
class ReporterSettings:
    """Where and as whom to report. ``bootstrap_servers`` is ``HOST:PORT[,...]``
    or a :class:`~streams.kafka.connection.KafkaConnection` (with credentials:
    ``connection_from_env(os.environ)`` reads the same ``FENCEWATCH_*``
    variables as the CLI). ``extra`` is passed to the Kafka producer (it
    cannot turn idempotence or ``acks=all`` off)."""

    bootstrap_servers: str | KafkaConnection
    worker_id: str
    topic: str = DEFAULT_TOPIC
    run_id: str | None = None
    linger_ms: int = 5
    delivery_timeout_ms: int = 30_000
    # How long produce() may wait for room in the local queue before failing.
    queue_full_wait_s: float = 5.0
    extra: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Report:
    """What was published, and what the lease store said when stamping it:
    ``current`` is False once a higher epoch was acquired (the worker has been
    displaced and should stop); None when the reporter has no lease store."""

    event: Event
    current: bool | None
    current_epoch: int | None


class EffectBoundary:
    """The open effect boundary handed out by :meth:`OwnershipReporter.effect`."""

    def __init__(self, reporter: OwnershipReporter, attempted: Report, sink: str | None) -> None:
        self._reporter = reporter
        self._sink = sink
        self.attempted = attempted
        self.result: Report | None = None

    def record(self, receipt: Receipt) -> Report:
        """Report the destination's receipt (once)."""
        if self.result is not None:
            raise RuntimeError("the receipt of this effect was already recorded")
        ev = self.attempted.event
        if (receipt.workflow_key, receipt.epoch) != (ev.workflow_key, ev.epoch):
            raise ValueError("the receipt is for another workflow key or epoch")
        self.result = self._reporter.effect_result(receipt, sink=self._sink)
        return self.result


class OwnershipReporter:
    """Publishes ownership evidence for one worker. Thread-safe (the Kafka
    producer is); use as a context manager or call :meth:`close`."""

    def __init__(
        self,
        settings: ReporterSettings,
        *,
        leases: LeaseStore | None = None,
    ) -> None:
        if not settings.worker_id or len(settings.worker_id) > 256:
            raise ValueError("worker_id must be 1-256 characters")
        self.settings = settings
        self.leases = leases
        conf: dict[str, Any] = {
            **settings.extra,
            "linger.ms": settings.linger_ms,
            "delivery.timeout.ms": settings.delivery_timeout_ms,
        }
        # Idempotent, acks=all: the layer's producer enforces both.
        self._producer = Producer(settings.bootstrap_servers, conf)
        # Delivery failures arrive on the poll thread; kept (bounded) until
        # the next flush() reports them.
        self._failed = 0
        self._errors: list[str] = []
        self._closed = False
        self._keeper: Keeper | None = None
        self._keeper_lock = threading.Lock()

    # -- the port the lease store uses -----------------------------------

    def publish(self, event: Event) -> None:
        """Validate and produce one event (asynchronously; :meth:`flush` waits).
        Raises InvalidEvent for an event that breaks the contract, BrokerError
        when Kafka refuses it or the local queue stays full."""
        if self._closed:
            raise RuntimeError("reporter is closed")
        doc = event_to_dict(event)
        to_event(doc)  # never publish what the processor would reject
        value = orjson.dumps(doc)
        key = event.workflow_key.encode("utf-8")
        waited = 0.0
        while True:
            try:
                self._producer.produce(
                    self.settings.topic, value=value, key=key, on_delivery=self._on_delivery
                )
                break
            except BufferError:
                # Local queue full: serve delivery reports to make room, bounded.
                if waited >= self.settings.queue_full_wait_s:
                    raise BrokerError(
                        "local producer queue stayed full", code="_QUEUE_FULL", retriable=True
                    ) from None
                self._producer.poll(0.1)
                waited += 0.1
        self._producer.poll(0)
        for observe in observers():  # e.g. streams.integrations.otel
            observe(event)

    def _on_delivery(self, err: BrokerError | None) -> None:
        if err is not None:
            self._failed += 1
            if len(self._errors) < _MAX_KEPT_ERRORS:
                self._errors.append(f"{err.code}: {err}")

    # -- helpers ----------------------------------------------------------

    def emit(
        self,
        etype: EventType,
        key: str,
        epoch: int,
        *,
        effect_key: str | None = None,
        sink: str | None = None,
        attrs: dict[str, Any] | None = None,
        stamp: Stamp | None = None,
        seq: int | None = None,
        unstamped: str | None = None,
    ) -> Report:
        """Publish one event of this worker. Its ``seq`` is ``stamp.seq`` or
        ``seq`` when given, else a fresh stamp from the lease store. With
        ``unstamped`` (why: e.g. ``store_unavailable``) no stamp is asked for:
        the event goes without a seq, and ``attrs.unstamped`` says why — it is
        then ordered by arrival (SPEC §3), which lowers the confidence of the
        key's findings; used only when the store cannot be reached."""
        if unstamped is not None:
            attrs = {**(attrs or {}), "unstamped": unstamped}
        elif stamp is None and seq is None and self.leases is not None:
            stamp = self.leases.stamp(key, epoch)
        event = Event(
            etype,
            key,
            epoch,
            self.settings.worker_id,
            seq=stamp.seq if stamp is not None else seq,
            effect_key=effect_key,
            sink=sink,
            event_id=uuid.uuid4().hex,
            run_id=self.settings.run_id,
            # Informational only: worker clocks never order anything.
            ts=datetime.now(UTC).isoformat(timespec="milliseconds"),
            attrs=attrs,
        )
        self.publish(event)
        if stamp is None:
            return Report(event, None, None)
        return Report(event, stamp.current, stamp.current_epoch)

    def lease_acquired(self, lease: Lease, *, attrs: dict[str, Any] | None = None) -> Report:
        """Report an acquisition (not needed when the lease store publishes
        through this reporter); its seq is the acquisition's store revision."""
        if lease.worker_id != self.settings.worker_id:
            raise ValueError("the lease belongs to another worker")
        return self.emit(
            EventType.LEASE_ACQUIRED, lease.key, lease.epoch, seq=lease.seq, attrs=attrs
        )

    def lease_released(self, key: str, epoch: int, *, stamp: Stamp | None = None) -> Report:
        """Report a release; pass the Stamp that ``LeaseStore.release`` returned."""
        return self.emit(EventType.LEASE_RELEASED, key, epoch, stamp=stamp)

    def release(self, lease: Lease) -> Report:
        """Release the lease in the store and report it."""
        if self.leases is None:
            raise RuntimeError("release() needs a lease store")
        stamp = self.leases.release(lease.key, lease.epoch, lease.worker_id)
        return self.lease_released(lease.key, lease.epoch, stamp=stamp)

    def progress(self, key: str, epoch: int, *, attrs: dict[str, Any] | None = None) -> Report:
        """A checkpoint. ``report.current`` tells a displaced worker to stop."""
        return self.emit(EventType.PROGRESS, key, epoch, attrs=attrs)

    def effect_attempted(
        self, key: str, epoch: int, effect_key: str, *, sink: str | None = None
    ) -> Report:
        return self.emit(EventType.EFFECT_ATTEMPTED, key, epoch, effect_key=effect_key, sink=sink)

    def effect_result(
        self, receipt: Receipt, *, sink: str | None = None, unstamped: str | None = None
    ) -> Report:
        """``effect_committed`` for a write, ``effect_rejected`` for a refusal
        (``attrs.receipt`` is ``rejected`` or ``duplicate``)."""
        attrs: dict[str, Any] = {"receipt": receipt.status, "current_epoch": receipt.current_epoch}
        if receipt.reason is not None:
            attrs["reason"] = receipt.reason
        etype = (
            EventType.EFFECT_COMMITTED
            if receipt.status == "committed"
            else EventType.EFFECT_REJECTED
        )
        return self.emit(
            etype,
            receipt.workflow_key,
            receipt.epoch,
            effect_key=receipt.effect_key,
            sink=sink or receipt.sink,
            attrs=attrs,
            unstamped=unstamped,
        )

    @contextmanager
    def effect(
        self, key: str, epoch: int, effect_key: str, *, sink: str | None = None
    ) -> Iterator[EffectBoundary]:
        """The effect boundary: ``effect_attempted`` now, the receipt's event
        when :meth:`EffectBoundary.record` is called inside the block."""
        attempted = self.effect_attempted(key, epoch, effect_key, sink=sink)
        yield EffectBoundary(self, attempted, sink)

    def apply_effect(
        self,
        sink: EffectSink,
        key: str,
        epoch: int,
        effect_key: str,
        payload: bytes,
        *,
        idempotency_key: str | None = None,
    ) -> Receipt:
        """Attempt, apply through ``sink``, report the receipt; returns it."""
        with self.effect(key, epoch, effect_key, sink=sink.name) as fx:
            receipt = sink.apply(key, epoch, effect_key, payload, idempotency_key=idempotency_key)
            fx.record(receipt)
        return receipt

    # -- ownership that looks after itself ----------------------------------

    def own(
        self,
        key: str,
        *,
        ttl: float,
        on_lost: Callable[[Owner], object] | None = None,
        renew_fraction: float = 1 / 3,
        wait_s: float = 0.0,
        max_deferred: int = 1000,
        drain_timeout_s: float | None = None,
    ) -> Owner:
        """Acquire ``key`` for ``ttl`` seconds (of store time) and keep it:
        use as ``with reporter.own(key, ttl=30) as owner: ...``.

        The keeper renews every ``renew_fraction * ttl`` seconds; ``on_lost``
        is called once (from a background thread) when the lease is lost.
        ``wait_s`` retries while another worker holds the key (else
        ``LeaseHeld`` at once). ``max_deferred`` bounds the deferrable effects
        queued while the store is unavailable (past it they are refused);
        ``drain_timeout_s`` (default ``ttl``) is how long leaving the block
        waits for them. Publishes ``lease_acquired`` (seq: the acquisition's
        store revision) unless the store publishes through this reporter.
        """
        from streams.sdk.owner import Owner, acquire

        store = self.leases
        if store is None:
            raise RuntimeError("own() needs a lease store: OwnershipReporter(..., leases=...)")
        check_lease_args(key, self.settings.worker_id, ttl)
        if not 0 < renew_fraction < 1:
            raise ValueError(f"renew_fraction must be in (0, 1), got {renew_fraction!r}")
        if not 1 <= max_deferred <= 1_000_000:
            raise ValueError("max_deferred must be in 1..1000000")
        lease, started = acquire(self, store, key, ttl, wait_s=max(0.0, wait_s))
        if getattr(store, "publisher", None) is not self:
            self.lease_acquired(lease, attrs={"ttl_s": ttl})
        keeper = self.keeper()
        owner = Owner(
            self,
            keeper,
            store,
            lease,
            ttl=ttl,
            renew_fraction=renew_fraction,
            on_lost=on_lost,
            max_deferred=max_deferred,
            drain_timeout_s=ttl if drain_timeout_s is None else drain_timeout_s,
            started=started,
        )
        keeper.add(owner)
        return owner

    def keeper(self) -> Keeper:
        """The background renewer of this reporter's owners (started on first use)."""
        from streams.sdk.owner import Keeper

        with self._keeper_lock:
            if self._closed:
                raise RuntimeError("reporter is closed")
            if self._keeper is None:
                self._keeper = Keeper()
            return self._keeper

    # -- lifecycle --------------------------------------------------------

    def flush(self, timeout: float = 30.0) -> None:
        """Wait for every event to be acknowledged. Raises BrokerError when
        some are still undelivered after ``timeout`` or failed since the last
        flush (the count and the first errors are in the message)."""
        remaining = self._producer.flush(timeout)
        failed, errors = self._failed, self._errors
        self._failed, self._errors = 0, []
        if failed:
            raise BrokerError(
                f"{failed} event(s) were not delivered: {'; '.join(errors)}", code="_DELIVERY"
            )
        if remaining:
            raise BrokerError(
                f"{remaining} event(s) still undelivered after {timeout}s",
                code="_TIMED_OUT",
                retriable=True,
            )

    def close(self, timeout: float = 30.0) -> None:
        """Close the owners still open (release, ``lease_released``; their
        deferred effects get ``drain_timeout_s`` and are then abandoned), stop
        the keeper, flush and stop; idempotent."""
        if self._closed:
            return
        with self._keeper_lock:
            keeper = self._keeper
        if keeper is not None:
            for owner in keeper.owners():
                # Abandoned effects are on the owner's outcomes; closing goes on.
                with suppress(StoreError):
                    owner.close()
            with self._keeper_lock:
                self._keeper = None
            keeper.stop()
        try:
            self.flush(timeout)
        finally:
            self._closed = True

    def __enter__(self) -> OwnershipReporter:
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        # Do not let a flush failure hide the exception that ended the block.
        if exc_type is None:
            self.close()
        else:
            with suppress(BrokerError):
                self.close()
