"""Epochs allocated by another authority (a Temporal attempt), claimed in the
lease table: the same on SQLite and PostgreSQL."""

from __future__ import annotations

import uuid

import pytest

from streams.core.records import Event, EventType
from streams.errors import LeaseLost
from streams.fences import FencedSink, SqlLeaseStore
from streams.fences.lease_claim import claim_epoch

from .conftest import Backend


def _key() -> str:
    return f"temporal/default/wf/{uuid.uuid4().hex[:8]}/1"


class _Events:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def publish(self, event: Event) -> None:
        self.events.append(event)


def test_a_higher_epoch_displaces_a_live_holder_and_is_announced(backend: Backend) -> None:
    """Claiming epoch 3 over epoch 1's unexpired lease succeeds at once, with
    the next store revision as seq, publishes lease_acquired with the given
    attrs, and the old holder's renewal then finds itself displaced."""
    published = _Events()
    store = SqlLeaseStore(backend.connect(), prefix=backend.prefix, publisher=published)
    key = _key()
    first = claim_epoch(store, key, 1, "alpha", 60)
    third = claim_epoch(store, key, 3, "beta", 60, attrs={"temporal_attempt": 3})
    assert (third.epoch, third.worker_id, third.seq) == (3, "beta", first.seq + 1)
    assert store.current_epoch(key) == 3
    assert [(e.type, e.epoch, e.seq) for e in published.events] == [
        (EventType.LEASE_ACQUIRED, 1, first.seq),
        (EventType.LEASE_ACQUIRED, 3, third.seq),
    ]
    assert published.events[1].attrs == {"ttl_s": 60, "temporal_attempt": 3}
    with pytest.raises(LeaseLost, match="displaced by epoch 3"):
        store.renew(key, 1, "alpha", 60)
    assert store.renew(key, 3, "beta", 60).epoch == 3


@pytest.mark.parametrize("late", [1, 2])
def test_an_epoch_not_above_the_current_one_is_refused(backend: Backend, late: int) -> None:
    """After epoch 2 was claimed, claiming 2 again or 1 raises LeaseLost naming
    the current epoch, and changes nothing."""
    store = SqlLeaseStore(backend.connect(), prefix=backend.prefix)
    key = _key()
    claim_epoch(store, key, 2, "beta", 60)
    with pytest.raises(LeaseLost) as info:
        claim_epoch(store, key, late, "alpha", 60)
    assert info.value.current_epoch == 2
    assert store.holder(key)[:2] == (2, "beta")


def test_the_fenced_sink_refuses_the_epochs_below_a_claim(backend: Backend) -> None:
    """A sink consulting the lease table refuses epoch 1's write once epoch 2
    is claimed, and takes epoch 2's."""
    db = backend.connect()
    store = SqlLeaseStore(db, prefix=backend.prefix)
    sink = FencedSink(db, name="ledger", prefix=backend.prefix)
    key = _key()
    claim_epoch(store, key, 1, "alpha", 60)
    claim_epoch(store, key, 2, "beta", 60)
    stale = sink.apply(key, 1, "publish", b"alpha")
    fresh = sink.apply(key, 2, "publish", b"beta")
    assert (stale.status, stale.reason, fresh.status) == ("rejected", "stale_epoch", "committed")


@pytest.mark.parametrize("epoch", [0, -1, True, 1.0, 2**63])
def test_an_epoch_outside_the_contract_is_refused_before_the_store(
    backend: Backend, epoch: object
) -> None:
    """Epoch 0, negatives, booleans, floats and 2^63 are ValueErrors; the key
    never gets a lease row epoch."""
    store = SqlLeaseStore(backend.connect(), prefix=backend.prefix)
    key = _key()
    with pytest.raises(ValueError, match="epoch must be an integer"):
        claim_epoch(store, key, epoch, "alpha", 60)  # type: ignore[arg-type]
    assert store.current_epoch(key) == 0
