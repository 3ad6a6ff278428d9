"""Restore the memory store from its changelog with confluent-kafka, then let
faust's own recovery start after what was loaded.

Why: faust 0.15.3 recovers a table one changelog record at a time through its
consumer, conductor and recovery loop (slow: docs/live.md has the figures), and under
exactly-once it then waits two 5 s queue time-outs before it notices that the
changelog ends with a transaction marker. A plain librdkafka consumer reads
the same changelog many times faster.

How (the hook is faust's own): ``TableManager.on_rebalance`` awaits every
table store's ``on_rebalance`` *before* ``Recovery.on_rebalance``, and the
latter asks ``store.persisted_offset(tp)`` where to start reading each
changelog partition (the hook RocksDB uses for its on-disk offsets). So
:class:`FastMemoryStore.on_rebalance` reads each assigned active changelog
partition with a ``read_committed`` consumer from the beginning (or, for a
partition it kept, from after what it already loaded) up to the partition's
end offset -- under read_committed that is the last stable offset (LSO) --
snapshotted first, and :meth:`FastMemoryStore.persisted_offset` returns
``LSO - 1``. Faust computes its highwater the same way (``LSO - 1``), finds
nothing left, and skips its reading and its marker wait; whatever was
committed after the snapshot it reads itself, from there on.

Why it is exactly what faust's recovery would give: the same records (every
committed record of the partition, aborted ones never delivered by
read_committed), applied in offset order, latest value per key, ``None``
deleting, and the same key -> partition bookkeeping. By the time the store's
hook runs faust has already started this partition's transactional producer
(``transactions.on_rebalance`` runs before ``tables.on_rebalance``), which
fences a previous owner and aborts its open transaction; and if the LSO still
moves after the snapshot, faust's recovery reads the rest itself. A load that
fails is logged and faust's recovery then reads those partitions from the
beginning, as it did before: re-applying the whole changelog in order over
a prefix of it gives the same state.

The records are applied to the store from the loader's thread (the agent is
paused during a rebalance; the rest of the worker only reads the store's
size meanwhile), so no second copy of the table is held. Bound: the
librdkafka prefetch queue is capped at 64 MiB; the table itself is bounded
as documented in docs/live.md.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

from faust.stores.memory import Store as MemoryStore
from faust.types import TP

from streams.errors import BrokerError
from streams.live.changelog import LoadResult, load_changelog
from streams.live.faust import seam as faust_seam
from streams.live.settings import LiveSettings

__all__ = ["FastMemoryStore", "LoadResult", "client_config", "load_changelog"]

log = logging.getLogger(__name__)


def client_config(settings: LiveSettings) -> dict[str, Any]:
    """librdkafka settings equivalent to the worker's own connection."""
    return settings.connection.librdkafka()


class FastMemoryStore(MemoryStore[bytes, bytes]):
    """faust's memory store, restored directly from the changelog (see the
    module docstring). Call :meth:`configure` before the app starts."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self._client_config: dict[str, Any] = {}
        self._loaded: dict[TP, int] = {}  # changelog TP -> last offset reflected in the store
        self._load_timeout = 120.0
        self.loaded_records = 0  # committed changelog records read directly, all loads
        self.load_seconds = 0.0

    def configure(self, client_config: Mapping[str, Any], *, timeout: float = 120.0) -> None:
        """librdkafka settings (bootstrap servers, security) for the loader."""
        self._client_config = dict(client_config)
        self._load_timeout = timeout

    def persisted_offset(self, tp: TP) -> int | None:
        # Recovery starts reading after this offset; None = from the beginning.
        return self._loaded.get(tp)

    async def on_rebalance(
        self,
        assigned: set[TP],
        revoked: set[TP],
        newly_assigned: set[TP],
        generation_id: int = 0,
    ) -> None:
        await super().on_rebalance(assigned, revoked, newly_assigned, generation_id)
        topic = self.table.changelog_topic.get_topic_name()
        actives = {tp for tp in self.app.assignor.assigned_actives() if tp.topic == topic}
        for tp in list(self._loaded):
            if tp not in actives:
                # Lost: faust's on_recovery_completed drops its keys; a later
                # assignment loads it again from the beginning.
                del self._loaded[tp]
        if not actives or not self._client_config:
            return
        by_partition = {tp.partition: tp for tp in actives}
        starts = {
            p: (self._loaded[tp] + 1 if tp in self._loaded else None)
            for p, tp in by_partition.items()
        }
        began = time.monotonic()
        log.info("fast restore: reading %s partitions %s", topic, sorted(by_partition))
        loop = asyncio.get_running_loop()
        try:
            result = await loop.run_in_executor(
                None,
                lambda: load_changelog(
                    self._client_config, topic, starts, self._apply, timeout=self._load_timeout
                ),
            )
        except BrokerError as exc:
            # faust's recovery reads these partitions from the beginning.
            for tp in actives:
                self._loaded.pop(tp, None)
            log.warning("fast restore of %s failed, faust recovers it: %s", topic, exc)
            return
        for p, end in result.ends.items():
            tp = by_partition[p]
            self._loaded[tp] = max(end - 1, self._loaded.get(tp, -1))
        took = time.monotonic() - began
        self.loaded_records += result.records
        self.load_seconds += took
        log.info(
            "fast restore: loaded %d changelog records (%d keys in the store) of %s "
            "partitions %s directly in %.2f s (%.0f records/s); recovery continues after "
            "offsets %s",
            result.records,
            len(self.data),
            topic,
            sorted(by_partition),
            took,
            result.records / took if took > 0 else 0.0,
            {p: end - 1 for p, end in sorted(result.ends.items())},
        )

    def _apply(self, partition: int, key: bytes, value: bytes | None) -> None:
        faust_seam.memory_store_apply(self, partition, key, value)
