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

import logging
import math
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from streams.core.records import Event, EventType, event_to_dict
from streams.core.validate import to_event
from streams.errors import BrokerError, ConfigError, StoreError
from streams.fences.lease import (
    Lease,
    LeaseStore,
    Stamp,
    TakeOverLeaseStore,
    check_lease_args,
    grant_attrs,
)
from streams.fences.sink import EffectSink, Receipt
from streams.kafka.admin import TopicAdmin
from streams.kafka.clients import Producer
from streams.kafka.connection import (
    LIBRDKAFKA_LOGGER,
    KafkaConnection,
    split_servers,
)
from streams.kafka.errors import watch_credentials
from streams.kafka.topics import DEFAULT_EVENTS_TOPIC, validate_topic_name
from streams.sdk.evidence import Report
from streams.sdk.hooks import observers
from streams.sdk.owner import Keeper, Owner, acquire

__all__ = [
    "SDK_LOGGER",
    "EffectBoundary",
    "OwnershipReporter",
    "Report",
    "ReporterSettings",
    "ReporterStats",
]

DEFAULT_TOPIC = DEFAULT_EVENTS_TOPIC
_MAX_KEPT_ERRORS = 20
#: The SDK's own log: one line per change of the link to Kafka (lost, back)
#: and one per batch of undelivered evidence nobody else was told about.
SDK_LOGGER = logging.getLogger("fencewatch.sdk")
#: librdkafka errors (error callback) that mean "no broker to talk to": the
#: link is lost. Not ``_TRANSPORT`` alone: one broker of several going away,
#: or an idle connection the broker closed, loses nothing.
_LINK_DOWN = frozenset({"_ALL_BROKERS_DOWN", "_RESOLVE", "_AUTHENTICATION", "_SSL"})
#: Delivery failures that say the same (the event waited past its timeout).
_DELIVERY_DOWN = frozenset({"_MSG_TIMED_OUT", "_TIMED_OUT", "_TRANSPORT", *_LINK_DOWN})


