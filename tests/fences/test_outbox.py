"""The transactional outbox: staging under the epoch compare, Kafka fencing of
a displaced owner's producer, the refusal to initialize, crash recovery and the
consuming-side fence. Kafka tests run against a real broker."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from streams.core.records import Event, EventType
from streams.errors import StaleOwner
from streams.fences import FencedSink, SqlLeaseStore, open_database
from streams.fences.db import Database
from streams.fences.outbox import (
    EPOCH_HEADER,
    IDEMPOTENCY_HEADER,
    EffectApplier,
    InvalidEffectMessage,
    Outbox,
    OutboxProducer,
    OutboxSettings,
    parse_effect_message,
    transactional_id_for,
)
from streams.kafka.connection import KafkaConnection

from .conftest import Backend, FrozenClock, read_topic

TTL = 10.0


class Recorder:
    """An EventPublisher that keeps what it is given."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def publish(self, event: Event) -> None:
        self.events.append(event)


def _key() -> str:
    return f"tenant/export/{uuid.uuid4().hex[:8]}"


def _headers(msg: Any) -> dict[str, bytes]:
    return dict(msg.headers() or [])


def _effects(msgs: list[Any]) -> list[tuple[int, str]]:
    return [
        (int(_headers(m)[EPOCH_HEADER]), _headers(m)[IDEMPOTENCY_HEADER].decode()) for m in msgs
    ]


@pytest.fixture
def world(tmp_path: Path, frozen_clock: FrozenClock) -> Any:
    """One SQLite file (frozen store clock) holding the leases and the outbox."""

    class World:
        clock = frozen_clock
        db: Database = open_database(f"sqlite:///{tmp_path / 'owner.db'}", clock=frozen_clock)
        leases = SqlLeaseStore(db)
        outbox = Outbox(db)
        opened: list[OutboxProducer] = []

        def producer(
            self,
            bootstrap: str,
            topic: str,
            key: str,
            epoch: int,
            worker: str,
            publisher: Recorder | None = None,
            **kw: Any,
        ) -> OutboxProducer:
            p = OutboxProducer(
                self.db,
                OutboxSettings(KafkaConnection(bootstrap), topic, op_timeout_s=30, **kw),
                workflow_key=key,
                epoch=epoch,
                worker_id=worker,
                publisher=publisher,
            )
            self.opened.append(p)
            return p

        def take_over(self, key: str, worker: str) -> int:
            """The old owner stalls past its TTL; ``worker`` acquires."""
            self.clock.t += TTL + 1
            return self.leases.acquire(key, worker, ttl=TTL).epoch

    w = World()
    yield w
    for p in w.opened:
        p.close()
    w.db.close()


def test_displaced_owner_cannot_stage(backend: Backend) -> None:
    """Staging compares the epoch in the same transaction: a displaced owner stages nothing."""
    db = backend.connect()
    leases = SqlLeaseStore(db, prefix=backend.prefix)
    outbox = Outbox(db, prefix=backend.prefix)
    key = _key()
    a = leases.acquire(key, "alpha", ttl=60)
    assert outbox.stage(key, a.epoch, "e1", b"1").status == "committed"
    assert outbox.stage(key, a.epoch, "e1", b"1").status == "duplicate"
    leases.release(key, a.epoch, "alpha")
    b = leases.acquire(key, "beta", ttl=60)
    late = outbox.stage(key, a.epoch, "e2", b"2")
    assert (late.status, late.current_epoch, late.reason) == ("rejected", b.epoch, "stale_epoch")
    assert outbox.statuses(key) == {"e1": "staged"}
    assert outbox.stage(key, b.epoch + 1, "e3", b"").reason == "unknown_epoch"


def test_transactional_id_is_per_workflow_key() -> None:
    """Owners of one key share a transactional.id; different keys do not."""
    assert transactional_id_for("a/b") == transactional_id_for("a/b")
    assert transactional_id_for("a/b") != transactional_id_for("a/c")
    assert transactional_id_for("a/b").startswith("fencewatch-outbox-")


def test_effect_message_without_headers_is_invalid() -> None:
    """A message missing the epoch or idempotency header, or with a bad epoch, is refused."""

    class Msg:
        def __init__(self, headers: list[tuple[str, bytes]], key: bytes | None = b"k") -> None:
            self._h, self._k = headers, key

        def key(self) -> bytes | None:
            return self._k

        def value(self) -> bytes:
            return b"v"

        def headers(self) -> list[tuple[str, bytes]]:
            return self._h

    ok = [(EPOCH_HEADER, b"3"), (IDEMPOTENCY_HEADER, b"e")]
    assert parse_effect_message(Msg(ok)).epoch == 3
    for bad in (
        [(IDEMPOTENCY_HEADER, b"e")],
        [(EPOCH_HEADER, b"3")],
        [(EPOCH_HEADER, b"-1"), (IDEMPOTENCY_HEADER, b"e")],
        [(EPOCH_HEADER, b"99999999999999999999"), (IDEMPOTENCY_HEADER, b"e")],
    ):
        with pytest.raises(InvalidEffectMessage):
            parse_effect_message(Msg(bad))
    with pytest.raises(InvalidEffectMessage):
        parse_effect_message(Msg(ok, key=None))


