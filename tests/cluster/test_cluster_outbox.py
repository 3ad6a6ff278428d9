"""The transactional outbox (streams/fences/outbox) on the three-broker
cluster across a SIGKILL of its topic's leader: a displaced owner's late
staged effect never becomes visible."""

from __future__ import annotations

from typing import Any

import pytest

from streams.core.records import EventType
from streams.errors import StaleOwner
from tests.cluster.conftest import LocalCluster
from tests.cluster.test_cluster_faults import _leader
from tests.faults.test_broker_restart_midstream import topic_factory
from tests.fences.conftest import frozen_clock, read_topic
from tests.fences.test_outbox import Recorder, _effects, _key, world

__all__ = ["frozen_clock", "world"]  # fixtures used here

pytestmark = [pytest.mark.kafka, pytest.mark.faults]


@pytest.mark.timeout(600)
def test_displaced_owners_effect_stays_invisible_across_a_leader_kill(
    world: Any, kafka_cluster: LocalCluster
) -> None:
    """alpha publishes e1 and stages e2; while alpha's transaction is open the
    topic's leader is SIGKILLed and beta takes over and initializes; alpha's
    commit is fenced (StaleOwner, effect_rejected), beta's e3 goes through the
    new leader, and read_committed shows only e1 and e3."""
    kafka_cluster.ensure_all_up()
    bootstrap = kafka_cluster.bootstrap
    topic, key = topic_factory(bootstrap)(1, prefix="cluster-outbox"), _key()
    rec = Recorder()
    a_epoch = world.leases.acquire(key, "alpha", ttl=10.0).epoch
    a = world.producer(bootstrap, topic, key, a_epoch, "alpha", rec, check_each_batch=False)
    a.init()
    assert world.outbox.stage(key, a_epoch, "e1", b"one").status == "committed"
    assert a.publish_pending() == 1
    assert world.outbox.stage(key, a_epoch, "e2", b"two").status == "committed"
    holder: dict[str, Any] = {}

    class KillAndTakeOverBeforeCommit:
        def __init__(self, real: Any) -> None:
            self.real = real

        def __getattr__(self, name: str) -> Any:
            return getattr(self.real, name)

        def commit_transaction(self, timeout: float) -> None:
            holder["node"] = _leader(kafka_cluster, topic, 0)
            kafka_cluster.broker(holder["node"], "kill")
            holder["b_epoch"] = world.take_over(key, "beta")
            holder["b"] = world.producer(bootstrap, topic, key, holder["b_epoch"], "beta")
            holder["b"].init()
            self.real.commit_transaction(timeout)

    a._producer._producer = KillAndTakeOverBeforeCommit(a._producer._producer)
    try:
        with pytest.raises(StaleOwner):
            a.publish_pending()
        b, b_epoch = holder["b"], holder["b_epoch"]
        (rejected,) = rec.events
        assert (rejected.type, rejected.epoch, rejected.effect_key) == (
            EventType.EFFECT_REJECTED,
            a_epoch,
            "e2",
        )
        assert world.outbox.stage(key, b_epoch, "e3", b"three").status == "committed"
        assert b.publish_pending() == 1
    finally:
        if "node" in holder:
            kafka_cluster.broker(holder["node"], "start")
    assert _effects(read_topic(bootstrap, topic)) == [(a_epoch, "e1"), (b_epoch, "e3")]
    assert world.outbox.statuses(key) == {"e1": "sent", "e2": "superseded", "e3": "sent"}
