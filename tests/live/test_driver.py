"""The live batch path through the broker-free driver (tests/support/driver.py):
findings, dead letters, the status topic, state, commits and aborted batches."""

from __future__ import annotations

import json
import random
from collections import Counter
from typing import Any

import pytest

from streams.core.replay import Replay
from streams.core.status import WorkflowStatus, status_from_replay
from streams.live.processor import split_value
from tests.live.conftest import fixture_events, scenario_events
from tests.support.driver import BatchAborted, BatchDriver


def ev(key: str, kind: str, epoch: int, worker: str, seq: int, **kw: Any) -> bytes:
    doc = {"type": kind, "workflow_key": key, "epoch": epoch, "worker_id": worker, "seq": seq}
    doc.update(kw)
    return json.dumps(doc).encode()


def replay_status(values: list[bytes]) -> dict[str, dict[str, Any]]:
    replay = Replay()
    for i, v in enumerate(values):
        replay.feed(v, offset=i, source="t")
    return {
        k: s.content() for k, s in status_from_replay(replay.states, replay.latest.values()).items()
    }


def content(status: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {k: WorkflowStatus.from_dict(v).content() for k, v in status.items()}


def test_the_reference_fixture_gives_four_findings_and_the_replays_status() -> None:
    """SPEC §5 fixture: four findings on export-ledger; the status equals a replay's."""
    d = BatchDriver()
    values = [v for _k, v in fixture_events()]
    d.pipe([d.record(v) for v in values])
    kinds = sorted(doc["kind"] for doc in d.latest_findings().values())
    assert kinds == ["conflicting_commit", "stale_activity", "stale_attempt", "stale_commit"]
    status = d.statuses()
    assert status["export-ledger"]["worst_open"] == "critical"
    assert status["export-ledger"]["current_epoch"] == 18
    assert content(status) == replay_status(values)
    assert d.committed == {0: len(values)}


def test_an_aborted_batch_leaves_nothing_and_reprocessing_gives_each_revision_once() -> None:
    """A send failing mid-batch aborts it; reprocessing from the commit emits each revision once."""
    d = BatchDriver()
    values = [v for _k, v in fixture_events()]
    records = [d.record(v) for v in values]
    d.pipe(records[:7])
    before = (list(d.outputs), dict(d.store), dict(d.committed))
    with pytest.raises(BatchAborted):
        d.pipe(records[7:12], fail_at=2)
    assert (d.outputs, d.store, d.committed) == before
    assert d.restarts == 1
    d.pipe(d.pending(records))
    revisions = d.revisions()
    assert len(revisions) == len(set(revisions))
    clean = BatchDriver()
    clean.pipe([clean.record(v) for v in values])
    assert d.latest_findings() == clean.latest_findings()
    assert d.statuses() == clean.statuses()


def test_an_abort_rolls_back_every_batch_of_the_open_transaction() -> None:
    """Two batches in one open transaction, then a failed send: none of them is visible."""
    d = BatchDriver()
    records = [d.record(v) for _k, v in fixture_events()]
    d.pipe(records[:4])
    committed = list(d.outputs)
    d.pipe(records[4:8], commit=False)
    d.pipe(records[8:12], commit=False)
    assert d.outputs == committed  # not visible before the commit
    with pytest.raises(BatchAborted):
        d.pipe(records[12:], fail_at=0)
    assert d.outputs == committed and d.committed == {0: 4}
    d.pipe(d.pending(records))
    assert len(d.revisions()) == len(set(d.revisions()))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_batches_with_aborts_give_the_replays_findings_and_status(seed: int) -> None:
    """Random batches over 3 partitions, some aborted: each finding once, status = replay."""
    rng = random.Random(seed)
    events = scenario_events(40, 4, seed=seed)
    d = BatchDriver()
    records = [
        d.record(v, key=k, partition=sum(k) % 3, timestamp=1_000 + i)
        for i, (k, v) in enumerate(events)
    ]
    while d.pending(records):
        todo = d.pending(records)
        size = rng.randint(1, 60)
        fail = rng.randint(0, 5) if rng.random() < 0.15 else None
        try:
            d.pipe(todo[:size], commit=rng.random() < 0.7, fail_at=fail)
        except BatchAborted:
            continue
        if not d.pending(records):
            d.commit()
    revisions = d.revisions()
    assert len(revisions) == len(set(revisions))
    replay = Replay()
    for i, (k, v) in enumerate(events):
        replay.feed(v, key=k, offset=i, source="t")
    assert set(d.latest_findings()) == set(replay.latest)
    assert content(d.statuses()) == replay_status([v for _k, v in events])


def test_one_status_record_per_changed_key_per_transaction_and_none_for_a_redelivery() -> None:
    """Events of a key over two batches of one transaction give one status record (the
    latest); an exact redelivery none."""
    d = BatchDriver()
    first = [ev("a", "lease_acquired", 1, "w", 1), ev("a", "progress", 1, "w", 2)]
    d.pipe([d.record(v) for v in first], commit=False)
    d.pipe([d.record(ev("a", "progress", 1, "w", 3)), d.record(ev("b", "progress", 1, "x", 1))])
    assert [r.key for r in d.topic("ownership.status")] == [b"a", b"b"]
    assert d.statuses()["a"]["last_position"] == 3
    d.pipe([d.record(first[1])])  # same seq, type, epoch: dropped by the detector
    assert len(d.topic("ownership.status")) == 2
    assert d.metric("fencewatch_status_records_total") == 2


def test_status_times_are_kafka_timestamps_and_survive_later_batches_and_a_restart() -> None:
    """last_seen_ms is the latest stale event's record timestamp, kept by later batches."""
    d = BatchDriver()
    v = [
        ev("a", "lease_acquired", 1, "old", 1),
        ev("a", "lease_acquired", 2, "new", 2),
        ev("a", "progress", 1, "old", 3),
        ev("a", "progress", 1, "old", 4),
    ]
    d.pipe([d.record(x, timestamp=t) for x, t in zip(v, [100, 200, 300, 400], strict=True)])
    s = d.statuses()["a"]
    assert s["stale_epochs"] == [
        {"epoch": 1, "worker": "old", "events": 2, "last_position": 4, "last_seen_ms": 400}
    ]
    assert s["updated_ms"] == 400
    records = [d.record(ev("a", "progress", 2, "new", 5), timestamp=500)]
    with pytest.raises(BatchAborted):
        d.pipe(records, fail_at=0)  # restart: state and its status times from the changelog
    d.pipe(d.pending(records))
    s = d.statuses()["a"]
    assert s["stale_epochs"][0]["last_seen_ms"] == 400
    assert s["updated_ms"] == 500 and s["last_position"] == 5


def test_with_the_status_off_there_are_no_status_records_and_bare_states() -> None:
    """status_topic=None: findings as before, no status records, bare KeyState values."""
    d = BatchDriver(status_topic=None)
    d.pipe([d.record(v) for _k, v in fixture_events()])
    assert d.statuses() == {} and len(d.latest_findings()) == 4
    assert all(split_value(v)[1] is None and b"\x00" not in v for v in d.store.values())


def test_dead_letters_carry_the_bytes_reason_and_position() -> None:
    """An invalid record is dead-lettered with its source position; no state, no status."""
    d = BatchDriver()
    d.pipe([d.record(b"{nope", key=b"k", partition=2, offset=41)])
    ((key, value, headers),) = d.dead_letters()
    assert (key, value) == (b"k", b"{nope")
    assert headers["fencewatch-source-partition"] == "2"
    assert headers["fencewatch-source-offset"] == "41"
    assert d.store == {} and d.statuses() == {}
    field = headers["fencewatch-error-field"]
    assert d.metric("fencewatch_invalid_events_total", field=field) == 1
    assert d.committed == {2: 42}


def test_stale_effects_are_counted_once_per_effect_and_outcome() -> None:
    """Attempt then rejection: attempted 1, rejected 1; a stale commit: committed 1."""
    d = BatchDriver()
    d.pipe(
        [
            d.record(ev("a", "lease_acquired", 1, "old", 1)),
            d.record(ev("a", "lease_acquired", 2, "new", 2)),
            d.record(ev("a", "effect_attempted", 1, "old", 3, effect_key="X", sink="db")),
        ]
    )
    d.pipe([d.record(ev("a", "effect_rejected", 1, "old", 4, effect_key="X", sink="db"))])
    d.pipe([d.record(ev("a", "effect_committed", 1, "old", 5, effect_key="Y"))])
    m = {
        (sink, outcome): d.metric("fencewatch_stale_effects_total", sink=sink, outcome=outcome)
        for sink in ("db", "unnamed")
        for outcome in ("attempted", "rejected", "committed")
    }
    assert m == {
        ("db", "attempted"): 1,
        ("db", "rejected"): 1,
        ("db", "committed"): 0,
        ("unnamed", "attempted"): 1,
        ("unnamed", "rejected"): 0,
        ("unnamed", "committed"): 1,
    }
    kinds = Counter(doc["kind"] for doc in d.findings())
    assert (
        d.metric("fencewatch_findings_total", kind="stale_attempt", severity="warning")
        == kinds["stale_attempt"]
    )
