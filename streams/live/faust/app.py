"""The faust wiring of the live processor: a factory that builds the app from
:class:`~streams.live.settings.LiveSettings`. No module-level app here.

Data path, in batches (partitions processed in offset order): faust's fetcher
-> :class:`~streams.live.faust.intake.Intake` (bounded) -> up to ``MAX_BATCH``
records -> :meth:`~streams.live.processor.Processor.process_batch` (validate,
detector, findings or dead letters, one state write per changed key) ->
:meth:`TransactionalSender.send_batch` (findings, dead letters and the
changelog records in the source partitions' transactions, then every record
acked, all under the commit gate). The state table holds one raw-bytes value
per workflow key (``KeyState.to_bytes()``), partitioned like the input.

The faust agent on the events topic only holds the subscription (faust
subscribes to the topics its agents read, and groups them with the table's
changelog for assignment); records never reach it, see
:mod:`streams.live.faust.intake` for why.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import time
from collections.abc import Callable
from typing import Any

import faust

from streams.kafka.topics import min_insync_replicas
from streams.live.faust import seam as faust_seam
from streams.live.faust.fast_restore import FastMemoryStore, client_config
from streams.live.faust.intake import Intake, TapMessage
from streams.live.faust.txn import TransactionalSender, TransactionFenced
from streams.live.heap import IdleTrim, release_free_heap
from streams.live.metrics import LiveMetrics, MetricsServer
from streams.live.partitions import (
    CHECK_INTERVAL_S,
    PartitionChange,
    PartitionGuard,
    PartitionsChanged,
)
from streams.live.processor import (
    BatchOutcome,
    Processor,
    encoded,
    processor_for,
    with_changelog,
)
from streams.live.settings import LiveSettings

__all__ = ["INTAKE_SIZE", "MAX_BATCH", "TABLE_NAME", "LiveRuntime", "build_app"]

TABLE_NAME = "owner-state"
#: Records processed (and acked) together under the commit gate at most. A
#: batch is whatever waits in the intake when the previous one is done, so
#: at low rates batches are small and add no delay.
MAX_BATCH = 500
#: Records fetched but not yet processed, at most (the intake's bound).
INTAKE_SIZE = 4 * MAX_BATCH
log = logging.getLogger(__name__)


def _app_config(settings: LiveSettings, partitions: int) -> dict[str, Any]:
    conf: dict[str, Any] = {
        **settings.connection.faust_broker(),  # broker URLs and credentials
        "store": settings.store,
        "processing_guarantee": "exactly_once" if settings.exactly_once else "at_least_once",
        "topic_partitions": partitions,
        "topic_replication_factor": settings.replication,
        "broker_commit_interval": settings.commit_interval,
        # faust's defaults (60 s session) make a dead worker's partitions wait
        # a minute; 10 s / 3 s moves them much sooner (measured in docs/live.md).
        "broker_session_timeout": settings.session_timeout,
        "broker_heartbeat_interval": settings.heartbeat_interval,
        "broker_rebalance_timeout": max(settings.session_timeout, 30.0),
        "consumer_auto_offset_reset": "earliest",
        "datadir": settings.data_dir,
        "table_standby_replicas": 0,
        "web_enabled": False,
        "autodiscover": False,
        # Bounded buffers: at most this many fetched records wait per
        # partition, and per poll.
        "stream_buffer_maxsize": 1024,
        "broker_max_poll_records": 1000,
        "producer_max_batch_size": 64 * 1024,
    }
    return conf


class LiveRuntime:
    """The batch loop (intake -> processor -> transactional sender), plus
    health and metrics upkeep."""

    def __init__(
        self,
        app: Any,
        table: Any,
        processor: Processor,
        metrics: LiveMetrics,
        settings: LiveSettings,
        partitions: int,
    ) -> None:
        self.app = app
        self.table = table
        self.processor = processor
        self.metrics = metrics
        self.settings = settings
        self.sender = TransactionalSender(app, exactly_once=settings.exactly_once)
        self.sender.on_flushed = metrics.status_records.inc
        self.sender.on_commit = metrics.commit_done
        self.sender.on_fenced = self._on_fenced
        #: Called (once) when this app must be replaced by a fresh one in the
        #: same process (its producer was fenced); set by the runner.
        self.replace: Callable[[], None] | None = None
        self._crashing: asyncio.Future[Any] | None = None
        self.intake = Intake(frozenset({settings.events_topic}), maxsize=INTAKE_SIZE)
        self.changelog_topic: str = table.changelog_topic.get_topic_name()
        self.positions: dict[int, int] = {}
        self.processed = 0
        #: The /health document as the 1 s timer last took it on the event
        #: loop (for the supervisor's reporter thread: faust_run._health_of).
        self.last_health: dict[str, Any] | None = None
        #: The assignment last announced in the log as being processed.
        self._announced: tuple[int, ...] | None = None
        #: The events topic's partition count the state is laid out for.
        self.guard = PartitionGuard(settings.events_topic, partitions)
        self._counter: Any = None  # a TopicAdmin, made on the first count check

    def _load(self, key: bytes) -> bytes | None:
        store = self.table.data
        # The memory store's dict directly: its Mapping.get -> __getitem__
        # chain costs more than the lookup (profiled).
        value = store.data.get(key) if isinstance(store, FastMemoryStore) else store.get(key)
        return value if value is None else bytes(value)

    async def run(self) -> None:
        """Take batches from the intake until the app stops."""
        intake = self.intake
        while True:
            await intake.wait()
            batch = intake.take(MAX_BATCH)
            try:
                await self.handle_batch(batch)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a send failed: the transactions are poisoned
                if faust_seam.is_fencing(exc):
                    fenced = exc if isinstance(exc, TransactionFenced) else None
                    self.sender.fence(fenced or TransactionFenced([], exc))
                    return
                log.exception("batch failed; stopping the worker")
                await self.app.crash(exc)
                return
            if self.sender.fenced is not None:
                return

    async def handle_batch(self, batch: list[TapMessage]) -> None:
        guard = self.guard
        for m in batch:
            if guard.check_record(m.partition) is not None:
                break
        if guard.change is not None:
            # Nothing of this batch is processed, acked or committed.
            await self.stop_on(guard.change)
            return
        changelog = self.changelog_topic
        outcome_box: list[BatchOutcome] = []

        def plan(kept: Any) -> Any:
            outcome = self.processor.process_batch(kept, self._load)
            outcome_box.append(outcome)
            out = with_changelog(outcome, changelog)
            status = outcome.status or {}
            if not self.sender.exactly_once:  # no transaction to defer to
                for p, recs in status.items():
                    out.setdefault(p, []).extend(encoded(r) for r in recs)
                    self.metrics.status_records.inc(len(recs))
                status = {}

            def apply_state() -> None:
                for key, partition, state in outcome.states:
                    self._store(key, state, partition)
                if status:
                    # Once per key per transaction, at its commit (SPEC §8).
                    self.sender.defer(status)

            return out, apply_state

        acked = await self.sender.send_batch(batch, plan)
        if not acked:
            return
        self.processed += len(acked)
        positions = self.positions
        inbound: dict[Any, None] = {}
        for m in acked:
            positions[m.partition] = m.offset + 1
            inbound[m.tp] = None
        # faust's "slow processing" check must see our batches.
        faust_seam.mark_inbound(self.app, inbound, time.monotonic())
        self.metrics.record_batch(len(acked), outcome_box[-1])

    async def check_partitions(self) -> None:
        """Re-read the events topic's partition count (off the loop); stop on a change."""
        if self.guard.change is not None:
            return
        try:
            change = await asyncio.to_thread(self._count_check)
        except Exception as exc:  # broker unavailable: the next check retries
            log.debug("partition count of %s not read: %r", self.settings.events_topic, exc)
            return
        if change is not None:
            await self.stop_on(change)

    def _count_check(self) -> PartitionChange | None:
        if self._counter is None:
            from streams.kafka.admin import TopicAdmin

            self._counter = TopicAdmin(self.settings.connection)
        return self.guard.check_count(self._counter)

    async def stop_on(self, change: PartitionChange) -> None:
        """Stop consuming: one ERROR line, then the worker stops with it."""
        if faust_seam.is_crashed(self.app):
            return
        self.intake.clear()
        if change.now is None:  # seen from a record: name the new count if it can be read
            with contextlib.suppress(Exception):
                counted = await asyncio.to_thread(self._count_check)
                change = counted if counted is not None else change
        log.error("%s", change.message())
        await self.app.crash(PartitionsChanged(change))

    def _on_fenced(self, exc: TransactionFenced) -> None:
        """The broker refused this worker's transactions (it was paused or cut
        off past its session, and another worker took its partitions), or
        their producer failed for good (:class:`faust_seam.ProducerFailed`):
        one line, then the app is replaced by a fresh one in this process,
        which rejoins the group and restores its partitions from the
        changelog. Nothing of the open transactions is ever committed (the
        sender is stopped for good), so the broker aborts them."""
        self.intake.clear()
        assigned = sorted(
            tp.partition
            for tp in self.app.consumer.assignment()
            if tp.topic == self.settings.events_topic
        )
        partitions = exc.partitions or assigned
        if isinstance(exc, faust_seam.ProducerFailed):
            # Not fenced: no other worker took the partitions (a lost broker
            # connection stopped aiokafka's sender); the remedy is the same.
            what = f"transactional producer failed ({faust_seam.describe_failure(exc.cause)})"
            why = "aiokafka does not retry this error and its producer cannot send again"
        else:
            what = f"producer fenced ({type(exc.cause).__name__})"
            why = "this worker was paused or cut off past its session and another worker took them"
        log.warning(
            "%s while committing partitions %s in generation %s: %s; "
            "%d uncommitted events aborted, never published; dropping the state of "
            "partitions %s and %s",
            what,
            partitions,
            self.app.consumer_generation_id,
            why,
            self.sender.uncommitted,
            assigned,
            "restarting the faust app in this process to rejoin the group and restore from "
            "the changelog"
            if self.replace is not None
            else "stopping the worker (faust's own command line cannot replace the app)",
        )
        if self.replace is not None:
            self.replace()
        else:  # faust's own command line (worker_app): no one to replace the app
            self._crashing = asyncio.ensure_future(self.app.crash(exc.cause))

    def _store(self, key: bytes, value: bytes, partition: int) -> None:
        store = self.table.data
        if isinstance(store, FastMemoryStore):
            faust_seam.memory_store_put(store, key, value, partition)
        else:
            faust_seam.store_put(store, key, value, partition)

    async def wait_stable_offsets(self, assigned: Any) -> None:
        """Until the group's committed offsets of the assigned input
        partitions are stable (no transactional offset commit pending), as a
        read_committed librdkafka consumer sees them (it sends
        ``require_stable`` and retries). See ``faust_seam._fix_unstable_offsets``."""
        partitions = sorted(
            tp.partition for tp in assigned if tp.topic == self.settings.events_topic
        )
        if not partitions:
            return
        try:
            await asyncio.to_thread(self._fetch_stable, partitions)
        except Exception as exc:  # faust's own (possibly unstable) read follows
            log.warning("committed offsets of %s not confirmed stable: %r", partitions, exc)

    def _fetch_stable(self, partitions: list[int]) -> None:
        from confluent_kafka import Consumer, TopicPartition

        conf = dict(client_config(self.settings))
        conf.update(
            {
                "group.id": self.settings.app_id,
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )
        consumer = Consumer(conf)
        try:
            topic = self.settings.events_topic
            consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=30)
        finally:
            consumer.close()

    def on_rebalance(self) -> None:
        # Records fetched before the rebalance are refetched by its seek.
        self.intake.clear()
        self.processor.forget()
        self.sender.on_rebalance()
        assigned = {tp.partition for tp in self.app.consumer.assignment()}
        self.positions = {p: o for p, o in self.positions.items() if p in assigned}

    def announce(self) -> None:
        """One INFO line each time the worker starts processing a new set of
        partitions (after start-up and after each rebalance, once restored):
        at the default log level the worker's log is these lines, not the
        frameworks' lifecycle chatter (faust_seam.quiet_framework_logs)."""
        state = self.health()
        if not state["ok"] or state["recovering"]:
            return
        partitions = tuple(state["partitions"])
        if partitions == self._announced:
            return
        self._announced = partitions
        where = ", ".join(map(str, partitions)) if partitions else "none (other workers have them)"
        st = self.settings
        log.info(
            "processing %s partitions %s (%s, %s store)",
            st.events_topic,
            where,
            "exactly-once" if st.exactly_once else "at-least-once",
            st.store_kind,
        )

    def refresh_gauges(self) -> None:
        # Called by the 1 s timer on the event loop: the loop turns.
        self.metrics.liveness.turned()
        self.refresh_lag()
        self.last_health = self.health()
        self.metrics.keys.set(self._key_count())
        store = self.table.data
        if isinstance(store, FastMemoryStore):
            self.metrics.restored.set(store.loaded_records)

    def refresh_lag(self) -> None:
        """The lag gauge for every partition of the events topic assigned now
        (0 until known); also called by each /metrics scrape, so one right
        after /health turns ok does not miss a partition."""
        consumer = self.app.consumer
        lags: dict[int, int | None] = {}
        for tp in consumer.assignment():
            if tp.topic != self.settings.events_topic:
                continue
            highwater = consumer.highwater(tp)
            position = self.positions.get(tp.partition)
            lags[tp.partition] = (
                None if highwater is None or position is None else int(highwater) - position
            )
        self.metrics.set_lag(lags)

    def _key_count(self) -> int:
        store = self.table.data
        if self.settings.store_kind == "memory":
            return len(store.data)
        return faust_seam.rocksdb_key_estimate(store)

    def health(self) -> dict[str, Any]:
        app = self.app
        crashed = faust_seam.is_crashed(app)
        recovery = app.tables.recovery
        in_recovery = bool(getattr(recovery, "in_recovery", False))
        topic = self.settings.events_topic
        assigned = sorted(tp.partition for tp in app.consumer.assignment() if tp.topic == topic)
        return {
            "ok": not crashed and not app.should_stop,
            "recovering": in_recovery,
            "partitions": assigned,
            "processed": self.processed,
            "exactly_once": self.settings.exactly_once,
            "pid": os.getpid(),
            **self.metrics.liveness.assess(
                partitions=assigned, lag=self.metrics.lag_total, recovering=in_recovery
            ),
        }


