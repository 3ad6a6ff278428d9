"""SPEC §2 and §7: every validation rule of the event record, through parse_event.

Each rejection must be an InvalidEvent whose ``field`` names the culprit (or is
None when the whole record is at fault: malformed JSON, not an object, oversize,
non-UTF-8 bytes) and whose ``reason`` is non-empty.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from streams.core import Event, EventType, InvalidEvent, parse_event, to_event

MAX = (1 << 63) - 1
EFFECT_TYPES = ["effect_attempted", "effect_committed", "effect_rejected", "outcome_verified"]
PLAIN_TYPES = ["lease_acquired", "lease_released", "progress"]


def base(**over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "type": "effect_committed",
        "workflow_key": "tenant/export/2026-07-26",
        "epoch": 17,
        "worker_id": "alpha",
        "seq": 8,
        "effect_key": "release index for 2026-07-26",
    }
    doc.update(over)
    return doc


def parse(doc: Any, **kw: Any) -> Event:
    return parse_event(orjson.dumps(doc), **kw)


def rejected(data: bytes | dict[str, Any], **kw: Any) -> InvalidEvent:
    raw = data if isinstance(data, bytes) else orjson.dumps(data)
    with pytest.raises(InvalidEvent) as info:
        parse_event(raw, **kw)
    assert info.value.reason, "a rejection carries a reason"
    return info.value


def test_valid_event_parses_to_its_fields() -> None:
    """A full valid event becomes an Event with each field as given."""
    doc = base(
        sink="release-bucket",
        event_id="el-8",
        run_id="run-1",
        ts="2026-07-26T02:00:14Z",
        attrs={"step": "commit", "n": [1, 2]},
        v=1,
    )
    e = parse(doc)
    assert e.type is EventType.EFFECT_COMMITTED
    assert (e.workflow_key, e.epoch, e.worker_id, e.seq) == (
        "tenant/export/2026-07-26",
        17,
        "alpha",
        8,
    )
    assert (e.effect_key, e.sink, e.event_id, e.run_id, e.ts) == (
        "release index for 2026-07-26",
        "release-bucket",
        "el-8",
        "run-1",
        "2026-07-26T02:00:14Z",
    )
    assert e.attrs == {"step": "commit", "n": [1, 2]}
    assert e.v == 1


@pytest.mark.parametrize("name", ["type", "workflow_key", "epoch", "worker_id"])
def test_each_required_field_missing_is_rejected(name: str) -> None:
    """Leaving out a required field rejects the event, naming the field."""
    doc = base()
    del doc[name]
    assert rejected(doc).field == name


@pytest.mark.parametrize("name", ["type", "workflow_key", "epoch", "worker_id"])
def test_required_field_null_counts_as_absent(name: str) -> None:
    """A required field given as null is missing: rejected, naming the field."""
    assert rejected(base(**{name: None})).field == name


@pytest.mark.parametrize("etype", EFFECT_TYPES)
def test_effect_key_required_for_effect_types(etype: str) -> None:
    """effect_* and outcome_verified need an effect_key; absent or null is rejected."""
    doc = base(type=etype)
    del doc["effect_key"]
    assert rejected(doc).field == "effect_key"
    assert rejected(base(type=etype, effect_key=None)).field == "effect_key"


@pytest.mark.parametrize("etype", PLAIN_TYPES)
def test_effect_key_optional_for_other_types(etype: str) -> None:
    """lease_*, progress need no effect_key (absent or null)."""
    doc = base(type=etype)
    del doc["effect_key"]
    assert parse(doc).effect_key is None
    assert parse(base(type=etype, effect_key=None)).effect_key is None


@pytest.mark.parametrize("etype", [t.value for t in EventType])
def test_every_known_type_is_accepted(etype: str) -> None:
    """All seven types of SPEC §2 are accepted."""
    assert parse(base(type=etype)).type.value == etype


@pytest.mark.parametrize("bad", ["teleport", "", "LEASE_ACQUIRED", "effect-committed"])
def test_unknown_type_is_rejected(bad: str) -> None:
    """A type outside the seven is rejected, naming type."""
    assert rejected(base(type=bad)).field == "type"


@pytest.mark.parametrize("name", ["epoch", "seq"])
@pytest.mark.parametrize(
    "bad", [True, False, 1.0, 17.5, "17", [17], {"n": 17}, -1, 1 << 63, (1 << 64) + 5]
)
def test_integer_fields_reject_non_integers_and_out_of_range(name: str, bad: Any) -> None:
    """epoch and seq must be integers in [0, 2^63): booleans, floats (even 1.0), strings,
    arrays, objects, negatives and 2^63 or more are rejected, naming the field."""
    if isinstance(bad, int) and not isinstance(bad, bool) and bad >= 1 << 64:
        raw = orjson.dumps(base(**{name: 0})).replace(
            f'"{name}":0'.encode(), f'"{name}":{bad}'.encode()
        )
        err = rejected(raw)
        # orjson cannot hold it: a whole-record parse error is acceptable too.
        assert err.field in (name, None)
        return
    if isinstance(bad, int) and not isinstance(bad, bool) and bad >= 1 << 63:
        raw = orjson.dumps(base(**{name: 0})).replace(
            f'"{name}":0'.encode(), f'"{name}":{bad}'.encode()
        )
        assert rejected(raw).field == name
        return
    assert rejected(base(**{name: bad})).field == name


@pytest.mark.parametrize("name", ["epoch", "seq"])
@pytest.mark.parametrize("good", [0, 1, MAX])
def test_integer_fields_accept_the_range_ends(name: str, good: int) -> None:
    """0 and 2^63 - 1 are valid epochs and seqs."""
    assert getattr(parse(base(**{name: good})), name) == good


def test_seq_is_optional_and_null_counts_as_absent() -> None:
    """seq may be left out or null; the event then has no seq."""
    doc = base()
    del doc["seq"]
    assert parse(doc).seq is None
    assert parse(base(seq=None)).seq is None


@pytest.mark.parametrize(
    ("name", "limit"), [("workflow_key", 512), ("worker_id", 256), ("effect_key", 1024)]
)
def test_string_length_limits(name: str, limit: int) -> None:
    """workflow_key 1-512, worker_id 1-256, effect_key 1-1024 characters: the ends are
    accepted, empty and one over are rejected, naming the field."""
    assert getattr(parse(base(**{name: "k"})), name) == "k"
    assert getattr(parse(base(**{name: "k" * limit})), name) == "k" * limit
    assert rejected(base(**{name: ""})).field == name
    assert rejected(base(**{name: "k" * (limit + 1)})).field == name


@pytest.mark.parametrize(
    ("name", "limit"), [("workflow_key", 512), ("worker_id", 256), ("effect_key", 1024)]
)
def test_string_lengths_count_characters_not_bytes(name: str, limit: int) -> None:
    """Limits are in characters: `limit` two-byte characters are accepted."""
    value = "é" * limit
    assert getattr(parse(base(**{name: value})), name) == value
    assert rejected(base(**{name: value + "é"})).field == name


@pytest.mark.parametrize("name", ["workflow_key", "worker_id", "effect_key"])
@pytest.mark.parametrize("bad", [17, True, 1.5, ["a"], {"a": 1}])
def test_string_fields_reject_other_types(name: str, bad: Any) -> None:
    """workflow_key, worker_id and effect_key must be strings, naming the field."""
    assert rejected(base(**{name: bad})).field == name


@pytest.mark.parametrize("name", ["sink", "event_id", "run_id", "ts"])
@pytest.mark.parametrize("bad", [17, True, ["a"], {"a": 1}])
def test_optional_string_fields_reject_other_types(name: str, bad: Any) -> None:
    """sink, event_id, run_id and ts, when present, must be strings, naming the field."""
    assert rejected(base(**{name: bad})).field == name


@pytest.mark.parametrize("bad", ["x", 1, True, [1]])
def test_attrs_must_be_an_object(bad: Any) -> None:
    """attrs, when present, must be an object, naming attrs."""
    assert rejected(base(attrs=bad)).field == "attrs"


@pytest.mark.parametrize("name", ["sink", "event_id", "run_id", "ts", "attrs", "v"])
def test_optional_field_null_counts_as_absent(name: str) -> None:
    """An optional field given as null is accepted and treated as absent."""
    e = parse(base(**{name: None}))
    assert getattr(e, name) == (1 if name == "v" else None)


def test_version_one_is_default_and_accepted() -> None:
    """v defaults to 1 and v = 1 is accepted."""
    assert parse(base()).v == 1
    assert parse(base(v=1)).v == 1


@pytest.mark.parametrize("bad", [0, 2, 99, "1", 1.0, True])
def test_unknown_or_mistyped_version_is_rejected(bad: Any) -> None:
    """A record version this build does not know (or not an integer) is rejected, naming v."""
    assert rejected(base(v=bad)).field == "v"


@pytest.mark.parametrize("bad", [0, 2])
def test_unknown_version_is_rejected_by_to_event_too(bad: int) -> None:
    """A document the SDK built with an unknown version is rejected by to_event, naming v."""
    with pytest.raises(InvalidEvent) as exc:
        to_event(base(v=bad))
    assert exc.value.field == "v"


def test_event_v_annotation_admits_exactly_the_known_versions() -> None:
    """Event.v's msgspec range is KNOWN_VERSIONS (the fast path relies on it and reads no v)."""
    import msgspec.inspect

    from streams.core.validate import KNOWN_VERSIONS

    (field,) = [f for f in msgspec.inspect.type_info(Event).fields if f.name == "v"]
    assert isinstance(field.type, msgspec.inspect.IntType)
    assert set(range(field.type.ge, field.type.le + 1)) == set(KNOWN_VERSIONS)


