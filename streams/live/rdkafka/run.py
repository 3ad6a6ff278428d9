"""Start and stop the rdkafka engine (``fencewatch run --engine rdkafka``):
topics, the /metrics server thread, signals, and the bounded stop.

Stopping: the first SIGTERM/SIGINT asks the loop to stop; it commits the
open transaction (or aborts it) and leaves the group, one line saying
which. Whatever the broker's state, the process is gone
:data:`STOP_BOUND_S` seconds after that signal: past it a watchdog ends the
process without leaving the group (the group then waits a session timeout,
and an open transaction is aborted by the broker; nothing is lost or
repeated). A second signal ends it at once.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import threading
from types import FrameType
from typing import TYPE_CHECKING, Any

from streams.errors import StoreError, WorkerCrashed
from streams.kafka.admin import TopicAdmin
from streams.kafka.topics import TopicSpec, min_insync_replicas
from streams.live.changelog import changelog_topic
from streams.live.collector import tune_collector
from streams.live.metrics import LiveMetrics, MetricsServer
from streams.live.partitions import PartitionsChanged, check_state_layout
from streams.live.rdkafka.engine import RdkafkaEngine
from streams.live.settings import LiveSettings
from streams.live.stopping import STOP_BOUND_S, hard_exit
from streams.live.supervisor import Reporter, engine_restarts

if TYPE_CHECKING:
    from streams.live.prepare import Prepared

__all__ = ["STOP_BOUND_S", "run_rdkafka"]

log = logging.getLogger(__name__)

#: The young generation of this engine's collector: its batches (up to
#: rdkafka_engine.MAX_BATCH = 5,000 events, ten times the faust engine's)
#: keep more than the shared 20,000 objects (collector.GC_THRESHOLDS) alive
#: while they run, which then survive young collections and are promoted
#: (the reason collector.py gives). bench/live_batch_cpu.py's events in
#: batches of 5,000, status on, six interleaved pairs on a loaded machine
#: (2026-12-02): 13.6-19.9 CPU µs/event (median 16.9) at 20,000, 10.7-14.5
#: (median 12.8) at 100,000, lower in each pair.
#:
#: A million since 2026-12-06 (issue 46). Python counts the young
#: generation as tracked allocations minus deallocations, and with more
#: keys live than the LRU of decoded states holds, every event decodes one
#: state (~30 tracked objects) and evicts another: the count rose by a
#: batch's decodes (~150,000) and fell back at its evictions, so at 100,000
#: a young collection ran almost every batch and walked every state decoded
#: since the last one (~50 ms each, 8 per 200,000 events), then promoted
#: them, and a full collection followed. gc.callbacks in the worker at
#: 25,000 live keys (bench/live_worker_cpu.py): 0.27-0.49 of the engine's
#: 3.6-4.5 CPU s for 200,000 events at 100,000, 0.005 s at a million (none
#: but the start-up's). At a million a young collection comes only when
#: the tracked heap has grown by that much (an LRU filling with large
#: states; cyclic garbage, which is never freed otherwise, so it stays
#: bounded at about a million objects): none in steady state, and one that
#: does come walks what grew. An LRU of 60,000 filling with 60,000 keys'
#: states (in process, 480,000 events): one young collection of 0.64 s at a
#: million, against 15 young of 32-136 ms and a middle one of 0.55 s at
#: 100,000 (1.7 s in all). Nothing of the batch logic makes cycles
#: (gc.collect() found none after 200,000 events with the collector off).
GC_YOUNG = 1_000_000


def _tune_collector() -> None:
    tune_collector()
    gc.set_threshold(GC_YOUNG, *gc.get_threshold()[1:])


def _ensure_changelog(settings: LiveSettings, partitions: int, admin: TopicAdmin) -> None:
    """The state changelog, compacted, partitioned like the input: the topic
    faust creates for its table, created here when missing, with the same
    ``min.insync.replicas=2`` when replicated 3 ways or more (docs/operate.md;
    it was missing here, found by tests/cluster/test_cluster_faults.py)."""
    name = changelog_topic(settings.app_id)
    config = {"cleanup.policy": "compact"}
    isr = min_insync_replicas(settings.replication)
    if isr is not None:
        config["min.insync.replicas"] = str(isr)
    admin.ensure([TopicSpec(name, partitions, settings.replication, config)])


def _serve_metrics(server: MetricsServer) -> None:
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(server.start())
        loop.run_forever()
    except Exception:  # the address was checked before start; log, keep processing
        log.exception("the /metrics server stopped")


def run_rdkafka(settings: LiveSettings, prepared: Prepared) -> int:
    """Run the rdkafka engine until SIGTERM/SIGINT, once ``prepared``
    (:func:`streams.live.runner.prepare`); the exit status."""
    partitions = prepared.partitions
    _ensure_changelog(settings, partitions, prepared.admin)
    # A changelog partitioned for another count: the events topic grew while
    # the workers were stopped (streams/live/partitions.py), as the faust engine checks.
    change = check_state_layout(
        prepared.admin, settings.events_topic, changelog_topic(settings.app_id)
    )
    if change is not None:
        raise PartitionsChanged(change)
    log.info("starting %r with %d partitions (rdkafka engine)", settings, partitions)
    metrics = LiveMetrics(stall_after=settings.stall_after)
    metrics.engine_restarts.inc(engine_restarts(os.environ))
    engine = RdkafkaEngine(settings, metrics=metrics, partitions=partitions)
    reporter = Reporter.from_env(os.environ)
    if reporter is not None:
        reporter.start(engine.health)
    if settings.metrics_port:
        server = MetricsServer(
            metrics,
            engine.health,
            host=settings.metrics_host,
            port=settings.metrics_port,
            refresh=engine.refresh_gauges,
        )
        threading.Thread(
            target=_serve_metrics, args=(server,), name="fencewatch-metrics", daemon=True
        ).start()
    signals: list[int] = []

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        signals.append(signum)
        if len(signals) > 1:
            hard_exit(log, 128 + signum, f"{name} again: stopping at once")
        log.info("%s: stopping (at most %.0f s)", name, STOP_BOUND_S)
        engine.stop()

        def too_long() -> None:
            hard_exit(
                log,
                1,
                f"stopping: no commit within {STOP_BOUND_S:.0f} s (is the broker reachable?); "
                f"the last transaction ({engine.uncommitted_events} events) is not committed "
                "and a restart processes those events again, exactly once; exiting without "
                "leaving the group",
            )

        watchdog = threading.Timer(STOP_BOUND_S, too_long)
        watchdog.daemon = True
        watchdog.start()

    previous: dict[signal.Signals, Any] = {}
    for sig in (signal.SIGTERM, signal.SIGINT):
        previous[sig] = signal.signal(sig, on_signal)
    _tune_collector()
    # The loop runs in its own thread: librdkafka calls block for seconds
    # when the broker is away, and Python runs signal handlers only in the
    # main thread between bytecodes, so the main thread stays free to take
    # the signal (and start the stop watchdog) at once.
    failure: list[BaseException] = []

    def loop() -> None:
        try:
            engine.run()
        except BaseException as exc:  # re-raised in the main thread
            failure.append(exc)

    thread = threading.Thread(target=loop, name="fencewatch-engine", daemon=True)
    try:
        thread.start()
        while thread.is_alive():
            thread.join(0.2)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if failure:
        if isinstance(failure[0], StoreError):
            # The faust engine's words for a store that failed under it.
            raise WorkerCrashed(f"the worker stopped: {failure[0]}") from None
        raise failure[0]
    return 0
