"""Ownership that looks after itself: ``with reporter.own(key, ttl=...) as owner:``.

An :class:`Owner` holds one lease. The reporter's keeper renews it in the
background every ``renew_fraction`` of the TTL; the TTL is counted by the
lease store's clock (the store sets ``expires_at = store now + ttl`` on each
renewal), and the worker's own deadline is the monotonic instant the renewal
request *started* plus the TTL, so it can only be earlier than the store's.
When the lease is lost — displaced, released under it, or that deadline
passed without a renewal the store confirmed — ``owner.lost`` is set, the
``on_lost`` callback runs once (like client-go's ``OnStoppedLeading``) and
``owner.check()`` raises :class:`~streams.errors.LeaseLost`.

Effects go through :meth:`Owner.effect`, which stamps, publishes
``effect_attempted``, applies through the sink and publishes its receipt. When
the lease store cannot be reached or is too slow (every call has a bounded
timeout, see ``open_database(timeout_s=...)``), the effect's ``risk`` decides:

* ``irreversible`` (money, publication, destructive change, customer message)
  fails closed: nothing is attempted, an ``effect_rejected`` event with
  ``attrs.reason = "store_unavailable"`` is published (without a ``seq``: the
  store could not hand one out) and :class:`~streams.errors.EffectRefused` is
  raised;
* ``deferrable`` lets the worker go on: the effect is queued (at most
  ``max_deferred`` per owner; past that it is refused like an irreversible
  one) and applied by the keeper once the store answers again, through the
  sink's epoch compare, so it commits only if the epoch is still current and
  is otherwise rejected as stale.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any, Literal

from streams.core.records import EventType
from streams.errors import (
    BrokerError,
    EffectRefused,
    LeaseHeld,
    LeaseLost,
    StoreError,
    StoreUnavailable,
)
from streams.fences.lease import Lease, LeaseStore, Stamp
from streams.fences.sink import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    EffectSink,
    Receipt,
    check_effect_args,
)
from streams.sdk.evidence import EvidencePublisher

__all__ = ["RISKS", "EffectOutcome", "Keeper", "OutcomeStatus", "Owner", "Risk"]

Risk = Literal["irreversible", "deferrable"]
RISKS: tuple[Risk, ...] = ("irreversible", "deferrable")
OutcomeStatus = Literal["committed", "duplicate", "rejected", "deferred", "failed", "abandoned"]

#: How often a store that failed is probed again (capped by the renew interval).
_MAX_RETRY_S = 1.0
#: Bound on waiting for the keeper's threads to end (longer than any store timeout).
_JOIN_S = 120.0


class _NotAttempted(Exception):
    """The stamp before the attempt failed: nothing reached the destination."""

    def __init__(self, cause: StoreError) -> None:
        super().__init__(str(cause))
        self.cause = cause


class EffectOutcome:
    """What became of one effect handed to :meth:`Owner.effect`.

    ``status`` is the receipt's (``committed``, ``duplicate``, ``rejected``)
    once the effect was applied, ``deferred`` while it waits for the lease
    store, ``failed`` when applying it raised (``error``), ``abandoned`` when
    the owner exited before the store answered (never applied by fencewatch).
    """

    def __init__(self, effect_key: str, risk: Risk) -> None:
        self.effect_key = effect_key
        self.risk = risk
        self.status: OutcomeStatus = "deferred"
        self.receipt: Receipt | None = None
        self.error: BaseException | None = None
        #: True when the effect had to wait for the store.
        self.deferred = False
        self._done = threading.Event()

    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the effect is resolved; False on timeout."""
        return self._done.wait(timeout)

    @property
    def accepted(self) -> bool:
        """The effect is in place (written now or before)."""
        return self.receipt is not None and self.receipt.accepted

    def _resolve(self, status: OutcomeStatus, receipt: Receipt | None = None) -> None:
        self.status, self.receipt = status, receipt
        self._done.set()

    def _fail(self, status: OutcomeStatus, error: BaseException | None) -> None:
        self.status, self.error = status, error
        self._done.set()

    def __repr__(self) -> str:
        return f"EffectOutcome({self.effect_key!r}, {self.risk}, {self.status})"


