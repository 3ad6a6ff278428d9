"""A fix for a faust-streaming 0.15.3 bug that loses table state on failover
under exactly-once.

``AIOKafkaConsumerThread._highwaters`` (faust/transport/drivers/aiokafka.py)
returns ``consumer.last_stable_offset(tp)`` when transactions are on. aiokafka
knows a partition's LSO only from a fetch response, so for a changelog
partition this worker has just been assigned (a failover) it is unknown, the
recovery computes a highwater of -1, declares "Recovery complete" without
reading a record, and the agent processes the partition against an empty
table. Observed with two workers: the survivor took over the dead worker's
partitions with empty state.

The replacement asks the broker (ListOffsets). The consumer is
``read_committed`` under exactly-once, so the answer is the LSO: records of
open or aborted transactions are not counted, as faust intends.

The patch is process-wide (faust offers no per-app consumer class), applied
once, and only changes where the number comes from.
"""

from __future__ import annotations

from typing import Any

__all__ = ["apply_faust_fixes"]

_MARK = "_fencewatch_fixed"


def apply_faust_fixes() -> None:
    from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

    if getattr(AIOKafkaConsumerThread._highwaters, _MARK, False):
        return

    async def _highwaters(self: Any, partitions: Any) -> Any:
        consumer = self._ensure_consumer()
        return await consumer.end_offsets(list(partitions))

    setattr(_highwaters, _MARK, True)
    setattr(AIOKafkaConsumerThread, "_highwaters", _highwaters)  # noqa: B010
