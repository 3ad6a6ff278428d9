"""Run the faust engine (``fencewatch run``, the default): signals, the
bounded stop, and the in-process replacement of a fenced app.

**A fenced worker.** A worker paused (SIGSTOP, a GC pause, a suspended VM)
or cut off from the cluster past its session timeout loses its partitions;
another worker's producers take the same transactional ids and the broker
fences the old ones. faust would crash the app on that ``ProducerFenced``
and exit. Here the commit gate stops the app's sender for good (nothing is
processed, acked or committed by it again), the runtime says so in one
line, and this module stops that app without committing, then builds a
fresh one from the same settings (:func:`~streams.live.runner.prepare_app`,
the factory the first start used) in the same process: it rejoins the
group and restores its partitions from the changelog before processing,
exactly as after a restart by a supervisor, without the process exiting.
faust cannot rejoin in place: its consumer, producers, table recovery and
the transactional producers of every partition live for the app's life.

**Stopping.** The first SIGTERM/SIGINT stops the app gracefully (open
transactions committed, the group left), with one line saying whether every
processed event was committed. Whatever the broker's state the process is
gone :data:`STOP_BOUND_S` seconds after that signal: past it a watchdog
ends it with one line (the last transaction is not committed; a restart
processes its events again, exactly once). A second signal ends it at once.
While stopping or replacing an app the frameworks' error records are logged
without their tracebacks (they are the stop's consequences, e.g. a dead
broker's timeouts).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from streams.errors import ConfigError
from streams.kafka.errors import translate
from streams.live.collector import tune_collector
from streams.live.faust import seam as faust_seam
from streams.live.group_engine import REFUSED_FOR_PROTOCOL, mixed_engines_message
from streams.live.metrics import LiveMetrics
from streams.live.settings import LiveSettings
from streams.live.stopping import STOP_BOUND_S, hard_exit
from streams.live.supervisor import Reporter, engine_restarts

__all__ = ["STOP_BOUND_S", "run_faust"]

#: The frameworks whose error records lose their tracebacks while stopping.
_FRAMEWORKS = ("faust", "mode", "aiokafka", "asyncio")

log = logging.getLogger(__name__)


class _NoTraceback(logging.Filter):
    """Drops the traceback of the frameworks' records (the message stays)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.split(".", 1)[0] in _FRAMEWORKS and record.exc_info:
            record.exc_info = None
            record.exc_text = None
        return True


def _thread_ended(args: threading.ExceptHookArgs) -> None:
    # faust's consumer thread can end on the broker's errors while its app
    # stops; Python would print the traceback (to stderr, which mode logs).
    name = args.thread.name if args.thread is not None else "?"
    log.info("stopping: thread %s ended on %s", name, args.exc_type.__name__)


def _quiet_tracebacks() -> None:
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, _NoTraceback) for f in handler.filters):
            handler.addFilter(_NoTraceback())
    threading.excepthook = _thread_ended
    sys.unraisablehook = _unraisable


def _unraisable(args: Any) -> None:
    # An exception in a finalizer of a client object torn down mid-request.
    log.debug("stopping: ignored %s in %r", args.exc_type.__name__, args.object)


def _loud_tracebacks() -> None:
    for handler in logging.getLogger().handlers:
        for f in [f for f in handler.filters if isinstance(f, _NoTraceback)]:
            handler.removeFilter(f)
    threading.excepthook = threading.__excepthook__
    sys.unraisablehook = sys.__unraisablehook__


