"""Validation at the edge (SPEC §2, §7): raw bytes in, an :class:`Event` or one
clear reason out.

This runs once per event on the hot path, so it is written as straight-line
dict lookups and ``type() is`` checks rather than a generic schema walk; the
JSON Schema in ``schemas/`` states the same rules and the tests hold the two
together.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

import msgspec
import orjson

from streams.core.errors import RECORD_FIELD, InvalidEvent
from streams.core.records import EFFECT_TYPES, MAX_INT63, WORKFLOW_KEY_FIELD, Event, EventType

__all__ = [
    "DEFAULT_MAX_EVENT_BYTES",
    "KNOWN_VERSIONS",
    "InvalidEvent",
    "decode_event",
    "parse_event",
    "to_event",
]

DEFAULT_MAX_EVENT_BYTES = 64 * 1024
KNOWN_VERSIONS: Final = frozenset({1})
# Event.v's annotation states the same range (tests/core/test_spec_validation.py
# holds them together), so the fast path need not read it.

_TYPES: dict[str, EventType] = {t.value: t for t in EventType}
_NEEDS_EFFECT_KEY = frozenset(
    {"effect_attempted", "effect_committed", "effect_rejected", "outcome_verified"}
)
# Optional string fields and their length caps (characters).
_OPTIONAL_STRINGS: tuple[tuple[str, int], ...] = (
    ("sink", 1024),
    ("event_id", 256),
    ("run_id", 256),
    ("ts", 64),
)


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if type(value) is bool:
        return "a boolean"
    if type(value) is float:
        return "a float"
    if type(value) is int:
        return "an integer"
    if type(value) is str:
        return "a string"
    if type(value) is list:
        return "an array"
    if type(value) is dict:
        return "an object"
    return type(value).__name__


def _string(doc: dict[str, Any], name: str, max_len: int, *, required: bool) -> str | None:
    value = doc.get(name)
    if value is None:
        if required:
            raise InvalidEvent(name, "is required")
        return None
    if type(value) is not str:
        raise InvalidEvent(name, f"must be a string, got {_describe(value)}")
    if not value:
        raise InvalidEvent(name, "must not be empty")
    if len(value) > max_len:
        raise InvalidEvent(name, f"is {len(value)} characters, the limit is {max_len}")
    return value


def _int63(doc: dict[str, Any], name: str, *, required: bool) -> int | None:
    value = doc.get(name)
    if value is None:
        if required:
            raise InvalidEvent(name, "is required")
        return None
    # bool is a subclass of int in Python; JSON true is not an integer here.
    if type(value) is not int:
        raise InvalidEvent(name, f"must be an integer, got {_describe(value)}")
    if value < 0 or value > MAX_INT63:
        shown = str(value) if value.bit_length() <= 256 else "a far larger integer"
        raise InvalidEvent(name, f"is out of range (0 ≤ {name} < 2^63), got {shown}")
    return value


def _explain(doc: Any, key: bytes | None) -> Event:
    """The authoritative, field-by-field check: returns the event or raises
    with the reason. The fast path below defers here on anything unusual."""
    if type(doc) is not dict:
        raise InvalidEvent(RECORD_FIELD, f"the event must be a JSON object, got {_describe(doc)}")
    v = doc.get("v")
    if v is None:
        v = 1
    elif type(v) is not int:
        raise InvalidEvent("v", f"must be an integer, got {_describe(v)}")
    elif v not in KNOWN_VERSIONS:
        raise InvalidEvent("v", f"record version {v} is not known to this build (knows 1)")
    raw_type = doc.get("type")
    if raw_type is None:
        raise InvalidEvent("type", "is required")
    if type(raw_type) is not str:
        raise InvalidEvent("type", f"must be a string, got {_describe(raw_type)}")
    etype = _TYPES.get(raw_type)
    if etype is None:
        shown = raw_type if len(raw_type) <= 40 else raw_type[:40] + "..."
        raise InvalidEvent("type", f"unknown event type {shown!r}")
    workflow_key = _string(doc, "workflow_key", 512, required=True)
    assert workflow_key is not None
    if key is not None:
        try:
            key_text = key.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidEvent("key", "Kafka key is not valid UTF-8") from None
        if key_text != workflow_key:
            raise InvalidEvent(
                "workflow_key",
                "differs from the Kafka message key (per-key order needs them equal)",
            )
    epoch = _int63(doc, "epoch", required=True)
    assert epoch is not None
    worker_id = _string(doc, "worker_id", 256, required=True)
    assert worker_id is not None
    seq = _int63(doc, "seq", required=False)
    effect_key = _string(doc, "effect_key", 1024, required=raw_type in _NEEDS_EFFECT_KEY)
    sink, event_id, run_id, ts = (
        _string(doc, name, cap, required=False) for name, cap in _OPTIONAL_STRINGS
    )
    attrs = doc.get("attrs")
    if attrs is not None and type(attrs) is not dict:
        raise InvalidEvent("attrs", f"must be an object, got {_describe(attrs)}")
    return Event(
        type=etype,
        workflow_key=workflow_key,
        epoch=epoch,
        worker_id=worker_id,
        seq=seq,
        effect_key=effect_key,
        sink=sink,
        event_id=event_id,
        run_id=run_id,
        ts=ts,
        attrs=attrs,
        v=v,
    )


_DECODER = msgspec.json.Decoder(Event)
# Bound once: compiled, a call through a Final is a direct call, not a global
# and attribute look-up per event.
_DECODE: Final = _DECODER.decode
# RecursionError: msgspec refuses deeply nested documents that way (attrs or an
# ignored extra field nested ~1000 deep); the slow path then rejects them cleanly.
_FAST_ERRORS = (msgspec.ValidationError, msgspec.DecodeError, RecursionError)


_ASTUPLE: Final = msgspec.structs.astuple
# Positions in msgspec.structs.astuple(event); checked against Event at import.
_F_TYPE: Final = 0
_F_EFFECT_KEY: Final = 5
if (
    Event.__struct_fields__[_F_TYPE] != "type"
    or Event.__struct_fields__[_F_EFFECT_KEY] != "effect_key"
):  # pragma: no cover - records.py changed
    raise ImportError("streams.core.records.Event fields moved; update validate._F_*")

_T_ATT: Final = EventType.EFFECT_ATTEMPTED
_T_COM: Final = EventType.EFFECT_COMMITTED
_T_REJ: Final = EventType.EFFECT_REJECTED
_T_VER: Final = EventType.OUTCOME_VERIFIED
if {_T_ATT, _T_COM, _T_REJ, _T_VER} != EFFECT_TYPES:  # pragma: no cover - records.py changed
    raise ImportError("streams.core.records.EFFECT_TYPES changed; update validate._accept_fields")


def _accept_fields(fields: tuple[Any, ...], key: bytes | None) -> bool:
    """The rules the Struct's annotations cannot state, on the event's fields
    (``msgspec.structs.astuple(event)``, see :func:`decode_event`).

    Every event passes here, so the effect-key rule is identity tests against
    the four members (compiled: a few C comparisons) rather than a set
    membership, which hashes the member (measured: ~25 of the ~90 ns this
    took as one expression); the type is read only when the key is absent.
    The record version is not read: Event.v's annotation limits it, so
    msgspec has refused any other and the slow path said why."""
    if fields[_F_EFFECT_KEY] is None:
        t = fields[_F_TYPE]
        if t is _T_COM or t is _T_ATT or t is _T_REJ or t is _T_VER:
            return False
    if key is None:
        return True
    wkey: str = fields[WORKFLOW_KEY_FIELD]
    return key == wkey.encode()


def to_event(doc: Any, *, key: bytes | None = None) -> Event:
    """Validate an already-decoded JSON document (e.g. built by the SDK).

    Fast path: msgspec converts and type-checks in C; anything it refuses goes
    to :func:`_explain`, which is authoritative and names the field.
    """
    try:
        event = msgspec.convert(doc, Event)
    except _FAST_ERRORS:
        return _explain(doc, key)
    if _accept_fields(_ASTUPLE(event), key):
        return event
    return _explain(doc, key)


def parse_event(
    data: bytes | bytearray | memoryview | str,
    *,
    key: bytes | None = None,
    max_bytes: int = DEFAULT_MAX_EVENT_BYTES,
) -> Event:
    """Parse and validate one event.

    ``key`` is the Kafka message key when there is one: present and different
    from ``workflow_key`` makes the event invalid. Raises :class:`InvalidEvent`.
    """
    return decode_event(data, key=key, max_bytes=max_bytes)[0]


def decode_event(
    data: bytes | bytearray | memoryview | str,
    *,
    key: bytes | None = None,
    max_bytes: int = DEFAULT_MAX_EVENT_BYTES,
) -> tuple[Event, tuple[Any, ...]]:
    """:func:`parse_event`, and the event's fields as one tuple in
    ``Event.__struct_fields__`` order (``msgspec.structs.astuple``). For
    compiled callers on the hot path: a msgspec Struct's attributes are a
    generic look-up each from there (~110 instructions), the tuple one C
    call, and the checks here read the same tuple."""
    event = _fast(data, max_bytes)
    if event is not None:
        fields = _ASTUPLE(event)
        if _accept_fields(fields, key) and _said_once(data, fields):
            return event, fields
    event = _slow(data, key)
    return event, _ASTUPLE(event)


# Duplicate keys. JSON parsers (msgspec and orjson included) keep the last of
# two values given for one name, silently: {"epoch": 17, ..., "epoch": 18}
# would be read as epoch 18 here and as 17 by a consumer that keeps the first.
# An event that names a field twice is invalid, naming the field (SPEC §7:
# a clear reason). Only the event object's own names are checked; a repeat
# inside ``attrs`` (free-form detail, never interpreted) is left alone.
#
# The check costs one C pass over the bytes for a usual event. Every name and
# every string value in the line takes at least two '"' bytes, so the line
# holds at least as many as the decoded fields account for (4 per string
# field, 2 per integer field; for ``attrs``, 2 for its name and 2 per string
# in it, names included, while it holds at most _ATTRS_COUNTED values); a
# repeated name adds two more. Exactly that many means no name is repeated.
# An event with "v", a null, an unknown field, an escaped '"' or a larger
# ``attrs`` has more: then the object is decoded again with each value
# left raw and encoded back (msgspec, in C: each name once, 2 '"' each when
# no name holds a '"', each raw value as it was), and the line must hold as
# many '"' as that (a repeated name and its other value would add 2 or more).
# Anything else goes to the slow path, whose exact check (_repeated_name)
# reads the object's names in order and names the field given twice.
_F_SEQ: Final = 4
# effect_key, sink, event_id, run_id, ts (_F_EFFECT_KEY is 5).
_F_SINK: Final = 6
_F_EVENT_ID: Final = 7
_F_RUN_ID: Final = 8
_F_TS: Final = 9
_F_ATTRS: Final = 10
#: type, workflow_key, worker_id (4 each) and epoch (2): always there.
_BASE_QUOTES: Final = 14
_RAW_VALUES: Final = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
_ENCODE: Final = msgspec.json.encode
#: Values of ``attrs`` (strings, numbers, lists, objects) counted at most.
_ATTRS_COUNTED: Final = 64
if Event.__struct_fields__[_F_SEQ : _F_ATTRS + 1] != (
    "seq",
    "effect_key",
    "sink",
    "event_id",
    "run_id",
    "ts",
    "attrs",
):  # pragma: no cover - records.py changed
    raise ImportError("streams.core.records.Event fields moved; update validate._F_*")


def _said_once(data: bytes | bytearray | memoryview | str, fields: tuple[Any, ...]) -> bool:
    """Whether the event object names no field twice (see above); False
    also when that takes the exact check (the slow path)."""
    # One test per field (compiled: a tuple read and a compare each, where a
    # slice and its count() would allocate).
    quotes = _BASE_QUOTES
    if fields[_F_EFFECT_KEY] is not None:
        quotes += 4
    if fields[_F_SINK] is not None:
        quotes += 4
    if fields[_F_EVENT_ID] is not None:
        quotes += 4
    if fields[_F_RUN_ID] is not None:
        quotes += 4
    if fields[_F_TS] is not None:
        quotes += 4
    if fields[_F_SEQ] is not None:
        quotes += 2
    attrs = fields[_F_ATTRS]
    if attrs is not None:
        inside = _attrs_quotes(attrs)
        quotes = -1 if inside < 0 else quotes + 2 + inside
    if isinstance(data, memoryview):
        data = data.tobytes()
    if isinstance(data, str):
        data = data.encode()
    found = data.count(b'"')
    if found == quotes:
        return True
    try:
        raw = _RAW_VALUES(data)
    except msgspec.DecodeError:
        return False
    if "".join(raw).count('"'):  # a name with a '"' in it: the exact check says
        return False
    return found == _ENCODE(raw).count(b'"')


def _attrs_quotes(attrs: Any) -> int:
    """The fewest '"' bytes ``attrs`` can be written with: 2 per string in
    it, names included (a name given twice in it was decoded once: fewer,
    still a lower bound); -1 past :data:`_ATTRS_COUNTED` values."""
    n = 0
    seen = 0
    stack: list[Any] = [attrs]
    while stack:
        value = stack.pop()
        seen += 1
        if seen > _ATTRS_COUNTED:
            return -1
        if type(value) is str:
            n += 2
        elif type(value) is dict:
            n += 2 * len(value)
            stack.extend(value.values())
        elif type(value) is list:
            stack.extend(value)
    return n


#: The tokens that say where a name is: strings, brackets and colons (numbers,
#: literals and whitespace need not be read).
_TOKEN: Final = re.compile(rb'"(?:[^"\\]|\\.)*"|[][{}:]')


def _repeated_name(data: bytes | bytearray | memoryview | str) -> str | None:
    """The first name the top-level JSON object of ``data`` gives twice, or
    None. ``data`` is one JSON object (orjson read it). The names are found
    by their tokens (a string followed by ':' at depth 1), without parsing
    the values: nothing here has a nesting limit, so whether a repeat is
    seen never depends on how deep ``attrs`` goes."""
    raw = data.encode() if isinstance(data, str) else bytes(data)
    seen: set[str] = set()
    depth = 0
    last: bytes = b""
    for m in _TOKEN.finditer(raw):
        token = m.group()
        c = token[0]
        if c == 0x22:  # '"'
            last = token
            continue
        if c == 0x7B or c == 0x5B:  # '{', '['
            depth += 1
        elif c == 0x7D or c == 0x5D:  # '}', ']'
            depth -= 1
        elif depth == 1:  # ':' after a name of the event object
            name: str = json.loads(last)
            if name in seen:
                return name
            seen.add(name)
    return None


def _fast(data: bytes | bytearray | memoryview | str, max_bytes: int) -> Event | None:
    """The size check, then msgspec's decode and type checks in C: the
    event, or None for the slow path to explain."""
    if len(data) > max_bytes:
        raise InvalidEvent(RECORD_FIELD, f"event is {len(data)} bytes, the limit is {max_bytes}")
    try:
        return _DECODE(data)
    except _FAST_ERRORS:
        return None


def _slow(data: bytes | bytearray | memoryview | str, key: bytes | None) -> Event:
    """The event, or :class:`InvalidEvent` with the exact reason: for what
    the fast path refused."""
    # Slow path, for rejections (and the rare valid shape msgspec refuses, such
    # as "v": null): parse generically and say exactly what is wrong.
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise InvalidEvent(RECORD_FIELD, _malformed(data, exc)) from None
    except RecursionError:
        raise InvalidEvent(RECORD_FIELD, "malformed JSON: nested too deeply") from None
    if type(doc) is dict:
        twice = _repeated_name(data)
        if twice is not None:
            shown = twice if len(twice) <= 64 else twice[:64] + "..."
            raise InvalidEvent(
                shown, "is given twice (a duplicate JSON key; parsers differ on which one counts)"
            )
        if type(doc.get("epoch")) is float or type(doc.get("seq")) is float:
            doc = _exact_integers(data, doc)
    return _explain(doc, key)


def _malformed(data: bytes | bytearray | memoryview | str, exc: Exception) -> str:
    """Why orjson refused ``data``: bytes that are not UTF-8 are named by
    their position (orjson's own message speaks of surrogates and columns)."""
    if not isinstance(data, str):
        raw = bytes(data)
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as bad:
            return f"not valid UTF-8 at byte {bad.start} (0x{raw[bad.start]:02x}, counting from 0)"
    return f"malformed JSON: {exc}"


def _exact_integers(
    data: bytes | bytearray | memoryview | str, doc: dict[str, Any]
) -> dict[str, Any]:
    """``doc`` re-read with exact integers. orjson reads an integer literal
    beyond 64 bits as a float, which would be reported as "a float"; the
    standard library keeps it an integer, so an epoch of 2**70 is reported as
    out of range. Only on this rejection path, and ``data`` is valid JSON."""
    try:
        text = data if isinstance(data, str) else bytes(data).decode("utf-8")
        exact = json.loads(text)
    except (ValueError, RecursionError):  # e.g. an integer over Python's digit limit
        return doc
    return exact if type(exact) is dict else doc
