"""The staged-promotion sink, the same on SQLite and PostgreSQL: output staged
under (key, epoch) becomes visible in one promotion of the current owner; a
displaced epoch's rows never do, and are reported."""

from __future__ import annotations

import uuid

import pytest

from streams.fences import SqlLeaseStore
from streams.fences.staged import StagedSink

from . import race
from .conftest import Backend
from .test_fenced_sink import MODES


def _key() -> str:
    return f"tenant/report/{uuid.uuid4().hex[:8]}"


def _world(backend: Backend) -> tuple[SqlLeaseStore, StagedSink]:
    db = backend.connect()
    return SqlLeaseStore(db, prefix=backend.prefix), StagedSink(db, prefix=backend.prefix)


def test_staged_rows_are_invisible_until_promoted_then_all_at_once(backend: Backend) -> None:
    """Staged rows are not visible; one promotion makes all of them visible together."""
    leases, sink = _world(backend)
    key = _key()
    lease = leases.acquire(key, "alpha", ttl=60)
    for part in ("part-1", "part-2", "part-3"):
        assert sink.stage(key, lease.epoch, part, part.encode()).status == "committed"
    assert sink.visible(key) == []
    promotion = sink.promote(key, lease.epoch)
    assert (promotion.status, promotion.promoted) == ("promoted", ("part-1", "part-2", "part-3"))
    rows = sink.visible(key)
    assert [r.effect_key for r in rows] == ["part-1", "part-2", "part-3"]
    assert len({r.fence_revision for r in rows}) == 1  # one promotion, one revision
    assert sink.promote(key, lease.epoch).receipts == ()  # nothing left staged


def test_a_displaced_epoch_is_never_promoted_and_is_reported(backend: Backend) -> None:
    """After a takeover the old epoch's promotion is refused, its rows stay
    invisible, displaced() lists them and discard() turns them into receipts."""
    leases, sink = _world(backend)
    key = _key()
    a = leases.acquire(key, "alpha", ttl=60)
    sink.stage(key, a.epoch, "report", b"old")
    leases.release(key, a.epoch, "alpha")
    b = leases.acquire(key, "beta", ttl=60)
    refused = sink.promote(key, a.epoch)
    assert (refused.status, refused.reason, refused.current_epoch) == (
        "rejected",
        "stale_epoch",
        b.epoch,
    )
    assert [r.status for r in refused.receipts] == ["rejected"]
    assert sink.visible(key) == []
    assert [(d.epoch, d.effect_key, d.current_epoch) for d in sink.displaced(key)] == [
        (a.epoch, "report", b.epoch)
    ]
    assert sink.stage(key, a.epoch, "more", b"").reason == "stale_epoch"
    with pytest.raises(ValueError):
        sink.discard(key, b.epoch)  # the current owner may still promote
    receipts = sink.discard(key, a.epoch)
    assert [(r.status, r.reason, r.effect_key) for r in receipts] == [
        ("rejected", "stale_epoch", "report")
    ]
    assert sink.displaced(key) == []
    sink.stage(key, b.epoch, "report", b"new")
    assert sink.promote(key, b.epoch).promoted == ("report",)
    assert [(r.epoch, r.payload) for r in sink.visible(key)] == [(b.epoch, b"new")]


def test_an_idempotency_key_already_visible_is_a_duplicate(backend: Backend) -> None:
    """Promoting an effect key a previous owner already made visible writes nothing."""
    leases, sink = _world(backend)
    key = _key()
    a = leases.acquire(key, "alpha", ttl=60)
    sink.stage(key, a.epoch, "report", b"a")
    sink.promote(key, a.epoch)
    leases.release(key, a.epoch, "alpha")
    b = leases.acquire(key, "beta", ttl=60)
    sink.stage(key, b.epoch, "report", b"b")
    assert [r.status for r in sink.promote(key, b.epoch).receipts] == ["duplicate"]
    assert [r.payload for r in sink.visible(key)] == [b"a"]


def test_an_epoch_never_granted_cannot_stage_or_promote(backend: Backend) -> None:
    """A forged epoch above the granted one is refused at both steps."""
    leases, sink = _world(backend)
    key = _key()
    lease = leases.acquire(key, "alpha", ttl=60)
    assert sink.stage(key, lease.epoch + 5, "x", b"").reason == "unknown_epoch"
    assert sink.promote(key, lease.epoch + 5).reason == "unknown_epoch"


@pytest.mark.parametrize("mode", sorted(MODES))
def test_many_owners_staging_and_promoting_across_takeovers(backend: Backend, mode: str) -> None:
    """The fenced sink's race (threads or processes): no row of a displaced epoch
    ever visible, none twice, one winner per shared effect; rows staged by an
    owner displaced before promoting are reported as displaced instead."""
    threads, processes, rounds = MODES[mode]
    attempts, rows = race.hammer(
        backend.url, backend.prefix, "staged", threads=threads, processes=processes, rounds=rounds
    )
    race.check(attempts, rows)
    sink = StagedSink(backend.connect(), prefix=backend.prefix)
    (key,) = {r.workflow_key for r in rows}
    displaced = {(d.epoch, d.idempotency_key) for d in sink.displaced(key)}
    refused = {(a.epoch, a.idempotency_key) for a in attempts if a.status == "rejected"}
    visible = {(r.epoch, r.idempotency_key) for r in rows}
    assert not displaced & visible
    # A row staged while its epoch was current whose promotion was then
    # refused is listed (one displaced before it could stage has nothing to list).
    assert displaced <= refused
    assert displaced, "no row was staged by an epoch displaced before its promotion"
