"""Batch processing (``Processor.process_batch``) against per-event processing:
same outputs in the same order, same final state, one state write per key."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from streams.core import Detector
from streams.core.stored import join_value, split_value
from streams.live.processor import (
    INTERNAL_ERROR,
    OutRecord,
    Processor,
    SourceRecord,
    headers_dict,
)
from tests.live.conftest import ExplodingDetector

FIXTURE = Path(__file__).resolve().parents[2] / "examples" / "reference.jsonl"
BAD = [b"{not json", b'{"type":"teleported"}', b"", b'{"type":"progress","epoch":1.5}']


def make(detector: Any = None) -> Processor:
    return Processor(detector or Detector(), findings_topic="f", dlq_topic="e.dlq")


def fixture_lines() -> list[bytes]:
    return [line.strip().encode() for line in FIXTURE.read_text().splitlines() if line.strip()]


def key_of(value: bytes) -> bytes | None:
    try:
        return str(json.loads(value)["workflow_key"]).encode()
    except (ValueError, KeyError, TypeError):
        return None


def stream(n_keys: int, seed: int, partitions: int = 3, bad_every: int = 0) -> list[SourceRecord]:
    """Handovers with stale activity of the old owner, keys interleaved at
    random, some events late, some invalid events in between; each key in
    one partition (by a stable hash), offsets counted per partition."""
    rng = random.Random(seed)
    per_key: list[list[bytes]] = []
    for k in range(n_keys):
        wkey, seq, evs = f"wf-{k}", 0, []
        for e in range(1, rng.randint(2, 5)):
            kinds = ["lease_acquired", "progress", "effect_attempted", "effect_committed"]
            if e > 1 and rng.random() < 0.6:
                kinds += ["stale:progress", "stale:effect_committed"]
            for kind in kinds:
                seq += 1
                epoch = e
                if kind.startswith("stale:"):
                    kind, epoch = kind[6:], e - 1
                doc: dict[str, Any] = {
                    "type": kind,
                    "workflow_key": wkey,
                    "epoch": epoch,
                    "worker_id": f"w{epoch}",
                    "seq": seq,
                }
                if kind.startswith("effect"):
                    doc["effect_key"] = f"fx-{rng.randint(0, 2)}"
                evs.append(json.dumps(doc).encode())
        for i in range(1, len(evs)):
            if rng.random() < 0.1:
                evs[i - 1], evs[i] = evs[i], evs[i - 1]
        per_key.append(evs)
    values: list[bytes] = []
    cursors = [0] * n_keys
    live = list(range(n_keys))
    while live:
        k = rng.choice(live)
        values.append(per_key[k][cursors[k]])
        cursors[k] += 1
        if cursors[k] == len(per_key[k]):
            live.remove(k)
        if bad_every and rng.random() < 1 / bad_every:
            values.append(rng.choice(BAD))
    offsets = [0] * partitions
    out = []
    for v in values:
        key = key_of(v)
        p = sum(key or b"x") % partitions
        out.append(SourceRecord("e", p, offsets[p], key, v))
        offsets[p] += 1
    return out


def per_event(
    proc: Processor, records: list[SourceRecord]
) -> tuple[dict[int, list[OutRecord]], dict[bytes, bytes], int]:
    """Batches of one: the per-event reference."""
    return batched(proc, records, 1)


def batched(
    proc: Processor, records: list[SourceRecord], size: int
) -> tuple[dict[int, list[OutRecord]], dict[bytes, bytes], int]:
    store: dict[bytes, bytes] = {}
    out: dict[int, list[OutRecord]] = {}
    writes = 0
    for i in range(0, len(records), size):
        o = proc.process_batch(records[i : i + size], store.get)
        for p, recs in o.records.items():
            out.setdefault(p, []).extend(recs)
        for key, _p, state in o.states:
            store[key] = state
            writes += 1
    return out, store, writes


@pytest.mark.parametrize("size", [1, 3, 50, 700, 100_000])
@pytest.mark.parametrize("seed", [1, 2])
def test_batches_give_the_per_event_outputs_and_final_states(size: int, seed: int) -> None:
    """For any batch size, the records produced per source partition (findings
    and dead letters, in order) and every key's final state equal per-event
    processing, with at most as many state writes."""
    records = stream(60, seed, bad_every=15)
    want_out, want_store, want_writes = per_event(make(), records)
    got_out, got_store, got_writes = batched(make(), records, size)
    assert got_out == want_out
    assert got_store == want_store
    assert sum(len(v) for v in want_out.values()) > 50  # findings were raised
    assert got_writes <= want_writes
    if size >= len(records):
        assert got_writes == len(want_store)  # one write per key


def test_a_batch_with_bad_events_dead_letters_them_and_keeps_the_findings() -> None:
    """Invalid events in the middle of a batch each become one dead letter
    (with their own offset), and the good events around them give the
    fixture's four findings (same revisions) and states for the same keys."""
    good = fixture_lines()
    values: list[bytes] = []
    for i, v in enumerate(good):
        values.append(v)
        if i % 4 == 1:
            values.append(BAD[i % len(BAD)])
    records = [SourceRecord("e", 0, off, key_of(v), v) for off, v in enumerate(values)]
    o = make().process_batch(records, {}.get)
    dead = [r for r in o.records[0] if r.topic == "e.dlq"]
    found = [r for r in o.records[0] if r.topic == "f"]
    bad_offsets = [off for off, v in enumerate(values) if v not in good]
    assert [int(headers_dict(r.headers)["fencewatch-source-offset"]) for r in dead] == bad_offsets
    assert len(o.errors) == len(bad_offsets)
    latest = {json.loads(r.value)["finding_id"]: json.loads(r.value)["kind"] for r in found}
    assert sorted(latest.values()) == [
        "conflicting_commit",
        "stale_activity",
        "stale_attempt",
        "stale_commit",
    ]
    clean = [SourceRecord("e", 0, off, key_of(v), v) for off, v in enumerate(good)]
    c = make().process_batch(clean, {}.get)
    assert [(f.finding_id, f.revision) for f in o.findings] == [
        (f.finding_id, f.revision) for f in c.findings
    ]
    assert {k for k, _p, _s in o.states} == {k for k, _p, _s in c.states}


