"""OpenTelemetry: the ownership identity on spans, spans as ownership events.

Three pieces (needs the ``otel`` extra, ``opentelemetry-sdk``):

* :func:`instrument` makes every event an :class:`~streams.sdk.OwnershipReporter`
  publishes also land on the *current span*, as the attributes
  ``fencewatch.workflow_key``, ``fencewatch.owner_epoch``,
  ``fencewatch.worker_id`` (and ``fencewatch.effect_key`` for effects) plus a
  span event ``fencewatch.<type>`` carrying the authoritative ``seq`` (and,
  for effects through ``owner.effect``, ``fencewatch.risk`` and, for a
  refusal, ``fencewatch.receipt`` / ``fencewatch.reason``): any
  tracing backend can then filter by owner epoch. It never sets
  ``fencewatch.event`` (the SDK already publishes the event; the span
  processor below must not publish it twice).
* :class:`OwnershipSpanProcessor` turns finished spans that carry
  ``fencewatch.event`` (and the identity attributes, see
  :mod:`streams.integrations.otlp`) into ownership events on Kafka through
  the SDK reporter, so a team that already instruments can feed the detector
  without calling the SDK. Span end never blocks: spans go to a bounded queue
  served by one thread; at the bound the span's event is dropped and counted.
* :class:`OtlpJsonFileExporter` writes spans as OTLP/JSON lines (the
  collector's file exporter format), which ``fencewatch audit --otlp FILE``
  reads as evidence.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

import orjson

from streams.core.records import Event
from streams.core.validate import InvalidEvent
from streams.errors import FencewatchError
from streams.extras import needs_extra
from streams.fences.lease import EventPublisher
from streams.integrations.otlp import (
    ATTR_EFFECT_KEY,
    ATTR_EPOCH,
    ATTR_EVENT,
    ATTR_WORKER,
    ATTR_WORKFLOW_KEY,
    InvalidSpan,
    OtlpSpan,
    encode_attributes,
    encode_span,
    span_event,
)
from streams.kafka.topics import DEFAULT_EVENTS_TOPIC
from streams.sdk.hooks import add_observer, remove_observer

with needs_extra("otel"):
    from opentelemetry import trace
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

__all__ = [
    "DEFAULT_MAX_QUEUE",
    "OtlpJsonFileExporter",
    "OwnershipSpanProcessor",
    "ProcessorStats",
    "annotate_span",
    "instrument",
    "otlp_span",
    "uninstrument",
]

#: Finished spans waiting to be forwarded; past this, spans are dropped.
DEFAULT_MAX_QUEUE = 10_000
#: Spans the forwarding thread takes off the queue at a time.
_MAX_BATCH = 512
_STOP = object()
#: Event attrs copied onto the span event (``fencewatch.<name>``) when present.
_DETAIL_ATTRS = ("risk", "receipt", "reason")


# -- (a) the identity on the current span ---------------------------------


def annotate_span(event: Event) -> None:
    """Put ``event``'s ownership identity on the current span (a no-op when
    no span is recording). The SDK observer :func:`instrument` installs."""
    span = trace.get_current_span()
    if not span.is_recording():
        return
    attrs: dict[str, str | int] = {
        ATTR_WORKFLOW_KEY: event.workflow_key,
        ATTR_EPOCH: event.epoch,
        ATTR_WORKER: event.worker_id,
    }
    if event.effect_key is not None:
        attrs[ATTR_EFFECT_KEY] = event.effect_key
    span.set_attributes(attrs)
    detail: dict[str, str | int] = {ATTR_EPOCH: event.epoch}
    if event.seq is not None:
        detail["fencewatch.seq"] = event.seq
    if event.attrs:
        # The owner's policy on the span: the effect's risk and why it was refused.
        for name in _DETAIL_ATTRS:
            value = event.attrs.get(name)
            if isinstance(value, str):
                detail[f"fencewatch.{name}"] = value
    span.add_event(f"fencewatch.{event.type.value}", detail)


def instrument() -> None:
    """Annotate the current span with every event the SDK reports (idempotent)."""
    add_observer(annotate_span)


def uninstrument() -> None:
    """Stop annotating spans."""
    remove_observer(annotate_span)


# -- (b) spans to events on Kafka ------------------------------------------


def otlp_span(span: ReadableSpan) -> OtlpSpan:
    """The evidence view of a finished SDK span."""
    ctx = span.context
    return OtlpSpan(
        span.name,
        format(ctx.trace_id, "032x") if ctx is not None else None,
        format(ctx.span_id, "016x") if ctx is not None else None,
        span.end_time,
        # One copy into a plain dict: reading the SDK's attribute mapping key
        # by key is several times slower (measured by bench/otel_span_bench.py).
        dict(span.attributes.items()) if span.attributes else {},
    )


@dataclass(frozen=True, slots=True)
class ProcessorStats:
    """Counts since start. ``dropped``: spans lost at the queue bound;
    ``invalid``: spans whose ``fencewatch.*`` attributes are not a valid event
    (``last_invalid`` says why); ``failed``: events the reporter refused
    (``last_error``); ``forwarded``: events handed to the reporter (delivery
    is confirmed by its flush)."""

    forwarded: int
    dropped: int
    invalid: int
    failed: int
    queued: int
    last_invalid: str | None
    last_error: str | None


class OwnershipSpanProcessor(SpanProcessor):
    """Forwards spans carrying ``fencewatch.event`` as ownership events.

    ``publisher`` is where events go: an :class:`~streams.sdk.OwnershipReporter`
    (it validates and produces to Kafka) or anything with ``publish(event)``.
    ``owns_publisher``: close it (flushing) at :meth:`shutdown`.

    ``on_end`` only checks for the attribute and enqueues the span
    (``put_nowait``): it never blocks and never raises. At ``max_queue``
    waiting spans the new span's event is dropped and counted in
    ``stats().dropped`` — evidence is lost, so size the queue for your burst
    and alert on the count. Conversion, validation and producing happen on
    the forwarding thread; the reporter may block there (its own producer
    queue bound, ``queue_full_wait_s``), never in the traced code.
    """

    def __init__(
        self,
        publisher: EventPublisher,
        *,
        max_queue: int = DEFAULT_MAX_QUEUE,
        owns_publisher: bool = False,
    ) -> None:
        if max_queue < 1:
            raise ValueError("max_queue must be at least 1")
        self.publisher = publisher
        self.owns_publisher = owns_publisher
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max_queue)
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._pending = 0  # enqueued and not yet handled
        self._forwarded = self._dropped = self._invalid = self._failed = 0
        self._last_invalid: str | None = None
        self._last_error: str | None = None
        self._stopped = False
        self._thread = threading.Thread(
            target=self._run, name="fencewatch-span-forwarder", daemon=True
        )
        self._thread.start()

    @classmethod
    def to_kafka(
        cls,
        bootstrap_servers: str,
        *,
        topic: str = DEFAULT_EVENTS_TOPIC,
        worker_id: str = "otel-span-processor",
        max_queue: int = DEFAULT_MAX_QUEUE,
        extra: Mapping[str, str] | None = None,
    ) -> OwnershipSpanProcessor:
        """A processor with its own reporter (closed at shutdown). ``worker_id``
        names the reporter only: each event keeps its span's worker id."""
        from streams.sdk import OwnershipReporter, ReporterSettings

        reporter = OwnershipReporter(
            ReporterSettings(bootstrap_servers, worker_id, topic=topic, extra=dict(extra or {}))
        )
        return cls(reporter, max_queue=max_queue, owns_publisher=True)

    # SpanProcessor ---------------------------------------------------------

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        attrs = span.attributes
        if not attrs or ATTR_EVENT not in attrs or self._stopped:
            return
        with self._lock:
            try:
                self._queue.put_nowait(span)
            except queue.Full:
                self._dropped += 1
                return
            self._pending += 1

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Wait until every queued span was handled and the reporter's events
        were acknowledged; False on timeout or a delivery failure."""
        deadline = timeout_millis / 1000
        with self._idle:
            if not self._idle.wait_for(lambda: self._pending == 0, timeout=deadline):
                return False
        flush = getattr(self.publisher, "flush", None)
        if flush is None:
            return True
        try:
            flush(deadline)
        except FencewatchError as exc:
            self._note_failure(str(exc))
            return False
        return True

    def shutdown(self) -> None:
        """Forward what is queued, stop the thread, close an owned reporter."""
        if self._stopped:
            return
        self._stopped = True
        self._queue.put(_STOP)  # may wait for room: shutdown, not span end
        self._thread.join()
        if self.owns_publisher:
            close = getattr(self.publisher, "close", None)
            if close is not None:
                try:
                    close()
                except FencewatchError as exc:
                    self._note_failure(str(exc))

    def stats(self) -> ProcessorStats:
        with self._lock:
            return ProcessorStats(
                self._forwarded,
                self._dropped,
                self._invalid,
                self._failed,
                self._pending,
                self._last_invalid,
                self._last_error,
            )

    # the forwarding thread ---------------------------------------------------

    def _note_failure(self, message: str) -> None:
        with self._lock:
            self._failed += 1
            self._last_error = message

    def _run(self) -> None:
        while True:
            batch = [self._queue.get()]
            # Drain what else is waiting: one bookkeeping update per batch.
            while len(batch) < _MAX_BATCH:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            stop = False
            try:
                for item in batch:
                    if item is _STOP:
                        stop = True
                    else:
                        self._forward(item)
            finally:
                with self._idle:
                    self._pending -= len(batch) - (1 if stop else 0)
                    self._idle.notify_all()
            if stop:
                return

    def _forward(self, span: ReadableSpan) -> None:
        try:
            event = span_event(otlp_span(span))
        except InvalidSpan as exc:
            with self._lock:
                self._invalid += 1
                self._last_invalid = str(exc)
            return
        if event is None:
            return
        try:
            self.publisher.publish(event)
        except (FencewatchError, InvalidEvent) as exc:
            self._note_failure(str(exc))
            return
        self._forwarded += 1  # written by this thread only


# -- (c) OTLP/JSON files -----------------------------------------------------


class OtlpJsonFileExporter(SpanExporter):
    """Writes each export batch as one OTLP/JSON ``TracesData`` line (the
    collector file exporter's format: hex ids, int64 as strings), grouped by
    resource and instrumentation scope. ``fencewatch audit --otlp FILE``
    reads it."""

    def __init__(self, out: IO[bytes]) -> None:
        self._out = out
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        groups: dict[tuple[Any, ...], dict[str, Any]] = {}
        for span in spans:
            res = dict(span.resource.attributes) if span.resource is not None else {}
            scope = span.instrumentation_scope
            gkey = (
                tuple(sorted((k, str(v)) for k, v in res.items())),
                scope.name if scope else "",
                scope.version if scope else None,
            )
            group = groups.get(gkey)
            if group is None:
                group = groups[gkey] = {
                    "resource": {"attributes": encode_attributes(res)},
                    "scopeSpans": [
                        {
                            "scope": {"name": gkey[1], **({"version": gkey[2]} if gkey[2] else {})},
                            "spans": [],
                        }
                    ],
                }
            view = otlp_span(span)
            doc = encode_span(
                view.name,
                view.trace_id,
                view.span_id,
                span.start_time,
                span.end_time,
                view.attributes,
            )
            if span.parent is not None:
                doc["parentSpanId"] = format(span.parent.span_id, "016x")
            group["scopeSpans"][0]["spans"].append(doc)
        line = orjson.dumps({"resourceSpans": list(groups.values())}) + b"\n"
        with self._lock:
            try:
                self._out.write(line)
                self._out.flush()
            except (OSError, ValueError):
                return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None
