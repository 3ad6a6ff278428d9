"""The agent SDK against a real broker: what it publishes, how it stamps, and
how it fails."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from streams.core import Detector, DetectorConfig
from streams.core.records import Event, EventType
from streams.core.validate import InvalidEvent, parse_event
from streams.errors import BrokerError
from streams.fences import FencedSink, SqlLeaseStore, open_database
from streams.kafka.connection import KafkaConnection
from streams.sdk import OwnershipReporter, ReporterSettings


def _read(bootstrap: str, topic: str) -> list[tuple[bytes, Event]]:
    """Every message of the topic to its end (read_committed), validated."""
    from streams.kafka.reader import iter_topic

    out: list[tuple[bytes, Event]] = []
    for key, value, _partition, _offset in iter_topic(KafkaConnection(bootstrap), topic):
        assert key is not None and value is not None
        out.append((key, parse_event(value, key=key)))
    return out


@pytest.fixture
def stores(tmp_path: Path) -> Any:
    db = open_database(f"sqlite:///{tmp_path / 'sdk.db'}")
    yield SqlLeaseStore(db), FencedSink(db, name="ledger")
    db.close()


def test_takeover_story_is_published_valid_keyed_and_stamped(
    stores: Any, kafka_bootstrap: str, unique_topic: Callable[..., str]
) -> None:
    """alpha acquires, checkpoints, commits; beta takes over; alpha's late effect
    is rejected: every event valid, keyed by workflow, seq increasing, ids unique."""
    leases, sink = stores
    topic, key = unique_topic(partitions=1), "tenant/export/2026-07-26"
    alpha = OwnershipReporter(
        ReporterSettings(kafka_bootstrap, "alpha", topic=topic, run_id="run-1"), leases=leases
    )
    beta = OwnershipReporter(ReporterSettings(kafka_bootstrap, "beta", topic=topic), leases=leases)
    leases.publisher = alpha
    a = leases.acquire(key, "alpha", ttl=60)
    assert alpha.progress(key, a.epoch, attrs={"step": 1}).current is True
    assert alpha.apply_effect(sink, key, a.epoch, "shard-1", b"1").status == "committed"
    alpha.release(a)
    leases.publisher = beta
    b = leases.acquire(key, "beta", ttl=60)
    late = alpha.progress(key, a.epoch)
    assert (late.current, late.current_epoch) == (False, b.epoch)
    receipt = alpha.apply_effect(sink, key, a.epoch, "release-index", b"x")
    assert receipt.status == "rejected"
    assert beta.apply_effect(sink, key, b.epoch, "release-index", b"y").status == "committed"
    alpha.close()
    beta.close()

    got = _read(kafka_bootstrap, topic)
    assert {k for k, _ in got} == {key.encode()}
    # Two producers interleave arbitrarily in the topic; seq is the true order.
    events = sorted((e for _, e in got), key=lambda e: e.seq or -1)
    assert [(e.type.value, e.worker_id, e.epoch) for e in events] == [
        ("lease_acquired", "alpha", 1),
        ("progress", "alpha", 1),
        ("effect_attempted", "alpha", 1),
        ("effect_committed", "alpha", 1),
        ("lease_released", "alpha", 1),
        ("lease_acquired", "beta", 2),
        ("progress", "alpha", 1),
        ("effect_attempted", "alpha", 1),
        ("effect_rejected", "alpha", 1),
        ("effect_attempted", "beta", 2),
        ("effect_committed", "beta", 2),
    ]
    seqs = [e.seq for e in events]
    assert None not in seqs and len(set(seqs)) == len(seqs)
    assert len({e.event_id for e in events}) == len(events)
    rejected = events[8]
    assert rejected.sink == "ledger" and rejected.attrs == {
        "receipt": "rejected",
        "current_epoch": 2,
        "reason": "stale_epoch",
    }
    assert events[1].run_id == "run-1" and events[1].attrs == {"step": 1}
    # What the detector makes of it, in arrival order: a rejected near miss.
    detector = Detector(DetectorConfig())
    state = detector.new_state()
    findings = [f for i, (_, e) in enumerate(got) for f in detector.process(state, e, i)]
    latest = {f.finding_id: f for f in findings}.values()
    assert sorted((f.kind.value, f.to_dict()["sink_outcome"]) for f in latest) == [
        ("stale_activity", None),
        ("stale_attempt", "rejected"),
    ]


def test_duplicate_receipt_is_reported_as_a_rejection_marked_duplicate(
    stores: Any, kafka_bootstrap: str, unique_topic: Callable[..., str]
) -> None:
    """A retried effect the sink already holds yields effect_rejected with receipt=duplicate."""
    leases, sink = stores
    topic, key = unique_topic(partitions=1), "k"
    with OwnershipReporter(
        ReporterSettings(kafka_bootstrap, "alpha", topic=topic), leases=leases
    ) as rep:
        lease = leases.acquire(key, "alpha", ttl=60)
        rep.apply_effect(sink, key, lease.epoch, "e", b"")
        rep.apply_effect(sink, key, lease.epoch, "e", b"")
    types = [(e.type, (e.attrs or {}).get("receipt")) for _, e in _read(kafka_bootstrap, topic)]
    assert types == [
        (EventType.EFFECT_ATTEMPTED, None),
        (EventType.EFFECT_COMMITTED, "committed"),
        (EventType.EFFECT_ATTEMPTED, None),
        (EventType.EFFECT_REJECTED, "duplicate"),
    ]


def test_failed_effect_block_leaves_only_the_attempt(
    kafka_bootstrap: str, unique_topic: Callable[..., str]
) -> None:
    """An exception inside the effect boundary publishes the attempt and nothing else."""
    topic = unique_topic(partitions=1)
    with (
        OwnershipReporter(ReporterSettings(kafka_bootstrap, "alpha", topic=topic)) as rep,
        pytest.raises(ZeroDivisionError),
        rep.effect("k", 1, "e", sink="s"),
    ):
        _ = 1 / 0
    assert [e.type for _, e in _read(kafka_bootstrap, topic)] == [EventType.EFFECT_ATTEMPTED]


def test_invalid_event_is_never_published(
    kafka_bootstrap: str, unique_topic: Callable[..., str]
) -> None:
    """An event that breaks the contract raises InvalidEvent and is not produced."""
    topic = unique_topic(partitions=1)
    with OwnershipReporter(ReporterSettings(kafka_bootstrap, "alpha", topic=topic)) as rep:
        with pytest.raises(InvalidEvent):
            rep.publish(Event(EventType.EFFECT_COMMITTED, "k", 1, "alpha"))  # no effect_key
        with pytest.raises(InvalidEvent):
            rep.progress("k" * 513, 1)
        rep.progress("k", 1)  # the only message that may appear
    assert [e.type for _, e in _read(kafka_bootstrap, topic)] == [EventType.PROGRESS]


def test_undeliverable_events_surface_as_broker_error_on_flush() -> None:
    """With no broker listening (and the construction check off), flush raises
    BrokerError rather than losing events silently."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens here
    rep = OwnershipReporter(
        ReporterSettings(
            f"127.0.0.1:{port}",
            "alpha",
            delivery_timeout_ms=1500,
            linger_ms=0,
            check_broker=False,
        )
    )
    rep.progress("k", 1)
    with pytest.raises(BrokerError) as info:
        rep.flush(timeout=20)
    assert info.value.code == "_DELIVERY"
    assert "_MSG_TIMED_OUT" in str(info.value)
