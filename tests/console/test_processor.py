"""The console's view of the processor's progress (streams/console/processor.py):
lag and the time without a commit per partition, from successive looks."""

from __future__ import annotations

import pytest

from streams.console.processor import (
    MAX_NAMED,
    MAX_PARTITIONS,
    NOT_COMMITTED,
    ProcessorWatch,
    stall_message,
)


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _watch(stall_after: float = 60.0) -> tuple[ProcessorWatch, _Clock]:
    clock = _Clock()
    return ProcessorWatch("g", stall_after, clock=clock, wall_ms=lambda: 5), clock


def test_a_group_without_commits_has_not_committed_yet() -> None:
    """No committed offset on any partition: the not-committed message, not stalled."""
    w, _ = _watch()
    s = w.observe({0: (None, 0, 10), 1: (None, 0, 0)}, 2)
    assert (s.committed, s.stalled, s.message, s.lag) == (False, False, NOT_COMMITTED, 10)
    assert w.observe({}, 0).message == NOT_COMMITTED


def test_lag_without_a_commit_past_the_threshold_is_a_stall() -> None:
    """Partitions whose committed offset stays put with lag for stall_after are named."""
    w, clock = _watch(60.0)
    w.observe({0: (5, 0, 100), 1: (7, 0, 7), 2: (None, 3, 10), 3: (900, 0, 2104)}, 4)
    clock.now += 59.0
    assert not w.observe(
        {0: (5, 0, 100), 1: (7, 0, 7), 2: (None, 3, 10), 3: (900, 0, 2104)}, 4
    ).stalled
    clock.now += 36.0
    s = w.observe({0: (5, 0, 110), 1: (7, 0, 7), 2: (None, 3, 10), 3: (900, 0, 2104)}, 4)
    assert s.stalled and s.stalled_partitions == (0, 2, 3)
    assert s.stalled_lag == 105 + 7 + 1204 and s.stalled_s == 95.0
    assert (
        s.message
        == "processor stalled: partitions 0,2,3 with lag 1,316, nothing committed for 95 s"
    )
    assert s.to_dict()["partitions"][1] == {
        "partition": 1, "committed": 7, "end": 7, "lag": 0, "still_for_s": 0.0
    }  # fmt: skip


def test_a_commit_or_no_lag_ends_the_spell() -> None:
    """A moved committed offset, or a partition caught up, starts the count again."""
    w, clock = _watch(10.0)
    w.observe({0: (5, 0, 100), 1: (5, 0, 100)}, 2)
    clock.now += 11.0
    assert w.observe({0: (5, 0, 100), 1: (5, 0, 100)}, 2).stalled_partitions == (0, 1)
    clock.now += 1.0
    s = w.observe({0: (6, 0, 100), 1: (100, 0, 100)}, 2)
    assert (s.stalled, s.message, s.still_s) == (False, None, 0.0)
    clock.now += 9.0
    s = w.observe({0: (6, 0, 100), 1: (100, 0, 105)}, 2)
    assert not s.stalled and s.still_s == 9.0
    clock.now += 1.0
    # Partition 1's spell counts from the last look that saw it caught up.
    assert w.observe({0: (6, 0, 100), 1: (100, 0, 105)}, 2).stalled_partitions == (0, 1)


def test_one_stalled_partition_is_named_in_the_singular() -> None:
    """The message's wording for one partition."""
    assert stall_message((4,), 3, 61.4) == (
        "processor stalled: partition 4 with lag 3, nothing committed for 61 s"
    )


def test_the_partitions_watched_and_named_are_bounded() -> None:
    """At most MAX_PARTITIONS are watched and MAX_NAMED named; the total is kept."""
    w, clock = _watch(1.0)
    offsets = {p: (0, 0, 1) for p in range(MAX_PARTITIONS + 50)}
    w.observe(offsets, MAX_PARTITIONS + 50)
    clock.now += 2.0
    s = w.observe(offsets, MAX_PARTITIONS + 50)
    assert len(s.partitions) == MAX_PARTITIONS and s.partitions_total == MAX_PARTITIONS + 50
    assert s.partitions[-1].partition == MAX_PARTITIONS - 1
    assert s.message is not None
    assert f"and {MAX_PARTITIONS - MAX_NAMED} more with lag {MAX_PARTITIONS:,}" in s.message


def test_a_threshold_must_be_positive() -> None:
    """A zero stall threshold is refused."""
    with pytest.raises(ValueError, match="more than 0"):
        ProcessorWatch("g", 0.0)
