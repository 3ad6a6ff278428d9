"""The fenced sink's compare-and-set, the same on SQLite and PostgreSQL."""

from __future__ import annotations

import uuid

import pytest

from streams.fences import FencedSink, SqlLeaseStore, UnfencedSink

from . import race
from .conftest import Backend


def _key() -> str:
    return f"tenant/export/{uuid.uuid4().hex[:8]}"


def test_stale_epoch_is_rejected_with_a_receipt(backend: Backend) -> None:
    """After the sink saw epoch 2, an epoch-1 write is rejected naming epoch 2."""
    sink = FencedSink(backend.connect(), prefix=backend.prefix, consult_leases=False)
    key = _key()
    assert sink.apply(key, 2, "release-index", b"b").status == "committed"
    r = sink.apply(key, 1, "other-effect", b"a")
    assert (r.status, r.current_epoch, r.reason) == ("rejected", 2, "stale_epoch")
    assert [e.effect_key for e in sink.effects(key)] == ["release-index"]


def test_higher_epoch_raises_the_stored_epoch(backend: Backend) -> None:
    """A write at a higher epoch is accepted and fences everything below it."""
    sink = FencedSink(backend.connect(), prefix=backend.prefix, consult_leases=False)
    key = _key()
    sink.apply(key, 1, "e1", b"")
    assert sink.apply(key, 5, "e2", b"").current_epoch == 5
    assert sink.apply(key, 4, "e3", b"").status == "rejected"
    assert sink.apply(key, 5, "e4", b"").status == "committed"


def test_repeat_is_a_duplicate_and_written_once(backend: Backend) -> None:
    """The same idempotency key twice: one row, the second receipt says duplicate."""
    sink = FencedSink(backend.connect(), prefix=backend.prefix, consult_leases=False)
    key = _key()
    first = sink.apply(key, 3, "release-index", b"one")
    second = sink.apply(key, 3, "release-index", b"two")
    assert (first.status, second.status) == ("committed", "duplicate")
    (row,) = sink.effects(key)
    assert row.payload == b"one"


def test_explicit_idempotency_key_separates_effects(backend: Backend) -> None:
    """Two writes of one effect key under different idempotency keys are two rows."""
    sink = FencedSink(backend.connect(), prefix=backend.prefix, consult_leases=False)
    key = _key()
    sink.apply(key, 1, "shard", b"1", idempotency_key="shard/1")
    sink.apply(key, 1, "shard", b"2", idempotency_key="shard/2")
    assert sorted(e.idempotency_key for e in sink.effects(key)) == ["shard/1", "shard/2"]


def test_consulting_leases_rejects_the_old_owner_before_the_new_one_writes(
    backend: Backend,
) -> None:
    """With the lease table consulted, a takeover alone fences the old epoch at the sink."""
    db = backend.connect()
    leases = SqlLeaseStore(db, prefix=backend.prefix)
    sink = FencedSink(db, prefix=backend.prefix)
    key = _key()
    a = leases.acquire(key, "alpha", ttl=60)
    leases.release(key, a.epoch, "alpha")
    leases.acquire(key, "beta", ttl=60)
    r = sink.apply(key, a.epoch, "release-index", b"late")
    assert (r.status, r.current_epoch) == ("rejected", a.epoch + 1)
    assert sink.effects(key) == []


def test_consulting_leases_refuses_an_epoch_never_granted(backend: Backend) -> None:
    """An epoch above any granted one is refused and does not raise the fence."""
    db = backend.connect()
    leases = SqlLeaseStore(db, prefix=backend.prefix)
    sink = FencedSink(db, prefix=backend.prefix)
    key = _key()
    lease = leases.acquire(key, "alpha", ttl=60)
    forged = sink.apply(key, lease.epoch + 10, "e", b"")
    assert (forged.status, forged.reason) == ("rejected", "unknown_epoch")
    assert sink.apply(key, lease.epoch, "e", b"").status == "committed"


def test_advance_fences_a_separate_sink_without_writing(backend: Backend) -> None:
    """advance() raises the stored epoch (never lowers it) so an older write is refused."""
    sink = FencedSink(backend.connect(), prefix=backend.prefix, consult_leases=False)
    key = _key()
    assert sink.advance(key, 7) == 7
    assert sink.advance(key, 3) == 7
    assert sink.apply(key, 6, "e", b"").status == "rejected"
    assert sink.effects(key) == []


def test_unfenced_sink_writes_everything(backend: Backend) -> None:
    """The baseline sink takes stale and repeated writes alike (what the fence prevents)."""
    sink = UnfencedSink(backend.connect(), prefix=backend.prefix)
    key = _key()
    for epoch in (2, 1, 1):
        assert sink.apply(key, epoch, "release-index", b"").status == "committed"
    assert sink.count(key, "release-index") == 3


def test_bad_arguments_are_refused(backend: Backend) -> None:
    """Negative or boolean epochs, empty effect keys, oversize payloads raise ValueError."""
    sink = FencedSink(backend.connect(), prefix=backend.prefix, max_payload_bytes=8)
    for args in (
        ("k", -1, "e", b""),
        ("k", True, "e", b""),
        ("k", 1, "", b""),
        ("k", 1, "e", b"123456789"),
        ("k", 1, "e", "text"),
    ):
        with pytest.raises(ValueError):
            sink.apply(*args)  # type: ignore[arg-type]


#: (threads, processes, rounds): owners racing in one process, or in several.
MODES = {"threads": (6, 0, 12), "processes": (2, 3, 4)}


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("kind", ["fenced-consult", "fenced-advance"])
def test_many_owners_hammering_across_takeovers(backend: Backend, kind: str, mode: str) -> None:
    """Across takeovers (threads or processes): no effect accepted from a displaced
    epoch, none written twice, one winner per shared effect."""
    threads, processes, rounds = MODES[mode]
    attempts, rows = race.hammer(
        backend.url, backend.prefix, kind, threads=threads, processes=processes, rounds=rounds
    )
    race.check(attempts, rows)
