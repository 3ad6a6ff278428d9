"""Alert hooks: hand each finding revision to a command or a webhook.

Sender threads ("lanes", one per target: one connection each) take
deliveries from bounded in-flight queues. A finding always goes to the same
lane (by its id), in order, so a receiver sees a finding's revisions in
increasing order; different findings travel in parallel, so one slow
request does not hold up the rest. Each delivery is tried up to
``RetryPolicy.max_attempts`` times with exponential backoff.
A delivery that still fails, or fails permanently (a 4xx answer other than
408/429), is appended to the dead-letter file (JSON Lines, fsync'ed) and
counts as handled. Only then is its position acknowledged to the consumer,
so a killed follower resends at most what was in flight or uncommitted.

Webhook (:mod:`streams.findings.webhook`): ``POST`` of the finding JSON with
``Content-Type: application/json`` and ``Idempotency-Key:
<finding_id>/<revision>``; 2xx read whole within the attempt's deadline is
success; 5xx, 408, 429, connection errors and an answer not ended within the
deadline or the body bound are retried.

Command: ``/bin/sh -c CMD`` with the finding JSON on stdin and
``FENCEWATCH_FINDING_ID``, ``_REVISION``, ``_KIND``, ``_SEVERITY``,
``_WORKFLOW_KEY``, ``_PREVIOUS_REVISION`` (empty unless an update) and
``_IDEMPOTENCY_KEY`` in its environment; exit 0 is success, anything else
(or exceeding the timeout) is retried.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Protocol, cast

import orjson

from streams.errors import DeliveryFailed, FencewatchError
from streams.findings.consumer import Delivery
from streams.findings.webhook import WebhookTarget

__all__ = [
    "DeadLetterFile",
    "DeliveryFailed",
    "ExecTarget",
    "HookSender",
    "HookTarget",
    "RetryPolicy",
    "WebhookTarget",
    "WindowTarget",
]


class HookTarget(Protocol):
    """Where findings go. ``send`` returns on success, raises DeliveryFailed."""

    def send(self, delivery: Delivery) -> None: ...


class WindowTarget(HookTarget, Protocol):
    """A target that keeps up to ``concurrency`` first attempts in flight
    from the lane's own thread (:class:`WebhookTarget`): ``start`` one,
    collect those ``finished`` (each with its outcome and start time),
    ``abandon`` those in flight when stopped."""

    concurrency: int

    @property
    def in_flight(self) -> int: ...

    def start(self, delivery: Delivery) -> None: ...

    def finished(self, wait_s: float) -> list[tuple[Delivery, DeliveryFailed | None, float]]: ...

    def abandon(self) -> None: ...


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_attempts: int = 5
    base_delay_s: float = 0.2
    max_delay_s: float = 10.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        if self.base_delay_s < 0 or self.max_delay_s < self.base_delay_s:
            raise ValueError("need 0 <= base delay <= max delay")

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        return float(min(self.max_delay_s, self.base_delay_s * 2 ** (attempt - 1)))


class ExecTarget:
    """Run ``command`` through ``/bin/sh -c`` once per finding."""

    def __init__(self, command: str, *, timeout_s: float = 30.0) -> None:
        if not command.strip():
            raise ValueError("the --exec command is empty")
        self.command = command
        self.timeout_s = timeout_s

    @staticmethod
    def missing_program(command: str) -> str | None:
        """The program ``command`` runs first when the shell would not find it
        (``notify-send`` not installed), else None. Asked of ``/bin/sh`` itself
        (``command -v``), with this environment's PATH, so builtins and
        absolute paths count as the hook's shell counts them; a command that
        does not start with a plain word (a subshell, a redirection) is left
        to the shell. Checked at start: otherwise the first delivery only
        finds out after its retries, and says so in the dead letters."""
        import re
        import shlex

        try:
            words = shlex.split(command)
        except ValueError:  # unbalanced quotes: the shell's own error will say it
            return None
        while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0], re.S):
            words.pop(0)  # FOO=bar cmd: the program is cmd
        if not words or not re.fullmatch(r"[A-Za-z0-9_./+@:-]+", words[0]):
            return None
        found = subprocess.run(
            ["/bin/sh", "-c", 'command -v -- "$1" >/dev/null', "sh", words[0]],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        )
        return None if found.returncode == 0 else words[0]

    def send(self, delivery: Delivery) -> None:
        f = delivery.finding
        env = dict(os.environ)
        env.update(
            {
                "FENCEWATCH_FINDING_ID": f.finding_id,
                "FENCEWATCH_REVISION": str(f.revision),
                "FENCEWATCH_KIND": f.kind.value,
                "FENCEWATCH_SEVERITY": f.severity.value,
                "FENCEWATCH_WORKFLOW_KEY": f.workflow_key,
                "FENCEWATCH_PREVIOUS_REVISION": (
                    "" if delivery.previous_revision is None else str(delivery.previous_revision)
                ),
                "FENCEWATCH_IDEMPOTENCY_KEY": delivery.idempotency_key,
            }
        )
        try:
            done = subprocess.run(
                ["/bin/sh", "-c", self.command],
                input=delivery.body,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                timeout=self.timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise DeliveryFailed(
                f"command ran longer than {self.timeout_s:g} s", retriable=True
            ) from None
        except OSError as exc:
            raise DeliveryFailed(f"cannot run the command: {exc}", retriable=True) from None
        if done.returncode != 0:
            tail = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:]
            detail = f": {tail[0][:200]}" if tail else ""
            raise DeliveryFailed(f"command exited {done.returncode}{detail}", retriable=True)


class DeadLetterFile:
    """Appends undeliverable findings, one JSON object per line: ``finding``,
    ``idempotency_key``, ``attempts``, ``error``, ``failed_at``. Each line is
    fsync'ed before its position may be committed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh: IO[bytes] | None = None
        self._lock = threading.Lock()  # the lanes share one file

    def append(self, delivery: Delivery, *, attempts: int, error: str) -> None:
        with self._lock:
            self._append(delivery, attempts, error)

    def _append(self, delivery: Delivery, attempts: int, error: str) -> None:
        if self._fh is None:
            self._fh = open(self.path, "ab")  # noqa: SIM115 - closed in close()
        line = orjson.dumps(
            {
                "finding": delivery.finding.to_dict(),
                "idempotency_key": delivery.idempotency_key,
                "attempts": attempts,
                "error": error,
                "failed_at": datetime.now(UTC).isoformat(timespec="milliseconds"),
            }
        )
        self._fh.write(line + b"\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        with self._lock:
            if self._fh is not None:
                self._fh.close()
                self._fh = None


@dataclass(slots=True)
class HookStats:
    delivered: int = 0
    retries: int = 0
    dead_lettered: int = 0

    def __add__(self, other: HookStats) -> HookStats:
        return HookStats(
            self.delivered + other.delivered,
            self.retries + other.retries,
            self.dead_lettered + other.dead_lettered,
        )


class HookSender:
    """The sender threads and their bounded queues: one lane per target
    (``targets``: one, or several of the same kind, e.g. one
    :class:`WebhookTarget` per connection). ``done`` is called (on a sender
    thread, so it must be thread-safe, as :meth:`FindingsConsumer.ack` is)
    for each delivery once it was delivered or dead-lettered; ``done_all``,
    when given, instead of ``done`` for those finished together
    (:meth:`FindingsConsumer.ack_all`).

    The bound: each lane holds at most its share of ``max_in_flight``
    deliveries (queued or being tried); :meth:`submit_batch` blocks while a
    lane it has deliveries for is full, so a slow target holds up the reader,
    never grows memory. A batch is handed to a lane in one step (one lock and
    one wake-up, not one per finding), and a lane takes everything queued
    when it wakes.

    ``on_health`` hears of state changes, not of each finding: called with
    the failed attempt when deliveries start failing (the first failed
    attempt after a success, or at the start), and with None and the count of
    attempts that failed meanwhile when one succeeds again. Called on a
    sender thread, under a lock (one call at a time)."""

    def __init__(
        self,
        targets: HookTarget | Sequence[HookTarget],
        done: Callable[[Delivery], None],
        *,
        policy: RetryPolicy | None = None,
        dead_letters: DeadLetterFile,
        max_in_flight: int = 100,
        on_health: Callable[[DeliveryFailed | None, int], None] | None = None,
        done_all: Callable[[Sequence[Delivery]], None] | None = None,
    ) -> None:
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be >= 1")
        lanes = list(targets) if isinstance(targets, Sequence) else [targets]
        if not lanes:
            raise ValueError("at least one hook target is needed")
        self.policy = policy or RetryPolicy()
        self.dead_letters = dead_letters
        self._done = done
        #: ``done`` for several deliveries in one call (one hand-off to the
        #: consumer instead of one per finding), when the caller has one.
        self._done_all = done_all
        self._abort = threading.Event()
        self._stop_now = threading.Event()
        self._failure: BaseException | None = None
        self._on_health = on_health
        self._health_lock = threading.Lock()
        #: Deliveries are failing (read without the lock by the lanes: a
        #: success takes the lock only when it changes the state).
        self._failing = False
        self._failed_attempts = 0
        self._recovered_at = float("-inf")
        per_lane = max(1, max_in_flight // len(lanes))
        self._lanes = [_Lane(self, t, per_lane, i) for i, t in enumerate(lanes)]

    @property
    def stats(self) -> HookStats:
        total = HookStats()
        for lane in self._lanes:
            total = total + lane.stats
        return total

    @property
    def pending(self) -> int:
        """Deliveries queued or being tried (not yet delivered or dead-lettered)."""
        return sum(lane.count for lane in self._lanes)

    def submit(self, delivery: Delivery, *, stopping: Callable[[], bool] | None = None) -> bool:
        """:meth:`submit_batch` of one delivery."""
        return self.submit_batch([delivery], stopping=stopping)

    def submit_batch(
        self, deliveries: Sequence[Delivery], *, stopping: Callable[[], bool] | None = None
    ) -> bool:
        """Queue each delivery on its finding's lane, in order; blocks while
        a lane's share of ``max_in_flight`` is taken, unless ``stopping()``
        turns true (then returns False: the deliveries not queued yet are not
        acknowledged, so a restart sends them). Raises a sender's fatal error
        (a dead-letter file that cannot be written), if any."""
        self._raise_failure()
        lanes = self._lanes
        n = len(lanes)
        if n == 1:
            per_lane = [list(deliveries)]
        else:
            per_lane = [[] for _ in range(n)]
            for d in deliveries:
                per_lane[zlib.crc32(d.finding.finding_id.encode()) % n].append(d)
        for lane, items in zip(lanes, per_lane, strict=True):
            if items and not lane.put(items, stopping):
                return False
        return True

    def stop_now(self) -> None:
        """Give up the queued deliveries (they stay unacknowledged): a lane
        stops after its current attempt, and :meth:`close` returns at once
        without waiting for a lane still in an attempt. Safe from a signal
        handler (it takes no lock: a lane sees the flag within its idle wait)."""
        self._stop_now.set()
        self._abort.set()

    def _health(self, failed: DeliveryFailed | None, started: float = 0.0) -> None:
        """An attempt's outcome, from a lane: reported when it changes the
        state. A failed attempt that ``started`` (time.monotonic()) before the
        last recovery was seen does not turn the state back to failing: its
        answer was sent before that success (other requests in flight when a
        receiver comes back), and a line for it would flap."""
        with self._health_lock:
            if failed is not None:
                self._failed_attempts += 1
                if self._failing or started < self._recovered_at:
                    return
                self._failing = True
                count = self._failed_attempts
            else:
                if not self._failing:
                    return
                self._failing = False
                self._recovered_at = time.monotonic()
                count, self._failed_attempts = self._failed_attempts, 0
            if self._on_health is not None:
                self._on_health(failed, count)

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise FencewatchError(f"alert hook stopped: {self._failure}") from self._failure

    def close(self, *, drain_timeout_s: float = 30.0) -> None:
        """Let the queued deliveries finish (up to ``drain_timeout_s``), then
        stop and close the targets that have a ``close()`` (the webhook's
        connections); what is left is not acknowledged. Raises the fatal
        error, if any."""
        deadline = time.monotonic() + drain_timeout_s
        for lane in self._lanes:
            lane.finish()
        self._join(deadline)
        if not self._stop_now.is_set() and any(lane.thread.is_alive() for lane in self._lanes):
            self._abort.set()
            self._join(time.monotonic() + 5.0)
        for lane in self._lanes:
            if lane.thread.is_alive():  # stopped now, mid-attempt: its target is in use
                continue
            # A target with a connection (WebhookTarget) lets it go: a sender
            # closed in a long-running process must not hold a socket per lane.
            close = getattr(lane.target, "close", None)
            if callable(close):
                close()
        if self._stop_now.is_set():
            return  # a lane may still be appending a dead letter; the process ends
        self.dead_letters.close()
        self._raise_failure()

    def _join(self, deadline: float) -> None:
        # Waits in short slices, so that stop_now() (a second Ctrl-C) ends it.
        for lane in self._lanes:
            while lane.thread.is_alive() and not self._stop_now.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                lane.thread.join(min(0.1, remaining))


#: How long an idle lane waits before looking at the stop flags again
#: (stop_now() sets them from a signal handler, which must not take a lock).
_IDLE_CHECK_S = 0.2


class _Lane:
    """One sender thread, its target and its bounded queue."""

    def __init__(self, sender: HookSender, target: HookTarget, size: int, index: int) -> None:
        self.sender = sender
        self.target = target
        self.stats = HookStats()
        self.capacity = size
        #: Free room at which a submitter waiting for room is woken.
        self._wake_room = max(1, size // 4)
        #: Deliveries queued or being tried (at most ``capacity``).
        self.count = 0
        self._queue: deque[Delivery] = deque()
        self._finishing = False
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)
        self._room = threading.Condition(self._lock)
        #: A submitter waits for room (the lane wakes it as deliveries finish).
        self._waiting = False
        self.thread = threading.Thread(
            target=self._loop, name=f"fencewatch-hook-{index}", daemon=True
        )
        self.thread.start()

    def put(self, items: list[Delivery], stopping: Callable[[], bool] | None) -> bool:
        """Queue ``items`` in order, as many at a time as there is room for;
        False if ``stopping()`` turned true first (the rest not queued)."""
        sender = self.sender
        i, n = 0, len(items)
        with self._lock:
            while i < n:
                room = self.capacity - self.count
                if room > 0:
                    take = items[i : i + room]
                    self._queue.extend(take)
                    self.count += len(take)
                    i += len(take)
                    self._work.notify()
                    continue
                if (stopping is not None and stopping()) or sender._abort.is_set():
                    return False
                if sender._failure is not None:
                    break
                self._waiting = True
                self._room.wait(0.2)
                self._waiting = False
        sender._raise_failure()
        return True

    def finish(self) -> None:
        """End the thread once the queue is empty."""
        with self._lock:
            self._finishing = True
            self._work.notify()

    def _take(self) -> list[Delivery] | None:
        """Everything queued (waiting for some), or None when the lane ends."""
        sender = self.sender
        with self._lock:
            while not self._queue:
                if self._finishing or sender._abort.is_set():
                    return None
                self._work.wait(_IDLE_CHECK_S)
            batch = list(self._queue)
            self._queue.clear()
            return batch

    def _loop(self) -> None:
        sender = self.sender
        try:
            target = self.target
            if getattr(target, "concurrency", 1) > 1 and callable(getattr(target, "start", None)):
                self._windowed(cast("WindowTarget", target))
                return
            while (batch := self._take()) is not None:
                if not all(self._one(item) for item in batch):
                    return  # aborted: the rest stays unacknowledged (a restart sends it)
        except BaseException as exc:  # reported to the polling thread by submit()/close()
            sender._failure = exc

    def _take_now(self) -> list[Delivery]:
        """Everything queued, without waiting."""
        with self._lock:
            batch = list(self._queue)
            self._queue.clear()
            return batch

    def _windowed(self, target: WindowTarget) -> None:
        """Deliver with up to ``target.concurrency`` first attempts in flight,
        started in queue order as earlier ones finish. Two rules keep each
        finding's revisions in order at the receiver: a finding with a
        revision in flight starts no other one until it finished, and once an
        attempt failed nothing new starts until the window is empty and the
        failures are retried (or dead-lettered) one by one, in the order they
        failed. Deliveries finished together are acknowledged together. On
        abort the attempts in flight are abandoned, unacknowledged."""
        sender = self.sender
        cap = target.concurrency
        start = target.start
        pending: deque[Delivery] = deque()
        flying: set[str] = set()
        failed: list[tuple[Delivery, DeliveryFailed, float]] = []
        try:
            while not sender._abort.is_set():
                # The room counted once per pass, not asked of the target
                # per finding.
                room = cap - target.in_flight if pending and not failed else 0
                while room > 0 and pending:
                    d = pending[0]
                    fid = d.finding.finding_id
                    if fid in flying:
                        break
                    pending.popleft()
                    try:
                        start(d)
                    except DeliveryFailed as exc:
                        failed.append((d, exc, time.monotonic()))
                        break
                    flying.add(fid)
                    room -= 1
                if not target.in_flight:
                    if failed:
                        # The window is empty: retry the failures, then go on.
                        for d, why, started in failed:
                            if not self._deliver(d, why, started):
                                return
                            self._finished(d)
                        failed = []
                    elif not pending:
                        batch = self._take()
                        if batch is None:
                            return
                        pending.extend(batch)
                    continue
                if not pending and not failed:
                    more = self._take_now()
                    if more:
                        pending.extend(more)
                        continue
                delivered: list[Delivery] = []
                for d, outcome, started in target.finished(_IDLE_CHECK_S):
                    flying.discard(d.finding.finding_id)
                    if outcome is None:
                        delivered.append(d)
                    else:
                        failed.append((d, outcome, started))
                if delivered:
                    if sender._failing:
                        sender._health(None)
                    self.stats.delivered += len(delivered)
                    self._finished(*delivered)
        finally:
            if target.in_flight:  # aborted (or failed): none of them is acknowledged
                target.abandon()

    def _one(self, delivery: Delivery) -> bool:
        if self.sender._abort.is_set() or not self._deliver(delivery):
            return False
        self._finished(delivery)
        return True

    def _finished(self, *deliveries: Delivery) -> None:
        """Delivered or dead-lettered: acknowledged, and their room freed.
        A submitter waiting for room is woken once a quarter of the lane is
        free (or the lane is empty), not per delivery: a wake-up per finding
        was a thread switch per finding while the reader drains a backlog
        (its wait also ends every 0.2 s, so a late wake-up cannot stall it)."""
        sender = self.sender
        if sender._done_all is not None:
            if deliveries:
                sender._done_all(deliveries)
        else:
            done = sender._done
            for d in deliveries:
                done(d)
        if deliveries:
            with self._lock:
                self.count -= len(deliveries)
                if self._waiting and (
                    self.count == 0 or self.capacity - self.count >= self._wake_room
                ):
                    self._room.notify()

    def _deliver(
        self, delivery: Delivery, failed: DeliveryFailed | None = None, started: float = 0.0
    ) -> bool:
        """True once delivered or dead-lettered; False when aborted (left
        unacknowledged, so it is sent again after a restart). ``failed``:
        the first attempt was made already (in a group, ``started`` then) and
        failed so."""
        sender = self.sender
        policy = sender.policy
        attempt = 0
        while True:
            attempt += 1
            try:
                if failed is not None:
                    exc, failed = failed, None
                    raise exc
                started = time.monotonic()
                self.target.send(delivery)
                self.stats.delivered += 1
                if sender._failing:
                    sender._health(None)
                return True
            except DeliveryFailed as exc:
                sender._health(exc, started)
                if not exc.retriable or attempt >= policy.max_attempts:
                    sender.dead_letters.append(delivery, attempts=attempt, error=str(exc))
                    self.stats.dead_lettered += 1
                    return True
                self.stats.retries += 1
                if sender._abort.wait(policy.delay(attempt)):
                    return False
