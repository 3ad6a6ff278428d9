"""The bad-input generator really produces every SPEC §7 class, all rejected by validation."""

from __future__ import annotations

from collections import Counter

import pytest

from streams.core.validate import parse_event
from streams.errors import InvalidEvent
from tests.faults.bad_input import BAD_CLASSES, bad_records


def test_every_generated_bad_record_is_rejected_with_a_reason() -> None:
    """Each of 2,000 generated records is refused by parse_event with a non-empty reason,
    and every class (malformed, wrong type, missing, oversize, unknown type/version,
    key mismatch, binary, deep nesting...) occurs."""
    records = bad_records(2_000, [f"wf-{i}" for i in range(20)])
    assert set(Counter(cls for _k, _v, cls in records)) == set(BAD_CLASSES)
    for key, value, cls in records:
        with pytest.raises(InvalidEvent) as raised:
            parse_event(value, key=key)
        assert str(raised.value), cls