def test_outbox_fencing_end_to_end(
    world: Any, kafka_bootstrap: str, unique_topic: Callable[..., str]
) -> None:
    """A publishes; B takes over and initializes; A's next commit is fenced
    (StaleOwner + effect_rejected); read_committed sees only B's effects after it."""
    topic, key = unique_topic(partitions=1), _key()
    rec = Recorder()
    a_epoch = world.leases.acquire(key, "alpha", ttl=TTL).epoch
    a = world.producer(kafka_bootstrap, topic, key, a_epoch, "alpha", rec, check_each_batch=False)
    a.init()
    assert world.outbox.stage(key, a_epoch, "e1", b"one").status == "committed"
    assert a.publish_pending() == 1
    assert world.outbox.stage(key, a_epoch, "e2", b"two").status == "committed"

    class TakeoverBeforeCommit:
        """alpha's producer; beta takes over while alpha's transaction is open."""

        def __init__(self, real: Any) -> None:
            self.real = real

        def __getattr__(self, name: str) -> Any:
            return getattr(self.real, name)

        def commit_transaction(self, timeout: float) -> None:
            holder["b_epoch"] = world.take_over(key, "beta")
            holder["b"] = world.producer(kafka_bootstrap, topic, key, holder["b_epoch"], "beta")
            holder["b"].init()  # Kafka fences alpha's producer here
            self.real.commit_transaction(timeout)

    holder: dict[str, Any] = {}
    # The confluent producer inside the layer's TransactionalProducer.
    a._producer._producer = TakeoverBeforeCommit(a._producer._producer)
    with pytest.raises(StaleOwner) as info:
        a.publish_pending()
    assert info.value.reason.startswith("Kafka fenced the producer (_FENCED)")
    b, b_epoch = holder["b"], holder["b_epoch"]
    (rejected,) = rec.events
    assert (rejected.type, rejected.epoch, rejected.effect_key) == (
        EventType.EFFECT_REJECTED,
        a_epoch,
        "e2",
    )
    assert rejected.seq is not None and rejected.seq > 0

    assert world.outbox.stage(key, b_epoch, "e3", b"three").status == "committed"
    assert b.publish_pending() == 1
    seen = read_topic(kafka_bootstrap, topic)
    assert _effects(seen) == [(a_epoch, "e1"), (b_epoch, "e3")]
    assert world.outbox.statuses(key) == {"e1": "sent", "e2": "superseded", "e3": "sent"}
    with world.db.transaction() as tx:
        row = tx.query("SELECT owner_epoch, worker_id, transactional_id FROM fw_producers")
    assert row == [(b_epoch, "beta", transactional_id_for(key))]
    assert b.inversions == 0


def test_per_batch_check_stops_a_displaced_owner_before_kafka(
    world: Any, kafka_bootstrap: str, unique_topic: Callable[..., str]
) -> None:
    """With the per-batch lease check, a displaced owner is refused before it sends."""
    topic, key = unique_topic(partitions=1), _key()
    rec = Recorder()
    a_epoch = world.leases.acquire(key, "alpha", ttl=TTL).epoch
    a = world.producer(kafka_bootstrap, topic, key, a_epoch, "alpha", rec)
    a.init()
    world.outbox.stage(key, a_epoch, "e1", b"")
    world.take_over(key, "beta")
    with pytest.raises(StaleOwner) as info:
        a.publish_pending()
    assert "not current" in info.value.reason
    assert [e.effect_key for e in rec.events] == ["e1"]
    assert read_topic(kafka_bootstrap, topic) == []


def test_producer_refuses_to_initialize_with_a_stale_epoch(
    world: Any, kafka_bootstrap: str, unique_topic: Callable[..., str]
) -> None:
    """A displaced owner's init is refused before Kafka, so the current owner is not fenced."""
    topic, key = unique_topic(partitions=1), _key()
    a_epoch = world.leases.acquire(key, "alpha", ttl=TTL).epoch
    b_epoch = world.take_over(key, "beta")
    b = world.producer(kafka_bootstrap, topic, key, b_epoch, "beta")
    b.init()
    world.outbox.stage(key, b_epoch, "b1", b"")
    assert b.publish_pending() == 1
    stale = world.producer(kafka_bootstrap, topic, key, a_epoch, "alpha")
    with pytest.raises(StaleOwner) as info:
        stale.init()
    assert "refusing to initialize" in info.value.reason
    world.outbox.stage(key, b_epoch, "b2", b"")
    assert b.publish_pending() == 1  # still the transactional id's owner
    assert b.inversions == 0
    assert _effects(read_topic(kafka_bootstrap, topic)) == [(b_epoch, "b1"), (b_epoch, "b2")]


