"""The JSON Schemas (draft 2020-12) of the event and finding records hold the SPEC:
they are valid, the fixture and generated events validate, every finding the detector
emits validates, and the event schema agrees with parse_event where JSON Schema can
express the rule."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from streams.core import InvalidEvent, event_to_dict, parse_event
from tests.core.conftest import acq, com, prog, run
from tests.strategies import arrival_orders, multi_workflow_events

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "schemas"
FIXTURE = ROOT / "examples" / "reference.jsonl"


def _schema(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((SCHEMAS / f"{name}.schema.json").read_text("utf-8"))
    return doc


def _validator(name: str) -> Draft202012Validator:
    return Draft202012Validator(_schema(name))


@pytest.mark.parametrize("name", ["event", "finding"])
def test_schema_is_valid_draft_2020_12(name: str) -> None:
    """schemas/<name>.schema.json is a valid draft 2020-12 schema that declares its draft."""
    doc = _schema(name)
    Draft202012Validator.check_schema(doc)
    assert doc.get("$schema") == "https://json-schema.org/draft/2020-12/schema"


def test_every_fixture_line_validates_against_event_schema() -> None:
    """Each of the sixteen fixture lines is a valid event by the schema."""
    validator = _validator("event")
    lines = [line for line in FIXTURE.read_bytes().splitlines() if line.strip()]
    assert len(lines) == 16
    for line in lines:
        validator.validate(orjson.loads(line))


def test_fixture_findings_validate_against_finding_schema() -> None:
    """The four fixture findings (every revision emitted) validate as finding records."""
    validator = _validator("finding")
    events = [
        (parse_event(line), n)
        for n, line in enumerate(FIXTURE.read_bytes().splitlines(), start=1)
        if line.strip()
    ]
    emitted = run(events).emitted
    assert len({f.finding_id for f in emitted}) == 4
    for f in emitted:
        validator.validate(orjson.loads(f.to_json()))


def test_arrival_ordered_and_commit_findings_validate() -> None:
    """Findings with null seqs (arrival ordering) and commit-family findings validate."""
    validator = _validator("finding")
    emitted = run(
        [
            acq(17, "a"),
            acq(18, "b"),
            prog(17, "a"),
            com(17, "a", None, "X"),
            com(18, "b", None, "X"),
        ]
    ).emitted
    assert {f.kind.value for f in emitted} >= {
        "stale_activity",
        "stale_commit",
        "conflicting_commit",
    }
    for f in emitted:
        validator.validate(f.to_dict())


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_every_emitted_finding_validates(data: st.DataObject) -> None:
    """Every finding revision the detector emits on generated workflows (with or without
    seq) validates against the finding schema, and every generated event against the
    event schema."""
    with_seq = data.draw(st.booleans())
    events = data.draw(multi_workflow_events(with_seq=with_seq))
    if with_seq:
        events = data.draw(arrival_orders(events))
    event_validator = _EVENT
    finding_validator = _FINDING
    for e in events:
        event_validator.validate(event_to_dict(e))
    for f in run(events).emitted:
        finding_validator.validate(orjson.loads(f.to_json()))


_EVENT = _validator("event")
_FINDING = _validator("finding")

_BASE: dict[str, Any] = {
    "type": "effect_committed",
    "workflow_key": "k",
    "epoch": 17,
    "worker_id": "w",
    "seq": 8,
    "effect_key": "e",
}


def _doc(**over: Any) -> dict[str, Any]:
    doc = dict(_BASE)
    for name, value in over.items():
        if value is _DROP:
            doc.pop(name, None)
        else:
            doc[name] = value
    return doc


_DROP = object()

# Documents parse_event rejects and JSON Schema can express the rule for. (Integral floats
# such as 1.0 are integers to JSON Schema, so they are left to the code.)
_REJECTED = [
    _doc(type=_DROP),
    _doc(workflow_key=_DROP),
    _doc(epoch=_DROP),
    _doc(worker_id=_DROP),
    _doc(effect_key=_DROP),
    _doc(effect_key=None),
    _doc(type="outcome_verified", effect_key=_DROP),
    _doc(type="teleport"),
    _doc(epoch=True),
    _doc(epoch=17.5),
    _doc(epoch="17"),
    _doc(epoch=-1),
    _doc(seq=-1),
    _doc(seq=False),
    _doc(workflow_key=""),
    _doc(workflow_key="k" * 513),
    _doc(worker_id="w" * 257),
    _doc(effect_key="e" * 1025),
    _doc(worker_id=7),
    _doc(attrs="x"),
    _doc(v=2),
    _doc(v="1"),
]

_ACCEPTED = [
    _doc(),
    _doc(seq=_DROP),
    _doc(seq=None, sink=None, event_id=None, run_id=None, ts=None, attrs=None, v=None),
    _doc(type="progress", effect_key=_DROP),
    _doc(type="lease_acquired", effect_key=None),
    _doc(epoch=0, seq=(1 << 63) - 1),
    _doc(workflow_key="k" * 512, worker_id="w" * 256, effect_key="é" * 1024),
    _doc(v=1, unknown_field={"x": [1]}, another=None),
]


@pytest.mark.parametrize("doc", _REJECTED, ids=lambda d: json.dumps(d)[:60])
def test_event_schema_rejects_what_the_code_rejects(doc: dict[str, Any]) -> None:
    """A document the validator rejects is also invalid by the event schema."""
    with pytest.raises(InvalidEvent):
        parse_event(orjson.dumps(doc))
    assert list(_EVENT.iter_errors(doc)), "schema accepted an event the code rejects"


@pytest.mark.parametrize("doc", _ACCEPTED, ids=lambda d: json.dumps(d)[:60])
def test_event_schema_accepts_what_the_code_accepts(doc: dict[str, Any]) -> None:
    """A document the validator accepts (nulls as absent, extra fields, range ends) is
    valid by the event schema."""
    parse_event(orjson.dumps(doc))
    _EVENT.validate(doc)


_FINDING_FIELDS = [
    "finding_id",
    "revision",
    "kind",
    "severity",
    "workflow_key",
    "stale_epoch",
    "stale_worker",
    "current_epoch",
    "current_worker",
    "transition_seq",
    "transition_implied",
    "epochs",
    "event_type",
    "event_seq",
    "event_offset",
    "effect_key",
    "sink",
    "sink_outcome",
    "same_owner",
    "ordering",
    "evidence",
    "action",
    "confidence",
]


def test_finding_to_dict_is_plain_json_in_field_order() -> None:
    """Finding.to_dict gives the SPEC fields in their order as plain builtins (str, not
    enums; lists, not tuples; evidence as dicts) and from_dict reads it back equal."""
    emitted = run(
        [acq(1, "a"), acq(2, "b"), com(1, "a", None, "X"), com(2, "b", None, "X")]
    ).emitted
    conflicting = [f for f in emitted if f.kind.value == "conflicting_commit"]
    assert conflicting and conflicting[-1].epochs == (1, 2)
    for f in emitted:
        doc = f.to_dict()
        assert list(doc) == _FINDING_FIELDS
        for name in ("kind", "severity", "confidence"):
            assert type(doc[name]) is str
        assert type(doc["evidence"]) is list and all(type(e) is dict for e in doc["evidence"])
        assert list(doc["evidence"][0]) == ["position", "epoch", "worker_id", "type", "effect_key"]
        assert doc["epochs"] is None or type(doc["epochs"]) is list
        assert type(f.from_dict(doc)) is type(f) and f.from_dict(doc) == f
    assert conflicting[-1].to_dict()["epochs"] == [1, 2]