def test_unknown_extra_fields_are_ignored() -> None:
    """Unknown fields are accepted and ignored (forward compatibility)."""
    e = parse(base(priority="high", nested={"a": [1, 2]}, tenant=None))
    assert e == parse(base())


@pytest.mark.parametrize(
    "raw",
    [
        b'{"type": "progress", "workflow_key": "k"',
        b"{type: progress}",
        b"",
        b"   ",
        b'{"type": "progress"} trailing',
        b"NaN",
    ],
)
def test_malformed_json_is_rejected(raw: bytes) -> None:
    """Malformed JSON is rejected with a reason (the whole record is at fault)."""
    assert rejected(raw).field == "(record)"


@pytest.mark.parametrize("raw", [b"[]", b'"progress"', b"17", b"null", b"true", b"[{}]"])
def test_not_an_object_is_rejected(raw: bytes) -> None:
    """A JSON value that is not an object is rejected."""
    assert rejected(raw).field == "(record)"


def _padded(total: int) -> bytes:
    """A valid event of exactly ``total`` bytes (padding in an ignored field)."""
    raw = orjson.dumps(base(pad=""))
    out = orjson.dumps(base(pad="x" * (total - len(raw))))
    assert len(out) == total
    return out


def test_event_at_the_default_size_cap_is_accepted() -> None:
    """An event of exactly 64 KiB is accepted (the cap is inclusive)."""
    assert parse_event(_padded(64 * 1024)).epoch == 17


