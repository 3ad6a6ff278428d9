"""An event that names a field twice is invalid, naming the field (issue 43:
JSON parsers keep the last value silently). The quick checks in
streams/core/validate.py never let a repeat through, whatever the spelling
(escapes, spaces), the values or what ``attrs`` holds; and the exact check
finds the same name the standard library's pairs do."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.validate import InvalidEvent, _repeated_name, parse_event

NAMES = st.text(alphabet='ab"\\é:{}[], \x1b', max_size=4)
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | NAMES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(NAMES, inner, max_size=3),
    max_leaves=8,
)
BASE: dict[str, Any] = {"type": "progress", "workflow_key": "k", "epoch": 1, "worker_id": "w"}
OPTIONAL: dict[str, Any] = {
    "seq": 4,
    "effect_key": "fx",
    "sink": "s",
    "event_id": "e",
    "run_id": "r",
    "ts": "t",
    "v": 1,
    "x-extra": [1, {"a": "b"}],
}


def _pairs_reference(text: str) -> str | None:
    last: list[list[tuple[str, Any]]] = [[]]

    def hook(items: list[tuple[str, Any]]) -> dict[str, Any]:
        last[0] = items
        return dict(items)

    json.loads(text, object_pairs_hook=hook)
    seen: set[str] = set()
    for name, _ in last[0]:
        if name in seen:
            return name
        seen.add(name)
    return None


def _spell(name: str, escaped: bool, spaced: bool) -> str:
    key = "".join(f"\\u{ord(c):04x}" for c in name) if escaped else json.dumps(name)[1:-1]
    return f'"{key}"' + (" : " if spaced else ":")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(NAMES, VALUES), min_size=1, max_size=5), st.booleans())
def test_the_exact_check_finds_what_the_standard_library_pairs_hold(
    items: list[tuple[str, Any]], ascii_only: bool
) -> None:
    """Any object, nested repeats and escaped quotes included: the same first repeat (or none)."""
    text = (
        "{"
        + ",".join(
            json.dumps(k, ensure_ascii=ascii_only) + ":" + json.dumps(v, ensure_ascii=ascii_only)
            for k, v in items
        )
        + "}"
    )
    assert _repeated_name(text.encode()) == _pairs_reference(text)


@settings(max_examples=300, deadline=None)
@given(
    st.sets(st.sampled_from(sorted(OPTIONAL)), max_size=len(OPTIONAL)),
    st.one_of(st.none(), st.dictionaries(NAMES, VALUES, max_size=3)),
    st.integers(0, 20),
    st.booleans(),
    st.booleans(),
    st.booleans(),
)
def test_a_repeated_field_is_never_accepted(
    present: set[str],
    attrs: dict[str, Any] | None,
    pick: int,
    escaped: bool,
    spaced: bool,
    null: bool,
) -> None:
    """The event is valid once; with any field named again (any spelling, any value) it is
    invalid and the reason names that field."""
    doc = {**BASE, **{k: OPTIONAL[k] for k in present}}
    if attrs is not None:
        doc["attrs"] = attrs
    once = json.dumps(doc)
    twice = sorted(doc)[pick % len(doc)]
    assert parse_event(once.encode()).workflow_key == "k"
    again = "null" if null else json.dumps(doc.get(twice, 7))
    line = once[:-1] + ", " + _spell(twice, escaped, spaced) + again + "}"
    with pytest.raises(InvalidEvent) as err:
        parse_event(line.encode())
    assert err.value.field == twice
    assert "is given twice" in err.value.reason
