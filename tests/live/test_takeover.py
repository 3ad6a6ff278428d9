"""The rdkafka engine's takeover fence (streams/live/rdkafka/takeover.py): the next
owner of a departed worker's partitions fences its transactional id, and
never a previous owner that is still in the group. The broker is real."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from streams.kafka.connection import KafkaConnection
from streams.live.rdkafka.takeover import (
    OWNER_PREFIX,
    DepartedOwners,
    departed,
    owner_metadata,
    owner_of,
)


def test_owner_metadata_round_trips() -> None:
    """The metadata a commit writes names its transactional id back."""
    assert owner_of(owner_metadata("app-rdkafka-0123abcd")) == "app-rdkafka-0123abcd"


@pytest.mark.parametrize("metadata", [None, "", "someone else's", OWNER_PREFIX])
def test_foreign_or_empty_metadata_names_no_owner(metadata: str | None) -> None:
    """Metadata this engine did not write (faust's, an operator tool's) names no one."""
    assert owner_of(metadata) is None


def test_departed_skips_itself_members_and_unknown_owners() -> None:
    """Only previous owners that are neither this worker nor a member are fenced,
    each with the partitions it last committed."""
    owners = {0: "me", 1: "gone", 2: "alive", 3: None, 4: "gone", 5: "gone2"}
    assert departed(owners, {"me", "alive"}, "me") == {"gone": [1, 4], "gone2": [5]}


def test_departed_is_empty_when_every_previous_owner_is_present() -> None:
    """A rebalance among live workers fences no one."""
    assert departed({0: "a", 1: "b"}, ["a", "b", "c"], "c") == {}


# -- against the broker ---------------------------------------------------------


@contextmanager
def _member(bootstrap: str, group: str, topic: str, client_id: str) -> Iterator[Any]:
    """A consumer in ``group`` named ``client_id``, assigned ``topic``."""
    from confluent_kafka import Consumer

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": client_id,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    c.subscribe([topic])
    deadline = time.monotonic() + 30
    while not c.assignment() and time.monotonic() < deadline:
        c.poll(0.2)
    assert c.assignment(), "the member was never assigned"
    try:
        yield c
    finally:
        c.close()


def _open_transaction(
    bootstrap: str, txn_id: str, out: str, commit_offsets: Callable[[Any], None]
) -> Any:
    """A producer of ``txn_id`` that committed offsets once (``commit_offsets``)
    and has a transaction open on ``out`` partition 0."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
    p.init_transactions(30)
    p.begin_transaction()
    commit_offsets(p)
    p.commit_transaction(30)
    p.begin_transaction()
    p.produce(out, b"left open", partition=0)
    assert p.flush(30) == 0
    return p


def _open_on(bootstrap: str, out: str) -> bool:
    """Whether a transaction is open on ``out`` partition 0 (LSO < high watermark)."""
    from confluent_kafka import Consumer, TopicPartition

    tp = TopicPartition(out, 0)
    marks = []
    for level in ("read_committed", "read_uncommitted"):
        c = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "probe", "isolation.level": level}
        )
        try:
            marks.append(c.get_watermark_offsets(tp, timeout=10, cached=False)[1])
        finally:
            c.close()
    return marks[0] < marks[1]


def _committer(
    group_member: Any, topic: str, partitions: list[int], owner: str
) -> Callable[[Any], None]:
    from confluent_kafka import TopicPartition

    def commit(p: Any) -> None:
        offsets = [TopicPartition(topic, q, 1, metadata=owner_metadata(owner)) for q in partitions]
        p.send_offsets_to_transaction(offsets, group_member.consumer_group_metadata(), 30)

    return commit


@pytest.mark.kafka
def test_a_departed_owner_is_fenced_and_its_open_transaction_aborted(
    kafka_bootstrap: str, unique_topic: Callable[..., str]
) -> None:
    """A worker that committed partitions 0 and 1, then left its transaction
    open and the group (frozen past its session): the next owner's fence
    aborts that transaction at once (long before its 10-minute timeout) and
    the old producer's commit is refused as fenced."""
    from confluent_kafka import KafkaException

    topic, out = unique_topic(2), unique_topic(1)
    group = f"fw-takeover-{uuid.uuid4().hex[:8]}"
    gone = f"{group}-rdkafka-gone"
    with _member(kafka_bootstrap, group, topic, gone) as old_member:
        old = _open_transaction(
            kafka_bootstrap, gone, out, _committer(old_member, topic, [0, 1], gone)
        )
    # old_member closed: it left the group; its producer's transaction is open.
    assert _open_on(kafka_bootstrap, out)
    me = f"{group}-rdkafka-me"
    with _member(kafka_bootstrap, group, topic, me):
        fence = DepartedOwners(
            KafkaConnection(kafka_bootstrap),
            group=group,
            topic=topic,
            own=me,
            transaction_timeout_ms=600_000,
        )
        assert fence.fence([0, 1]) == [gone]
        assert not _open_on(kafka_bootstrap, out)
        # Fenced once is enough: its metadata stays until the next commit.
        assert fence.fence([0, 1]) == []
    with pytest.raises(KafkaException) as refused:
        old.commit_transaction(10)
    assert refused.value.args[0].name() == "_FENCED"


@pytest.mark.kafka
def test_a_previous_owner_still_in_the_group_is_not_fenced(
    kafka_bootstrap: str, unique_topic: Callable[..., str]
) -> None:
    """A previous owner that is a member now (a rebalance among live workers)
    keeps its producer: no fence, and its transaction commits."""
    topic, out = unique_topic(2), unique_topic(1)
    group = f"fw-takeover-{uuid.uuid4().hex[:8]}"
    alive = f"{group}-rdkafka-alive"
    with _member(kafka_bootstrap, group, topic, alive) as member:
        producer = _open_transaction(
            kafka_bootstrap, alive, out, _committer(member, topic, [0], alive)
        )
        fence = DepartedOwners(
            KafkaConnection(kafka_bootstrap),
            group=group,
            topic=topic,
            own=f"{group}-rdkafka-me",
            transaction_timeout_ms=600_000,
        )
        assert fence.fence([0, 1]) == []
        assert _open_on(kafka_bootstrap, out)
        producer.commit_transaction(30)
    assert not _open_on(kafka_bootstrap, out)


def test_a_fence_that_cannot_reach_the_broker_says_so_and_returns(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """With no broker, the fence logs one warning and fences no one (the
    broker's timeout is left to abort, as before); it never raises."""
    fence = DepartedOwners(
        KafkaConnection("127.0.0.1:9", connect_timeout=1.0),
        group="g",
        topic="t",
        own="me",
        transaction_timeout_ms=10_000,
    )
    with caplog.at_level("WARNING", logger="streams.live.rdkafka.takeover"):
        assert fence.fence([0]) == []
    [line] = [r.getMessage() for r in caplog.records if r.name == "streams.live.rdkafka.takeover"]
    assert "could not look up the previous owners of partitions [0]" in line