@dataclass(slots=True)
class _Pending:
    sink: EffectSink
    effect_key: str
    payload: bytes
    idempotency_key: str | None
    outcome: EffectOutcome
    queued_at: float = field(default_factory=time.monotonic)


class Owner:
    """One self-renewing lease; create it with :meth:`OwnershipReporter.own`.

    ``epoch`` and ``lease`` are the acquisition's; ``lost`` is a
    :class:`threading.Event` a worker can wait on; ``lost_reason`` says why.
    Thread-safe: the keeper renews while the worker works.
    """

    def __init__(
        self,
        reporter: EvidencePublisher,
        keeper: Keeper,
        store: LeaseStore,
        lease: Lease,
        *,
        ttl: float,
        renew_fraction: float,
        on_lost: Callable[[Owner], object] | None,
        max_deferred: int,
        drain_timeout_s: float,
        started: float,
    ) -> None:
        self.reporter = reporter
        self.keeper = keeper
        self.store = store
        self.lease = lease
        self.ttl = ttl
        self.renew_every = ttl * renew_fraction
        self.retry_every = min(self.renew_every, _MAX_RETRY_S)
        self.on_lost = on_lost
        self.max_deferred = max_deferred
        self.drain_timeout_s = drain_timeout_s
        self.lost = threading.Event()
        self.lost_reason: str | None = None
        #: Renewals the store confirmed; the last store error seen (if any).
        self.renewals = 0
        self.last_error: StoreError | None = None
        #: An exception the on_lost callback raised (kept, never re-raised).
        self.callback_error: BaseException | None = None
        #: Why releasing on exit failed (the lease then expires by its TTL).
        self.release_error: StoreError | None = None
        self._lock = threading.Lock()
        self._valid_until = started + ttl
        self._renew_due = started + self.renew_every
        self._lost_current = lease.epoch
        #: The keeper's schedule for this owner (lazy deletion in its heap).
        self._scheduled: float | None = None
        self._healthy = True
        self._deferred: deque[_Pending] = deque()
        self._closing = False
        self._finished = threading.Event()

    # -- what a worker reads ------------------------------------------------

    @property
    def key(self) -> str:
        return self.lease.key

    @property
    def epoch(self) -> int:
        return self.lease.epoch

    @property
    def worker_id(self) -> str:
        return self.lease.worker_id

    @property
    def store_healthy(self) -> bool:
        """False since a store call failed, until one succeeds again."""
        return self._healthy

    @property
    def deferred_pending(self) -> int:
        """Deferred effects still waiting for the store."""
        with self._lock:
            return len(self._deferred)

    def check(self) -> None:
        """Raise :class:`~streams.errors.LeaseLost` if the lease is lost (also
        when its local deadline passed, even if the keeper has not run yet)."""
        self._check_deadline()
        if self.lost.is_set():
            raise LeaseLost(self.key, self.epoch, self._lost_current, self.lost_reason or "lost")

    # -- effects --------------------------------------------------------------

    def effect(
        self,
        sink: EffectSink,
        effect_key: str,
        payload: bytes,
        *,
        risk: Risk = "irreversible",
        idempotency_key: str | None = None,
    ) -> EffectOutcome:
        """Apply one effect under this lease, with evidence (``effect_attempted``
        then ``effect_committed`` / ``effect_rejected``).

        Raises LeaseLost when the lease is already lost (after publishing
        ``effect_rejected`` with ``attrs.reason = "lease_lost"``: nothing was
        attempted), EffectRefused when the
        effect is refused without an attempt (see the module docs), and
        StoreUnavailable when an ``irreversible`` effect was attempted but the
        destination did not answer (the outcome is unknown; only the attempt
        stands in the evidence). A displaced owner learns it from the stamp
        before the attempt: the effect is not attempted, the outcome is
        ``rejected`` (``stale_epoch``) and the lease is marked lost.
        """
        if risk not in RISKS:
            raise ValueError(f"risk must be one of {', '.join(RISKS)}, got {risk!r}")
        # Refuse what the sink would refuse now, not from the keeper later.
        cap = getattr(sink, "max_payload_bytes", DEFAULT_MAX_PAYLOAD_BYTES)
        check_effect_args(self.key, self.epoch, effect_key, payload, cap, idempotency_key)
        try:
            self.check()
        except LeaseLost as exc:
            # The worker missed its loss until now: the refused effect is the
            # evidence of a stale worker acting, so it is reported (then raised).
            current = self._report_lost(sink.name, effect_key, risk)
            if current is not None and current > exc.current_epoch:
                raise LeaseLost(self.key, self.epoch, current, exc.reason) from None
            raise
        outcome = EffectOutcome(effect_key, risk)
        item = _Pending(sink, effect_key, bytes(payload), idempotency_key, outcome)
        if risk == "deferrable":
            with self._lock:
                # Behind earlier deferred effects, so one owner's effects keep their order.
                wait = not self._healthy or bool(self._deferred)
            if wait:
                self._defer(item, self.last_error)
                return outcome
        elif not self._healthy:
            self._refuse(item, "store_unavailable", self.last_error)
        try:
            self._apply(item)
        except _NotAttempted as exc:
            self._mark_unhealthy(exc.cause)
            if risk == "irreversible":
                self._refuse(item, "store_unavailable", exc.cause)
            self._defer(item, exc.cause)
        except StoreError as exc:
            # Attempted, no receipt: the outcome is unknown.
            self._mark_unhealthy(exc)
            if risk == "irreversible":
                raise
            # Safe to redo: the idempotency key turns a second copy into a duplicate.
            self._defer(item, exc)
        return outcome

    def progress(self, attrs: dict[str, Any] | None = None) -> bool:
        """Publish a checkpoint; returns whether the epoch is still current
        (False also marks the lease lost)."""
        report = self.reporter.progress(self.key, self.epoch, attrs=attrs)
        if report.current is False:
            self._lose(f"displaced by epoch {report.current_epoch}", report.current_epoch)
        return report.current is not False

    def _apply(self, item: _Pending) -> None:
        """Stamp, attempt, apply, report; resolves ``item.outcome``. Raises
        _NotAttempted when the stamp failed, StoreError when the sink did."""
        rep, key, epoch = self.reporter, self.key, self.epoch
        try:
            stamp = self.store.stamp(key, epoch)
        except StoreError as exc:
            raise _NotAttempted(exc) from exc
        self._mark_healthy()
        sink_name = item.sink.name
        if not stamp.current:
            self._lose(f"displaced by epoch {stamp.current_epoch}", stamp.current_epoch)
            receipt = Receipt(
                "rejected",
                key,
                epoch,
                item.effect_key,
                item.idempotency_key or item.effect_key,
                stamp.current_epoch,
                sink_name,
                "stale_epoch",
            )
            rep.emit(
                EventType.EFFECT_REJECTED,
                key,
                epoch,
                effect_key=item.effect_key,
                sink=sink_name,
                attrs={
                    **self._risk_attrs(item),
                    "receipt": "not_attempted",
                    "reason": "stale_epoch",
                    "current_epoch": stamp.current_epoch,
                },
                stamp=stamp,
            )
            item.outcome._resolve("rejected", receipt)
            return
        rep.emit(
            EventType.EFFECT_ATTEMPTED,
            key,
            epoch,
            effect_key=item.effect_key,
            sink=sink_name,
            attrs=self._risk_attrs(item),
            stamp=stamp,
        )
        receipt = item.sink.apply(
            key, epoch, item.effect_key, item.payload, idempotency_key=item.idempotency_key
        )
        try:
            rep.effect_result(receipt, sink=sink_name)
        except StoreUnavailable as exc:
            # Applied, but the store went away before the outcome's stamp:
            # the outcome still has to be told, without a seq.
            self._mark_unhealthy(exc)
            rep.effect_result(receipt, sink=sink_name, unstamped="store_unavailable")
        item.outcome._resolve(receipt.status, receipt)

    def _report_lost(self, sink_name: str, effect_key: str, risk: Risk) -> int | None:
        """Publish ``effect_rejected`` (``lease_lost``, not attempted) for an
        effect a lost owner was asked for; stamped when the store answers (the
        stamp also tells the epoch that displaced this one, returned), else
        without a seq. Evidence only: a failure here never hides the loss."""
        attrs: dict[str, Any] = {
            "risk": risk,
            "receipt": "not_attempted",
            "reason": "lease_lost",
            "detail": (self.lost_reason or "lost")[:500],
        }
        stamp: Stamp | None = None
        with suppress(StoreError):
            stamp = self.store.stamp(self.key, self.epoch)
        if stamp is not None:
            attrs["current_epoch"] = stamp.current_epoch
        # Kafka away too: the refusal stands, the worker still gets it.
        with suppress(BrokerError):
            self.reporter.emit(
                EventType.EFFECT_REJECTED,
                self.key,
                self.epoch,
                effect_key=effect_key,
                sink=sink_name,
                attrs=attrs,
                stamp=stamp,
                unstamped=None if stamp is not None else "store_unavailable",
            )
        return stamp.current_epoch if stamp is not None else None

    def _risk_attrs(self, item: _Pending) -> dict[str, Any]:
        attrs: dict[str, Any] = {"risk": item.outcome.risk}
        if item.outcome.deferred:
            attrs["deferred_s"] = round(time.monotonic() - item.queued_at, 3)
        return attrs

    def _refuse(self, item: _Pending, reason: str, cause: StoreError | None) -> None:
        """Fail closed: publish why (no seq: the store did not answer) and raise."""
        detail = str(cause) if cause is not None else "the lease store did not answer"
        evidence_error: BrokerError | None = None
        try:
            self.reporter.emit(
                EventType.EFFECT_REJECTED,
                self.key,
                self.epoch,
                effect_key=item.effect_key,
                sink=item.sink.name,
                attrs={
                    "risk": item.outcome.risk,
                    "receipt": "not_attempted",
                    "reason": reason,
                    "detail": detail[:500],
                },
                unstamped="store_unavailable",
            )
        except BrokerError as exc:
            # Kafka is away too: the refusal stands; the worker still gets it.
            evidence_error = exc
        error = EffectRefused(
            self.key,
            self.epoch,
            item.effect_key,
            item.outcome.risk,
            reason,
            detail,
            evidence_error=evidence_error,
        )
        item.outcome._fail("failed", error)
        raise error from cause

    def _defer(self, item: _Pending, cause: StoreError | None) -> None:
        with self._lock:
            full = len(self._deferred) >= self.max_deferred
            if not full:
                item.outcome.deferred = True
                self._deferred.append(item)
        if full:
            self._refuse(item, "deferred_queue_full", cause)
        self.keeper.wake(self)

    # -- the keeper's side ----------------------------------------------------

    def _tick(self) -> float | None:
        """One keeper turn: renew if due (or the store failed), then apply what
        waited. Returns when to come back (monotonic), None when done."""
        if (
            not self._closing
            and not self.lost.is_set()
            and (not self._healthy or time.monotonic() >= self._renew_due)
        ):
            started = time.monotonic()
            try:
                lease = self.store.renew(self.key, self.epoch, self.worker_id, self.ttl)
            except LeaseLost as exc:
                self._mark_healthy()
                self._lose(exc.reason, exc.current_epoch)
            except StoreError as exc:
                self._mark_unhealthy(exc)
                self._check_deadline()
                return time.monotonic() + self.retry_every
            else:
                with self._lock:
                    self.lease = lease
                    self._valid_until = started + self.ttl
                    self._renew_due = started + self.renew_every
                    self.renewals += 1
                self._mark_healthy()
        self._drain()
        with self._lock:
            waiting = bool(self._deferred)
        if waiting:
            return time.monotonic() + self.retry_every
        if self._closing or self.lost.is_set():
            return None
        return self._renew_due

    def _drain(self) -> None:
        """Apply deferred effects in order until the store fails again."""
        while True:
            with self._lock:
                if not self._deferred:
                    return
                item = self._deferred[0]
            try:
                self._apply(item)
            except _NotAttempted as exc:
                self._mark_unhealthy(exc.cause)
                return
            except StoreError as exc:
                self._mark_unhealthy(exc)  # retried later: idempotent
                return
            except Exception as exc:  # a sink or publisher failure: this effect only
                item.outcome._fail("failed", exc)
            with self._lock:
                self._deferred.popleft()

    def _deadline(self) -> float | None:
        if self.lost.is_set() or self._closing:
            return None
        return self._valid_until

    def _check_deadline(self) -> None:
        if not self.lost.is_set() and not self._closing and time.monotonic() >= self._valid_until:
            cause = f": {self.last_error}" if self.last_error is not None else ""
            self._lose(f"not renewed within the ttl ({self.ttl}s) by the store's clock{cause}")

    def _mark_healthy(self) -> None:
        self._healthy = True

    def _mark_unhealthy(self, exc: StoreError) -> None:
        self._healthy = False
        self.last_error = exc

    def _lose(self, reason: str, current_epoch: int | None = None) -> None:
        with self._lock:
            if self.lost.is_set():
                return
            self.lost_reason = reason
            if current_epoch is not None:
                self._lost_current = current_epoch
            self.lost.set()
        if self.on_lost is not None:
            try:
                self.on_lost(self)
            except Exception as exc:  # the keeper must go on; kept for the worker
                self.callback_error = exc

    # -- lifecycle ------------------------------------------------------------

    def close(self) -> None:
        """Stop renewing, wait (up to ``drain_timeout_s``) for deferred effects,
        release the lease and report ``lease_released``. Deferred effects still
        waiting then are ``abandoned``: raises StoreUnavailable naming how many."""
        if self._finished.is_set():
            return
        self._closing = True
        keeper = self.keeper
        deadline = time.monotonic() + self.drain_timeout_s
        while self.deferred_pending and time.monotonic() < deadline:
            keeper.wake(self)
            time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
        with self._lock:
            abandoned, self._deferred = list(self._deferred), deque()
        keeper.forget(self)
        for item in abandoned:
            item.outcome._fail("abandoned", self.last_error)
        try:
            stamp: Stamp = self.store.release(self.key, self.epoch, self.worker_id)
        except StoreError as exc:
            self.release_error = exc
        else:
            self.reporter.lease_released(self.key, self.epoch, stamp=stamp)
        self._finished.set()
        if abandoned:
            raise StoreUnavailable(
                f"{len(abandoned)} deferred effect(s) of {self.key!r} at epoch {self.epoch}"
                f" were abandoned: the lease store did not answer within"
                f" {self.drain_timeout_s}s ({self.last_error})"
            )

    def __enter__(self) -> Owner:
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is None:
            self.close()
            return
        # Do not hide the exception that ended the block.
        with suppress(StoreError):
            self.close()

    def __repr__(self) -> str:
        state = f"lost: {self.lost_reason}" if self.lost.is_set() else "held"
        return f"Owner({self.key!r}, epoch={self.epoch}, {state})"


