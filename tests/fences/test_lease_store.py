"""The lease store's behaviour, the same on SQLite and PostgreSQL."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import threading
import time
import uuid

import pytest

from streams.core.records import Event, EventType
from streams.errors import BrokerError, LeaseHeld, LeaseLost
from streams.fences import LeaseUnpublished, SqlLeaseStore
from streams.fences.db import Database

from .conftest import Backend, FrozenClock


def _key() -> str:
    return f"tenant/export/{uuid.uuid4().hex[:8]}"


def _store_now(db: Database) -> float:
    with db.transaction() as tx:
        return tx.now()


def test_first_acquisition_is_epoch_one_and_seq_one(backend: Backend) -> None:
    """A fresh key's first lease is epoch 1 with seq 1 from the store revision."""
    store = SqlLeaseStore(backend.connect(), prefix=backend.prefix)
    lease = store.acquire(_key(), "alpha", ttl=30)
    assert (lease.epoch, lease.seq, lease.worker_id) == (1, 1, "alpha")


def test_unexpired_lease_blocks_another_worker(backend: Backend) -> None:
    """Another worker cannot acquire while the holder's lease is unexpired."""
    store = SqlLeaseStore(backend.connect(), prefix=backend.prefix)
    key = _key()
    store.acquire(key, "alpha", ttl=60)
    with pytest.raises(LeaseHeld) as info:
        store.acquire(key, "beta", ttl=60)
    assert (info.value.holder, info.value.epoch) == ("alpha", 1)
    assert store.current_epoch(key) == 1


def test_release_lets_the_next_owner_in_with_a_higher_epoch(backend: Backend) -> None:
    """After a release the next acquisition gets the next epoch and a later seq."""
    store = SqlLeaseStore(backend.connect(), prefix=backend.prefix)
    key = _key()
    a = store.acquire(key, "alpha", ttl=60)
    released = store.release(key, a.epoch, "alpha")
    b = store.acquire(key, "beta", ttl=60)
    assert released.current and released.seq > a.seq
    assert b.epoch == a.epoch + 1 and b.seq > released.seq


def test_same_worker_reacquiring_gets_a_new_epoch(backend: Backend) -> None:
    """A restarted worker with the same id takes over its own lease at a new epoch."""
    store = SqlLeaseStore(backend.connect(), prefix=backend.prefix)
    key = _key()
    a = store.acquire(key, "alpha", ttl=60)
    again = store.acquire(key, "alpha", ttl=60)
    assert again.epoch == a.epoch + 1
    with pytest.raises(LeaseLost):
        store.renew(key, a.epoch, "alpha", ttl=60)


def test_stamp_reports_displacement_and_hands_out_increasing_seqs(backend: Backend) -> None:
    """stamp() gives strictly increasing seqs and says when an epoch is no longer current."""
    store = SqlLeaseStore(backend.connect(), prefix=backend.prefix)
    key = _key()
    a = store.acquire(key, "alpha", ttl=60)
    s1 = store.stamp(key, a.epoch)
    store.release(key, a.epoch, "alpha")
    b = store.acquire(key, "beta", ttl=60)
    s2 = store.stamp(key, a.epoch)
    s3 = store.stamp(key, b.epoch)
    assert s1.current and s1.seq == a.seq + 1
    assert not s2.current and s2.current_epoch == b.epoch
    assert s3.current
    assert a.seq < s1.seq < b.seq < s2.seq < s3.seq


def test_renew_extends_and_a_displaced_renew_fails(backend: Backend) -> None:
    """renew() extends a live lease; after a takeover the old epoch's renew raises LeaseLost."""
    store = SqlLeaseStore(backend.connect(), prefix=backend.prefix)
    key = _key()
    a = store.acquire(key, "alpha", ttl=5)
    renewed = store.renew(key, a.epoch, "alpha", ttl=120)
    assert renewed.expires_at > a.expires_at and renewed.seq == a.seq
    store.release(key, a.epoch, "alpha")
    with pytest.raises(LeaseLost) as info:
        store.renew(key, a.epoch, "alpha", ttl=5)
    assert info.value.reason == "released"
    store.acquire(key, "beta", ttl=60)
    with pytest.raises(LeaseLost) as info2:
        store.renew(key, a.epoch, "alpha", ttl=5)
    assert info2.value.current_epoch == a.epoch + 1


