"""Prometheus metrics and the /health endpoint of the live processor.

The registry is private to one processor (no process-global collectors), so
two apps in one process never share counters. The HTTP server is a tiny
aiohttp app on the worker's own event loop; port 0 disables it.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, Histogram, generate_latest
from prometheus_client import Counter as PromCounter
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from streams.core.records import Kind
from streams.live.liveness import Liveness
from streams.live.processor import BatchOutcome

__all__ = ["LiveMetrics", "MetricsServer"]

log = logging.getLogger(__name__)


class LiveMetrics:
    """The processor's counters and gauges, in their own registry."""

    def __init__(self, *, stall_after: float = 60.0) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        #: Commits and loop turns, for /health's ``stalled`` (streams/live/liveness.py).
        self.liveness = Liveness(stall_after)
        #: Sum of the assigned partitions' known lags (None: none known yet).
        self.lag_total: int | None = None
        self.events = PromCounter(
            "fencewatch_events", "Events consumed (valid or not)", registry=self.registry
        )
        self.invalid = PromCounter(
            "fencewatch_invalid_events",
            "Events sent to the dead-letter topic, by offending field",
            ["field"],
            registry=self.registry,
        )
        self.findings = PromCounter(
            "fencewatch_findings",
            "Finding revisions produced, by kind and severity",
            ["kind", "severity"],
            registry=self.registry,
        )
        # Every kind's series exists from the start at 0: a counter that first
        # appears at 1 shows no increase(), and the alert rules
        # (deploy/prometheus/alerts.yml) would miss the first finding of a kind.
        for kind in Kind:
            self.findings.labels(kind=kind.value, severity=kind.severity.value)
        self.keys = Gauge(
            "fencewatch_state_keys", "Workflow keys held in the state table", registry=self.registry
        )
        self.restored = Gauge(
            "fencewatch_restored_records",
            "Changelog records loaded directly by the fast restore (memory store), all loads",
            registry=self.registry,
        )
        self.lag = Gauge(
            "fencewatch_consumer_lag",
            "Records between the processed position and the high watermark, per assigned "
            "partition (0 until both are known)",
            ["partition"],
            registry=self.registry,
        )
        self.stale_effects = PromCounter(
            "fencewatch_stale_effects",
            "Distinct stale effects by sink and outcome (attempted: every stale effect; "
            "rejected: refused by the destination; committed: committed by it)",
            ["sink", "outcome"],
            registry=self.registry,
        )
        self.status_records = PromCounter(
            "fencewatch_status_records",
            "Records written to the status topic",
            registry=self.registry,
        )
        # What each finding waits for after the commit interval: the first
        # place to look when findings arrive late (the broker, not the
        # detector). Buckets around the 0.1 s default interval.
        self.commit_seconds = Histogram(
            "fencewatch_commit_seconds",
            "Duration of each commit that completed, from its start to the broker's answer "
            "(exactly-once: the transaction's offsets and commit; otherwise the flush and "
            "the offset commit)",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
            registry=self.registry,
        )
        self.up = Gauge(
            "fencewatch_up",
            "1 while the worker runs and has neither crashed nor begun stopping",
            registry=self.registry,
        )
        self.recovering = Gauge(
            "fencewatch_recovering",
            "1 while faust recovers the state table",
            registry=self.registry,
        )
        self.stalled = Gauge(
            "fencewatch_stalled",
            "1 while the worker holds partitions with lag and has committed nothing for "
            "--stall-timeout seconds (its findings are not being published)",
            registry=self.registry,
        )
        self.stalled_seconds = Gauge(
            "fencewatch_stalled_seconds",
            "Seconds the worker has held partitions with lag without a commit",
            registry=self.registry,
        )
        self.engine_restarts = PromCounter(
            "fencewatch_engine_restarts",
            "Times fencewatch run's supervisor restarted the engine (a crash or a stall) "
            "before this engine process started",
            registry=self.registry,
        )

    def commit_done(self, seconds: float) -> None:
        """A commit completed in ``seconds``: timed, and counted as progress."""
        self.commit_seconds.observe(seconds)
        self.liveness.committed()

    def set_lag(self, lags: Mapping[int, int | None]) -> None:
        """``lags``: every assigned partition -> its lag, ``None`` when not
        known yet (exported as 0, so every assigned partition has a series)."""
        # Drop partitions no longer assigned, so a moved partition's lag does
        # not linger on the worker that lost it.
        self.lag.clear()
        for partition, value in lags.items():
            self.lag.labels(partition=str(partition)).set(max(value or 0, 0))
        known = [max(v, 0) for v in lags.values() if v is not None]
        self.lag_total = sum(known) if known else None

    def record_batch(self, acked: int, outcome: BatchOutcome) -> None:
        """Count a committed-to-be batch: ``acked`` records and what
        :meth:`~streams.live.processor.Processor.process_batch` made of them."""
        self.events.inc(acked)
        if outcome.errors:
            for field_name, n in Counter(f or "" for f, _reason in outcome.errors).items():
                self.invalid.labels(field=field_name).inc(n)
        if outcome.findings:
            kinds = Counter((f.kind.value, f.severity.value) for f in outcome.findings)
            for (kind, severity), n in kinds.items():
                self.findings.labels(kind=kind, severity=severity).inc(n)
        if outcome.stale_effects:
            for (effect_outcome, sink), n in outcome.stale_effects.items():
                self.stale_effects.labels(sink=sink, outcome=effect_outcome).inc(n)

    def set_health(self, health: Mapping[str, Any]) -> None:
        """The ``up``/``recovering``/``stalled`` gauges from the /health document."""
        self.up.set(1 if health.get("ok") else 0)
        self.recovering.set(1 if health.get("recovering") else 0)
        self.stalled.set(1 if health.get("stalled") else 0)
        self.stalled_seconds.set(float(health.get("stalled_for") or 0.0))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class MetricsServer:
    """``GET /metrics`` (Prometheus text) and ``GET /health`` (JSON; 200 when
    ``health()`` says ``ok``, else 503)."""

    def __init__(
        self,
        metrics: LiveMetrics,
        health: Callable[[], dict[str, Any]],
        *,
        host: str,
        port: int,
        refresh: Callable[[], None] | None = None,
    ) -> None:
        self.metrics = metrics
        self.health = health
        #: Called before each /metrics answer (the live worker: lag of every
        #: partition assigned right now, rather than at the last gauge tick).
        self.refresh = refresh
        self.host = host
        self.port = port
        self._runner: Any = None

    async def start(self) -> None:
        from aiohttp import web

        async def metrics_view(_request: web.Request) -> web.Response:
            if self.refresh is not None:
                self.refresh()
            self.metrics.set_health(self.health())
            return web.Response(
                body=self.metrics.exposition(), headers={"Content-Type": CONTENT_TYPE_LATEST}
            )

        async def health_view(_request: web.Request) -> web.Response:
            doc = self.health()
            return web.json_response(doc, status=200 if doc.get("ok") else 503)

        app = web.Application()
        app.router.add_get("/metrics", metrics_view)
        app.router.add_get("/health", health_view)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port)
        await site.start()
        self._runner = runner
        log.info("metrics on http://%s:%d/metrics, health on /health", self.host, self.port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
