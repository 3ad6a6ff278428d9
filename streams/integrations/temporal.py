"""Temporal: an activity interceptor that makes each attempt of an activity
an owner epoch, reports its evidence and fences its effects.

The duplicate Temporal users meet: an activity attempt outlives its
start-to-close (or heartbeat) timeout — a tool call that hangs, a frozen
VM — and Temporal, as designed, retries it, possibly on another worker. The
server refuses the old attempt's *completion*, but nothing stops its *side
effects*: it keeps running orphaned and acts after the retry already did.

:class:`FencedActivities` (``Worker(..., interceptors=[FencedActivities(reporter)])``)
turns what Temporal already knows into fencing:

* **workflow key**: the activity execution, ``temporal/<namespace>/<workflow
  id>/<run id>/<activity id>`` (:func:`activity_key`; a standalone activity:
  ``temporal/<namespace>/<activity id>/<activity run id>``). The attempt
  number only rises within one execution, so the key must not span two (a
  reset or a new run starts its activities at attempt 1 again);
* **owner epoch**: ``activity.info().attempt``. It is a valid epoch because
  the Temporal server allocates it: it increments it for every retry of the
  execution, never reuses one, and starts attempt N+1 only once it has given
  up on attempt N (timed out or failed). So the highest attempt seen is the
  current owner, as Temporal itself holds when it rejects the completion of
  an older attempt. When the attempt starts, the interceptor records that
  epoch in the lease store (:func:`~streams.fences.lease_claim.claim_epoch`,
  which publishes ``lease_acquired``), so the sinks and the outbox refuse
  every lower attempt from then on;
* **evidence**: ``lease_acquired`` when the attempt starts, ``progress`` on
  its heartbeats (at most one per ``progress_interval_s``; reported on a
  background thread, never on the worker's event loop), ``lease_released``
  when it ends, and each effect's ``effect_attempted`` and receipt;
* **effects**: inside the activity, :func:`owned` is the attempt's
  :class:`~streams.integrations.runs.OwnedRun`:
  ``owned().effect(sink, effect_key, payload)`` goes through the owner and
  the destination's compare-and-set, so an attempt that Temporal has already
  replaced by a newer one is refused (``effect_rejected``) and gets
  :class:`~streams.errors.StaleOwner`; the detector then reports the stale
  attempt (``stale_attempt``, and ``stale_activity`` for its heartbeats).

An attempt whose epoch is not higher than one already claimed for its key
(an activity reset by ``temporal activity reset``, which restarts the count)
is refused before the activity body runs: it fails with StaleOwner and
Temporal retries it with the next attempt number. Needs the ``temporal``
extra; see docs/integrations.md ("Temporal").
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable, Collection
from contextlib import suppress
from datetime import timedelta
from typing import Any

from streams.errors import FencewatchError, LeaseLost, StaleOwner
from streams.extras import needs_extra
from streams.fences.lease import check_lease_args
from streams.fences.lease_claim import claim_epoch
from streams.fences.lease_sql import SqlLeaseStore
from streams.integrations.runs import DEFAULT_RISK, OwnedRun, check_risk
from streams.sdk.owner import Owner, Risk
from streams.sdk.reporter import OwnershipReporter

with needs_extra("temporal"):
    from temporalio import activity
    from temporalio.worker import (
        ActivityInboundInterceptor,
        ActivityOutboundInterceptor,
        ExecuteActivityInput,
        Interceptor,
    )

__all__ = ["DEFAULT_TTL_S", "FencedActivities", "KeyOf", "activity_key", "owned"]

#: The lease TTL when the activity has neither a heartbeat nor a
#: start-to-close timeout (the worker's own deadline; Temporal decides the rest).
DEFAULT_TTL_S = 60.0
#: Builds the workflow key of an activity execution from its info.
KeyOf = Callable[[activity.Info], str]
_LOG = logging.getLogger("fencewatch.temporal")


def activity_key(info: activity.Info) -> str:
    """The default workflow key: one activity execution (see the module docs)."""
    namespace = info.workflow_namespace or info.namespace
    if info.workflow_id:
        return f"temporal/{namespace}/{info.workflow_id}/{info.workflow_run_id}/{info.activity_id}"
    return f"temporal/{namespace}/{info.activity_id}/{info.activity_run_id}"


class _Attempt:
    """One running attempt: its run, and its heartbeats' progress reports
    (at most one in flight; the ones in between are skipped, not queued)."""

    __slots__ = ("fence", "heartbeats", "in_flight", "last_report", "lock", "run")

    def __init__(self, run: OwnedRun, fence: FencedActivities) -> None:
        self.run = run
        self.fence = fence
        self.lock = threading.Lock()
        self.heartbeats = 0
        self.last_report: float | None = None
        self.in_flight: concurrent.futures.Future[None] | None = None


# task token -> the attempt it runs; one entry per running fenced activity
# (so bounded by the workers' max_concurrent_activities), removed when it ends.
_attempts: dict[bytes, _Attempt] = {}
_attempts_lock = threading.Lock()
# Progress reports run here, off the worker's event loop (Temporal calls a
# sync activity's heartbeat on the loop); one thread: reports are cheap and
# each attempt has at most one in flight.
_reports = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="fencewatch-temporal")


def owned() -> OwnedRun:
    """The current activity attempt's :class:`OwnedRun` (its epoch is the
    attempt). Only inside an activity run by a worker with
    :class:`FencedActivities` (a sync activity on a thread pool, or an async
    one); RuntimeError elsewhere."""
    attempt = _attempts.get(activity.info().task_token)
    if attempt is None:
        raise RuntimeError(
            "owned() is only available inside an activity run with the FencedActivities"
            " interceptor (on a thread-pool or async activity)"
        )
    return attempt.run


def _seconds(value: timedelta | None) -> float | None:
    return value.total_seconds() if value is not None and value > timedelta(0) else None


class FencedActivities(Interceptor):
    """The worker interceptor: every activity attempt (or those whose type
    is in ``activities``) runs as the owner of its workflow key at the epoch
    ``attempt``.

    ``reporter`` is the worker process's :class:`OwnershipReporter`; its lease
    store must be a :class:`~streams.fences.lease_sql.SqlLeaseStore` (the
    database the fenced sinks consult). ``ttl`` is the lease's TTL (default:
    the activity's heartbeat timeout, else its start-to-close timeout, else
    :data:`DEFAULT_TTL_S`): renewed in the background while the worker runs,
    lost when the worker itself stalls longer (a frozen process). ``risk`` is
    the default risk of the activities' effects; ``key`` builds the workflow
    key (:func:`activity_key`); ``progress_interval_s`` spaces the progress
    reports of one attempt's heartbeats (0: every heartbeat).
    """

    def __init__(
        self,
        reporter: OwnershipReporter,
        *,
        ttl: float | None = None,
        risk: Risk = DEFAULT_RISK,
        key: KeyOf = activity_key,
        activities: Collection[str] | None = None,
        progress_interval_s: float = 1.0,
    ) -> None:
        if not isinstance(reporter, OwnershipReporter):
            raise TypeError(f"reporter must be an OwnershipReporter, got {type(reporter).__name__}")
        if not isinstance(reporter.leases, SqlLeaseStore):
            raise ValueError(
                "FencedActivities needs a reporter with a SqlLeaseStore"
                " (OwnershipReporter(..., leases=SqlLeaseStore(db))): the attempts' epochs"
                " are claimed in its lease table"
            )
        if ttl is not None:
            check_lease_args("-", ttl=ttl)
        if isinstance(progress_interval_s, bool) or not (
            isinstance(progress_interval_s, int | float) and 0 <= progress_interval_s <= 3600
        ):
            raise ValueError(
                f"progress_interval_s must be seconds in [0, 3600], got {progress_interval_s!r}"
            )
        self.reporter = reporter
        self.store: SqlLeaseStore = reporter.leases
        self.ttl = ttl
        self.risk = check_risk(risk)
        self.key = key
        self.activities = frozenset(activities) if activities is not None else None
        self.progress_interval_s = float(progress_interval_s)

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _Inbound(next, self)

    def ttl_for(self, info: activity.Info) -> float:
        """The lease TTL of one attempt (see the class docs)."""
        if self.ttl is not None:
            return self.ttl
        return (
            _seconds(info.heartbeat_timeout)
            or _seconds(info.start_to_close_timeout)
            or DEFAULT_TTL_S
        )

    def start(self, info: activity.Info) -> Owner:
        """Claim the attempt's epoch and keep it (blocking: the lease store
        and Kafka). Raises StaleOwner when a higher attempt claimed the key
        first."""
        key = self.key(info)
        check_lease_args(key)
        ttl = self.ttl_for(info)
        reporter = self.reporter
        started = time.monotonic()
        try:
            lease = claim_epoch(self.store, key, info.attempt, reporter.worker_id, ttl)
        except LeaseLost as exc:
            raise StaleOwner(
                key, info.attempt, exc.current_epoch, f"attempt {info.attempt}: {exc.reason}"
            ) from None
        try:
            if self.store.publisher is not reporter:
                reporter.lease_acquired(
                    lease,
                    attrs={
                        "ttl_s": ttl,
                        "temporal_attempt": info.attempt,
                        "activity_type": info.activity_type,
                    },
                )
            return reporter.adopt(lease, ttl=ttl, started=started)
        except BaseException:
            # The claim stands (a retry's higher attempt displaces it); let go now.
            with suppress(FencewatchError):
                self.store.release(key, lease.epoch, lease.worker_id)
            raise

    def finish(self, attempt: _Attempt, *, failed: bool) -> None:
        """After the activity body: wait for its last progress report, close
        the owner (drain deferred effects, release, ``lease_released``), flush
        the evidence. Raises what ``settle`` raises (a deferred effect refused
        as stale) or the flush's BrokerError, unless the body already failed."""
        with attempt.lock:
            pending = attempt.in_flight
        if pending is not None:
            with suppress(Exception):  # logged where it happened
                pending.result()
        run = attempt.run
        if failed:
            with suppress(FencewatchError):
                run.owner.close()
            with suppress(FencewatchError):
                self.reporter.flush()
            return
        try:
            run.owner.close()
            run.settle()
        finally:
            # Evidence before Temporal hears of the result: a flush failure
            # fails the attempt, and Temporal retries it (at a higher epoch).
            self.reporter.flush()

    def heartbeat(self, attempt: _Attempt) -> None:
        """Report ``progress`` for a heartbeat, if the interval allows and no
        report of this attempt is in flight; never blocks the caller."""
        now = time.monotonic()
        with attempt.lock:
            attempt.heartbeats += 1
            due = (
                attempt.last_report is None or now - attempt.last_report >= self.progress_interval_s
            )
            if not due or attempt.in_flight is not None:
                return
            attempt.last_report = now
            count = attempt.heartbeats
            attempt.in_flight = _reports.submit(self._report, attempt, count)

    def _report(self, attempt: _Attempt, count: int) -> None:
        run = attempt.run
        try:
            # False (a higher attempt claimed the key) marks the owner lost.
            run.checkpoint(heartbeat=count, temporal_attempt=run.epoch)
        except FencewatchError as exc:
            # Evidence lost, not the activity: its effects are still fenced.
            _LOG.warning("fencewatch: progress of %r at epoch %d: %s", run.key, run.epoch, exc)
        finally:
            with attempt.lock:
                attempt.in_flight = None


