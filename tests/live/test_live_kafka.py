"""The live processor against a real broker, run as real worker processes."""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from tests.live.conftest import ENGINES

pytestmark = pytest.mark.kafka

Live = Callable[..., Any]


def assert_status_equals_audit(h: Any) -> None:
    """The live status topic (latest per key) equals the replay's per-workflow
    status, Kafka timestamps aside; every record carries its timestamps."""
    from streams.core.status import WorkflowStatus

    live = h.live_status()
    assert all(doc["updated_ms"] is not None for doc in live.values())
    assert all(
        se["last_seen_ms"] is not None for doc in live.values() for se in doc["stale_epochs"]
    )
    assert {k: WorkflowStatus.from_dict(v).content() for k, v in live.items()} == h.audit_status()
    # ... and its open/cleared lists are the health `fencewatch audit --topic` prints.
    live_health = {
        k: {s: sorted(f["finding_id"] for f in doc[s]) for s in ("open", "cleared")}
        for k, doc in live.items()
        if doc["open"] or doc["cleared"]
    }
    assert live_health == h.cli_audit_health()


def assert_exactly_once_and_audit(h: Any) -> dict[str, dict[str, Any]]:
    latest, seen = h.live_findings()
    dupes = [k for k, n in Counter(seen).items() if n > 1]
    assert not dupes, f"(finding id, revision) seen more than once: {dupes[:5]}"
    # No gap either: revisions of each id are 1..latest.
    revs: dict[str, set[int]] = {}
    for fid, rev in seen:
        revs.setdefault(fid, set()).add(rev)
    assert all(r == set(range(1, max(r) + 1)) for r in revs.values())
    audit = h.audit()
    assert latest == audit
    return latest


@pytest.mark.timeout(90)
@pytest.mark.parametrize("engine", ENGINES)
def test_reference_fixture_gives_four_findings_and_nothing_else(live: Live, engine: str) -> None:
    """The SPEC §5 fixture through the broker yields exactly the audit's four
    findings on export-ledger (each with confidence), with headers, nothing in
    the DLQ, and metrics."""
    h = live(partitions=3, engine=engine)
    w = h.start()
    w.wait_ready()
    h.produce(h.fixture_events())
    h.wait_all_committed()
    latest = assert_exactly_once_and_audit(h)
    assert sorted((d["kind"], d["event_seq"]) for d in latest.values()) == [
        ("conflicting_commit", 9),
        ("stale_activity", 6),
        ("stale_attempt", 7),
        ("stale_commit", 8),
    ]
    assert {d["workflow_key"] for d in latest.values()} == {"export-ledger"}
    # SPEC §4 confidence on every live finding (all evidence stamped: high).
    assert {d["confidence"] for d in latest.values()} == {"high"}
    for key, value, headers in h.read_with_headers(h.findings):
        doc = json.loads(value)
        assert key == b"export-ledger"
        assert headers["fencewatch-finding-id"] == doc["finding_id"]
        assert headers["fencewatch-revision"] == str(doc["revision"])
        assert headers["fencewatch-severity"] == doc["severity"]
    assert h.read(h.dlq) == []
    text = w.metrics()
    assert "fencewatch_events_total 16.0" in text
    assert 'fencewatch_findings_total{kind="conflicting_commit",severity="critical"} 1.0' in text
    assert "fencewatch_state_keys 3.0" in text
    # Every assigned partition has a lag series, 0 once processed to the end.
    for p in w.health()["partitions"]:
        assert f'fencewatch_consumer_lag{{partition="{p}"}} 0.0' in text
    assert "fencewatch_up 1.0" in text
    commits = re.search(r"^fencewatch_commit_seconds_count (\S+)$", text, re.M)
    took = re.search(r"^fencewatch_commit_seconds_sum (\S+)$", text, re.M)
    assert commits is not None and float(commits.group(1)) >= 1
    assert took is not None and float(took.group(1)) > 0
    written = re.search(r"^fencewatch_status_records_total (\S+)$", text, re.M)
    assert written is not None and float(written.group(1)) >= 3  # one per key and batch at least
    assert 'fencewatch_stale_effects_total{outcome="committed",sink="release-bucket"} 1.0' in text
    assert_status_equals_audit(h)


def ev(key: str, kind: str, epoch: int, worker: str, seq: int, effect: str | None = None) -> bytes:
    doc: dict[str, Any] = {
        "type": kind,
        "workflow_key": key,
        "epoch": epoch,
        "worker_id": worker,
        "seq": seq,
    }
    if effect:
        doc["effect_key"] = effect
    return json.dumps(doc).encode()