@dataclass(frozen=True, slots=True)
class ReporterSettings:
    """Where and as whom to report. ``bootstrap_servers`` is a
    :class:`~streams.kafka.connection.KafkaConnection` (with credentials:
    ``KafkaConnection.from_env()`` reads the same ``FENCEWATCH_*`` variables
    as the CLI) or, the one convenience at the SDK's edge (docs/sdk.md), a
    plain ``HOST:PORT[,...]`` string (PLAINTEXT); :attr:`connection` is the
    connection either way. ``extra`` is passed to the Kafka producer (it
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
    #: Seconds to reach a broker at construction (None: the connection's,
    #: 10 s by default), as every CLI command does.
    connect_timeout_s: float | None = None
    #: Check at construction that a broker answers (one clear error instead
    #: of a worker that runs on while its evidence goes nowhere).
    check_broker: bool = True

    def __post_init__(self) -> None:
        # Every field checked here, naming it: a mistake surfaces where the
        # settings are written, not as a producer that never connects.
        def bad(name: str, why: str) -> ConfigError:
            return ConfigError(f"ReporterSettings.{name}: {why}")

        servers = self.bootstrap_servers
        if isinstance(servers, KafkaConnection):
            pass  # checked when it was made
        elif isinstance(servers, str):
            try:
                split_servers(servers)
            except ValueError as exc:
                raise bad("bootstrap_servers", str(exc)) from None
        else:
            raise bad(
                "bootstrap_servers",
                f"must be HOST:PORT[,...] or a KafkaConnection, got {type(servers).__name__}",
            )
        if not isinstance(self.worker_id, str) or not 1 <= len(self.worker_id) <= 256:
            raise bad("worker_id", f"must be a string of 1-256 characters, got {self.worker_id!r}")
        if not isinstance(self.topic, str):
            raise bad("topic", f"must be a string, got {type(self.topic).__name__}")
        try:
            validate_topic_name(self.topic)
        except ValueError as exc:
            raise bad("topic", str(exc)) from None
        if self.run_id is not None and (
            not isinstance(self.run_id, str) or not 1 <= len(self.run_id) <= 256
        ):
            raise bad(
                "run_id", f"must be None or a string of 1-256 characters, got {self.run_id!r}"
            )
        if not _is_int(self.linger_ms) or not 0 <= self.linger_ms <= 900_000:
            raise bad("linger_ms", f"must be an integer in 0..900000, got {self.linger_ms!r}")
        if not _is_int(self.delivery_timeout_ms) or not 1 <= self.delivery_timeout_ms <= 2**31 - 1:
            raise bad(
                "delivery_timeout_ms",
                f"must be a positive integer of milliseconds, got {self.delivery_timeout_ms!r}",
            )
        if not _is_number(self.queue_full_wait_s) or not 0 <= self.queue_full_wait_s <= 3600:
            raise bad(
                "queue_full_wait_s", f"must be seconds in [0, 3600], got {self.queue_full_wait_s!r}"
            )
        if self.connect_timeout_s is not None and (
            not _is_number(self.connect_timeout_s) or not 0 < self.connect_timeout_s <= 300
        ):
            raise bad(
                "connect_timeout_s",
                f"must be None or seconds in (0, 300], got {self.connect_timeout_s!r}",
            )
        if not isinstance(self.extra, Mapping) or not all(isinstance(k, str) for k in self.extra):
            raise bad("extra", "must be a mapping of librdkafka setting names to values")
        if not isinstance(self.check_broker, bool):
            raise bad("check_broker", f"must be True or False, got {self.check_broker!r}")

    @property
    def connection(self) -> KafkaConnection:
        """The connection these settings describe (with ``connect_timeout_s``)."""
        conn = self.bootstrap_servers
        if isinstance(conn, str):
            conn = KafkaConnection(conn)
        if self.connect_timeout_s is not None:
            conn = conn.replace(connect_timeout=float(self.connect_timeout_s))
        return conn


def _check_keeping(renew_fraction: float, max_deferred: int) -> None:
    if not 0 < renew_fraction < 1:
        raise ValueError(f"renew_fraction must be in (0, 1), got {renew_fraction!r}")
    if not 1 <= max_deferred <= 1_000_000:
        raise ValueError("max_deferred must be in 1..1000000")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return _is_int(value) or (isinstance(value, float) and math.isfinite(value))


@dataclass(frozen=True, slots=True)
class ReporterStats:
    """Counts since the reporter started: events handed to the producer
    (``published``), acknowledged by Kafka (``delivered``), and refused or
    timed out (``undelivered``: evidence lost); ``broker_up`` is False from
    the moment the link to Kafka was seen lost until a delivery succeeds."""

    published: int
    delivered: int
    undelivered: int
    broker_up: bool


class _ClientLog:
    """librdkafka's log for the SDK's clients: every failed connection
    attempt is a line there, many a second. Passed on to the
    ``streams.kafka.librdkafka`` logger only when that is enabled for debug;
    otherwise dropped: the reporter's own state lines say what matters."""

    def log(self, level: int, msg: str, *args: object) -> None:
        if LIBRDKAFKA_LOGGER.isEnabledFor(logging.DEBUG):
            LIBRDKAFKA_LOGGER.log(level, msg, *args)


_CLIENT_LOG = _ClientLog()


def _quiet_client(on_error: Callable[[Any], None] | None) -> dict[str, Any]:
    """The producer settings that keep librdkafka's retries out of the
    application's log (and, given ``on_error``, feed the link state)."""
    conf: dict[str, Any] = {"logger": _CLIENT_LOG}
    if on_error is not None:
        conf["error_cb"] = on_error
    return conf


def _event_type(value: object) -> EventType:
    if isinstance(value, EventType):
        return value
    if not isinstance(value, str):
        raise TypeError(f"etype must be an EventType or its string, got {type(value).__name__}")
    try:
        return EventType(value)
    except ValueError:
        known = ", ".join(t.value for t in EventType)
        raise ValueError(f"etype: unknown event type {value!r} (one of {known})") from None


def _check_str(name: str, value: object) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")


