"""The events topic grows partitions mid-stream (issue 22): the faust worker
stops with one line before making any finding from split state, refuses to
start again until `fencewatch migrate --partitions N`, and after the
migration the findings are exactly the audit's, every revision once."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions

from streams.core.replay import Replay
from streams.kafka.connection import KafkaConnection
from streams.kafka.reader import iter_topic
from streams.live.migrate import consistent_partition, murmur2_partition
from tests.live.conftest import ENGINES, REPO, LiveHarness

pytestmark = pytest.mark.kafka


def _grow(h: LiveHarness, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": h.bootstrap})
    admin.create_partitions([NewPartitions(h.events, partitions)])[h.events].result(60)
    h.partitions = partitions


def _processed_audit(h: LiveHarness, committed: dict[int, int]) -> dict[str, dict[str, Any]]:
    """The audit of the events below the group's committed offsets only."""
    r = Replay()
    for key, value, partition, offset in iter_topic(KafkaConnection(h.bootstrap), h.events):
        if offset < committed.get(partition, -1):
            r.feed(value or b"", key=key, offset=offset, source=f"{h.events}/{partition}")
    return {f.finding_id: f.to_dict() for f in r.latest_findings()}


def _audit_old_partitions_first(h: LiveHarness) -> dict[str, dict[str, Any]]:
    """The audit of every event, each partition in offset order, lower
    partitions first: for a key that moved from p to p + old count, its old
    partition's events before its new one's, the order the producers wrote
    them in (revision numbers depend on arrival order)."""
    records = sorted(
        iter_topic(KafkaConnection(h.bootstrap), h.events), key=lambda r: (r.partition, r.offset)
    )
    r = Replay()
    for key, value, partition, offset in records:
        r.feed(value or b"", key=key, offset=offset, source=f"{h.events}/{partition}")
    return {f.finding_id: f.to_dict() for f in r.latest_findings()}


def _migrate(h: LiveHarness, partitions: int, tmp: Any) -> subprocess.CompletedProcess[str]:
    import os

    env = dict(os.environ)
    env.update(h.env())
    return subprocess.run(
        [sys.executable, "-m", "streams", "migrate", "--partitions", str(partitions),
         "--backup-dir", str(tmp)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def test_partitioners_place_keys_as_the_clients_do(kafka_bootstrap: str, unique_topic: Any) -> None:
    """murmur2 and consistent put each key in the partition librdkafka's
    murmur2_random and consistent_random producers put it in."""
    from confluent_kafka import Producer

    topic = unique_topic(7)
    partitioners = (
        ("murmur2_random", murmur2_partition),
        ("consistent_random", consistent_partition),
    )
    for name, place in partitioners:
        got: list[tuple[bytes, int]] = []

        def delivered(_err: Any, msg: Any, got: list[tuple[bytes, int]] = got) -> None:
            got.append((msg.key(), msg.partition()))

        p = Producer({"bootstrap.servers": kafka_bootstrap, "partitioner": name})
        for i in range(200):
            p.produce(topic, b"v", key=f"wf-{i}-{'x' * (i % 5)}".encode(), on_delivery=delivered)
        assert p.flush(30) == 0
        assert len(got) == 200
        assert all(place(k, 7) == part for k, part in got), name


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    "engine", [p if p == "faust" else pytest.param(p, marks=pytest.mark.faults) for p in ENGINES]
)
def test_growth_mid_stream_stops_the_worker_then_migrate_makes_findings_exact(
    live: Any, tmp_path: Any, engine: str
) -> None:
    """Grow 2 -> 4 partitions mid-stream: the worker stops with one line naming
    the change and `fencewatch migrate --partitions 4`, having published only
    findings of the events it processed; a restart is refused with that line;
    a migration to the wrong count is refused in one line; after the
    migration the findings equal the audit's, each revision once."""
    h: LiveHarness = live(2, engine=engine)
    events = h.scenario_events(n_keys=60, epochs=3, seed=5)
    half = len(events) // 2
    w1 = h.start("w1")
    w1.wait_ready(timeout=180)
    h.produce(events[:half])
    h.wait_all_committed(timeout=120)
    _grow(h, 4)
    h.produce(events[half:])
    assert w1.proc.wait(120) != 0
    log1 = w1.tail(20000)
    assert log1.count("the partitions changed") >= 1, log1
    assert "fencewatch migrate --partitions 4" in log1, log1
    # Nothing from the new partitions was committed, and every published
    # finding is one of the processed events' (none from split state).
    committed = h.committed()
    assert committed[2] < 0 and committed[3] < 0, committed
    latest, _seen = h.live_findings()
    assert latest == _processed_audit(h, committed)

    w2 = h.start("w2")
    assert w2.proc.wait(120) != 0
    lines = [ln for ln in w2.tail(20000).splitlines() if "the partitions changed" in ln]
    assert len(lines) == 1 and "has 4 partitions, its state 2" in lines[0], w2.tail()

    wrong = _migrate(h, 3, tmp_path)
    assert wrong.returncode != 0
    assert wrong.stderr.strip().splitlines() == [
        f"fencewatch migrate: topic {h.events} has 4 partitions, --partitions says 3: "
        "grow the topic first, then migrate to its count"
    ], wrong.stderr
    done = _migrate(h, 4, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "migrated" in done.stdout and "2 -> 4 partitions" in done.stdout, done.stdout

    w3 = h.start("w3")
    w3.wait_ready(timeout=180)
    h.wait_all_committed(timeout=180)
    assert w3.proc.poll() is None, w3.tail()
    latest, seen = h.live_findings()
    assert [x for x, n in Counter(seen).items() if n > 1] == []
    revs: dict[str, set[int]] = {}
    for fid, rev in seen:
        revs.setdefault(fid, set()).add(rev)
    assert all(r == set(range(1, max(r) + 1)) for r in revs.values())
    assert latest == _audit_old_partitions_first(h)
    assert len(latest) > 20
    assert h.read(h.dlq) == []
