"""``fencewatch run`` supervises its engine: the engine runs in a child
process, and a native crash or a stall of it is one log line and a restart,
never a silent death.

Why. A stale-owner detector that dies silently is worse than none: operators
believe they are watched. On a three-broker cluster a librdkafka crash
(issue 5040, :mod:`streams.kafka.coordinator`) killed every rdkafka worker at
once without a line; the next native crash may be in a path no one has met
yet. So the process the operator started (the supervisor) only watches:

- the engine's process reports its ``/health`` document once a second on a
  pipe (:class:`Reporter`); faulthandler writes every thread's Python stack to
  the log when it dies of a signal (SIGSEGV, SIGABRT...) or when the
  supervisor asks (SIGUSR1) before killing a stalled engine;
- an engine that dies of a signal, that reports itself stalled
  (:mod:`streams.live.liveness`: partitions with lag and no commit) for
  :attr:`RestartPolicy.restart_after` seconds, whose loop has not turned for
  as long, or that stops reporting for as long, is logged in one line (the
  signal or the stall, the partitions it held) and restarted after a backoff;
  past :attr:`RestartPolicy.max_restarts` restarts within
  :attr:`RestartPolicy.window_s` seconds the supervisor gives up and exits 1;
- an engine that exits on its own (a stop, a configuration refused, a broker
  that cannot be reached at its first start) ends the supervisor with the
  same status: it has said why in its own line;
- SIGTERM/SIGINT are passed on to the engine, which stops as it always did
  (bounded: :data:`~streams.live.stopping.STOP_BOUND_S`);
- the engine dies with the supervisor, even one killed with -9
  (``PR_SET_PDEATHSIG``): no orphan worker keeps the partitions' transactional
  id alive.

Restarts are counted in the engine's ``fencewatch_engine_restarts_total``.
Exactly-once holds across a restart: the restarted engine has the same
transactional id, so its ``init_transactions`` aborts what the dead one left
open, and it resumes from the committed offsets.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import IO, Any

from streams.live.liveness import FREEZE_GAP_S
from streams.live.stopping import STOP_BOUND_S

__all__ = [
    "CHILD_ENV",
    "REPORT_FD_ENV",
    "RESTARTS_ENV",
    "Reporter",
    "RestartPolicy",
    "engine_restarts",
    "supervise",
]

log = logging.getLogger(__name__)

#: Set in the engine's process: it is the supervised child (runs the engine).
CHILD_ENV = "FENCEWATCH_ENGINE_CHILD"
#: The pipe the engine reports on.
REPORT_FD_ENV = "FENCEWATCH_SUPERVISOR_FD"
#: Restarts before this engine process (its metric; a restarted engine waits
#: for the brokers instead of exiting when they cannot be reached).
RESTARTS_ENV = "FENCEWATCH_ENGINE_RESTARTS"
#: The engine's look at its own health (reported when it changed, else each second).
_LOOK_S = 0.2
#: The supervisor's poll of its child.
_POLL_S = 0.5
#: After SIGUSR1 (stacks to the log), before SIGKILL.
_DUMP_WAIT_S = 1.0


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    """When the supervisor restarts the engine, and when it gives up."""

    #: Seconds of stall (or of a loop that does not turn, or of silence)
    #: before a restart: 3 x ``--stall-timeout``, so /health says ``stalled``
    #: for a while first and a few stall restarts never exhaust the budget.
    restart_after: float = 180.0
    #: More restarts than this within ``window_s``: give up, exit 1.
    max_restarts: int = 5
    window_s: float = 600.0
    #: Wait before the n-th restart of a row (the last repeats).
    backoff_s: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0, 16.0, 30.0)


def engine_restarts(env: Mapping[str, str]) -> int:
    """Restarts before this engine process (0 when not supervised)."""
    try:
        return max(0, int(env.get(RESTARTS_ENV, "0")))
    except ValueError:
        return 0


# -- the engine's side --------------------------------------------------------


class Reporter:
    """The engine's reports to its supervisor: ``health()`` as one JSON line a
    second, from a thread of its own (so a restore or a blocked loop still
    reports; the document's ``loop_age`` says whether the loop turns)."""

    def __init__(self, fd: int) -> None:
        os.set_blocking(fd, False)  # a frozen supervisor must not block us
        self._out = os.fdopen(fd, "wb", buffering=0)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Reporter | None:
        raw = env.get(REPORT_FD_ENV)
        if not raw:
            return None
        try:
            return cls(int(raw))
        except (ValueError, OSError):
            log.warning(
                "%s=%r is not an open pipe: not reporting to a supervisor", REPORT_FD_ENV, raw
            )
            return None

    def start(self, health: Callable[[], Mapping[str, Any]]) -> None:
        threading.Thread(
            target=self._run, args=(health,), name="fencewatch-report", daemon=True
        ).start()

    def _run(self, health: Callable[[], Mapping[str, Any]]) -> None:
        # Every second, and at once when the partitions held change: the
        # supervisor's line names what a dead engine held.
        sent: tuple[Any, Any] | None = None
        sent_at = 0.0
        while True:
            try:
                doc = dict(health())
            except Exception:  # a look at state in flux; the next one counts
                log.debug("health for the supervisor failed", exc_info=True)
                doc = None
            now = time.monotonic()
            held = None if doc is None else (doc.get("partitions"), doc.get("recovering"))
            if doc is not None and (held != sent or now - sent_at >= 1.0):
                try:
                    self._out.write(json.dumps(doc, default=str).encode() + b"\n")
                    sent, sent_at = held, now
                except BlockingIOError:
                    pass  # the supervisor is not reading (frozen): drop this one
                except OSError:
                    return  # the supervisor is gone (and we die with it)
            time.sleep(_LOOK_S)


# -- the supervisor's side ---------------------------------------------------


@dataclass(slots=True)
class _Watch:
    """What the supervisor knows of the running engine."""

    proc: subprocess.Popen[bytes]
    last: dict[str, Any] | None = None
    heard_at: float = 0.0


class _Signals:
    """SIGTERM/SIGINT while supervising: passed on to the engine."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self.child: subprocess.Popen[bytes] | None = None
        self.first_at = 0.0

    def handler(self, signum: int, _frame: FrameType | None) -> None:
        if not self.received:
            self.first_at = time.monotonic()
        self.received.append(signum)
        child = self.child
        if child is not None and child.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(signum)


def supervise(
    argv: Sequence[str],
    *,
    engine: str,
    policy: RestartPolicy,
    env: Mapping[str, str] | None = None,
) -> int:
    """Run ``argv`` (the engine: ``fencewatch run`` itself, marked as the
    child) until it exits on its own or is stopped; restart it on a crash or
    a stall as :class:`RestartPolicy` says. The exit status."""
    signals = _Signals()
    previous = {sig: signal.signal(sig, signals.handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    restarts: deque[float] = deque()
    total = in_a_row = 0
    try:
        while True:
            started = time.monotonic()
            watch = _start(argv, env or os.environ, total, signals)
            why = _watch(watch, policy, signals)
            code = watch.proc.returncode
            if signals.received:
                return code if code >= 0 else 128 - code
            if why is None:
                return code  # it exited on its own and said why
            now = time.monotonic()
            restarts.append(now)
            while restarts and restarts[0] < now - policy.window_s:
                restarts.popleft()
            held = _held(watch.last)
            if len(restarts) > policy.max_restarts:
                log.error(
                    "the %s engine (pid %d) %s, holding %s: %d restarts within %.0f s, giving "
                    "up (exit 1)",
                    engine,
                    watch.proc.pid,
                    why,
                    held,
                    len(restarts) - 1,
                    policy.window_s,
                )
                return 1
            if now - started > policy.window_s:
                in_a_row = 0  # it had run well for a while: back to the shortest wait
            wait = policy.backoff_s[min(in_a_row, len(policy.backoff_s) - 1)]
            in_a_row += 1
            total += 1
            log.error(
                "the %s engine (pid %d) %s, holding %s; restarting it in %.0f s (restart %d of "
                "at most %d within %.0f s)",
                engine,
                watch.proc.pid,
                why,
                held,
                wait,
                len(restarts),
                policy.max_restarts,
                policy.window_s,
            )
            if _sleep_unless_stopped(wait, signals):
                return 128 + signals.received[0]
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _start(argv: Sequence[str], env: Mapping[str, str], restarts: int, signals: _Signals) -> _Watch:
    read_fd, write_fd = os.pipe()
    child_env = dict(env)
    child_env.update(
        {
            CHILD_ENV: str(os.getpid()),
            REPORT_FD_ENV: str(write_fd),
            RESTARTS_ENV: str(restarts),
        }
    )
    try:
        # Its own process group: a terminal's Ctrl-C reaches the supervisor
        # only, which passes it on once (twice would stop the engine at once).
        proc = subprocess.Popen(list(argv), env=child_env, pass_fds=(write_fd,), process_group=0)
    finally:
        os.close(write_fd)
    signals.child = proc
    watch = _Watch(proc)
    threading.Thread(
        target=_read_reports,
        args=(os.fdopen(read_fd, "rb"), watch),
        name="fencewatch-supervise",
        daemon=True,
    ).start()
    return watch


def _read_reports(pipe: IO[bytes], watch: _Watch) -> None:
    with pipe:
        for line in pipe:
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict):
                watch.last, watch.heard_at = doc, time.monotonic()


def _watch(watch: _Watch, policy: RestartPolicy, signals: _Signals) -> str | None:
    """Until the engine exits: None if it exited on its own (or was
    stopped), else why it died or was killed (for the log line)."""
    proc = watch.proc
    looked = time.monotonic()
    while True:
        try:
            proc.wait(_POLL_S)
        except subprocess.TimeoutExpired:
            pass
        else:
            if proc.returncode < 0 and not signals.received:
                name = signal.Signals(-proc.returncode).name
                return f"died of {name} (its threads' stacks are in the log above)"
            return None
        now = time.monotonic()
        if now - looked > FREEZE_GAP_S and watch.heard_at:
            # This process was frozen with the engine: start the count again.
            watch.heard_at = now
        looked = now
        if signals.received:
            if now - signals.first_at > STOP_BOUND_S + 15:
                proc.kill()  # its own stop bound has long passed
            continue
        stall = _stalled(watch, now, policy.restart_after)
        if stall is not None:
            _kill_with_stacks(proc)
            return stall


def _stalled(watch: _Watch, now: float, after: float) -> str | None:
    doc = watch.last
    if watch.heard_at and now - watch.heard_at >= after:
        return f"stopped reporting for {now - watch.heard_at:.0f} s (killed)"
    if doc is None or doc.get("recovering") or not doc.get("partitions"):
        return None
    if float(doc.get("stalled_for") or 0) >= after:
        return f"was stalled: no commit for {doc['stalled_for']:.0f} s with lag (killed)"
    if float(doc.get("loop_age") or 0) >= after:
        return f"was stalled: its loop had not turned for {doc['loop_age']:.0f} s (killed)"
    return None


def _kill_with_stacks(proc: subprocess.Popen[bytes]) -> None:
    """SIGUSR1 (faulthandler writes every thread's stack to the log), then SIGKILL."""
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGUSR1)
        time.sleep(_DUMP_WAIT_S)
        proc.kill()
    proc.wait()


def _held(doc: Mapping[str, Any] | None) -> str:
    if not doc:
        return "no partitions it had reported"
    parts = doc.get("partitions") or []
    return f"partitions {parts}" if parts else "no partitions"


def _sleep_unless_stopped(seconds: float, signals: _Signals) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if signals.received:
            return True
        time.sleep(min(0.1, end - time.monotonic()))
    return bool(signals.received)