class _Inbound(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, fence: FencedActivities) -> None:
        super().__init__(next)
        self.fence = fence

    def init(self, outbound: ActivityOutboundInterceptor) -> None:
        super().init(_Outbound(outbound))

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        info = activity.info()
        fence = self.fence
        if fence.activities is not None and info.activity_type not in fence.activities:
            return await super().execute_activity(input)
        # The lease store and Kafka block: never on the worker's event loop.
        owner = await asyncio.to_thread(fence.start, info)
        attempt = _Attempt(OwnedRun(owner, risk=fence.risk), fence)
        token = info.task_token
        with _attempts_lock:
            _attempts[token] = attempt
        try:
            result = await super().execute_activity(input)
        except BaseException:
            with _attempts_lock:
                _attempts.pop(token, None)
            await asyncio.shield(asyncio.to_thread(fence.finish, attempt, failed=True))
            raise
        with _attempts_lock:
            _attempts.pop(token, None)
        await asyncio.to_thread(fence.finish, attempt, failed=False)
        return result


class _Outbound(ActivityOutboundInterceptor):
    def heartbeat(self, *details: Any) -> None:
        attempt = _attempts.get(self.info().task_token)
        if attempt is not None:
            attempt.fence.heartbeat(attempt)
        super().heartbeat(*details)