def test_oversize_event_is_rejected() -> None:
    """An event over 64 KiB is rejected by default, with a reason naming the size."""
    err = rejected(_padded(64 * 1024 + 1))
    assert err.field == "(record)"
    assert err.reason == "event is 65537 bytes, the limit is 65536"


def test_size_cap_is_configurable() -> None:
    """max_bytes lowers or raises the cap."""
    small = _padded(1000)
    assert parse_event(small, max_bytes=1000).epoch == 17
    with pytest.raises(InvalidEvent):
        parse_event(small, max_bytes=999)
    assert parse_event(_padded(70_000), max_bytes=80_000).epoch == 17


def test_kafka_key_equal_to_workflow_key_is_accepted() -> None:
    """A Kafka key equal to workflow_key (UTF-8) is fine, and no key is fine."""
    doc = base(workflow_key="tenant/é/1")
    assert parse(doc, key="tenant/é/1".encode()).workflow_key == "tenant/é/1"
    assert parse(doc, key=None).workflow_key == "tenant/é/1"


def test_kafka_key_mismatch_is_rejected() -> None:
    """A Kafka key present and different from workflow_key rejects the event."""
    err = rejected(base(workflow_key="a"), key=b"b")
    assert err.field in ("workflow_key", "key")


def test_non_utf8_kafka_key_is_rejected() -> None:
    """A Kafka key that is not UTF-8 rejects the event rather than crashing."""
    err = rejected(base(workflow_key="a"), key=b"\xff\xfe")
    assert err.field in ("workflow_key", "key")


@pytest.mark.parametrize(
    "raw",
    [
        b'{"type": "progress", "workflow_key": "k\xff", "epoch": 1, "worker_id": "w"}',
        b'{"type": "progress", "workflow_key": "k", "epoch": 1, "worker_id": "\xc3("}',
        b"\xff\xfe{}",
    ],
)
def test_non_utf8_bytes_are_rejected(raw: bytes) -> None:
    """Bytes that are not valid UTF-8 are rejected with a reason, never a crash."""
    rejected(raw)