def test_init_inversion_is_detected_and_the_rightful_owner_recovers(
    world: Any,
    kafka_bootstrap: str,
    unique_topic: Callable[..., str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stale init that slips past its lease check fences the new owner; the stale
    one refuses after init, the new owner takes the id back and delivers."""
    import streams.fences.outbox.producer as outbox_mod

    topic, key = unique_topic(partitions=1), _key()
    a_epoch = world.leases.acquire(key, "alpha", ttl=TTL).epoch
    stale = world.producer(kafka_bootstrap, topic, key, a_epoch, "alpha")
    real_producer = outbox_mod.TransactionalProducer
    holder: dict[str, OutboxProducer] = {}

    def producer_after_takeover(*args: Any, **kwargs: Any) -> Any:
        # alpha passed its lease check; before its init_transactions, beta
        # acquires and initializes: the race the docs describe.
        monkeypatch.setattr(outbox_mod, "TransactionalProducer", real_producer)
        b_epoch = world.take_over(key, "beta")
        holder["b"] = world.producer(kafka_bootstrap, topic, key, b_epoch, "beta")
        holder["b"].init()
        return real_producer(*args, **kwargs)

    monkeypatch.setattr(outbox_mod, "TransactionalProducer", producer_after_takeover)
    with pytest.raises(StaleOwner) as info:
        stale.init()  # its init_transactions fenced beta's producer
    assert "after initializing" in info.value.reason
    b = holder["b"]
    world.outbox.stage(key, b.epoch, "b1", b"")
    assert b.publish_pending() == 1
    assert b.inversions == 1
    assert _effects(read_topic(kafka_bootstrap, topic)) == [(b.epoch, "b1")]


def test_crash_between_kafka_commit_and_mark_sent_neither_loses_nor_doubles(
    world: Any,
    kafka_bootstrap: str,
    unique_topic: Callable[..., str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Rows committed to Kafka but not marked sent are republished after a
    restart; the consuming fence applies each idempotency key once."""
    topic, key = unique_topic(partitions=1), _key()
    epoch = world.leases.acquire(key, "alpha", ttl=TTL).epoch
    first = world.producer(kafka_bootstrap, topic, key, epoch, "alpha")
    first.init()
    for name in ("e1", "e2"):
        world.outbox.stage(key, epoch, name, name.encode())

    class Crash(Exception):
        pass

    def crash(rows: Any) -> None:
        raise Crash

    monkeypatch.setattr(first, "_mark_sent", crash)
    with pytest.raises(Crash):
        first.publish_pending()
    first.close()  # the process died here
    assert world.outbox.statuses(key) == {"e1": "staged", "e2": "staged"}

    restarted = world.producer(kafka_bootstrap, topic, key, epoch, "alpha")
    restarted.init()
    assert restarted.publish_pending() == 2
    assert world.outbox.statuses(key) == {"e1": "sent", "e2": "sent"}

    msgs = read_topic(kafka_bootstrap, topic)
    assert _effects(msgs) == [(epoch, "e1"), (epoch, "e2"), (epoch, "e1"), (epoch, "e2")]
    dest_db = open_database(f"sqlite:///{tmp_path / 'destination.db'}")
    try:
        applier = EffectApplier(FencedSink(dest_db, consult_leases=False))
        statuses = [applier.apply_message(m).status for m in msgs]
        assert statuses == ["committed", "committed", "duplicate", "duplicate"]
        assert [(e.effect_key, e.payload) for e in applier.sink.effects(key)] == [
            ("e1", b"e1"),
            ("e2", b"e2"),
        ]
    finally:
        dest_db.close()


def test_consuming_fence_rejects_an_effect_committed_in_the_takeover_window(
    world: Any, kafka_bootstrap: str, unique_topic: Callable[..., str], tmp_path: Path
) -> None:
    """An old owner's effect committed to Kafka after the new acquisition but
    before the new owner's init is refused by the consuming fence."""
    topic, key = unique_topic(partitions=1), _key()
    a_epoch = world.leases.acquire(key, "alpha", ttl=TTL).epoch
    a = world.producer(kafka_bootstrap, topic, key, a_epoch, "alpha", check_each_batch=False)
    a.init()
    world.outbox.stage(key, a_epoch, "late", b"")
    b_epoch = world.take_over(key, "beta")  # beta has not initialized a producer yet
    assert a.publish_pending() == 1  # Kafka accepts: nothing fenced alpha yet
    b = world.producer(kafka_bootstrap, topic, key, b_epoch, "beta")
    b.init()
    world.outbox.stage(key, b_epoch, "fresh", b"")
    b.publish_pending()
    msgs = read_topic(kafka_bootstrap, topic)
    assert _effects(msgs) == [(a_epoch, "late"), (b_epoch, "fresh")]
    dest_db = open_database(f"sqlite:///{tmp_path / 'destination.db'}")
    try:
        # The applier reads the lease store, so the takeover alone fences alpha.
        applier = EffectApplier(FencedSink(dest_db, consult_leases=False), leases=world.leases)
        receipts = [applier.apply_message(m) for m in msgs]
        assert [(r.status, r.reason) for r in receipts] == [
            ("rejected", "stale_epoch"),
            ("committed", None),
        ]
        assert [e.effect_key for e in applier.sink.effects(key)] == ["fresh"]
    finally:
        dest_db.close()
