"""The faust wiring of the live processor: a factory that builds the app from
:class:`~streams.live.settings.LiveSettings`. No module-level app here.

Data path per event (one agent, partitions processed in offset order):
Kafka record (raw bytes) -> :class:`~streams.live.processor.Processor`
(validate, detector, findings or dead letter) -> :class:`TransactionalSender`
(findings, dead letter and the state's changelog record in the source
partition's transaction, then ack). The state table holds one raw-bytes value
per workflow key (``KeyState.to_bytes()``), partitioned like the input.
"""

from __future__ import annotations

import logging
import shutil
from typing import Any

import faust

from streams.core import Detector, DetectorConfig
from streams.live.fast_restore import FastMemoryStore, client_config
from streams.live.faust_fixes import apply_faust_fixes
from streams.live.metrics import LiveMetrics, MetricsServer
from streams.live.processor import OutRecord, Processor, SourceRecord
from streams.live.settings import KafkaSecurity, LiveSettings
from streams.live.txn import TransactionalSender

__all__ = ["TABLE_NAME", "LiveRuntime", "build_app"]

TABLE_NAME = "owner-state"
log = logging.getLogger(__name__)


def _credentials(sec: KafkaSecurity) -> Any:
    if sec.protocol == "PLAINTEXT":
        return None
    ssl_context = None
    if sec.protocol.endswith("SSL"):
        from aiokafka.helpers import create_ssl_context

        ssl_context = create_ssl_context(
            cafile=sec.ssl_cafile,
            certfile=sec.ssl_certfile,
            keyfile=sec.ssl_keyfile,
            password=sec.ssl_key_password,
        )
    if sec.protocol.startswith("SASL"):
        return faust.SASLCredentials(
            username=sec.sasl_username,
            password=sec.sasl_password,
            mechanism=sec.sasl_mechanism,
            ssl_context=ssl_context,
        )
    return faust.SSLCredentials(ssl_context)


def _app_config(settings: LiveSettings, partitions: int) -> dict[str, Any]:
    servers = ";".join(f"kafka://{s.strip()}" for s in settings.bootstrap_servers.split(","))
    conf: dict[str, Any] = {
        "broker": servers,
        "store": settings.store,
        "processing_guarantee": "exactly_once" if settings.exactly_once else "at_least_once",
        "topic_partitions": partitions,
        "topic_replication_factor": settings.replication,
        "broker_commit_interval": settings.commit_interval,
        # faust's defaults (60 s session) make a dead worker's partitions wait
        # a minute; 10 s / 3 s moves them in ~10-15 s (docs/live.md).
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
    creds = _credentials(settings.security)
    if creds is not None:
        conf["broker_credentials"] = creds
    return conf


class LiveRuntime:
    """What the agent calls per event, plus health and metrics upkeep."""

    def __init__(
        self,
        app: Any,
        table: Any,
        processor: Processor,
        metrics: LiveMetrics,
        settings: LiveSettings,
    ) -> None:
        self.app = app
        self.table = table
        self.processor = processor
        self.metrics = metrics
        self.settings = settings
        self.sender = TransactionalSender(app, exactly_once=settings.exactly_once)
        self.changelog_topic: str = table.changelog_topic.get_topic_name()
        self.positions: dict[int, int] = {}
        self.processed = 0

    def _load(self, key: bytes) -> bytes | None:
        value = self.table.data.get(key)
        return value if value is None else bytes(value)

    async def handle(self, event: Any) -> None:
        message = event.message
        record = SourceRecord(
            message.topic, message.partition, message.offset, message.key, message.value
        )
        outcome = self.processor.process(record, self._load)
        records: tuple[OutRecord, ...] = outcome.records
        state_key, state = outcome.state_key, outcome.state
        if state_key is not None and state is not None:
            # The changelog record goes to the source partition, in the same
            # transaction as the findings and the offset.
            records += (OutRecord(self.changelog_topic, state_key, state, (), message.partition),)

        def apply_state() -> None:
            if state_key is not None and state is not None:
                self._store(state_key, state, message.partition)

        if not await self.sender.send(event, records, apply_state):
            return
        self.processed += 1
        self.positions[message.partition] = message.offset + 1
        self.metrics.events.inc()
        if outcome.error is not None:
            self.metrics.invalid.labels(field=outcome.error[0] or "").inc()
        for f in outcome.findings:
            self.metrics.findings.labels(kind=f.kind.value, severity=f.severity.value).inc()

    def _store(self, key: bytes, value: bytes, partition: int) -> None:
        store = self.table.data
        store[key] = value
        key_partition = getattr(store, "_key_partition", None)
        if isinstance(key_partition, dict):
            # The memory store forgets keys of partitions this worker lost
            # only if it knows their partition (it learns it from recovery,
            # and here from live writes).
            key_partition[key] = partition

    def on_rebalance(self) -> None:
        self.processor.forget()
        self.sender.on_rebalance()
        assigned = {tp.partition for tp in self.app.consumer.assignment()}
        self.positions = {p: o for p, o in self.positions.items() if p in assigned}

    def refresh_gauges(self) -> None:
        consumer = self.app.consumer
        lags: dict[int, int] = {}
        for tp in consumer.assignment():
            if tp.topic != self.settings.events_topic:
                continue
            highwater = consumer.highwater(tp)
            position = self.positions.get(tp.partition)
            if highwater is not None and position is not None:
                lags[tp.partition] = int(highwater) - position
        self.metrics.set_lag(lags)
        self.metrics.keys.set(self._key_count())
        store = self.table.data
        if isinstance(store, FastMemoryStore):
            self.metrics.restored.set(store.loaded_records)

    def _key_count(self) -> int:
        store = self.table.data
        if self.settings.store_kind == "memory":
            return len(store.data)
        total = 0
        for db in list(getattr(store, "_dbs", {}).values()):
            try:  # an estimate: counting a large RocksDB exactly is a full scan
                total += int(db.property_int_value("rocksdb.estimate-num-keys") or 0)
            except Exception:
                return 0
        return total

    def health(self) -> dict[str, Any]:
        app = self.app
        crashed = bool(getattr(app, "_crash_reason", None))
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
        }


