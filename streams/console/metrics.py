"""The console's own Prometheus metrics (``/metrics``), in a private registry
like the live processor's (:mod:`streams.live.metrics`)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client import Counter as PromCounter
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["CONTENT_TYPE_LATEST", "ConsoleMetrics"]


class ConsoleMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.records = PromCounter(
            "fencewatch_console_records", "Records read, by topic", ["topic"], registry=r
        )
        self.invalid = PromCounter(
            "fencewatch_console_invalid_records",
            "Records that were not status records or findings, by topic",
            ["topic"],
            registry=r,
        )
        for topic in ("status", "findings"):
            self.records.labels(topic=topic)
            self.invalid.labels(topic=topic)
        self.requests = PromCounter(
            "fencewatch_console_requests",
            "HTTP requests answered, by route and status code",
            ["route", "code"],
            registry=r,
        )
        self.verifications = PromCounter(
            "fencewatch_console_verifications",
            "Verification requests, by result (published, refused, failed)",
            ["result"],
            registry=r,
        )
        self.replays = PromCounter(
            "fencewatch_console_replays", "Workflow replays of the events topic", registry=r
        )
        self.replays_refused = PromCounter(
            "fencewatch_console_replays_refused",
            "Timelines not replayed because every replay slot was taken (503)",
            registry=r,
        )
        self.workflows = Gauge(
            "fencewatch_console_workflows", "Workflows held in the view", registry=r
        )
        self.refused = Gauge(
            "fencewatch_console_refused_workflows",
            "Workflows not held because the view was full (--max-workflows)",
            registry=r,
        )
        self.bytes = Gauge(
            "fencewatch_console_view_bytes",
            "Bytes the view's memory bound counts (keys, kept records, overhead)",
            registry=r,
        )

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
