"""Committed offsets are asked again while the group coordinator is not ready
(a fresh broker elects it on the first group request: NOT_COORDINATOR), and
only then; found when a `fencewatch findings --group` follower died at start."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from streams.kafka.clients import fetch_committed


class _Coordinator:
    """Answers ``committed`` with the given errors first, then offset 7."""

    def __init__(self, *errors: int) -> None:
        self.errors = list(errors)
        self.calls = 0

    def committed(self, partitions: list[Any], timeout: float) -> list[Any]:
        self.calls += 1
        if self.errors:
            raise KafkaException(KafkaError(self.errors.pop(0)))
        return [TopicPartition(p.topic, p.partition, 7) for p in partitions]


def test_not_ready_coordinator_is_asked_again_until_it_answers() -> None:
    """NOT_COORDINATOR, then COORDINATOR_LOAD_IN_PROGRESS, then the offsets."""
    c = _Coordinator(KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS)
    got = fetch_committed(c, [TopicPartition("t", 0)], timeout=10)
    assert [(t.partition, t.offset) for t in got] == [(0, 7)] and c.calls == 3


def test_other_errors_are_not_retried() -> None:
    """An authorization failure propagates at once."""
    c = _Coordinator(KafkaError.GROUP_AUTHORIZATION_FAILED)
    with pytest.raises(KafkaException):
        fetch_committed(c, [TopicPartition("t", 0)], timeout=10)
    assert c.calls == 1


def test_a_coordinator_that_stays_unready_fails_within_the_timeout() -> None:
    """Past the timeout the last NOT_COORDINATOR propagates."""
    c = _Coordinator(*[KafkaError.NOT_COORDINATOR] * 1000)
    start = time.monotonic()
    with pytest.raises(KafkaException):
        fetch_committed(c, [TopicPartition("t", 0)], timeout=1.0)
    assert time.monotonic() - start < 2.0 and c.calls > 1