def test_a_detector_failure_mid_batch_leaves_the_state_as_before_that_event() -> None:
    """An event the detector fails on in the middle of a batch is dead-lettered
    as an internal error, and its key's state is the one per-event processing
    keeps (the earlier events of the batch applied, the failing one not)."""
    lines = fixture_lines()
    records = [SourceRecord("e", 0, off, key_of(v), v) for off, v in enumerate(lines)]
    want_out, want_store, _ = per_event(make(ExplodingDetector()), records)
    got_out, got_store, _ = batched(make(ExplodingDetector()), records, len(records))
    assert got_out == want_out
    assert got_store == want_store
    errors = [headers_dict(r.headers) for r in got_out[0] if r.topic == "e.dlq"]
    assert [h["fencewatch-error-reason"] for h in errors] == [INTERNAL_ERROR]


def test_a_key_in_two_partitions_gets_a_state_write_in_each() -> None:
    """A key whose events arrive through two partitions (a producer not
    partitioning by key) gets, in each partition run, the state per-event
    writes would have left last in that partition."""
    lines = [v for v in fixture_lines() if b"export-ledger" in v]
    records = [
        SourceRecord("e", 0 if i < 3 else 1, i, b"export-ledger", v) for i, v in enumerate(lines)
    ]
    per: dict[int, bytes] = {}
    proc, store = make(), {}  # type: ignore[var-annotated]
    for r in records:
        o = proc.process_batch([r], store.get)
        ((_key, _p, state),) = o.states
        store[b"export-ledger"] = per[r.partition] = state
    o = make().process_batch(records, {}.get)
    assert [(p, s) for _k, p, s in o.states] == sorted(per.items())


@pytest.mark.parametrize("size", [1, 7, 100_000])
def test_a_stored_status_meta_is_the_encoders_bytes(size: int) -> None:
    """With the status on, every stored value is its state's bytes joined with
    ``encode_meta`` of its meta, whether a record's timestamp is known or not
    (the batch formats the usual meta itself)."""
    proc = Processor(Detector(), findings_topic="f", dlq_topic="e.dlq", status_topic="s")
    records = [
        SourceRecord(r.topic, r.partition, r.offset, r.key, r.value, None if i % 5 else 1_000 + i)
        for i, r in enumerate(stream(40, 3))
    ]
    store: dict[bytes, bytes] = {}
    # (any stale epoch, updated_ms known) of the metas written
    kinds: set[tuple[bool, bool]] = set()
    for i in range(0, len(records), size):
        o = proc.process_batch(records[i : i + size], store.get)
        for key, _p, value in o.states:
            store[key] = value
            state, meta = split_value(value)
            assert meta is not None
            assert value == join_value(state, meta)
            kinds.add((bool(meta.seen), meta.updated_ms is not None))
    assert {(False, True), (True, True)} <= kinds
    if size == 1:  # a key's first event without a timestamp: updated_ms null
        assert (False, False) in kinds
