"""The followers that keep the console's view current: one thread reads
the status topic from its start and follows it, one reads the findings
topic the same way (through the findings consumer API, which delivers each
finding's revisions in order, never one twice), and one looks at the
processor's committed offsets every few seconds (:mod:`.processor`). A follower that loses the
broker says why (:attr:`Follower.error`, shown on the page) and starts
again after a pause; re-reading is harmless (the view keeps the latest
status and ignores a revision it holds).

A record is the topic's data, not ours: one that is not a status record or
a finding is counted and skipped, one with values no page can show is kept
as invalid (:mod:`streams.console.check`), and nothing a record holds stops
a follower (an unexpected error on one record skips that record, counted)."""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from typing import Any

import orjson

from streams.console.metrics import ConsoleMetrics
from streams.console.processor import MAX_PARTITIONS, ProcessorWatch
from streams.console.view import ConsoleView
from streams.core.status import WorkflowStatus
from streams.errors import FencewatchError, TopicMissing
from streams.kafka.connection import KafkaConnection

__all__ = ["RETRY_S", "Follower", "findings_follower", "processor_follower", "status_follower"]

log = logging.getLogger(__name__)

#: Pause before a follower that lost the broker starts again.
RETRY_S = 2.0
_POLL_S = 0.2


class Follower:
    """A daemon thread running ``body(stop)`` until stopped, restarting it
    after a broker failure."""

    def __init__(
        self, name: str, body: Callable[[threading.Event], None], what: str | None = None
    ) -> None:
        self.name = name
        #: What it reads, as its error line names it.
        self.what = what or f"the {name} topic"
        self._body = body
        self._stop = threading.Event()
        self.error: str | None = None
        self._thread = threading.Thread(target=self._loop, name=f"console-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._body(self._stop)
            except FencewatchError as exc:
                self.error = str(exc)
                log.warning("console %s follower: %s (retrying in %s s)", self.name, exc, RETRY_S)
                self._stop.wait(RETRY_S)
            except (OSError, MemoryError) as exc:
                # Out of file descriptors or memory (a flood of connections
                # to the console): the follower waits and tries again; ending
                # its thread stopped the console following that topic for good.
                self.error = f"{type(exc).__name__}: {exc}"
                log.warning(
                    "console %s follower: %s (retrying in %s s)", self.name, self.error, RETRY_S
                )
                self._stop.wait(RETRY_S)

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)


def _status_doc(key: bytes | None, value: bytes) -> dict[str, Any]:
    doc = orjson.loads(value)
    if not isinstance(doc, dict):
        raise TypeError("not a JSON object")
    # Every field is there; their values are the view's check's to judge
    # (streams/console/check.py: a bad one shows as an invalid row). Not the
    # typed record: the compiled core refuses a value of another type there,
    # and the row would be dropped instead of shown invalid.
    missing = [f.name for f in dataclasses.fields(WorkflowStatus) if f.name not in doc]
    if missing:
        raise KeyError(missing[0])
    if not isinstance(doc["workflow_key"], str) or (
        key is not None and key.decode("utf-8", "replace") != doc["workflow_key"]
    ):
        raise ValueError("workflow_key differs from the record key")
    return doc


def status_follower(
    connection: KafkaConnection, topic: str, view: ConsoleView, metrics: ConsoleMetrics
) -> Follower:
    def body(stop: threading.Event) -> None:
        from streams.kafka.reader import BEGINNING
        from streams.kafka.tail import TopicTail

        tail = TopicTail(connection, topic, start=BEGINNING, timeout=connection.connect_timeout)
        follower.error = None
        try:
            while not stop.is_set():
                rec = tail.poll(_POLL_S)
                if rec is None:
                    continue
                metrics.records.labels(topic="status").inc()
                if rec.value is None:
                    if rec.key is not None:
                        view.put_status(rec.key.decode("utf-8", "replace"), None)
                    continue
                try:
                    doc = _status_doc(rec.key, rec.value)
                except (
                    orjson.JSONDecodeError,
                    KeyError,
                    TypeError,
                    ValueError,
                    AttributeError,
                ) as exc:
                    metrics.invalid.labels(topic="status").inc()
                    view.reject(f"{topic}/{rec.partition}@{rec.offset}: not a status record: {exc}")
                    continue
                try:
                    view.put_status(doc["workflow_key"], doc)
                except Exception as exc:  # one record must not stop the follower
                    metrics.invalid.labels(topic="status").inc()
                    view.reject(f"{topic}/{rec.partition}@{rec.offset}: not shown: {exc!r}")
        finally:
            tail.close()

    follower = Follower("status", body)
    return follower


def findings_follower(
    connection: KafkaConnection, topic: str, view: ConsoleView, metrics: ConsoleMetrics
) -> Follower:
    def body(stop: threading.Event) -> None:
        from streams.findings.consumer import FindingsConsumer, FindingsSettings

        consumer = FindingsConsumer(FindingsSettings(connection, topic, follow=True))
        follower.error = None
        seen_errors = 0
        try:
            while not stop.is_set():
                delivery = consumer.poll(_POLL_S)
                st = consumer.stats
                if st.not_findings > seen_errors:
                    metrics.invalid.labels(topic="findings").inc(st.not_findings - seen_errors)
                    seen_errors = st.not_findings
                    if st.errors:
                        view.reject(st.errors[-1])
                if delivery is None:
                    continue
                metrics.records.labels(topic="findings").inc()
                try:
                    view.put_finding(delivery.finding.to_dict())
                except Exception as exc:  # one record must not stop the follower
                    metrics.invalid.labels(topic="findings").inc()
                    view.reject(f"{topic}: finding not shown: {exc!r}")
                consumer.ack(delivery)
        finally:
            consumer.close()

    follower = Follower("findings", body)
    return follower


def processor_follower(
    connection: KafkaConnection,
    topic: str,
    watch: ProcessorWatch,
    metrics: ConsoleMetrics,
    every_s: float,
) -> Follower:
    """Every ``every_s`` seconds: the committed offsets of the processor's
    group (``watch.group``) on ``topic`` (the events topic) and the topic's
    ends, handed to ``watch``. The consumer never subscribes: it reads the
    group's offsets without joining it (and never commits)."""

    def body(stop: threading.Event) -> None:
        from streams.kafka.group_probe import GroupProbe

        probe = GroupProbe(connection, watch.group)
        try:
            while not stop.is_set():
                try:
                    offsets, total = probe.progress(topic, MAX_PARTITIONS)
                except TopicMissing:
                    # No events topic yet: no processor has run on it.
                    offsets, total = {}, 0
                state = watch.observe(offsets, total)
                follower.error = None
                metrics.processor_state(state)
                stop.wait(every_s)
        finally:
            probe.close()

    follower = Follower("processor", body, "the processor's offsets")
    return follower