def test_rejection_is_a_value_error_with_field_and_reason() -> None:
    """InvalidEvent is a ValueError carrying .field and .reason."""
    err = rejected(base(epoch="x"))
    assert isinstance(err, ValueError)
    assert err.field == "epoch"
    assert err.reason == "must be an integer, got a string"
    assert str(err) == "epoch: must be an integer, got a string"


def _nested(depth: int, where: str) -> bytes:
    head = b'{"type": "progress", "workflow_key": "k", "epoch": 1, "worker_id": "w", '
    return head + f'"{where}": '.encode() + b"[" * depth + b"]" * depth + b"}"


@pytest.mark.parametrize("where", ["attrs_inner", "unknown_extra"])
@pytest.mark.parametrize("depth", [1_000, 5_000, 30_000])
def test_deeply_nested_json_is_rejected_not_a_crash(where: str, depth: int) -> None:
    """Pathologically nested JSON inside the size cap (in attrs or an ignored extra field)
    is an InvalidEvent with a reason, never a RecursionError or other crash (SPEC §7:
    nothing crashes the processor)."""
    if where == "attrs_inner":
        raw = _nested(depth, "attrs").replace(b'"attrs": [', b'"attrs": {"a": [', 1) + b"}"
    else:
        raw = _nested(depth, "zzz")
    assert len(raw) <= 64 * 1024
    try:
        parse_event(raw)
    except InvalidEvent as err:
        assert err.reason


# --- issue 9 item 8: messages that say what is wrong ---------------------------------------


@pytest.mark.parametrize(
    ("name", "literal", "shown"),
    [
        ("epoch", str(2**70), str(2**70)),
        ("seq", str(10**23), str(10**23)),
        ("epoch", str(2**63), str(2**63)),
    ],
)
def test_integer_beyond_64_bits_is_out_of_range_not_a_float(
    name: str, literal: str, shown: str
) -> None:
    """An integer literal of 2**70 (beyond what a 64-bit parser keeps exact) is reported as out
    of range, 0 <= value < 2^63, never as a float."""
    fields = {"type": '"progress"', "workflow_key": '"k"', "epoch": "1", "worker_id": '"w"'}
    fields[name] = literal
    raw = ("{" + ",".join(f'"{k}":{v}' for k, v in fields.items()) + "}").encode()
    err = rejected(raw)
    assert (err.field, err.reason) == (name, f"is out of range (0 ≤ {name} < 2^63), got {shown}")
    assert "float" not in err.reason


def test_out_of_range_integer_in_a_document_is_out_of_range() -> None:
    """to_event (documents built in Python, e.g. by the SDK) says the same for 2**70."""
    with pytest.raises(InvalidEvent) as info:
        to_event({"type": "progress", "workflow_key": "k", "epoch": 2**70, "worker_id": "w"})
    assert info.value.reason == f"is out of range (0 ≤ epoch < 2^63), got {2**70}"


def test_a_real_float_is_still_a_float() -> None:
    """A float literal (1.5e30) is still reported as a float."""
    err = rejected(b'{"type":"progress","workflow_key":"k","epoch":1.5e30,"worker_id":"w"}')
    assert (err.field, err.reason) == ("epoch", "must be an integer, got a float")


@pytest.mark.parametrize(
    ("raw", "bad"),
    [
        (b'{"type": "progress", "workflow_key": "k\xff", "epoch": 1, "worker_id": "w"}', 0xFF),
        (b"\xff\xfe{}", 0xFF),
        (b'{"type": "progress", "workflow_key": "k", "epoch": 1, "worker_id": "\xc3("}', 0xC3),
    ],
)
def test_invalid_utf8_names_the_byte(raw: bytes, bad: int) -> None:
    """Bytes that are not UTF-8 are reported as "not valid UTF-8 at byte N" (the first bad
    byte, counted from 0), for the whole record, not as surrogates at column 1."""
    at = raw.index(bytes([bad]))
    err = rejected(raw)
    assert err.field == "(record)"
    assert err.reason == f"not valid UTF-8 at byte {at} (0x{raw[at]:02x}, counting from 0)"


@pytest.mark.parametrize(
    ("raw", "what"),
    [(b"[1,2]", "an array"), (b'"x"', "a string"), (b"null", "null"), (b"3", "an integer")],
)
def test_non_object_event_is_named_as_the_record(raw: bytes, what: str) -> None:
    """A JSON value that is not an object is rejected under field "(record)" (never an empty
    field name): "the event must be a JSON object"."""
    err = rejected(raw)
    assert (err.field, err.reason) == ("(record)", f"the event must be a JSON object, got {what}")