def test_take_over_displaces_a_live_holder_at_the_next_epoch(backend: Backend) -> None:
    """take_over grants the next epoch over an unexpired lease (where acquire
    raises LeaseHeld); the old holder's renew then fails as displaced, its
    stamp is not current, and the published lease_acquired says take_over."""
    published: list[Event] = []

    class Sink:
        def publish(self, event: Event) -> None:
            published.append(event)

    store = SqlLeaseStore(backend.connect(), prefix=backend.prefix, publisher=Sink())
    key = _key()
    a = store.acquire(key, "alpha", ttl=120)
    with pytest.raises(LeaseHeld):
        store.acquire(key, "beta", ttl=60)
    b = store.take_over(key, "beta", ttl=60)
    assert (b.epoch, b.worker_id) == (a.epoch + 1, "beta") and b.seq > a.seq
    with pytest.raises(LeaseLost) as info:
        store.renew(key, a.epoch, "alpha", ttl=120)
    assert info.value.current_epoch == b.epoch
    assert not store.stamp(key, a.epoch).current
    assert [e.attrs for e in published] == [{"ttl_s": 120}, {"ttl_s": 60, "take_over": True}]


def test_release_by_a_displaced_worker_does_not_free_the_new_lease(backend: Backend) -> None:
    """A late release of an old epoch leaves the current holder's lease in place."""
    store = SqlLeaseStore(backend.connect(), prefix=backend.prefix)
    key = _key()
    a = store.acquire(key, "alpha", ttl=60)
    store.release(key, a.epoch, "alpha")
    store.acquire(key, "beta", ttl=60)
    late = store.release(key, a.epoch, "alpha")
    assert not late.current
    with pytest.raises(LeaseHeld):
        store.acquire(key, "gamma", ttl=60)


def test_ttl_is_judged_by_the_store_clock_not_the_worker_clock(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker clock an hour ahead does not expire a lease; the store clock does."""
    db = backend.connect()
    store = SqlLeaseStore(db, prefix=backend.prefix)
    held_key, short_key = _key(), _key()
    store.acquire(held_key, "alpha", ttl=60)
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + 3600.0)
    with pytest.raises(LeaseHeld):
        store.acquire(held_key, "beta", ttl=60)
    monkeypatch.setattr(time, "time", real_time)
    lease = store.acquire(short_key, "alpha", ttl=0.3)
    while _store_now(db) <= lease.expires_at:  # wait on the store's own clock
        time.sleep(0.05)
    with pytest.raises(LeaseLost) as info:
        store.renew(short_key, lease.epoch, "alpha", ttl=5)
    assert info.value.reason == "expired by the store's clock"
    assert store.acquire(short_key, "beta", ttl=60).epoch == lease.epoch + 1


def test_frozen_store_clock_decides_expiry_on_sqlite(
    tmp_path: object, frozen_clock: FrozenClock
) -> None:
    """With the SQLite store clock frozen, a lease expires exactly when that clock passes it."""
    from streams.fences.connect import open_database

    db = open_database(f"sqlite:///{tmp_path}/clock.db", clock=frozen_clock)
    store = SqlLeaseStore(db)
    try:
        lease = store.acquire("k", "alpha", ttl=10)
        assert lease.expires_at == frozen_clock.t + 10
        frozen_clock.t += 9.9
        with pytest.raises(LeaseHeld):
            store.acquire("k", "beta", ttl=10)
        renewed = store.renew("k", lease.epoch, "alpha", ttl=10)  # still alive at +9.9
        frozen_clock.t = renewed.expires_at
        with pytest.raises(LeaseLost):
            store.renew("k", lease.epoch, "alpha", ttl=10)
        assert store.acquire("k", "beta", ttl=10).epoch == 2
    finally:
        db.close()


def test_acquisition_publishes_lease_acquired_with_the_store_seq(backend: Backend) -> None:
    """The store publishes a lease_acquired event carrying the new epoch and its seq."""
    published: list[Event] = []

    class Sink:
        def publish(self, event: Event) -> None:
            published.append(event)

    store = SqlLeaseStore(backend.connect(), prefix=backend.prefix, publisher=Sink())
    key = _key()
    lease = store.acquire(key, "alpha", ttl=30)
    (event,) = published
    assert event.type is EventType.LEASE_ACQUIRED
    assert (event.workflow_key, event.epoch, event.worker_id, event.seq) == (
        key,
        lease.epoch,
        "alpha",
        lease.seq,
    )
    assert event.event_id


def test_a_failed_publish_raises_lease_unpublished_carrying_the_held_lease(
    backend: Backend,
) -> None:
    """A publisher's BrokerError leaves the lease held and is raised as LeaseUnpublished (a
    BrokerError with the same message, code and retriable) whose ``lease`` is that lease."""
    cause = BrokerError("delivery failed: broker down", code="_TRANSPORT", retriable=True)

    class Down:
        def publish(self, event: Event) -> None:
            raise cause

    store = SqlLeaseStore(backend.connect(), prefix=backend.prefix, publisher=Down())
    key = _key()
    with pytest.raises(LeaseUnpublished) as info:
        store.acquire(key, "alpha", ttl=30)
    err = info.value
    assert isinstance(err, BrokerError) and err.__cause__ is cause
    assert (str(err), err.code, err.retriable) == (str(cause), cause.code, cause.retriable)
    assert (err.lease.key, err.lease.worker_id) == (key, "alpha")
    with pytest.raises(LeaseHeld):
        store.acquire(key, "beta", ttl=30)
    assert store.stamp(key, err.lease.epoch).current


def test_invalid_arguments_are_refused_before_the_store(backend: Backend) -> None:
    """Empty keys, oversize ids and non-positive TTLs raise ValueError."""
    store = SqlLeaseStore(backend.connect(), prefix=backend.prefix)
    for bad in (
        ("", "w", 1.0),
        ("k", "", 1.0),
        ("k", "w", 0),
        ("k", "w", float("nan")),
        ("k" * 513, "w", 1.0),
        ("k", "w" * 257, 1.0),
    ):
        with pytest.raises(ValueError):
            store.acquire(*bad)


def test_concurrent_threads_get_unique_strictly_increasing_epochs(backend: Backend) -> None:
    """8 threads acquiring one key: every epoch 1..N granted once, increasing per thread."""
    threads_n, per_thread = 8, 15
    key = _key()
    db = backend.connect()
    SqlLeaseStore(db, prefix=backend.prefix)  # schema first
    got: dict[int, list[int]] = {i: [] for i in range(threads_n)}
    errors: list[BaseException] = []

    def run(i: int) -> None:
        store = SqlLeaseStore(db, prefix=backend.prefix)
        try:
            while len(got[i]) < per_thread:
                try:
                    lease = store.acquire(key, f"w{i}", ttl=60)
                except LeaseHeld:
                    continue
                got[i].append(lease.epoch)
                store.release(key, lease.epoch, f"w{i}")
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads_n)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(120)
    assert not errors, errors
    everything = sorted(e for eps in got.values() for e in eps)
    assert everything == list(range(1, threads_n * per_thread + 1))
    for eps in got.values():
        assert all(a < b for a, b in itertools.pairwise(eps))


_PROC_SCRIPT = r"""
import json, sys
from streams.errors import LeaseHeld
from streams.fences import SqlLeaseStore, open_database
url, prefix, key, worker, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
store = SqlLeaseStore(open_database(url), prefix=prefix)
epochs = []
while len(epochs) < n:
    try:
        lease = store.acquire(key, worker, ttl=60)
    except LeaseHeld:
        continue
    epochs.append(lease.epoch)
    store.release(key, lease.epoch, worker)
