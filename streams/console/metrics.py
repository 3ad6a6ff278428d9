"""The console's own Prometheus metrics (``/metrics``), in a private registry
like the live processor's (:mod:`streams.live.metrics`)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client import Counter as PromCounter
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from streams.console.processor import ProcessorState

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
        # The processor's progress as the console sees it (streams/console/
        # processor.py): totals, not a series per partition (a topic may
        # have hundreds).
        self.processor_stalled = Gauge(
            "fencewatch_console_processor_stalled",
            "1 while some partition of the events topic has lag and the processor's group "
            "has committed nothing on it for the stall threshold (--stall-after)",
            registry=r,
        )
        self.processor_stalled_partitions = Gauge(
            "fencewatch_console_processor_stalled_partitions",
            "Partitions of the events topic the processor is stalled on",
            registry=r,
        )
        self.processor_lag = Gauge(
            "fencewatch_console_processor_lag",
            "Events not yet committed by the processor's group, all watched partitions",
            registry=r,
        )
        self.processor_still = Gauge(
            "fencewatch_console_processor_seconds_since_commit",
            "Longest time a partition with lag has gone without its committed offset moving",
            registry=r,
        )
        self.processor_committed = Gauge(
            "fencewatch_console_processor_committed",
            "1 once the processor's group has a committed offset on some partition",
            registry=r,
        )

    def processor_state(self, state: ProcessorState) -> None:
        self.processor_stalled.set(int(state.stalled))
        self.processor_stalled_partitions.set(len(state.stalled_partitions))
        self.processor_lag.set(state.lag)
        self.processor_still.set(state.still_s)
        self.processor_committed.set(int(state.committed))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
