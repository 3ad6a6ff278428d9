"""Topic replay for the audit: whole topic, offset and timestamp bounds."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from streams.errors import BrokerError
from streams.kafka.connection import KafkaConnection
from streams.kafka.errors import TopicMissing
from streams.kafka.reader import (
    END,
    Bound,
    Offset,
    PartitionOffsets,
    Timestamp,
    TopicRecord,
    Truncated,
    iter_topic,
)

pytestmark = pytest.mark.kafka

T0 = 1_700_000_000_000  # epoch ms of the first record


def _fill(bootstrap: str, topic: str) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(10):
        # partition i % 2; record i at T0 + i seconds
        p.produce(
            topic, f"v{i}".encode(), key=f"k{i}".encode(), partition=i % 2, timestamp=T0 + i * 1000
        )
    assert p.flush(10) == 0


def test_reads_every_record_in_partition_order(
    kafka_bootstrap: str, unique_topic: Callable[..., str]
) -> None:
    """Without bounds every record is yielded once, each partition in offset order."""
    topic = unique_topic(2)
    _fill(kafka_bootstrap, topic)
    recs = list(iter_topic(KafkaConnection(kafka_bootstrap), topic))
    assert sorted(r.value for r in recs) == sorted(f"v{i}".encode() for i in range(10))
    for p in (0, 1):
        offsets = [r.offset for r in recs if r.partition == p]
        assert offsets == list(range(5))
    key, value, partition, offset = recs[0]
    assert key is not None and value is not None and partition in (0, 1) and offset == 0


def test_offset_bounds_apply_to_every_partition(
    kafka_bootstrap: str, unique_topic: Callable[..., str]
) -> None:
    """--from-offset/--to-offset: start inclusive, end exclusive, per partition."""
    topic = unique_topic(2)
    _fill(kafka_bootstrap, topic)
    recs = list(iter_topic(KafkaConnection(kafka_bootstrap), topic, start=Offset(1), end=Offset(3)))
    assert sorted((r.partition, r.offset) for r in recs) == [(0, 1), (0, 2), (1, 1), (1, 2)]
    assert list(iter_topic(KafkaConnection(kafka_bootstrap), topic, start=Offset(99))) == []


def test_timestamp_bounds_use_record_times(
    kafka_bootstrap: str, unique_topic: Callable[..., str]
) -> None:
    """--since/--until select records with since <= timestamp < until."""
    topic = unique_topic(2)
    _fill(kafka_bootstrap, topic)
    recs = list(
        iter_topic(
            KafkaConnection(kafka_bootstrap),
            topic,
            start=Timestamp(T0 + 3000),
            end=Timestamp(T0 + 7000),
        )
    )
    assert sorted(r.value for r in recs) == [b"v3", b"v4", b"v5", b"v6"]
    late = list(
        iter_topic(KafkaConnection(kafka_bootstrap), topic, start=Timestamp(T0 + 8000), end=END)
    )
    assert sorted(r.value for r in late) == [b"v8", b"v9"]


def test_unknown_topic_is_a_broker_error(kafka_bootstrap: str) -> None:
    """A topic that does not exist raises TopicMissing (a BrokerError), not a client
    exception, naming the topic and the broker."""
    with pytest.raises(BrokerError) as raised:
        list(
            iter_topic(KafkaConnection(kafka_bootstrap), "no-such-topic-fencewatch-xyz", timeout=5)
        )
    assert isinstance(raised.value, TopicMissing)
    assert str(raised.value).startswith(
        f"topic no-such-topic-fencewatch-xyz does not exist on {kafka_bootstrap}"
    )


def test_per_partition_start_and_deleted_history_are_reported(
    kafka_bootstrap: str, unique_topic: Callable[..., str]
) -> None:
    """PartitionOffsets starts each named partition at its offset (the others at their log
    start); on_truncated names a partition whose log starts above the start, with the count."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    topic = unique_topic(2)
    _fill(kafka_bootstrap, topic)
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 1, 2)]).values():
        assert future.result(timeout=30).low_watermark == 2
    seen: list[list[Truncated]] = []
    recs = list(
        iter_topic(
            KafkaConnection(kafka_bootstrap),
            topic,
            start=PartitionOffsets({0: 3}),
            on_truncated=seen.append,
        )
    )
    assert sorted((r.partition, r.offset) for r in recs) == [(0, 3), (0, 4), (1, 2), (1, 3), (1, 4)]
    assert seen == [[Truncated(partition=1, asked=0, log_start=2, missing=2)]]
    seen.clear()
    list(
        iter_topic(
            KafkaConnection(kafka_bootstrap), topic, start=Offset(2), on_truncated=seen.append
        )
    )
    assert seen == [[]]


def test_the_tail_and_the_bounded_read_share_records_and_bounds(
    kafka_bootstrap: str, unique_topic: Callable[..., str]
) -> None:
    """TopicTail takes the reader's bounds (here PartitionOffsets and Timestamp) and gives
    the same TopicRecords, timestamps included; only_partitions limits a bounded read."""
    from streams.kafka.tail import TopicTail

    topic = unique_topic(2)
    _fill(kafka_bootstrap, topic)

    def tail(start: Bound) -> list[TopicRecord]:
        t = TopicTail(KafkaConnection(kafka_bootstrap), topic, start=start, stop_at_end=True)
        out = []
        try:
            while (rec := t.poll(5)) is not None:
                out.append(rec)
        finally:
            t.close()
        assert t.finished
        return out

    bounded = list(
        iter_topic(KafkaConnection(kafka_bootstrap), topic, start=PartitionOffsets({1: 3}))
    )
    followed = tail(PartitionOffsets({1: 3}))
    assert sorted(followed, key=lambda r: (r.partition, r.offset)) == sorted(
        bounded, key=lambda r: (r.partition, r.offset)
    )
    assert sorted((r.partition, r.offset) for r in followed) == [
        (0, 0),
        (0, 1),
        (0, 2),
        (0, 3),
        (0, 4),
        (1, 3),
        (1, 4),
    ]
    assert {r.timestamp_ms for r in followed if r.partition == 1} == {T0 + 7000, T0 + 9000}
    assert sorted((r.partition, r.offset) for r in tail(Timestamp(T0 + 8000))) == [(0, 4), (1, 4)]
    only = list(iter_topic(KafkaConnection(kafka_bootstrap), topic, only_partitions=[1]))
    assert [(r.partition, r.offset) for r in only] == [(1, o) for o in range(5)]


def test_the_tails_record_maker_sets_every_field_as_the_constructor_does() -> None:
    """_new_record gives a TopicRecord equal to TopicRecord(...) in every field."""
    from dataclasses import astuple, fields

    from streams.kafka.tail import _new_record

    args = (b"k", b"v", 3, 17, T0)
    made, built = _new_record(*args), TopicRecord(*args)
    assert type(made) is TopicRecord and made == built and astuple(made) == args
    assert [getattr(made, f.name) for f in fields(TopicRecord)] == list(args)
    assert _new_record(None, None, 0, 0, -1) == TopicRecord(None, None, 0, 0)
