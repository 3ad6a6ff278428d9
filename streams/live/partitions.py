"""Partition growth of the events topic, detected the same way by every
live engine.

The processor's state is partitioned like its input: a workflow key's state
lives in the changelog partition its events come from. Adding partitions to
the events topic moves keys (the producers' partitioner is a hash of the key
modulo the partition count), so a key's later events arrive on a partition
whose worker does not hold its state. Processing them would classify them
against an empty (split) state: silently wrong findings (issue 22 measured
480 findings against 721 expected). Kafka Streams refuses a changed source
partition count for the same reason; so does fencewatch:

- at start, :func:`check_state_layout`: the state changelog's partition count
  must equal the events topic's (an existing changelog with another count is
  a grown topic);
- while running, :class:`PartitionGuard`: a record from a partition at or past
  the count the state was built for is refused before it is processed
  (:meth:`PartitionGuard.check_record`), and the count is re-read
  periodically (:meth:`PartitionGuard.check_count`), so a grown topic stops
  the processor even before a record from a new partition arrives.

For a growth to a multiple of the old count (4 -> 8, the recommended way) a
key only ever moves to a *new* partition (hash mod 2N is hash mod N or that
plus N), so the record check alone guarantees no finding is made from split
state. For other growths a moved key may land on an old partition; the
periodic check bounds that window to its interval, and docs/operate.md says
to grow by a multiple.

The engine calls these and stops consuming with :class:`PartitionsChanged`'s
one line, which says what changed and what to do (``fencewatch migrate``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from streams.errors import PartitionsChanged

__all__ = [
    "CHECK_INTERVAL_S",
    "PartitionChange",
    "PartitionCounter",
    "PartitionGuard",
    "PartitionsChanged",
    "check_state_layout",
]

#: Seconds between two reads of the events topic's partition count while running.
CHECK_INTERVAL_S = 2.0


@dataclass(frozen=True, slots=True)
class PartitionChange:
    """The events topic's partition count no longer matches the state's.
    ``now`` is ``None`` when only a record from a partition past ``was`` is
    known (the count itself not read yet)."""

    topic: str
    was: int
    now: int | None
    partition: int | None = None

    def message(self) -> str:
        if self.now is not None:
            what = f"topic {self.topic} has {self.now} partitions, its state {self.was}"
            target = str(self.now)
        else:
            what = (
                f"topic {self.topic} has a record in partition {self.partition}, "
                f"its state {self.was} partitions"
            )
            target = "<the new count>"
        return (
            f"{what}: the partitions changed, so keys moved away from their state; "
            f"stopped consuming (no finding is made from split state). Stop every worker, "
            f"run `fencewatch migrate --partitions {target}`, then start them again "
            f"(docs/operate.md)"
        )


class PartitionCounter(Protocol):
    """Reads a topic's partition counts (``TopicAdmin.partitions`` is one)."""

    def partitions(self, names: list[str]) -> dict[str, int]: ...


def check_state_layout(
    counter: PartitionCounter, events_topic: str, changelog_topic: str
) -> PartitionChange | None:
    """At start: the change when the state changelog exists with another
    partition count than the events topic (a topic grown while stopped)."""
    counts = counter.partitions([events_topic, changelog_topic])
    events = counts.get(events_topic)
    state = counts.get(changelog_topic)
    if events is None or state is None or events == state:
        return None
    return PartitionChange(events_topic, state, events)


class PartitionGuard:
    """While running: refuses records and counts past the state's layout."""

    def __init__(self, topic: str, partitions: int) -> None:
        self.topic = topic
        self.partitions = partitions
        #: The first change seen; once set, every check returns it.
        self.change: PartitionChange | None = None

    def check_record(self, partition: int) -> PartitionChange | None:
        """The change if a record of ``partition`` cannot belong to the state's layout."""
        if self.change is None and partition >= self.partitions:
            self.change = PartitionChange(self.topic, self.partitions, None, partition)
        return self.change

    def check_count(self, counter: PartitionCounter) -> PartitionChange | None:
        """Re-read the topic's partition count (a broker call: run it off the
        event loop); the change if it differs. After a record-only change it
        fills in the count, so the message names the migration to run."""
        change = self.change
        if change is None or change.now is None:
            now = counter.partitions([self.topic]).get(self.topic)
            if now is not None and now != self.partitions:
                partition = None if change is None else change.partition
                self.change = PartitionChange(self.topic, self.partitions, now, partition)
        return self.change