@pytest.mark.timeout(90)
@pytest.mark.parametrize("engine", ENGINES)
def test_late_acquisition_and_late_evidence_behave_as_in_the_audit(live: Live, engine: str) -> None:
    """A lease_acquired that arrives after later-positioned stale activity, and
    buffered evidence of an old epoch arriving after newer events, give the
    same latest findings live as in the audit (classified by position)."""
    h = live(partitions=2, engine=engine)
    w = h.start()
    w.wait_ready()
    late_acq = [
        ev("late-acq", "lease_acquired", 1, "a", 1),
        ev("late-acq", "progress", 1, "a", 4),  # stale once epoch 2 (seq 3) is known
        ev("late-acq", "effect_committed", 1, "a", 5, "fx"),
        ev("late-acq", "lease_acquired", 2, "b", 3),  # arrives last
    ]
    buffered = [
        ev("buffered", "lease_acquired", 1, "a", 1),
        ev("buffered", "lease_acquired", 2, "b", 2),
        ev("buffered", "effect_committed", 2, "b", 6, "fx"),
        ev("buffered", "progress", 1, "a", 3),  # buffered by the old worker
        ev("buffered", "effect_attempted", 1, "a", 4, "fx"),
    ]
    h.produce([(b"late-acq", v) for v in late_acq] + [(b"buffered", v) for v in buffered])
    h.wait_all_committed()
    latest = assert_exactly_once_and_audit(h)
    kinds = {(d["workflow_key"], d["kind"]) for d in latest.values()}
    assert ("late-acq", "stale_activity") in kinds
    assert ("late-acq", "stale_commit") in kinds
    assert ("buffered", "stale_activity") in kinds
    assert ("buffered", "stale_attempt") in kinds


@pytest.mark.timeout(90)
@pytest.mark.parametrize("engine", ENGINES)
def test_bad_events_go_to_the_dlq_while_good_ones_flow(live: Live, engine: str) -> None:
    """Malformed, mistyped, mis-keyed, oversize and unknown-type events each
    land in the DLQ with their original bytes, a reason and their source
    position; the good events around them still give the audit's findings."""
    h = live(partitions=3, engine=engine)
    w = h.start()
    w.wait_ready()
    bad: list[tuple[bytes | None, bytes]] = [
        (b"export-ledger", b"{not json"),
        (b"export-ledger", ev("export-ledger", "teleported", 17, "alpha", 99)),
        (b"someone-else", ev("export-ledger", "progress", 17, "alpha", 98)),
        (b"export-ledger", b'{"type":"progress","workflow_key":"export-ledger","epoch":1.5}'),
        (b"big", b'{"pad":"' + b"x" * 70_000 + b'"}'),
    ]
    good = h.fixture_events()
    mixed: list[tuple[bytes | None, bytes]] = []
    for i, rec in enumerate(good):
        mixed.append(rec)
        if i % 3 == 0 and bad:
            mixed.append(bad.pop(0))
    mixed.extend(bad)
    h.produce(mixed)
    h.wait_all_committed()
    assert_exactly_once_and_audit(h)
    dead = h.read_with_headers(h.dlq)
    assert len(dead) == 5
    originals = {v for _k, v in mixed} - {v for _k, v in good}
    for _key, value, headers in dead:
        assert value in originals
        assert headers["fencewatch-error-reason"]
        assert headers["fencewatch-source-topic"] == h.events
        assert int(headers["fencewatch-source-partition"]) in range(h.partitions)
        assert int(headers["fencewatch-source-offset"]) >= 0
    fields = sorted(hd["fencewatch-error-field"] for _k, _v, hd in dead)
    assert "workflow_key" in fields and "type" in fields and "epoch" in fields
    assert w.health()["ok"]