class _Supervisor:
    """The signals of the process and the app that runs now."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.signals: list[int] = []
        self.worker: Any = None
        self.runtime: Any = None
        self.replacing = False
        #: Set when the group refused this worker for good (_watch_group).
        self.refused: ConfigError | None = None
        self._watchdog: threading.Timer | None = None
        self._clock = clock
        #: When the first stop signal reached the process (not the loop).
        self._arrived: float | None = None

    def note_arrival(self, signum: int, _frame: object = None) -> None:
        """The Python-level handler of SIGTERM/SIGINT while an app runs
        (faust_seam.take_stop_signals): it runs between two bytecodes of the
        main thread as soon as the signal comes, while the loop's callback
        (:meth:`on_signal`) waits for the loop to finish what it is doing.
        The stop bound counts from here. A second signal ends the process
        here and now, as the rdkafka engine's handler does, busy loop or not
        (the log handler's lock is reentrant, so a record the interrupted
        code was writing cannot deadlock it)."""
        if self._arrived is None:
            self._arrived = self._clock()
            return
        self._stop_at_once(signum)

    def _stop_at_once(self, signum: int) -> None:
        """A second stop signal: end the process now, saying what is left."""
        hard_exit(
            log,
            128 + signum,
            f"{signal.Signals(signum).name} again: stopping at once; {self.left_behind()}",
        )

    def uncommitted(self) -> int:
        runtime = self.runtime
        return 0 if runtime is None else int(runtime.sender.uncommitted)

    def left_behind(self) -> str:
        """What a stop now leaves uncommitted, for its one line."""
        runtime = self.runtime
        if runtime is not None and not runtime.sender.exactly_once:
            return (
                "the events after the last offset commit are processed again after a "
                "restart (at-least-once)"
            )
        return (
            f"the last transaction ({self.uncommitted()} events) is not committed and a "
            "restart processes those events again, exactly once"
        )

    def on_signal(self, signum: int) -> None:
        """A stop signal (on the event loop, or between two apps)."""
        self.signals.append(signum)
        if len(self.signals) > 1:
            self._stop_at_once(signum)
        waited = 0.0 if self._arrived is None else max(0.0, self._clock() - self._arrived)
        delay = f"; the signal waited {waited:.1f} s for the event loop" if waited >= 1.0 else ""
        log.info(
            "%s: stopping (at most %.0f s%s)", signal.Signals(signum).name, STOP_BOUND_S, delay
        )
        _quiet_tracebacks()
        # From the signal's arrival, not from now: a loop busy for seconds
        # (a dead broker's reconnect storm, a long batch) must not stretch
        # the bound an orchestrator's grace period is sized from.
        self._watchdog = threading.Timer(max(0.0, STOP_BOUND_S - waited), self._too_long)
        self._watchdog.daemon = True
        self._watchdog.start()
        if self.worker is not None:
            faust_seam.stop_worker(self.worker, signum)

    def _too_long(self) -> None:
        hard_exit(
            log,
            1,
            f"stopping: no commit within {STOP_BOUND_S:.0f} s (is the broker reachable?); "
            f"{self.left_behind()}; exiting without leaving the group",
        )

    def replace(self) -> None:
        """Stop the current app (it commits nothing more) so that
        :func:`run_faust` builds the next one."""
        if self.replacing or self.signals:
            return
        self.replacing = True
        _quiet_tracebacks()
        faust_seam.stop_worker(self.worker, signal.SIGTERM)

    def stopped(self) -> None:
        """After a graceful stop: one line saying what was committed."""
        if self._watchdog is not None:
            self._watchdog.cancel()
        left = self.uncommitted()
        if self.runtime is not None and not self.runtime.sender.exactly_once:
            log.info(
                "stopping: at-least-once, events after the last offset commit are "
                "processed again after a restart"
            )
        elif left:
            log.warning(
                "stopping: the last transaction (%d events) was not committed; a restart "
                "processes those events again, exactly once",
                left,
            )
        else:
            log.info("stopping: every processed event committed")


def _health_of(supervisor: _Supervisor, metrics: LiveMetrics) -> dict[str, Any]:
    """The /health document for the supervisor, from the reporter's thread:
    the one the app's 1 s timer took on its event loop (faust's objects are
    the loop's alone: the app's consumer, made lazily from this thread, was
    bound to no loop and the worker failed to start), with the liveness
    judged now, so an event loop that stops turning still shows."""
    runtime = supervisor.runtime
    doc = getattr(runtime, "last_health", None)
    if doc is None:  # before the first timer, or a replacement app
        doc = {"ok": True, "recovering": True, "partitions": [], "pid": os.getpid()}
    doc = dict(doc)
    doc.update(
        metrics.liveness.assess(
            partitions=doc["partitions"], lag=metrics.lag_total, recovering=doc["recovering"]
        )
    )
    return doc


def run_faust(settings: LiveSettings, build: Callable[[LiveMetrics], Any]) -> int:
    """Run the faust engine until SIGTERM/SIGINT and return the exit status;
    a fenced app is replaced by a fresh one in this process. ``build`` makes
    an app reporting to the given metrics (runner.prepare_app: passed in, so
    this module does not import the runner that imports it)."""
    import faust

    supervisor = _Supervisor()
    # One registry for every app of this process.
    metrics = LiveMetrics(stall_after=settings.stall_after)
    metrics.engine_restarts.inc(engine_restarts(os.environ))
    reporter = Reporter.from_env(os.environ)
    if reporter is not None:
        reporter.start(lambda: _health_of(supervisor, metrics))
    processed = 0
    replaced = 0
    while True:
        supervisor.replacing = False
        app = build(metrics)
        if supervisor.signals:  # a stop signal while the next app was built
            break
        hooks = faust_seam.hooks_of(app)
        runtime = hooks.runtime if hooks is not None else None
        if runtime is not None:
            runtime.processed = processed
            runtime.replace = supervisor.replace
        supervisor.runtime = runtime
        if replaced == 0:
            tune_collector()  # once per process, not per replaced app
        worker = faust.Worker(app, loglevel=settings.log_level.upper(), quiet=True)
        faust_seam.quiet_worker(worker)
        faust_seam.quiet_framework_logs(settings.log_level)
        if replaced:
            # The first worker configured logging; a second setup would
            # add its handlers again.
            worker.override_logging = False
        faust_seam.take_stop_signals(worker, supervisor.on_signal, supervisor.note_arrival)
        supervisor.worker = worker
        done = threading.Event()
        threading.Thread(
            target=_watch_group,
            args=(app, worker, supervisor, settings, done),
            name="fencewatch-group-watch",
            daemon=True,
        ).start()
        try:
            code = _execute(worker)
        finally:
            done.set()
        supervisor.worker = None
        if runtime is not None:
            processed = runtime.processed
        # The closed loop took its signal handlers with it: until the next
        # app installs its own, a signal is recorded here.
        asyncio.set_event_loop(asyncio.new_event_loop())
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda signum, _frame: supervisor.on_signal(signum))
        if supervisor.signals:
            break
        reason = faust_seam.crash_reason(app)
        if not supervisor.replacing and reason is not None and faust_seam.is_fencing(reason):
            # A fencing faust met on a path the commit gate does not see.
            log.warning(
                "the faust app stopped on %s (fenced: another worker holds its partitions); "
                "restarting the faust app in this process to rejoin the group and restore "
                "from the changelog",
                type(reason).__name__,
            )
            supervisor.replacing = True
        if not supervisor.replacing:
            break
        replaced += 1
        _loud_tracebacks()  # the next app's errors are its own
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL if sig == signal.SIGTERM else signal.default_int_handler)
    if supervisor.signals:
        supervisor.stopped()
        return code
    if supervisor.refused is not None:
        supervisor.stopped()
        raise supervisor.refused
    _raise_crash(app)
    return code


def _watch_group(
    app: Any, worker: Any, supervisor: _Supervisor, settings: LiveSettings, done: threading.Event
) -> None:
    """Stop the worker when the group refused its join for good because the
    other engine's workers hold it (they joined after the start's check,
    streams/live/group_engine.py): aiokafka keeps that refusal where faust's
    fetcher never looks, and the worker would stay up without partitions.
    A thread, not a faust timer: faust starts its timers only once it has
    partitions and has recovered."""
    while not done.wait(0.5):
        failure = faust_seam.group_join_failure(app)
        if failure is not None and translate(failure, "joining").code == REFUSED_FOR_PROTOCOL:
            supervisor.refused = ConfigError(mixed_engines_message(settings, None))
            worker.loop.call_soon_threadsafe(faust_seam.stop_worker, worker, signal.SIGTERM)
            return


def _execute(worker: Any) -> int:
    try:
        worker.execute_from_commandline()
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0


def _raise_crash(app: Any) -> None:
    from streams.errors import WorkerCrashed

    reason = faust_seam.crash_reason(app)
    if reason is not None:
        # faust logs the crash as pages of tracebacks; the caller gets one line.
        first = (str(reason).strip().splitlines() or [type(reason).__name__])[0]
        raise WorkerCrashed(f"the worker stopped: {first[:500]}")
