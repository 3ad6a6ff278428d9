"""Key state format: changelog values written by an earlier build still restore.

``tests/core/data/changelog-v1.jsonl`` holds one key's changelog values as
fencewatch wrote them at commit 8b9115f (``KeyState`` format ``v`` 1, one
without and one with the status trailer). A build that changes the encoding
must still restore them, so an upgrade restores an existing changelog.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from streams.core import Detector, KeyState, parse_event
from streams.core.detector import DetectorConfig
from streams.core.errors import StateError
from streams.live.processor import Processor, SourceRecord, split_value

DATA = Path(__file__).resolve().parent / "data" / "changelog-v1.jsonl"
KEY = "tenant-1/export/7"


def _records() -> list[dict[str, Any]]:
    lines = DATA.read_text().splitlines()
    return [json.loads(line) for line in lines if line and not line.startswith("#")]


def _values() -> list[bytes]:
    return [base64.b64decode(r["value"]) for r in _records()]


def _event(kind: str, epoch: int, worker: str, seq: int, **extra: Any) -> bytes:
    doc = {"type": kind, "workflow_key": KEY, "epoch": epoch, "worker_id": worker, "seq": seq}
    return orjson.dumps({**doc, **extra})


@pytest.mark.parametrize("index", [0, 1], ids=["bare-state", "with-status-trailer"])
def test_an_old_changelog_value_restores_the_key_state(index: int) -> None:
    """A v1 changelog value restores the key's events, horizon, findings and counters."""
    state_bytes, meta = split_value(_values()[index])
    assert (meta is not None) == (index == 1)
    state = KeyState.from_bytes(state_bytes)
    assert len(state) == 8
    assert state.max_major == 14
    assert state.horizon == (12, 0, 2, 2, "w-b", "")
    assert len(state.emitted) == 3
    assert state.counters == {
        "events": 15,
        "redeliveries_dropped": 1,
        "evicted": 6,
        "late_beyond_horizon": 0,
        "findings_forgotten": 0,
    }
    assert all(state.retains_id(e) for e in ("e1", "e3", "e4", "e5", "e6"))
    assert not state.retains_id("e2")


def test_an_old_changelog_value_is_written_back_byte_for_byte() -> None:
    """Restored and encoded again, a v1 state is the same bytes (the format is unchanged)."""
    state_bytes, _meta = split_value(_values()[0])
    assert KeyState.from_bytes(state_bytes).to_bytes() == state_bytes


def test_a_stored_event_whose_seq_contradicts_its_position_is_corrupt() -> None:
    """An event row's seq is implied by its position (the event keeps only the
    position): a row where they disagree is refused as corrupt, not restored."""
    state_bytes, _meta = split_value(_values()[0])
    doc = orjson.loads(state_bytes)
    row = next(r for r in doc["e"] if r[1] == 0)
    row[2] = row[0] + 1
    with pytest.raises(StateError, match="seq does not match its position"):
        KeyState.from_bytes(orjson.dumps(doc))


@pytest.mark.parametrize("fields", [9, 11])
def test_a_stored_event_row_of_another_length_is_corrupt(fields: int) -> None:
    """An event row has ten fields: a shorter or longer one is refused as corrupt."""
    state_bytes, _meta = split_value(_values()[0])
    doc = orjson.loads(state_bytes)
    row = doc["e"][0]
    doc["e"][0] = row[:fields] if fields < len(row) else [*row, None]
    with pytest.raises(StateError, match=f"corrupt key state: .*{fields} fields, not 10"):
        KeyState.from_bytes(orjson.dumps(doc))


def test_a_restored_old_state_carries_on_detecting() -> None:
    """Restored from the old changelog, the processor drops a redelivery, does not re-raise
    what was emitted, and raises a new finding for new stale evidence."""
    stored = {KEY.encode(): _values()[1]}
    processor = Processor(
        Detector(DetectorConfig(max_events_per_key=8)),
        findings_topic="f",
        dlq_topic="d",
        status_topic="s",
    )

    def batch(value: bytes, offset: int) -> Any:
        rec = SourceRecord("events", 0, offset, KEY.encode(), value, 1_700_000_001_000)
        out = processor.process_batch([rec], stored.get)
        for key, _partition, blob in out.states:
            stored[key] = blob
        return out

    redelivered = batch(_event("lease_acquired", 2, "w-b", 4, event_id="e4"), 200)
    assert redelivered.findings == ()
    again = batch(_event("progress", 1, "w-a", 15), 201)  # stale, but already raised
    assert again.findings == ()
    new = batch(_event("effect_committed", 1, "w-a", 16, effect_key="fx-2"), 202)
    assert [(f.kind.value, f.revision, f.effect_key) for f in new.findings] == [
        ("stale_commit", 1, "fx-2")
    ]
    state = KeyState.from_bytes(split_value(stored[KEY.encode()])[0])
    assert state.counters["events"] == 18 and state.counters["redeliveries_dropped"] == 2


def test_encoded_state_round_trips_after_appends_inserts_and_eviction() -> None:
    """After tail appends, late inserts and evictions the encoded state decodes to
    the same events and encodes to the same bytes again."""
    detector = Detector(DetectorConfig(max_events_per_key=8))
    state = detector.new_state()
    seqs = [1, 2, 3, 5, 4, 9, 10, 6, 11, 12, 13, 14, 15, 7, 16, 17, 18, 19, 20]
    for i, seq in enumerate(seqs):
        kind = "lease_acquired" if seq in (1, 10) else "progress"
        epoch = 2 if seq >= 10 else 1
        detector.process(state, parse_event(_event(kind, epoch, f"w{epoch}", seq)), i)
        written = state.to_bytes()
        assert written == KeyState.from_bytes(written).to_bytes()
        assert orjson.loads(written)["e"] == [ev.row() for ev in state.events]
