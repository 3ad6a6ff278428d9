"""Celery: a task base class that owns the task's workflow key, reports
evidence and fences effects.

The classic duplicate: with ``acks_late`` on a Redis (or SQS) broker, a
message not acknowledged within the broker's ``visibility_timeout`` is
delivered again, to another worker, while the first one may still be
running it. :class:`FencedTask` gives every run of a task an owner epoch:

* the workflow key is ``celery/<task name>/<task id>`` (a redelivered message
  keeps its task id; override :meth:`FencedTask.workflow_key` to own a
  business key instead, e.g. ``export/<day>``);
* the lease is taken through ``reporter.own`` when the task starts, for
  ``fence_ttl`` seconds (default: the broker's visibility timeout, the
  moment the broker itself hands the work to someone else) and renewed in
  the background while the task runs; a live, slow task therefore keeps its
  lease, and a duplicate not marked redelivered (below) waits
  ``fence_wait_s`` for it and then retries later (``self.retry``) instead of
  running twice;
* a **redelivered** message (kombu marks it: ``delivery_info["redelivered"]``;
  Redis sets it when it restores a message not acknowledged within the
  visibility timeout, as does a worker's shutdown that restores its unacked
  messages) is the broker's own takeover: it has already handed the work to
  this worker, so the delivery takes the key at the next epoch even from a
  live holder (``reporter.own(..., take_over=True)``; its ``lease_acquired``
  says ``take_over: true``). A first delivery still running is thereby a
  stale owner, with no change to the task: its next renewal or stamp says it
  was displaced and its effects are refused. Set ``fence_redelivery =
  "wait"`` to treat a redelivery like any other copy (wait for a live holder,
  then retry);
* a worker that stalls past its lease (GC pause, frozen VM, starved CPU, a
  long call that never releases the GIL so even the keeper cannot renew)
  loses it to the redelivered copy; its effects, applied through
  ``self.owned.effect(sink, ...)`` (the owner's ``effect``), are refused —
  by the owner when it already knows its lease is lost, else by the
  destination's compare-and-set — reported (``effect_rejected``), and the
  task fails with :class:`~streams.errors.StaleOwner`;
* when the lease store does not answer, the effect's risk decides
  (``fence_risk`` on the task, default ``irreversible``; ``risk=`` per
  effect): an irreversible effect fails the task with
  :class:`~streams.errors.EffectRefused` (nothing attempted: add it to
  ``autoretry_for`` to run the task again later), a deferrable one is queued
  and committed when the store is back, before the task returns (up to
  ``fence_drain_s``), only if the epoch is still current.

Evidence is flushed to Kafka before the task returns, so the broker message
is acknowledged only after its evidence is. Configure the reporter once per
app with :func:`configure` (it is created lazily in each worker process,
after any fork, and closed at worker shutdown). Needs the ``celery`` extra.
"""

from __future__ import annotations

import contextvars
import os
import socket
import threading
from collections.abc import Callable
from contextlib import suppress
from typing import Any, Literal

from streams.errors import FencewatchError, LeaseHeld
from streams.extras import needs_extra
from streams.integrations.runs import DEFAULT_RISK, OwnedRun, check_risk
from streams.sdk.owner import Risk
from streams.sdk.reporter import OwnershipReporter

with needs_extra("celery"):
    from celery import Celery, Task, signals

__all__ = [
    "FencedTask",
    "RedeliveryPolicy",
    "ReporterFactory",
    "configure",
    "is_redelivered",
    "reporter_for",
    "visibility_timeout",
]

#: Builds the worker process's reporter (with its lease store) for a worker id.
ReporterFactory = Callable[[str], OwnershipReporter]

#: What a redelivered message does: take the key from a live holder, or wait.
RedeliveryPolicy = Literal["take_over", "wait"]

#: Used when neither ``fence_ttl`` nor a broker visibility timeout is set.
DEFAULT_TTL_S = 60.0
_RUN: contextvars.ContextVar[OwnedRun | None] = contextvars.ContextVar(
    "fencewatch_celery_run", default=None
)
_lock = threading.Lock()
# (app id, pid) -> reporter: one per app per process, rebuilt after a fork.
_reporters: dict[tuple[int, int], OwnershipReporter] = {}
_factories: dict[int, ReporterFactory] = {}


def configure(app: Celery, factory: ReporterFactory) -> None:
    """Tell ``app``'s fenced tasks how to build their reporter (``factory(worker_id)``;
    the worker id is the Celery node name, e.g. ``alpha@host``)."""
    _factories[id(app)] = factory
    # Strong references: the handler is a module function, never collected.
    signals.worker_process_shutdown.connect(_close_reporters, weak=False)
    signals.worker_shutdown.connect(_close_reporters, weak=False)


def reporter_for(app: Celery, worker_id: str) -> OwnershipReporter:
    """This process's reporter for ``app`` (created on first use)."""
    key = (id(app), os.getpid())
    with _lock:
        reporter = _reporters.get(key)
        if reporter is None:
            factory = _factories.get(id(app))
            if factory is None:
                raise RuntimeError(
                    "fenced Celery tasks need streams.integrations.celery.configure(app, factory)"
                )
            reporter = _reporters[key] = factory(worker_id)
        return reporter