def acquire(
    reporter: EvidencePublisher, store: LeaseStore, key: str, ttl: float, *, wait_s: float
) -> tuple[Lease, float]:
    """Acquire, retrying LeaseHeld for up to ``wait_s`` seconds; returns the
    lease and the monotonic instant the successful request started (the
    worker's deadline counts from there, so it is never later than the store's)."""
    worker = reporter.worker_id
    give_up = time.monotonic() + wait_s
    while True:
        started = time.monotonic()
        try:
            return store.acquire(key, worker, ttl), started
        except LeaseHeld:
            left = give_up - time.monotonic()
            if left <= 0:
                raise
            time.sleep(min(max(ttl / 4, 0.05), 1.0, left))


class Keeper:
    """One reporter's background renewals: a renewer thread (the only one that
    calls the store for renewals and deferred effects, so one connection per
    reporter however many leases) and a watchdog thread that never touches
    the store and sets ``lost`` the moment a lease's local deadline passes,
    even while the renewer is stuck in a slow call."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Owner]] = []
        self._owners: set[Owner] = set()
        self._order = itertools.count()
        self._stop = False
        self._running: Owner | None = None
        # Daemon threads: a worker that forgets close() must still be able to exit.
        self._renewer = threading.Thread(
            target=self._renew_loop, name="fencewatch-renewer", daemon=True
        )
        self._watchdog = threading.Thread(
            target=self._watch_loop, name="fencewatch-watchdog", daemon=True
        )
        self._renewer.start()
        self._watchdog.start()

    def add(self, owner: Owner) -> None:
        with self._cond:
            self._owners.add(owner)
            self._push(owner, owner._renew_due)

    def wake(self, owner: Owner) -> None:
        """Run ``owner``'s turn now (a deferred effect arrived, or it is closing)."""
        with self._cond:
            if owner in self._owners:
                self._push(owner, time.monotonic())

    def forget(self, owner: Owner) -> None:
        """Stop keeping ``owner``; returns once the renewer is no longer inside a
        store call for it (bounded by the database's timeout), so the caller
        may close the database afterwards."""
        with self._cond:
            self._owners.discard(owner)
            self._cond.notify_all()
            if threading.current_thread() is not self._renewer:
                while self._running is owner:
                    self._cond.wait()

    def _push(self, owner: Owner, due: float) -> None:
        # One live schedule per owner: an earlier one replaces a later one;
        # heap entries that no longer match owner._scheduled are skipped.
        if owner._scheduled is not None and owner._scheduled <= due:
            return
        owner._scheduled = due
        heapq.heappush(self._heap, (due, next(self._order), owner))
        self._cond.notify_all()

    def _renew_loop(self) -> None:
        while True:
            with self._cond:
                while not self._stop:
                    now = time.monotonic()
                    if self._heap and self._heap[0][0] <= now:
                        break
                    self._cond.wait(self._heap[0][0] - now if self._heap else None)
                if self._stop:
                    return
                due, _, owner = heapq.heappop(self._heap)
                if owner not in self._owners or owner._scheduled != due:
                    continue
                owner._scheduled = None
                self._running = owner
            try:
                again = owner._tick()
            except Exception as exc:  # a bug must not stop every other lease
                owner.last_error = StoreError(f"keeper: {exc!r}")
                again = time.monotonic() + owner.retry_every
            with self._cond:
                self._running = None
                self._cond.notify_all()
                if again is not None and owner in self._owners:
                    self._push(owner, again)

    def _watch_loop(self) -> None:
        while True:
            with self._cond:
                if self._stop:
                    return
                owners = list(self._owners)
            now = time.monotonic()
            deadlines = []
            for owner in owners:
                owner._check_deadline()
                d = owner._deadline()
                if d is not None:
                    deadlines.append(d)
            wait = min(deadlines) - now if deadlines else 1.0
            with self._cond:
                if self._stop:
                    return
                self._cond.wait(max(0.01, min(wait, 1.0)))

    def owners(self) -> list[Owner]:
        """The owners still kept (not closed)."""
        with self._cond:
            return list(self._owners)

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        # The renewer may be inside a store call (bounded by the database's
        # timeout): wait for it, so the caller can close the database safely.
        self._renewer.join(_JOIN_S)
        self._watchdog.join(_JOIN_S)