@pytest.mark.timeout(150)
@pytest.mark.parametrize(
    ("engine", "store"),
    [
        ("faust", "memory://"),
        ("faust", "rocksdb://"),
        ("rdkafka", "memory://"),
        ("rdkafka", "rocksdb://"),
    ],
)
def test_sigkill_mid_stream_and_restart_is_exactly_once(
    live: Live, engine: str, store: str
) -> None:
    """A worker killed with SIGKILL mid-stream and restarted (state restored
    from the changelog; RocksDB rebuilt) leaves each (finding id, revision)
    exactly once for a read_committed consumer, the audit's findings, and a
    status topic equal to the audit's per-workflow status."""
    h = live(partitions=3, engine=engine)
    events = h.scenario_events(n_keys=300, epochs=4)
    w1 = h.start("w1", store=store)
    w1.wait_ready()
    h.produce(events)
    w1.wait_processed(len(events) // 3)
    w1.kill()
    w2 = h.start("w2", store=store)
    # The dead member's session must expire before the group rebalances.
    w2.wait_ready(timeout=60)
    h.wait_all_committed(timeout=60)
    latest = assert_exactly_once_and_audit(h)
    assert len(latest) > 100
    assert_status_equals_audit(h)


@pytest.mark.timeout(150)
@pytest.mark.parametrize("engine", ENGINES)
def test_two_workers_split_partitions_and_fail_over(live: Live, engine: str) -> None:
    """Two workers in one group split the partitions; when one is killed its
    partitions and state move to the other, and the result equals the audit."""
    h = live(partitions=4, engine=engine)
    a = h.start("a")
    b = h.start("b")
    a.wait_ready()
    b.wait_ready()
    events = h.scenario_events(n_keys=200, epochs=3, seed=11)
    half = len(events) // 2
    h.produce(events[:half])
    h.wait_all_committed()
    pa, pb = set(a.health()["partitions"]), set(b.health()["partitions"])
    assert pa and pb and not pa & pb and pa | pb == set(range(4))
    a.kill()
    h.produce(events[half:])
    h.wait_all_committed(timeout=60)
    assert set(b.health()["partitions"]) == set(range(4))
    latest = assert_exactly_once_and_audit(h)
    assert len(latest) > 50
    assert_status_equals_audit(h)


@pytest.mark.timeout(120)
def test_rocksdb_write_of_an_aborted_transaction_does_not_survive_restart(live: Live) -> None:
    """RocksDB values written by a transaction that never committed (what a
    crash mid-transaction leaves) are discarded on restart: the events are
    processed again and their finding is emitted, as the audit says. faust's:
    it keeps its RocksDB across restarts; the rdkafka engine's is a cache it
    wipes on opening (streams.live.rdkafka.table.RocksTable)."""
    from rocksdict import Options, Rdict

    from streams.core import Detector, parse_event

    h = live(partitions=1, engine="faust")
    w = h.start("w", store="rocksdb://")
    w.wait_ready()
    h.produce(h.fixture_events())
    h.wait_all_committed()
    w.stop()
    # Two events of a new key; their state as an aborted transaction would
    # have left it in RocksDB (the findings and offsets were never committed).
    ghost = [
        (b"ghost", ev("ghost", "lease_acquired", 2, "b", 2)),
        (b"ghost", ev("ghost", "progress", 1, "a", 3)),
    ]
    det = Detector()
    state = det.new_state()
    offset = h.end_offsets(h.events)[0]
    found = []
    for i, (key, value) in enumerate(ghost):
        found += det.process(state, parse_event(value, key=key), offset + i)
    assert [f.kind.value for f in found] == ["stale_activity"]
    (db_path,) = list((h.tmp / "data-w").rglob("*owner-state-0.db"))
    db = Rdict(str(db_path), Options(raw_mode=True))
    db[b"ghost"] = state.to_bytes()
    db.close()
    h.produce(ghost)
    w2 = h.start("w", store="rocksdb://")
    w2.wait_ready()
    h.wait_all_committed()
    latest = assert_exactly_once_and_audit(h)
    assert "ghost" in {d["workflow_key"] for d in latest.values()}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("engine", ENGINES)
def test_memory_restart_loads_committed_changelog_directly_without_aborted_writes(
    live: Live, engine: str
) -> None:
    """A memory-store restart loads the changelog directly (logged and in the
    metrics, every committed record counted): a committed state is restored,
    the states of an aborted transaction are not."""
    from confluent_kafka import Producer

    from streams.core import Detector, parse_event

    h = live(partitions=1, engine=engine)
    w = h.start("w1")
    w.wait_ready()
    h.produce(h.fixture_events())
    h.wait_all_committed()
    w.stop()
    changelog = f"{h.app_id}-owner-state-changelog"
    det = Detector()
    epoch2 = det.new_state()
    det.process(epoch2, parse_event(ev("planted", "lease_acquired", 2, "b", 2), key=b"planted"), 0)
    p = Producer({"bootstrap.servers": h.bootstrap, "transactional.id": f"{h.app_id}-planter"})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(changelog, epoch2.to_bytes(), key=b"planted", partition=0)
    p.commit_transaction(30)
    p.begin_transaction()  # what a worker that crashed mid-transaction leaves behind
    p.produce(changelog, det.new_state().to_bytes(), key=b"planted", partition=0)
    p.produce(changelog, epoch2.to_bytes(), key=b"ghost", partition=0)
    p.flush(30)
    p.abort_transaction(30)
    # Both transactions' markers written first: the read stops at any open one.
    h.wait_outputs_stable(time.monotonic() + 30, also=[changelog])
    committed = len(h.read(changelog))
    # At most one state write per key per batch (three keys, 16 events), plus
    # the planted one.
    assert 3 + 1 <= committed <= 16 + 1
    w2 = h.start("w2")
    w2.wait_ready()
    log = w2.tail(200_000)
    loaded = {
        "faust": f"fast restore: loaded {committed} changelog records (4 keys in the store)",
        "rdkafka": f"restored {committed} changelog records (4 keys)",
    }
    assert loaded[engine] in log
    deadline = time.monotonic() + 10  # the gauges are refreshed once a second
    text = w2.metrics()
    while "fencewatch_restored_records 0.0" in text and time.monotonic() < deadline:
        time.sleep(0.2)
        text = w2.metrics()
    assert "fencewatch_state_keys 4.0" in text
    assert f"fencewatch_restored_records {float(committed)}" in text
    h.produce(
        [
            (b"planted", ev("planted", "progress", 1, "a", 3)),
            (b"ghost", ev("ghost", "progress", 1, "a", 3)),
        ]
    )
    h.wait_all_committed()
    latest, seen = h.live_findings()
    assert not [k for k, n in Counter(seen).items() if n > 1]
    kinds = {(d["workflow_key"], d["kind"]) for d in latest.values()}
    assert ("planted", "stale_activity") in kinds  # the committed epoch-2 state was restored
    assert not [k for k in kinds if k[0] == "ghost"]  # the aborted state was not
    assert len(latest) == 5  # the fixture's four findings, plus planted's


@pytest.mark.timeout(90)
@pytest.mark.parametrize("engine", ENGINES)
def test_transactional_input_with_an_aborted_transaction_commits_past_the_gaps(
    live: Live, engine: str
) -> None:
    """Input written in transactions, one of them aborted, leaves offsets
    without records (markers, aborted records): the aborted events are never
    processed, and the group's committed offset still moves past every gap to
    the last record (the batch intake keeps faust's gap bookkeeping)."""
    from confluent_kafka import Producer

    h = live(partitions=1, engine=engine)
    w = h.start()
    w.wait_ready()
    events = h.fixture_events()
    p = Producer({"bootstrap.servers": h.bootstrap, "transactional.id": f"{h.app_id}-input"})
    p.init_transactions(30)
    for i, chunk in enumerate([events[:6], events[6:10], events[10:]]):
        p.begin_transaction()
        for key, value in chunk:
            p.produce(h.events, value, key=key, partition=0)
        if i == 1:
            # A stale commit that never happened: it must raise nothing.
            p.produce(h.events, ev("ghost", "lease_acquired", 2, "b", 1), key=b"ghost", partition=0)
            p.produce(h.events, ev("ghost", "progress", 1, "a", 2), key=b"ghost", partition=0)
            p.flush(30)
            p.abort_transaction(30)
            p.begin_transaction()
            for key, value in chunk:
                p.produce(h.events, value, key=key, partition=0)
        p.commit_transaction(30)
    last = max(offset for _k, _v, _p, offset in h.read(h.events))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and h.committed().get(0, -1) < last + 1:
        time.sleep(0.2)
    assert h.committed()[0] >= last + 1, w.tail()
    latest = assert_exactly_once_and_audit(h)
    assert "ghost" not in {d["workflow_key"] for d in latest.values()}
    assert len(latest) == 4


@pytest.mark.timeout(150)
@pytest.mark.parametrize("engine", ENGINES)
def test_a_worker_joining_mid_stream_takes_partitions_without_duplicates(
    live: Live, engine: str
) -> None:
    """A second worker joining while the first is busy makes the group
    rebalance with batches in flight: every (finding id, revision) is still
    seen exactly once and the result equals the audit."""
    h = live(partitions=4, engine=engine)
    a = h.start("a")
    a.wait_ready()
    events = h.scenario_events(n_keys=400, epochs=4, seed=5)
    h.produce(events[:1000])
    a.wait_processed(1000)
    b = h.start("b")
    # Keep input flowing while b starts, joins and the group rebalances.
    rest = events[1000:]
    step = max(1, len(rest) // 40)
    for i in range(0, len(rest), step):
        h.produce(rest[i : i + step])
        time.sleep(0.25)
    b.wait_ready(timeout=60)
    h.wait_all_committed(timeout=90)
    pa, pb = set(a.health()["partitions"]), set(b.health()["partitions"])
    assert pa and pb and not pa & pb
    latest = assert_exactly_once_and_audit(h)
    assert len(latest) > 100
