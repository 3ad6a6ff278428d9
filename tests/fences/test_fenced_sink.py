"""The fenced sink's compare-and-set, the same on SQLite and PostgreSQL."""

from __future__ import annotations

import itertools
import threading
import uuid
from dataclasses import dataclass

import pytest

from streams.errors import LeaseHeld
from streams.fences import FencedSink, Receipt, SqlLeaseStore, UnfencedSink

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


@dataclass
class _Attempt:
    epoch: int
    seen_max: int  # highest epoch acquired (and fenced) before the apply started
    receipt: Receipt


def _hammer(backend: Backend, *, shared_db: bool) -> tuple[list[_Attempt], FencedSink, str]:
    """Six owners take the key over from each other again and again; each
    writes while current and once more after it has been displaced."""
    owners, rounds, writes = 6, 12, 4
    key = _key()
    lease_db = backend.connect()
    leases = SqlLeaseStore(lease_db, prefix=backend.prefix)
    if shared_db:
        sink = FencedSink(lease_db, prefix=backend.prefix, consult_leases=True)
    else:
        # The destination lives apart from the lease store (another prefix,
        # another connection): new owners fence it with advance().
        sink = FencedSink(backend.connect(), prefix=backend.prefix + "d_", consult_leases=False)
    lock = threading.Lock()
    acquired = threading.Condition(lock)
    state = {"max": 0, "done": 0}
    attempts: list[_Attempt] = []
    errors: list[BaseException] = []

    def apply(epoch: int, effect_key: str) -> None:
        with lock:
            seen = state["max"]
        r = sink.apply(key, epoch, effect_key, f"{epoch}".encode())
        with lock:
            attempts.append(_Attempt(epoch, seen, r))

    def owner(i: int) -> None:
        try:
            for _ in range(rounds):
                while True:
                    try:
                        lease = leases.acquire(key, f"w{i}", ttl=0.001)
                        break
                    except LeaseHeld:
                        continue
                if not shared_db:
                    sink.advance(key, lease.epoch)
                with acquired:
                    state["max"] = max(state["max"], lease.epoch)
                    acquired.notify_all()
                for j in range(writes):
                    # Shared effect keys contend (duplicates); own keys do not.
                    apply(lease.epoch, f"shared-{j}" if j % 2 else f"e{lease.epoch}-{j}")
                with acquired:  # wait (bounded) until someone displaces us
                    acquired.wait_for(
                        lambda e=lease.epoch: state["max"] > e or state["done"] == owners - 1,
                        timeout=5.0,
                    )
                apply(lease.epoch, f"late-{lease.epoch}")
        except BaseException as exc:  # surfaced by the caller
            errors.append(exc)
        finally:
            with acquired:
                state["done"] += 1
                acquired.notify_all()

    threads = [threading.Thread(target=owner, args=(i,)) for i in range(owners)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert not errors, errors
    return attempts, sink, key


@pytest.mark.parametrize("shared_db", [True, False], ids=["consult-leases", "advance"])
def test_many_owners_hammering_across_takeovers(backend: Backend, shared_db: bool) -> None:
    """Across takeovers: no effect accepted from a displaced epoch, none written twice."""
    attempts, sink, key = _hammer(backend, shared_db=shared_db)
    rows = sink.effects(key)
    committed = [a for a in attempts if a.receipt.status == "committed"]
    displaced = [a for a in attempts if a.epoch < a.seen_max]
    # The harness really produced late writers, and every one was refused.
    assert len(displaced) >= 6
    assert all(a.receipt.status == "rejected" for a in displaced)
    assert not [a for a in committed if a.epoch < a.seen_max]
    # The table holds exactly the committed receipts, each once.
    assert len({r.idempotency_key for r in rows}) == len(rows)
    assert sorted((r.idempotency_key, r.epoch) for r in rows) == sorted(
        (a.receipt.idempotency_key, a.epoch) for a in committed
    )
    # In the fence's own commit order, epochs never go down.
    assert all(x.epoch <= y.epoch for x, y in itertools.pairwise(rows))
    for j in (1, 3):
        wins = [a for a in committed if a.receipt.effect_key == f"shared-{j}"]
        assert len(wins) == 1