def _check_epoch(value: object, name: str = "epoch") -> None:
    if not _is_int(value):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")


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
        on_undelivered: Callable[[int, str], object] | None = None,
        on_broker: Callable[[bool, str], object] | None = None,
    ) -> None:
        """``on_undelivered(count, errors)`` is called once per batch of
        events Kafka refused or never acknowledged (when :meth:`flush` or
        :meth:`close` finds them); ``on_broker(up, detail)`` once per change
        of the link to Kafka (lost, back). Both run on the thread that polls
        the producer (a publishing or flushing thread) and must be quick."""
        if not isinstance(settings, ReporterSettings):
            raise TypeError(f"settings must be a ReporterSettings, got {type(settings).__name__}")
        self.settings = settings
        self.leases = leases
        self._on_undelivered = on_undelivered
        self._on_broker = on_broker
        conn = settings.connection
        if settings.check_broker:
            # The CLI's probe: TCP to a bootstrap server, then one metadata
            # answer, both within the connect timeout; one line if not.
            TopicAdmin(conn.replace(extra={**conn.extra, **_quiet_client(None)})).probe()
        self._lock = threading.Lock()
        self._broker_up = True
        self._published = self._delivered = self._undelivered = 0
        conf: dict[str, Any] = {
            **settings.extra,
            "linger.ms": settings.linger_ms,
            "delivery.timeout.ms": settings.delivery_timeout_ms,
            **_quiet_client(self._on_client_error(conn.bootstrap_servers)),
        }
        # Idempotent, acks=all: the layer's producer enforces both.
        self._producer = Producer(conn, conf)
        # Delivery failures arrive on the poll thread; kept (bounded) until
        # the next flush() reports them.
        self._failed = 0
        # Distinct delivery errors since the last flush, with their counts.
        self._errors: dict[str, int] = {}
        self._closed = False
        self._keeper: Keeper | None = None
        self._keeper_lock = threading.Lock()

    # -- the link to Kafka: one line per change -----------------------------

    def _on_client_error(self, bootstrap: str) -> Callable[[Any], None]:
        credentials = watch_credentials(bootstrap)

        def on_error(err: Any) -> None:
            credentials(err)  # a refused login is still reported as such
            name = str(err.name())
            if name in _LINK_DOWN:
                self._link(False, f"{name}: {err.str()}")

        return on_error

    def _link(self, up: bool, detail: str) -> None:
        with self._lock:
            if self._broker_up == up:
                return
            self._broker_up = up
        servers = self.settings.connection.bootstrap_servers
        who = f"fencewatch reporter {self.settings.worker_id!r}"
        if up:
            SDK_LOGGER.warning("%s: broker %s is back", who, servers)
        else:
            SDK_LOGGER.warning(
                "%s: lost the broker %s (%s); events wait in the producer for up to %d ms",
                who,
                servers,
                detail,
                self.settings.delivery_timeout_ms,
            )
        if self._on_broker is not None:
            self._on_broker(up, detail)

    def stats(self) -> ReporterStats:
        """Counts since the start (a metric to export: ``undelivered`` is
        evidence the detector will never see)."""
        with self._lock:
            return ReporterStats(
                self._published, self._delivered, self._undelivered, self._broker_up
            )

    # -- the port the lease store uses -----------------------------------

    def publish(self, event: Event | Mapping[str, Any]) -> None:
        """Validate and produce one event (asynchronously; :meth:`flush` waits).
        ``event`` is an :class:`Event` or its JSON object as a dict (SPEC §2,
        validated as the audit validates a line). Raises TypeError for
        anything else, InvalidEvent (a ValueError naming the field) for an
        event that breaks the contract, BrokerError when Kafka refuses it or
        the local queue stays full."""
        if self._closed:
            raise RuntimeError("reporter is closed")
        if isinstance(event, Event):
            doc = event_to_dict(event)
            to_event(doc)  # never publish what the processor would reject
        elif isinstance(event, Mapping):
            event = to_event(dict(event))
            doc = event_to_dict(event)
        else:
            raise TypeError(
                f"event must be a fencewatch.Event or a dict, got {type(event).__name__}"
            )
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
        with self._lock:
            self._published += 1
        self._producer.poll(0)
        for observe in observers():  # e.g. streams.integrations.otel
            observe(event)

    def _on_delivery(self, err: BrokerError | None) -> None:
        if err is None:
            with self._lock:
                self._delivered += 1
            self._link(True, "delivered")
            return
        with self._lock:
            self._undelivered += 1
            self._failed += 1
            text = f"{err.code}: {err}"
            if text in self._errors or len(self._errors) < _MAX_KEPT_ERRORS:
                self._errors[text] = self._errors.get(text, 0) + 1
        if err.code in _DELIVERY_DOWN:
            self._link(False, f"{err.code}: {err}")

    # -- helpers ----------------------------------------------------------

    def emit(
        self,
        etype: EventType | str,
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
        key's findings; used only when the store cannot be reached.

        ``etype`` is an :class:`EventType` or its string (``"progress"``).
        A wrong type of argument raises TypeError, a value the contract
        refuses ValueError (InvalidEvent), each naming the argument."""
        etype = _event_type(etype)
        _check_str("key", key)
        _check_epoch(epoch)
        for name, value in (("effect_key", effect_key), ("sink", sink), ("unstamped", unstamped)):
            if value is not None:
                _check_str(name, value)
        if attrs is not None and not isinstance(attrs, Mapping):
            raise TypeError(f"attrs must be a dict or None, got {type(attrs).__name__}")
        if seq is not None:
            _check_epoch(seq, "seq")
        if stamp is not None and not isinstance(stamp, Stamp):
            raise TypeError(f"stamp must be a Stamp or None, got {type(stamp).__name__}")
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
            attrs=dict(attrs) if attrs is not None else None,
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
        take_over: bool = False,
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
        ``take_over``: take the key even from a live holder, which is then
        displaced (the store must have ``take_over``, e.g. ``SqlLeaseStore``;
        for an outside authority that already handed the work on, such as a
        broker redelivery); ``lease_acquired`` then says ``take_over: true``.
        """
        store = self._owner_store("own")
        check_lease_args(key, self.settings.worker_id, ttl)
        _check_keeping(renew_fraction, max_deferred)
        if take_over:
            if not isinstance(store, TakeOverLeaseStore):
                raise TypeError(f"take_over needs a lease store with take_over(), not {store!r}")
            started = time.monotonic()
            lease = store.take_over(key, self.settings.worker_id, ttl)
        else:
            lease, started = acquire(self, store, key, ttl, wait_s=max(0.0, wait_s))
        if getattr(store, "publisher", None) is not self:
            self.lease_acquired(lease, attrs=grant_attrs(ttl, take_over=take_over))
        return self._keep(
            store, lease, ttl, on_lost, renew_fraction, max_deferred, drain_timeout_s, started
        )

    def adopt(
        self,
        lease: Lease,
        *,
        ttl: float,
        started: float,
        on_lost: Callable[[Owner], object] | None = None,
        renew_fraction: float = 1 / 3,
        max_deferred: int = 1000,
        drain_timeout_s: float | None = None,
    ) -> Owner:
        """Keep a lease this worker obtained from the lease store by other
        means than :meth:`own` (an epoch claimed from another authority:
        :func:`~streams.fences.lease_claim.claim_epoch`), exactly as ``own``
        keeps its own; ``started`` is the monotonic instant the request that
        granted it started (the worker's deadline counts from there). Its
        ``lease_acquired`` is the caller's to publish."""
        store = self._owner_store("adopt")
        check_lease_args(lease.key, lease.worker_id, ttl)
        if lease.worker_id != self.settings.worker_id:
            raise ValueError("the lease belongs to another worker")
        _check_keeping(renew_fraction, max_deferred)
        return self._keep(
            store, lease, ttl, on_lost, renew_fraction, max_deferred, drain_timeout_s, started
        )

    def _owner_store(self, method: str) -> LeaseStore:
        if self.leases is None:
            raise RuntimeError(
                f"{method}() needs a lease store: OwnershipReporter(..., leases=...)"
            )
        return self.leases

    def _keep(
        self,
        store: LeaseStore,
        lease: Lease,
        ttl: float,
        on_lost: Callable[[Owner], object] | None,
        renew_fraction: float,
        max_deferred: int,
        drain_timeout_s: float | None,
        started: float,
    ) -> Owner:
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
        flush (the message has the count and the distinct errors, each with
        how often it occurred)."""
        remaining = self._producer.flush(timeout)
        with self._lock:
            failed, errors = self._failed, self._errors
            self._failed, self._errors = 0, {}
        if failed:
            detail = "; ".join(f"{text} (x{n})" if n > 1 else text for text, n in errors.items())
            self._report_undelivered(failed, detail)
            raise BrokerError(
                f"{failed} event(s) were not delivered to {self.settings.topic}: {detail}",
                code="_DELIVERY",
            )
        if remaining:
            raise BrokerError(
                f"{remaining} event(s) still undelivered after {timeout}s",
                code="_TIMED_OUT",
                retriable=True,
            )

    def _report_undelivered(self, count: int, detail: str) -> None:
        # Once per batch, before the BrokerError that says the same to the caller.
        if self._on_undelivered is not None:
            self._on_undelivered(count, detail)

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

    @property
    def worker_id(self) -> str:
        """The worker this reporter publishes for (``settings.worker_id``)."""
        return self.settings.worker_id

    def __enter__(self) -> OwnershipReporter:
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        # Do not let a flush failure hide the exception that ended the block;
        # say it in one log line instead, since nobody else will.
        if exc_type is None:
            self.close()
        else:
            try:
                self.close()
            except BrokerError as exc:
                SDK_LOGGER.warning("fencewatch reporter %r: %s", self.settings.worker_id, exc)