def build_app(
    settings: LiveSettings, *, partitions: int, metrics: LiveMetrics | None = None
) -> faust.App:
    """Build the faust app for ``settings``; ``partitions`` is the events
    topic's partition count (see :func:`streams.live.topics.ensure_topics`).

    With the RocksDB store the app's local table directory is removed here,
    so every start rebuilds the state from the changelog read with
    read_committed: RocksDB keeps writes of transactions that were later
    aborted (a crash mid-transaction), the changelog does not."""
    settings.validate()
    apply_faust_fixes()
    app = faust.App(settings.app_id, **_app_config(settings, partitions))
    if settings.store_kind == "rocksdb":
        shutil.rmtree(app.conf.tabledir, ignore_errors=True)
    metrics = metrics or LiveMetrics()
    events = app.topic(
        settings.events_topic,
        key_type=bytes,
        value_type=bytes,
        key_serializer="raw",
        value_serializer="raw",
        partitions=partitions,
    )
    table = app.Table(
        TABLE_NAME,
        partitions=partitions,
        # bytes/bytes is what makes faust use the raw codec for the changelog
        # (a ``schema=`` argument is ignored by Table for serialization, and a
        # decode error during recovery is only logged: the key would be lost).
        key_type=bytes,
        value_type=bytes,
    )
    if settings.store_kind == "memory":
        tbl: Any = table  # faust's TableT does not declare the attributes used here
        # Restored directly from the changelog (streams/live/fast_restore.py);
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
        tbl._data = store
    detector = Detector(DetectorConfig(max_events_per_key=settings.max_events_per_key))
    processor = Processor(
        detector,
        findings_topic=settings.findings_topic,
        dlq_topic=settings.dlq,
        max_event_bytes=settings.max_event_bytes,
        cache_keys=settings.state_cache_keys,
    )
    runtime = LiveRuntime(app, table, processor, metrics, settings)
    app.fencewatch = runtime  # type: ignore[attr-defined]  # for tests and introspection

    @app.agent(events, name="fencewatch-detect")
    async def detect(stream: Any) -> None:
        async for event in stream.events():
            await runtime.handle(event)

    @app.timer(interval=1.0)  # type: ignore[untyped-decorator]
    async def gauges() -> None:
        runtime.refresh_gauges()

    async def _assigned(sender: Any, *args: Any, **kwargs: Any) -> None:
        runtime.on_rebalance()

    app.on_partitions_assigned.connect(_assigned)  # type: ignore[arg-type]

    if settings.metrics_port:
        server = MetricsServer(
            metrics, runtime.health, host=settings.metrics_host, port=settings.metrics_port
        )

        @app.task  # type: ignore[untyped-decorator]
        async def serve_metrics() -> None:
            await server.start()

    return app