def _close_reporters(**_: Any) -> None:
    """Flush and close this process's reporters when the worker stops."""
    pid = os.getpid()
    with _lock:
        mine = [k for k in _reporters if k[1] == pid]
        closing = [_reporters.pop(k) for k in mine]
    for reporter in closing:
        reporter.close()


def visibility_timeout(app: Celery) -> float | None:
    """The broker's redelivery timeout, when the transport has one."""
    options = app.conf.broker_transport_options or {}
    value = options.get("visibility_timeout")
    return float(value) if value is not None else None


def is_redelivered(request: Any) -> bool:
    """Whether the broker says this delivery is a redelivery: kombu's
    ``delivery_info["redelivered"]`` (AMQP's flag; the Redis transport sets it,
    and the same in the message headers, when it restores an unacknowledged
    message), falling back to the header."""
    info = getattr(request, "delivery_info", None) or {}
    if info.get("redelivered"):
        return True
    headers = getattr(request, "headers", None) or {}
    return bool(headers.get("redelivered"))


class FencedTask(Task):  # type: ignore[misc]  # celery ships no type hints
    """Base class of tasks that run under an owner epoch (``base=FencedTask``).

    In the task body, ``self.owned`` is the :class:`OwnedRun`: its
    ``checkpoint(...)`` reports progress, ``effect(sink, effect_key, payload)``
    applies through the owner and the fence, ``lost`` is set the moment the
    lease is lost and ``check()`` raises StaleOwner then (for long loops).
    Use with ``bind=True`` and ``acks_late=True``; the ``fence_*`` attributes
    can be given to ``@app.task(...)`` like any task option.
    """

    #: Lease TTL in seconds; None: the broker's visibility timeout (else 60).
    fence_ttl: float | None = None
    #: How long a delivery waits for a lease another worker holds; None: the TTL.
    fence_wait_s: float | None = None
    #: Seconds before a delivery that found the lease held runs again.
    fence_retry_s: float | None = None
    fence_key_prefix: str = "celery/"
    #: Wait for the evidence to be acknowledged by Kafka before returning.
    fence_flush: bool = True
    #: Default risk of the task's effects: "irreversible" or "deferrable".
    fence_risk: Risk = DEFAULT_RISK
    #: How long the end of the task waits for deferred effects; None: the TTL.
    fence_drain_s: float | None = None
    #: A redelivered message takes the key over (a running first delivery
    #: becomes stale) or, with "wait", waits like any other copy.
    fence_redelivery: RedeliveryPolicy = "take_over"

    def workflow_key(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        """The unit that must have one effect owner; default: this task run."""
        return f"{self.fence_key_prefix}{self.name}/{self.request.id}"

    @property
    def owned(self) -> OwnedRun:
        run = _RUN.get()
        if run is None:
            raise RuntimeError("self.owned is only available while a FencedTask runs")
        return run

    def _ttl(self) -> float:
        if self.fence_ttl is not None:
            return float(self.fence_ttl)
        return visibility_timeout(self.app) or DEFAULT_TTL_S

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        worker = self.request.hostname or f"{socket.gethostname()}-{os.getpid()}"
        reporter = reporter_for(self.app, worker)
        ttl = self._ttl()
        wait = ttl if self.fence_wait_s is None else self.fence_wait_s
        key = self.workflow_key(args, kwargs)
        risk = check_risk(self.fence_risk)
        drain = ttl if self.fence_drain_s is None else self.fence_drain_s
        if self.fence_redelivery not in ("take_over", "wait"):
            raise ValueError(
                f'fence_redelivery must be "take_over" or "wait", got {self.fence_redelivery!r}'
            )
        # The broker already gave the work to this delivery: that is the takeover.
        take_over = self.fence_redelivery == "take_over" and is_redelivered(self.request)
        try:
            owner = reporter.own(
                key, ttl=ttl, wait_s=wait, drain_timeout_s=drain, take_over=take_over
            )
        except LeaseHeld as exc:
            # Another delivery of this work is alive and renewing its lease:
            # do not run it twice now; come back (if that run dies, this one
            # takes over then).
            countdown = ttl if self.fence_retry_s is None else self.fence_retry_s
            raise self.retry(exc=exc, countdown=countdown) from None
        try:
            with owner:
                run = OwnedRun(owner, risk=risk)
                token = _RUN.set(run)
                try:
                    result = super().__call__(*args, **kwargs)
                finally:
                    _RUN.reset(token)
            # Leaving the block drained the deferred effects (or raised).
            run.settle()
        except BaseException:
            # The task's own exception (e.g. StaleOwner) is the one to keep.
            if self.fence_flush:
                with suppress(FencewatchError):
                    reporter.flush()
            raise
        if self.fence_flush:
            reporter.flush()  # a delivery failure fails the task: evidence first
        return result