print(json.dumps(epochs))
"""


def test_concurrent_processes_get_unique_strictly_increasing_epochs(backend: Backend) -> None:
    """4 processes acquiring one key: every epoch 1..N granted once, increasing per process."""
    procs_n, per_proc = 4, 20
    key = _key()
    SqlLeaseStore(backend.connect(), prefix=backend.prefix)
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                _PROC_SCRIPT,
                backend.url,
                backend.prefix,
                key,
                f"p{i}",
                str(per_proc),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(procs_n)
    ]
    results: list[list[int]] = []
    for proc in procs:
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err
        results.append(json.loads(out))
    everything = sorted(e for eps in results for e in eps)
    assert everything == list(range(1, procs_n * per_proc + 1))
    for eps in results:
        assert all(a < b for a, b in itertools.pairwise(eps))


def test_a_store_too_slow_raises_store_unavailable_in_one_line(backend: Backend) -> None:
    """A call that waits past the database's timeout (another transaction holds
    the key's lock) raises StoreUnavailable with a one-line message, not a hang."""
    from streams.errors import StoreUnavailable
    from streams.fences.connect import open_database

    key = _key()
    holder_db = backend.connect()
    SqlLeaseStore(holder_db, prefix=backend.prefix).acquire(key, "alpha", ttl=60)
    slow = open_database(backend.url, timeout_s=0.5)
    backend.opened.append(slow)
    store = SqlLeaseStore(slow, prefix=backend.prefix)
    with holder_db.transaction() as tx:
        # Lock the key's lease row (SQLite: the whole database) and keep it.
        tx.query(
            f"SELECT epoch FROM {backend.prefix}leases WHERE workflow_key = ?{tx.for_update}",
            (key,),
        )
        with pytest.raises(StoreUnavailable) as info:
            store.renew(key, 1, "alpha", ttl=60)
    assert info.value.retriable
    assert "\n" not in str(info.value) and "unavailable" in str(info.value)
    assert store.renew(key, 1, "alpha", ttl=60).epoch == 1  # answers again afterwards