def _changelog_configs(replication: int) -> dict[str, str]:
    isr = min_insync_replicas(replication)
    return {} if isr is None else {"min.insync.replicas": str(isr)}


def raw_topic(app: Any, name: str, partitions: int) -> Any:
    """The events topic as faust sees it: raw bytes in, our own validation."""
    return app.topic(
        name,
        key_type=bytes,
        value_type=bytes,
        key_serializer="raw",
        value_serializer="raw",
        partitions=partitions,
    )


def build_app(
    settings: LiveSettings, *, partitions: int, metrics: LiveMetrics | None = None
) -> faust.App:
    """Build the faust app for ``settings``; ``partitions`` is the events
    topic's partition count (see :func:`streams.live.prepare.ensure_topics`).

    With the RocksDB store the app's local table directory is removed here,
    so every start rebuilds the state from the changelog read with
    read_committed: RocksDB keeps writes of transactions that were later
    aborted (a crash mid-transaction), the changelog does not."""
    faust_seam.install()
    app = faust.App(settings.app_id, **_app_config(settings, partitions))
    if settings.store_kind == "rocksdb":
        shutil.rmtree(app.conf.tabledir, ignore_errors=True)
    metrics = metrics or LiveMetrics()
    events = raw_topic(app, settings.events_topic, partitions)
    table = app.Table(
        TABLE_NAME,
        partitions=partitions,
        # bytes/bytes is what makes faust use the raw codec for the changelog
        # (a ``schema=`` argument is ignored by Table for serialization, and a
        # decode error during recovery is only logged: the key would be lost).
        key_type=bytes,
        value_type=bytes,
        # Replicated like the topics `run` creates (streams/kafka/topics.py).
        extra_topic_configs=_changelog_configs(settings.replication),
    )
    if settings.store_kind == "memory":
        tbl: Any = table  # faust's TableT does not declare the attributes used here
        # Restored directly from the changelog (streams/live/faust/fast_restore.py);
        # the arguments are the ones faust's Collection._new_store_by_url uses.
        store = FastMemoryStore(
            app.conf.store,
            app,
            tbl,
            table_name=tbl.name,
            key_type=tbl.key_type,
            key_serializer=tbl.key_serializer,
            value_serializer=tbl.value_serializer,
            value_type=tbl.value_type,
            loop=tbl.loop,
            options=tbl.options,
        )
        store.configure(client_config(settings))
        faust_seam.set_table_store(table, store)
    processor = processor_for(settings)
    runtime = LiveRuntime(app, table, processor, metrics, settings, partitions)
    # faust's fetcher hands the events topic's records to the intake, and
    # committed offsets are confirmed stable before faust seeks to them
    # (streams/live/faust/seam.py).
    faust_seam.attach_hooks(
        app, faust_seam.LiveHooks(runtime, runtime.intake, runtime.wait_stable_offsets)
    )

    @app.agent(events, name="fencewatch-detect")
    async def detect(stream: Any) -> None:
        # Holds the subscription only: a record here would bypass the batch
        # path and the commit gate, so it is a bug, not something to process.
        async for event in stream.events():
            raise RuntimeError(
                f"record {event.message.tp}@{event.message.offset} reached the agent"
            )

    @app.task  # type: ignore[untyped-decorator]
    async def process_batches() -> None:
        await runtime.run()

    idle_trim = IdleTrim()  # a burst's freed heap back once quiet (heap.py)

    @app.timer(interval=1.0)  # type: ignore[untyped-decorator]
    async def gauges() -> None:
        runtime.refresh_gauges()
        runtime.announce()
        if idle_trim.due(runtime.processed, time.monotonic()):
            release_free_heap()

    @app.timer(interval=CHECK_INTERVAL_S)  # type: ignore[untyped-decorator]
    async def partition_count() -> None:
        await runtime.check_partitions()

    async def _assigned(sender: Any, *args: Any, **kwargs: Any) -> None:
        runtime.on_rebalance()

    app.on_partitions_assigned.connect(_assigned)  # type: ignore[arg-type]

    if settings.metrics_port:
        server = MetricsServer(
            metrics,
            runtime.health,
            host=settings.metrics_host,
            port=settings.metrics_port,
            refresh=runtime.refresh_lag,
        )

        @app.task  # type: ignore[untyped-decorator]
        async def serve_metrics() -> None:
            await server.start()
            try:
                await asyncio.Event().wait()
            finally:
                # Cancelled when the app stops: free the port for the app
                # that replaces this one (runner.run_worker).
                await server.stop()

    return app
