"""The live processor's logic without a broker, one record per batch (the
per-event case of the batch path): bytes in, records and state out."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from streams.core import Detector
from streams.live.processor import (
    HEADER_ERROR_FIELD,
    HEADER_ERROR_REASON,
    HEADER_FINDING_ID,
    HEADER_REVISION,
    HEADER_SEVERITY,
    INTERNAL_ERROR,
    BatchOutcome,
    OutRecord,
    Processor,
    SourceRecord,
    headers_dict,
)
from tests.live.conftest import ExplodingDetector

FIXTURE = Path(__file__).resolve().parents[2] / "examples" / "reference.jsonl"


def fixture_lines() -> list[bytes]:
    return [line.strip().encode() for line in FIXTURE.read_text().splitlines() if line.strip()]


def make(detector: Any = None, **kw: Any) -> Processor:
    return Processor(detector or Detector(), findings_topic="f", dlq_topic="e.dlq", **kw)


def one(proc: Processor, record: SourceRecord, store: dict[bytes, bytes]) -> BatchOutcome:
    """Process ``record`` as a batch of one and write its state to ``store``."""
    out = proc.process_batch([record], store.get)
    for key, _partition, state in out.states:
        store[key] = state
    return out


def records_of(out: BatchOutcome) -> list[OutRecord]:
    return [r for recs in out.records.values() for r in recs]


def feed(
    proc: Processor, store: dict[bytes, bytes], values: list[bytes], start: int = 0
) -> list[BatchOutcome]:
    outcomes = []
    for offset, value in enumerate(values, start):
        key = json.loads(value)["workflow_key"].encode() if value.startswith(b"{") else b"k"
        outcomes.append(one(proc, SourceRecord("e", 0, offset, key, value), store))
    return outcomes


def test_reference_fixture_gives_the_four_expected_findings_with_headers() -> None:
    """The SPEC §5 fixture yields stale_activity, stale_attempt, stale_commit and
    conflicting_commit on export-ledger, each record keyed and headed."""
    store: dict[bytes, bytes] = {}
    outcomes = feed(make(), store, fixture_lines())
    records = [r for o in outcomes for r in records_of(o)]
    assert all(r.topic == "f" and r.key == b"export-ledger" for r in records)
    latest: dict[str, dict[str, Any]] = {}
    for r in records:
        doc = json.loads(r.value)
        h = headers_dict(r.headers)
        assert h[HEADER_FINDING_ID] == doc["finding_id"]
        assert h[HEADER_REVISION] == str(doc["revision"])
        assert h[HEADER_SEVERITY] == doc["severity"]
        latest[doc["finding_id"]] = doc
    kinds = sorted((d["kind"], d["event_seq"]) for d in latest.values())
    assert kinds == [
        ("conflicting_commit", 9),
        ("stale_activity", 6),
        ("stale_attempt", 7),
        ("stale_commit", 8),
    ]
    assert set(store) == {b"export-ledger", b"report-index", b"checkout-sync"}


def test_invalid_event_goes_to_dlq_with_original_bytes_and_reason() -> None:
    """Malformed JSON becomes one dead-letter record carrying the original
    bytes, the reason and the source position; no state is written."""
    proc = make()
    out = one(proc, SourceRecord("e", 3, 41, b"k", b"{nope"), {})
    assert out.states == () and out.findings == ()
    (rec,) = records_of(out)
    assert rec.topic == "e.dlq" and rec.value == b"{nope" and rec.key == b"k"
    h = headers_dict(rec.headers)
    assert "JSON" in h[HEADER_ERROR_REASON]
    assert h["fencewatch-source-topic"] == "e"
    assert h["fencewatch-source-partition"] == "3"
    assert h["fencewatch-source-offset"] == "41"


def test_key_mismatch_names_the_field() -> None:
    """A Kafka key that differs from workflow_key is rejected naming workflow_key."""
    value = fixture_lines()[0]
    out = one(make(), SourceRecord("e", 0, 0, b"other", value), {})
    assert out.errors[0][0] == "workflow_key"
    assert headers_dict(records_of(out)[0].headers)[HEADER_ERROR_FIELD] == "workflow_key"


def test_null_value_is_a_dead_letter_not_a_crash() -> None:
    """A tombstone (null value) is rejected like any malformed record."""
    out = one(make(), SourceRecord("e", 0, 0, b"k", None), {})
    assert out.errors and records_of(out)[0].topic == "e.dlq"


def test_unexpected_exception_is_dead_lettered_and_processing_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A detector exception on one event sends it to the DLQ as an internal
    error, logged once with its traceback and source position, leaves that
    key's stored state unchanged, and later events still run."""
    store: dict[bytes, bytes] = {}
    lines = fixture_lines()
    proc = make(ExplodingDetector())
    outcomes = feed(proc, store, lines[:5])
    before = store.get(b"export-ledger")
    with caplog.at_level(logging.ERROR, logger="streams.live.processor"):
        bad = one(proc, SourceRecord("e", 0, 5, b"export-ledger", lines[5]), store)
    [logged] = [r for r in caplog.records if r.name == "streams.live.processor"]
    assert logged.getMessage() == "internal error processing e[0]@5"
    assert logged.exc_info is not None and str(logged.exc_info[1]) == "boom"
    assert bad.errors == ((None, INTERNAL_ERROR),) and bad.states == ()
    assert store.get(b"export-ledger") == before
    outcomes += feed(proc, store, lines[6:], start=6)
    assert len(store) == 3 and all(not o.errors for o in outcomes)


def test_cached_state_is_not_used_when_the_table_holds_other_bytes() -> None:
    """After the table is restored to other bytes (e.g. from the changelog),
    the processor decodes the stored state, not its cached object."""
    lines = [v for v in fixture_lines() if b"export-ledger" in v]
    proc = make()
    store: dict[bytes, bytes] = {}
    feed(proc, store, lines[:3])
    # Roll the table back to an empty state for this key, as a restore of an
    # older changelog position would.
    store[b"export-ledger"] = Detector().new_state().to_bytes()
    cold = make()
    cold_store = {b"export-ledger": store[b"export-ledger"]}
    a = feed(proc, store, lines[3:], start=3)
    b = feed(cold, cold_store, lines[3:], start=3)
    assert [r.value for o in a for r in records_of(o)] == [
        r.value for o in b for r in records_of(o)
    ]


def test_state_cache_is_bounded() -> None:
    """The decoded-state cache never holds more than cache_keys entries."""
    proc = make(cache_keys=2)
    store: dict[bytes, bytes] = {}
    feed(proc, store, fixture_lines())
    assert len(proc.core.cache) <= 2
