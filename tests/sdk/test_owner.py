"""reporter.own(): a lease that renews itself, says when it is lost, and applies
effects by risk when the lease store is too slow. SQLite lease store and a
real broker; the PostgreSQL outage is in test_store_outage.py."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from streams.core.records import Event, EventType
from streams.core.validate import parse_event
from streams.errors import EffectRefused, LeaseHeld, LeaseLost
from streams.fences import FencedSink, SqlLeaseStore, open_database
from streams.kafka.connection import KafkaConnection
from streams.sdk import Owner, OwnershipReporter, ReporterSettings
from tests.support.waiting import wait_until

KEY = "tenant/export/2026-07-26"


def _read(bootstrap: str, topic: str) -> list[Event]:
    """Every event of the topic to its end, validated, in arrival order."""
    from streams.kafka.reader import iter_topic

    return [
        parse_event(v, key=k) for k, v, _p, _o in iter_topic(KafkaConnection(bootstrap), topic) if v
    ]


class World:
    def __init__(self, path: Path, bootstrap: str, topic: str) -> None:
        self.url = f"sqlite:///{path}"
        # A short busy timeout: a held write lock makes the store "too slow" fast.
        self.db = open_database(self.url, timeout_s=0.3)
        self.leases = SqlLeaseStore(self.db)
        self.sink = FencedSink(self.db, name="ledger")
        self.bootstrap, self.topic = bootstrap, topic
        self.reporters: list[OwnershipReporter] = []

    def reporter(self, worker: str) -> OwnershipReporter:
        rep = OwnershipReporter(
            ReporterSettings(self.bootstrap, worker, topic=self.topic), leases=self.leases
        )
        self.reporters.append(rep)
        return rep

    def hold_write_lock(self) -> sqlite3.Connection:
        """Another process-like connection takes SQLite's write lock and keeps it."""
        conn = sqlite3.connect(self.url.removeprefix("sqlite:///"), isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        return conn


@pytest.fixture
def world(
    tmp_path: Path, kafka_bootstrap: str, unique_topic: Callable[..., str]
) -> Iterator[World]:
    w = World(tmp_path / "owner.db", kafka_bootstrap, unique_topic(partitions=1))
    yield w
    for rep in w.reporters:
        rep.close()
    w.db.close()


def test_own_acquires_renews_in_the_background_and_releases(world: World) -> None:
    """own() acquires, the keeper renews at a third of the ttl, exit releases:
    lease_acquired and lease_released carry the store's revisions as seq."""
    rep = world.reporter("alpha")
    with rep.own(KEY, ttl=0.6) as owner:
        first_expiry = owner.lease.expires_at
        started = time.monotonic()
        # Three renewals, and held past 2 ttl: only renewals keep it that long.
        wait_until(lambda: owner.renewals >= 3, timeout=20, what="three renewals")
        wait_until(lambda: time.monotonic() - started > 1.2, timeout=5, what="two ttl")
        owner.check()
        assert owner.lease.expires_at > first_expiry
        assert world.leases.holder(KEY)[1] == "alpha"
    assert world.leases.holder(KEY)[1] is None
    rep.flush()
    events = _read(world.bootstrap, world.topic)
    assert [(e.type, e.epoch) for e in events] == [
        (EventType.LEASE_ACQUIRED, 1),
        (EventType.LEASE_RELEASED, 1),
    ]
    assert events[0].seq == owner.lease.seq and events[1].seq is not None
    assert events[1].seq > events[0].seq


def test_displacement_sets_lost_calls_back_once_and_check_raises(world: World) -> None:
    """A newer acquisition: the next renewal finds it, lost is set, on_lost runs
    once, check() and effect() raise LeaseLost naming the new epoch."""
    rep = world.reporter("alpha")
    calls: list[Owner] = []
    with rep.own(KEY, ttl=0.9, on_lost=calls.append) as owner:
        # The same worker id restarted elsewhere: a new epoch displaces this one.
        newer = SqlLeaseStore(open_database(world.url)).acquire(KEY, "alpha", ttl=60)
        assert owner.lost.wait(5), "the keeper did not notice the displacement"
        assert calls == [owner]
        with pytest.raises(LeaseLost) as info:
            owner.check()
        assert info.value.current_epoch == newer.epoch
        assert "displaced" in (owner.lost_reason or "")
        with pytest.raises(LeaseLost):
            owner.effect(world.sink, "release-index", b"x")
    assert world.sink.effects(KEY) == []
    assert world.leases.holder(KEY)[:2] == (newer.epoch, "alpha")  # release was a no-op


def test_effect_through_the_owner_commits_with_evidence(world: World) -> None:
    """owner.effect applies through the fenced sink and publishes attempted then
    committed, stamped, with the effect's risk in attrs."""
    rep = world.reporter("alpha")
    with rep.own(KEY, ttl=30) as owner:
        outcome = owner.effect(world.sink, "release-index", b"x", risk="irreversible")
    assert (outcome.status, outcome.accepted) == ("committed", True)
    rep.flush()
    events = _read(world.bootstrap, world.topic)
    effect_events = [e for e in events if e.type.value.startswith("effect_")]
    assert [(e.type, (e.attrs or {}).get("risk")) for e in effect_events] == [
        (EventType.EFFECT_ATTEMPTED, "irreversible"),
        (EventType.EFFECT_COMMITTED, None),
    ]
    assert all(e.seq is not None for e in events)


def test_a_store_too_slow_fails_irreversible_closed_and_defers_deferrable(world: World) -> None:
    """With the store's write lock held past the timeout: an irreversible effect
    is refused (typed error, evidence says why, nothing written); a deferrable
    one is queued and committed once the store answers; the lease, not renewed
    within its ttl, is reported lost."""
    rep = world.reporter("alpha")
    lost_at: list[float] = []
    with rep.own(KEY, ttl=1.5, on_lost=lambda o: lost_at.append(time.monotonic())) as owner:
        blocker = world.hold_write_lock()
        try:
            with pytest.raises(EffectRefused) as info:
                owner.effect(world.sink, "pay-invoice", b"100", risk="irreversible")
            assert info.value.reason == "store_unavailable"
            later = owner.effect(world.sink, "index-report", b"r", risk="deferrable")
            assert (later.status, later.deferred) == ("deferred", True)
            assert owner.lost.wait(5), "the lease should be lost once its ttl passed unrenewed"
            assert "not renewed within the ttl" in (owner.lost_reason or "")
        finally:
            blocker.rollback()
            blocker.close()
        assert later.wait(10)
        assert later.status == "committed"
    assert [e.effect_key for e in world.sink.effects(KEY)] == ["index-report"]
    rep.flush()
    events = _read(world.bootstrap, world.topic)
    refused = [e for e in events if e.effect_key == "pay-invoice"]
    assert [e.type for e in refused] == [EventType.EFFECT_REJECTED]
    assert refused[0].seq is None
    assert refused[0].attrs is not None and refused[0].attrs["reason"] == "store_unavailable"
    assert refused[0].attrs["receipt"] == "not_attempted"
    assert refused[0].attrs["unstamped"] == "store_unavailable"
    deferred = [e for e in events if e.effect_key == "index-report"]
    assert [e.type for e in deferred] == [EventType.EFFECT_ATTEMPTED, EventType.EFFECT_COMMITTED]
    assert deferred[0].attrs is not None and deferred[0].attrs["deferred_s"] > 0


def test_deferred_queue_is_bounded(world: World) -> None:
    """Past max_deferred, a deferrable effect is refused like an irreversible one."""
    rep = world.reporter("alpha")
    with rep.own(KEY, ttl=30, max_deferred=2) as owner:
        blocker = world.hold_write_lock()
        try:
            outcomes = [owner.effect(world.sink, f"e{i}", b"", risk="deferrable") for i in range(2)]
            with pytest.raises(EffectRefused) as info:
                owner.effect(world.sink, "e2", b"", risk="deferrable")
            assert info.value.reason == "deferred_queue_full"
        finally:
            blocker.rollback()
            blocker.close()
        assert all(o.wait(10) and o.status == "committed" for o in outcomes)
    assert sorted(e.effect_key for e in world.sink.effects(KEY)) == ["e0", "e1"]


def test_deferred_effects_left_when_the_store_stays_away_are_abandoned(world: World) -> None:
    """Leaving the block while the store is still too slow: the waiting effects
    are marked abandoned and StoreUnavailable says how many."""
    from streams.errors import StoreUnavailable

    rep = world.reporter("alpha")
    owner = rep.own(KEY, ttl=30, drain_timeout_s=0.5)
    blocker = world.hold_write_lock()
    try:
        outcome = owner.effect(world.sink, "e", b"", risk="deferrable")
        with pytest.raises(StoreUnavailable, match="1 deferred effect"):
            owner.close()
    finally:
        blocker.rollback()
        blocker.close()
    assert outcome.status == "abandoned"
    assert world.sink.effects(KEY) == []


def test_wait_s_waits_for_the_holder_to_let_go(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """own(wait_s=...) retries while another worker holds the key, then gets the next epoch."""
    alpha, beta = world.reporter("alpha"), world.reporter("beta")
    with pytest.raises(LeaseHeld), alpha.own(KEY, ttl=30):
        beta.own(KEY, ttl=30)
    got: dict[str, Any] = {}
    holder = alpha.own(KEY, ttl=30)
    # The waiter has been refused once (it is waiting) before the holder lets go.
    refused = threading.Event()
    acquire = world.leases.acquire

    def observed(key: str, worker: str, ttl: float) -> Any:
        try:
            return acquire(key, worker, ttl)
        except LeaseHeld:
            refused.set()
            raise

    monkeypatch.setattr(world.leases, "acquire", observed)

    def take() -> None:
        with beta.own(KEY, ttl=30, wait_s=10) as b:
            got["epoch"] = b.epoch

    t = threading.Thread(target=take)
    t.start()
    assert refused.wait(15), "the waiter never asked for the lease"
    holder.close()
    t.join(15)
    assert got["epoch"] == holder.epoch + 1


def test_the_workers_wall_clock_decides_nothing(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the worker's wall clock an hour ahead, the lease is neither lost nor
    short-renewed: renewals run on the store's TTL and a monotonic deadline."""
    rep = world.reporter("alpha")
    with rep.own(KEY, ttl=0.6) as owner:
        real = time.time
        monkeypatch.setattr(time, "time", lambda: real() + 3600)
        before = owner.renewals
        started = time.monotonic()
        wait_until(lambda: owner.renewals >= before + 3, timeout=20, what="three renewals")
        owner.check()
        elapsed = time.monotonic() - started
        # Every ttl/3 (0.2 s), not a storm: at most one renewal per 0.1 s of what passed.
        assert owner.renewals - before <= elapsed / 0.1 + 2, (owner.renewals, elapsed)


def test_closing_the_reporter_releases_its_open_owners(world: World) -> None:
    """reporter.close() releases every owner still open and reports lease_released."""
    rep = world.reporter("alpha")
    owner = rep.own(KEY, ttl=30)
    rep.close()
    assert world.leases.holder(KEY)[1] is None
    assert [e.type for e in _read(world.bootstrap, world.topic)] == [
        EventType.LEASE_ACQUIRED,
        EventType.LEASE_RELEASED,
    ]
    assert owner.renewals == 0 and not owner.lost.is_set()


def test_bad_effect_arguments_are_refused_before_anything_is_queued(world: World) -> None:
    """An empty effect key or a payload over the sink's bound raises ValueError at
    once, even for a deferrable effect while the store is too slow."""
    rep = world.reporter("alpha")
    small = FencedSink(world.db, name="small", max_payload_bytes=4)
    with rep.own(KEY, ttl=30) as owner:
        blocker = world.hold_write_lock()
        try:
            with pytest.raises(ValueError):
                owner.effect(small, "", b"", risk="deferrable")
            with pytest.raises(ValueError):
                owner.effect(small, "e", b"12345", risk="deferrable")
            assert owner.deferred_pending == 0
        finally:
            blocker.rollback()
            blocker.close()


def test_the_watchdog_marks_the_lease_lost_while_a_renewal_hangs(world: World) -> None:
    """A renewal stuck in a store call longer than the ttl does not delay the
    loss: the watchdog sets owner.lost at the local deadline."""
    slow_db = open_database(world.url, timeout_s=6.0)
    rep = OwnershipReporter(
        ReporterSettings(world.bootstrap, "alpha", topic=world.topic),
        leases=SqlLeaseStore(slow_db),
    )
    world.reporters.append(rep)
    owner = rep.own(KEY, ttl=1.0)
    blocker = world.hold_write_lock()
    try:
        # The blocked renewal cannot return before its 6 s busy timeout: a loss seen
        # before then was reported by the watchdog at the local deadline (ttl 1 s).
        assert owner.lost.wait(5.5), "the lease was not reported lost before the call returned"
        assert "not renewed within the ttl" in (owner.lost_reason or "")
    finally:
        blocker.rollback()
        blocker.close()
    owner.close()
    slow_db.close()


def test_adopt_keeps_a_claimed_lease_until_a_higher_claim_displaces_it(world: World) -> None:
    """A lease claimed at an epoch another authority allocated (claim_epoch)
    is kept by adopt() like one from own(): renewed in the background, lost
    when a higher epoch is claimed, its effect then refused; a lease of
    another worker is refused."""
    from streams.fences.lease_claim import claim_epoch

    rep = world.reporter("alpha")
    lease = claim_epoch(world.leases, KEY, 4, "alpha", 0.6)
    with pytest.raises(ValueError, match="another worker"):
        world.reporter("beta").adopt(lease, ttl=0.6, started=time.monotonic())
    with rep.adopt(lease, ttl=0.6, started=time.monotonic()) as owner:
        assert owner.epoch == 4
        wait_until(lambda: owner.renewals >= 2, timeout=20, what="two renewals")
        claim_epoch(world.leases, KEY, 5, "beta", 60)
        assert owner.lost.wait(5), "the keeper did not notice the higher claim"
        with pytest.raises(LeaseLost) as info:
            owner.effect(world.sink, "release-index", b"x")
        assert info.value.current_epoch == 5
    assert world.sink.effects(KEY) == []
