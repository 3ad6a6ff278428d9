"""The intake between faust's fetcher and the batch loop (streams/live/faust/intake.py),
without a broker: the synchronous offer() and the awaiting accept() keep the
same read-offset and gap bookkeeping as faust's _drain_messages."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from faust.types import TP

from streams.live.faust.intake import Intake

TOPIC = "events"


class _Consumer:
    """Holds only what the intake reads and writes of faust's consumer."""

    def __init__(self) -> None:
        self._read_offset: dict[TP, int] = {}
        self.gaps: list[tuple[TP, int, int]] = []

    async def _add_gap(self, tp: TP, start: int, end: int) -> None:
        self.gaps.append((tp, start, end))


def _rec(offset: int) -> Any:
    return SimpleNamespace(offset=offset, key=b"k", value=b"v", timestamp=1)


def test_offer_takes_consecutive_records_and_drops_redeliveries() -> None:
    """offer() queues consecutive offsets, drops redeliveries and records the read offset."""
    tp = TP(TOPIC, 0)
    consumer, intake = _Consumer(), Intake(frozenset({TOPIC}), maxsize=10)
    assert all(intake.offer(consumer, tp, _rec(o), 1) for o in (0, 1, 2))
    assert intake.offer(consumer, tp, _rec(1), 1)  # a redelivery: handled (dropped)
    assert [m.offset for m in intake.take(10)] == [0, 1, 2]
    assert consumer._read_offset[tp] == 2


def test_offer_refuses_a_gap_or_a_full_intake_and_accept_then_does_the_work() -> None:
    """offer() refuses a record after a gap or into a full intake; accept() notes the gap."""
    tp = TP(TOPIC, 0)
    consumer, intake = _Consumer(), Intake(frozenset({TOPIC}), maxsize=2)
    assert intake.offer(consumer, tp, _rec(0), 1)
    assert intake.offer(consumer, tp, _rec(1), 1)
    assert not intake.offer(consumer, tp, _rec(2), 1)  # full
    assert [m.offset for m in intake.take(2)] == [0, 1]
    assert not intake.offer(consumer, tp, _rec(5), 1)  # offsets 2-4: a transaction marker's gap
    assert len(intake) == 0 and consumer.gaps == []
    asyncio.run(intake.accept(consumer, tp, _rec(5), 1))
    assert consumer.gaps == [(tp, 2, 5)]
    assert [m.offset for m in intake.take(2)] == [5]
