"""How --partitions is read and how --jobs deals partitions to workers (issue 46)."""

from __future__ import annotations

import pytest

from streams.audit.shard import parse_partitions, split


def test_partitions_and_ranges_are_read_sorted() -> None:
    """``5,0,2-3`` is partitions 0, 2, 3 and 5; spaces around pieces are allowed."""
    assert parse_partitions("5,0,2-3") == (0, 2, 3, 5)
    assert parse_partitions(" 7 ") == (7,)
    assert parse_partitions("4-4") == (4,)


@pytest.mark.parametrize("text", ["", "a", "1,,2", "-1", "3-1", "1-x", "0-2,2", "1-2-3"])
def test_a_piece_that_is_not_partitions_is_refused(text: str) -> None:
    """Empty pieces, negatives, reversed ranges and repeats are a ValueError naming --partitions."""
    with pytest.raises(ValueError, match=r"^--partitions"):
        parse_partitions(text)


def test_an_enormous_range_is_refused() -> None:
    """A range of over a million partitions is refused, not expanded."""
    with pytest.raises(ValueError, match="over a million"):
        parse_partitions("0-2000000")


def test_partitions_are_dealt_largest_first_to_the_lightest_worker() -> None:
    """Each partition goes to the worker with the fewest records so far."""
    sizes = {0: 10, 1: 100, 2: 40, 3: 50, 4: 5}
    assert split(sizes, 2) == [[1, 4], [0, 2, 3]]
    assert split(sizes, 3) == [[1], [3, 4], [0, 2]]


def test_no_worker_is_left_without_a_partition() -> None:
    """More jobs than partitions: one worker per partition; no partition: no worker."""
    assert split({0: 1, 1: 0}, 8) == [[0], [1]]
    assert split({}, 4) == []


_START_METHOD = """
import threading
from confluent_kafka import Consumer
from streams.audit.shard import _start_context

print(_start_context().get_start_method())
consumer = Consumer({"bootstrap.servers": "127.0.0.1:9", "group.id": "g"})
print(_start_context().get_start_method())  # librdkafka's threads are running
consumer.close()
print(_start_context().get_start_method())  # closed: its threads are joined
stop = threading.Event()
thread = threading.Thread(target=stop.wait)
thread.start()
print(_start_context().get_start_method())
stop.set()
thread.join()
"""


def test_workers_are_forked_only_from_a_process_without_other_threads() -> None:
    """--jobs forks its workers from a one-thread process, spawns them while a Kafka
    client's or any other thread runs (a fork would copy the locks they hold)."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", _START_METHOD], capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == ["fork", "spawn", "fork", "spawn"]
