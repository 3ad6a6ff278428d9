"""Spans as ownership evidence: the ``fencewatch.*`` span attributes, and
OTLP/JSON trace files (the OpenTelemetry Collector file exporter's format).

Pure: no OpenTelemetry import, so ``fencewatch audit --otlp`` needs only the
core. A span is evidence when it carries ``fencewatch.event`` (the SPEC §2
event type); the other attributes map to the event's fields:

=============================  ==============  ========
attribute                      event field     required
=============================  ==============  ========
``fencewatch.event``           ``type``        yes
``fencewatch.workflow_key``    ``workflow_key``  yes
``fencewatch.owner_epoch``     ``epoch``       yes (an integer attribute)
``fencewatch.worker_id``       ``worker_id``   yes
``fencewatch.effect_key``      ``effect_key``  for ``effect_*``/``outcome_verified``
``fencewatch.seq``             ``seq``         no (the authoritative order)
``fencewatch.sink``            ``sink``        no
``fencewatch.event_id``        ``event_id``    no (default: from trace and span id)
``fencewatch.run_id``          ``run_id``      no (default: the trace id)
=============================  ==============  ========

The default ``event_id`` is derived from the trace and span ids, so a span
exported twice is one event to the detector. The span's end time goes to
``ts`` (informational: worker clocks never order anything).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import IO, Any

import orjson

from streams.core.records import Event
from streams.core.replay import Replay
from streams.core.validate import InvalidEvent, to_event
from streams.errors import InvalidSpan

__all__ = [
    "ATTR_EFFECT_KEY",
    "ATTR_EPOCH",
    "ATTR_EVENT",
    "ATTR_EVENT_ID",
    "ATTR_RUN_ID",
    "ATTR_SEQ",
    "ATTR_SINK",
    "ATTR_WORKER",
    "ATTR_WORKFLOW_KEY",
    "IDENTITY_ATTRIBUTES",
    "InvalidSpan",
    "OtlpSpan",
    "attribute_value",
    "encode_attributes",
    "encode_span",
    "feed_otlp",
    "read_otlp_line",
    "span_event",
    "span_event_doc",
]

ATTR_EVENT = "fencewatch.event"
ATTR_WORKFLOW_KEY = "fencewatch.workflow_key"
ATTR_EPOCH = "fencewatch.owner_epoch"
ATTR_WORKER = "fencewatch.worker_id"
ATTR_EFFECT_KEY = "fencewatch.effect_key"
ATTR_SEQ = "fencewatch.seq"
ATTR_SINK = "fencewatch.sink"
ATTR_EVENT_ID = "fencewatch.event_id"
ATTR_RUN_ID = "fencewatch.run_id"

#: What the SDK puts on the current span (the ownership identity).
IDENTITY_ATTRIBUTES = (ATTR_WORKFLOW_KEY, ATTR_EPOCH, ATTR_WORKER, ATTR_EFFECT_KEY)

# event field -> span attribute, for building the event and naming culprits.
_FIELDS = {
    "type": ATTR_EVENT,
    "workflow_key": ATTR_WORKFLOW_KEY,
    "epoch": ATTR_EPOCH,
    "worker_id": ATTR_WORKER,
    "effect_key": ATTR_EFFECT_KEY,
    "seq": ATTR_SEQ,
    "sink": ATTR_SINK,
    "event_id": ATTR_EVENT_ID,
    "run_id": ATTR_RUN_ID,
}


@dataclass(frozen=True, slots=True)
class OtlpSpan:
    """The parts of one span that evidence needs."""

    name: str
    trace_id: str | None
    span_id: str | None
    end_unix_nano: int | None
    attributes: Mapping[str, Any]

    def describe(self) -> str:
        return f"span {self.name!r}" + (f" ({self.span_id})" if self.span_id else "")


def span_event_doc(span: OtlpSpan) -> dict[str, Any] | None:
    """The SPEC §2 document for a span carrying ``fencewatch.event``; None for
    a span that does not (it is not evidence). Not validated here."""
    attrs = span.attributes
    if ATTR_EVENT not in attrs:
        return None
    doc: dict[str, Any] = {}
    for name, attr in _FIELDS.items():
        value = attrs.get(attr)
        if value is not None:
            doc[name] = value
    if "event_id" not in doc and span.trace_id and span.span_id:
        # Deterministic: a span exported (or forwarded) twice is one event.
        doc["event_id"] = f"otel-{span.trace_id}-{span.span_id}"
    if "run_id" not in doc and span.trace_id:
        doc["run_id"] = span.trace_id
    if span.end_unix_nano:
        when = datetime.fromtimestamp(span.end_unix_nano / 1e9, UTC)
        doc["ts"] = when.isoformat(timespec="milliseconds")
    extra = {"otel.span_name": span.name}
    if span.trace_id:
        extra["otel.trace_id"] = span.trace_id
    if span.span_id:
        extra["otel.span_id"] = span.span_id
    doc["attrs"] = extra
    return doc


def span_event(span: OtlpSpan) -> Event | None:
    """The validated event of a span (None when it is not evidence). Raises
    :class:`InvalidSpan` naming the attribute at fault."""
    doc = span_event_doc(span)
    if doc is None:
        return None
    try:
        return to_event(doc)
    except InvalidEvent as exc:
        attr = _FIELDS.get(exc.field or "", exc.field)
        raise InvalidSpan(attr, f"{span.describe()}: {exc.reason}") from None


# -- OTLP/JSON ------------------------------------------------------------


def attribute_value(value: Any) -> Any:
    """Decode an OTLP/JSON ``AnyValue`` object. ``intValue`` is a string in
    the protobuf JSON mapping (int64) and becomes an int; unknown shapes raise
    InvalidSpan."""
    if not isinstance(value, dict) or len(value) > 1:
        raise InvalidSpan(None, "an attribute value is not an OTLP AnyValue object")
    if not value:
        return None
    ((kind, raw),) = value.items()
    if kind == "stringValue" and isinstance(raw, str):
        return raw
    if kind == "boolValue" and isinstance(raw, bool):
        return raw
    if kind == "intValue" and not isinstance(raw, bool):
        if isinstance(raw, int):
            return raw
        if isinstance(raw, str):
            try:
                return int(raw, 10)
            except ValueError:
                pass
    if kind == "doubleValue" and isinstance(raw, int | float) and not isinstance(raw, bool):
        return float(raw)
    if kind == "arrayValue" and isinstance(raw, dict):
        return [attribute_value(v) for v in raw.get("values") or []]
    if kind == "kvlistValue" and isinstance(raw, dict):
        return _attributes(raw.get("values"))
    if kind == "bytesValue" and isinstance(raw, str):
        return raw
    raise InvalidSpan(None, f"attribute value {kind!r} is not a valid OTLP {kind}")


def _attributes(items: Any) -> dict[str, Any]:
    if items is None:
        return {}
    if not isinstance(items, list):
        raise InvalidSpan(None, "'attributes' is not a list of key/value objects")
    out: dict[str, Any] = {}
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("key"), str):
            raise InvalidSpan(None, "an attribute is not a {key, value} object")
        out[item["key"]] = attribute_value(item.get("value") or {})
    return out


def _list(doc: dict[str, Any], name: str, where: str) -> list[Any]:
    value = doc.get(name)
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidSpan(None, f"{where}.{name} is not a list")
    return value


def _nanos(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def _hex_id(value: Any) -> str | None:
    """A trace or span id in one spelling: OTLP/JSON ids are case-insensitive
    hex (the spec's own example is upper case, the collector and the Python
    SDK write lower case), and the default event id is built from them."""
    return value.lower() if isinstance(value, str) and value else None


def read_otlp_line(line: bytes) -> list[OtlpSpan | InvalidSpan]:
    """The spans of one OTLP/JSON ``TracesData`` line (``resourceSpans`` →
    ``scopeSpans`` → ``spans``), in file order. A span whose attributes cannot
    be decoded comes back as an :class:`InvalidSpan` in its place; a line that
    is not a ``TracesData`` object raises InvalidSpan."""
    try:
        doc = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise InvalidSpan(None, f"malformed JSON: {exc}") from None
    return _traces_data(doc)


def _traces_data(doc: Any) -> list[OtlpSpan | InvalidSpan]:
    if not isinstance(doc, dict) or "resourceSpans" not in doc:
        raise InvalidSpan(None, "not an OTLP/JSON trace export (no 'resourceSpans')")
    out: list[OtlpSpan | InvalidSpan] = []
    for rs in _list(doc, "resourceSpans", "line"):
        if not isinstance(rs, dict):
            raise InvalidSpan(None, "a resourceSpans entry is not an object")
        for ss in _list(rs, "scopeSpans", "resourceSpans"):
            if not isinstance(ss, dict):
                raise InvalidSpan(None, "a scopeSpans entry is not an object")
            for sp in _list(ss, "spans", "scopeSpans"):
                if not isinstance(sp, dict):
                    out.append(InvalidSpan(None, "a span is not an object"))
                    continue
                raw_name = sp.get("name")
                name = raw_name if isinstance(raw_name, str) else "?"
                span_id = _hex_id(sp.get("spanId"))
                try:
                    attrs = _attributes(sp.get("attributes"))
                except InvalidSpan as exc:
                    where = f"span {name!r}" + (f" ({span_id})" if span_id else "")
                    out.append(InvalidSpan(None, f"{where}: {exc.reason}"))
                    continue
                trace_id = _hex_id(sp.get("traceId"))
                out.append(
                    OtlpSpan(name, trace_id, span_id, _nanos(sp.get("endTimeUnixNano")), attrs)
                )
    return out


def feed_otlp(
    replay: Replay,
    fh: IO[bytes],
    *,
    source: str,
    offset: int = 0,
    stop_on_invalid: bool = False,
) -> int:
    """Feed the evidence spans of an OTLP/JSON file to ``replay`` in file
    order and return the last offset used (pass it on for the next file).

    The file is JSON Lines (one ``TracesData`` per line, the collector's file
    exporter) or, when its first non-blank line is not a JSON value on its
    own (``{`` alone), pretty-printed ``TracesData`` documents one after the
    other (``jq .`` output, a saved export), read whole up to
    :data:`MAX_DOCUMENT_BYTES`.

    Each span carrying ``fencewatch.event`` is one record at the next offset
    (its arrival position, SPEC §3: give spans ``fencewatch.seq`` for an
    authoritative order). A bad line, document or span is reported invalid
    with its line and the reason; spans without ``fencewatch.event`` are not
    evidence and are skipped. ``stop_on_invalid``: return at the first
    invalid record."""
    invalid_before = replay.invalid_count
    first = True
    # One TracesData per line; the collector writes a line per export batch,
    # so a line can be large (each event is still capped by the Replay).
    for line_no, raw in enumerate(fh, start=1):
        if line_no == 1:
            raw = raw.removeprefix(b"\xef\xbb\xbf")  # a byte-order mark, as editors write
        line = raw.strip()
        if not line:
            continue
        try:
            doc = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            if first and line[:1] in (b"{", b"["):
                # Not a JSON value on its own line: pretty-printed documents.
                rest = fh.read(MAX_DOCUMENT_BYTES + 1)
                return _feed_documents(
                    replay, b"\n" * (line_no - 1) + raw + rest, source=source, offset=offset,
                    stop_on_invalid=stop_on_invalid,
                )  # fmt: skip
            offset += 1
            replay.feed_rejected(source, offset, None, f"malformed JSON: {exc}", line=line_no)
            first = False
            continue
        first = False
        try:
            spans = _traces_data(doc)
        except InvalidSpan as exc:
            offset += 1
            replay.feed_rejected(source, offset, exc.attribute, exc.reason, line=line_no)
            continue
        offset = _feed_spans(replay, spans, source, offset, line_no, stop_on_invalid)
        if stop_on_invalid and replay.invalid_count != invalid_before:
            return offset
    return offset


#: A pretty-printed file is decoded whole, up to this size; a larger one is
#: one invalid record that says so (JSON Lines, read a line at a time, has
#: no such bound). Decoded, its objects take several times its size in memory.
MAX_DOCUMENT_BYTES = 64 * 1024 * 1024


def _size(n: int) -> str:
    return f"{n // 2**20} MiB" if n >= 2**20 else f"{n:,} bytes"


def _feed_documents(
    replay: Replay,
    data: bytes,
    *,
    source: str,
    offset: int,
    stop_on_invalid: bool,
) -> int:
    """Pretty-printed JSON values back to back: each a ``TracesData`` object
    (or a list of them). A value that does not parse ends the file: what
    follows cannot be told apart from it."""
    if len(data) > MAX_DOCUMENT_BYTES:  # the read stopped one byte past the bound
        replay.feed_rejected(
            source, offset + 1, None,
            f"pretty-printed OTLP/JSON larger than {_size(MAX_DOCUMENT_BYTES)}:"
            " write it as JSON Lines (one TracesData per line, e.g. jq -c)",
            line=1,
        )  # fmt: skip
        return offset + 1
    import json  # the standard decoder: it can decode one value of many

    invalid_before = replay.invalid_count
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        replay.feed_rejected(source, offset + 1, None, f"not UTF-8: {exc}", line=1)
        return offset + 1
    decoder = json.JSONDecoder()
    pos, end = 0, len(text)
    line_no, counted = 1, 0  # line numbers counted on as the decoder moves on
    while True:
        while pos < end and text[pos].isspace():
            pos += 1
        if pos >= end:
            return offset
        line_no += text.count("\n", counted, pos)
        counted = pos
        try:
            doc, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            offset += 1
            replay.feed_rejected(
                source, offset, None, f"malformed JSON at line {exc.lineno}: {exc.msg}",
                line=line_no,
            )  # fmt: skip
            return offset
        for item in doc if isinstance(doc, list) else [doc]:
            try:
                spans = _traces_data(item)
            except InvalidSpan as exc:
                offset += 1
                replay.feed_rejected(source, offset, exc.attribute, exc.reason, line=line_no)
                continue
            offset = _feed_spans(replay, spans, source, offset, line_no, stop_on_invalid)
            if stop_on_invalid and replay.invalid_count != invalid_before:
                return offset


def _feed_spans(
    replay: Replay,
    spans: list[OtlpSpan | InvalidSpan],
    source: str,
    offset: int,
    line_no: int,
    stop_on_invalid: bool,
) -> int:
    invalid_before = replay.invalid_count
    for span in spans:
        if isinstance(span, InvalidSpan):
            offset += 1
            replay.feed_rejected(source, offset, span.attribute, span.reason, line=line_no)
        else:
            try:
                doc = span_event_doc(span)
                if doc is None:
                    continue
                span_event(span)  # validate, naming the attribute at fault
            except InvalidSpan as exc:
                offset += 1
                replay.feed_rejected(source, offset, exc.attribute, exc.reason, line=line_no)
            else:
                offset += 1
                replay.feed(orjson.dumps(doc), offset=offset, source=source, line=line_no)
        if stop_on_invalid and replay.invalid_count != invalid_before:
            return offset
    return offset


def encode_span(
    name: str,
    trace_id: str | None,
    span_id: str | None,
    start_unix_nano: int | None,
    end_unix_nano: int | None,
    attributes: Mapping[str, Any],
) -> dict[str, Any]:
    """One span as an OTLP/JSON object (ids in hex, int64 as strings, like
    the collector's file exporter)."""
    out: dict[str, Any] = {"name": name}
    if trace_id:
        out["traceId"] = trace_id
    if span_id:
        out["spanId"] = span_id
    if start_unix_nano is not None:
        out["startTimeUnixNano"] = str(start_unix_nano)
    if end_unix_nano is not None:
        out["endTimeUnixNano"] = str(end_unix_nano)
    out["attributes"] = encode_attributes(attributes)
    return out


def encode_attributes(attributes: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Attributes as OTLP/JSON key/value objects."""
    return [{"key": k, "value": _any_value(v)} for k, v in attributes.items()]


def _any_value(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, list | tuple):
        return {"arrayValue": {"values": [_any_value(v) for v in value]}}
    return {"stringValue": str(value)}
