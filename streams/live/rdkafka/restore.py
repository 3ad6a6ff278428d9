"""The rdkafka engine's restore: the held partitions' state read from the
changelog into the state table, as of the group's committed offsets, and
the wait for a transaction still open on a changelog partition when the
committed offsets may count it.

Why apart. The rebalance handling (:mod:`streams.live.rdkafka.rebalance`)
restores on every assignment and rewind; what a restore reads and when it
must wait (:meth:`ChangelogRestore.restore`) needs a consumer for the
committed offsets, the changelog and the table only, so it is testable
alone against a broker (tests/live/test_rdkafka_engine.py's restore tests).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from streams.errors import BrokerError
from streams.live.changelog import LoadResult, load_changelog
from streams.live.rdkafka.table import MemoryTable, StateTable
from streams.live.rdkafka.transaction import TransactionUnit
from streams.live.settings import LiveSettings

__all__ = ["ChangelogRestore"]

log = logging.getLogger(__name__)

#: Changelog records written to a RocksDB table per write batch while restoring.
_RESTORE_CHUNK = 10_000


class ChangelogRestore:
    """Restores ``values`` from the ``changelog`` topic for the events
    partitions ``consumer`` is assigned. ``txn``: this worker's transaction
    (a restore that waits says whether one of its own is open);
    ``drop_state``: empties the table and the processor's state;
    ``stopping``: whether the worker is stopping (a wait ends)."""

    def __init__(
        self,
        settings: LiveSettings,
        client: dict[str, Any],
        consumer: Any,
        values: StateTable,
        txn: TransactionUnit,
        *,
        changelog: str,
        drop_state: Callable[[], None],
        stopping: Callable[[], bool],
    ) -> None:
        self.settings = settings
        self._client = client
        self.consumer = consumer
        self.values = values
        self.txn = txn
        self.events_topic = settings.events_topic
        self.changelog = changelog
        self._txn_timeout_ms = int(settings.transaction_timeout * 1000)
        self._drop_state = drop_state
        self._stopping = stopping
        self.restored_records = 0
        #: Watermark probes of the changelog (read_committed, read_uncommitted).
        self._probes: tuple[Any, Any] | None = None

    def open_changelog(self, partitions: list[int]) -> dict[int, tuple[int, int]]:
        """The changelog ``partitions`` with a transaction open on them: their
        (last stable offset, high watermark), LSO < HW."""
        from confluent_kafka import TopicPartition

        if self._probes is None:
            from confluent_kafka import Consumer

            base = {**self._client, "group.id": f"{self.settings.app_id}-probe"}
            self._probes = (
                Consumer({**base, "isolation.level": "read_committed"}),
                Consumer({**base, "isolation.level": "read_uncommitted"}),
            )
        stable, raw = self._probes
        try:
            marks = {
                p: (
                    stable.get_watermark_offsets(tp, timeout=10, cached=False)[1],
                    raw.get_watermark_offsets(tp, timeout=10, cached=False)[1],
                )
                for p, tp in ((p, TopicPartition(self.changelog, p)) for p in partitions)
            }
        except Exception:
            # New probes next time: after a rolling restart of a cluster
            # these clients answered _UNKNOWN_PARTITION for minutes, every
            # retry (tests/cluster/test_cluster_faults.py).
            self._probes = None
            for probe in (stable, raw):
                with contextlib.suppress(Exception):
                    probe.close()
            raise
        return {p: m for p, m in marks.items() if m[0] < m[1]}

    def _wait_changelog_stable(self, partitions: list[int]) -> None:
        """Until no transaction is open on the changelog ``partitions`` (last
        stable offset = high watermark). Only a previous owner can have one:
        a transaction that committed but whose markers the coordinator has
        not written yet (the committed offsets already count it, so its
        state records must be restored), or a dead owner's, which the broker
        aborts after the transaction timeout. Past a bound, a retriable
        BrokerError: the caller retries (the loop polls in between)."""
        bound = self._txn_timeout_ms / 1000 + 20
        deadline = time.monotonic() + bound
        told = False
        while True:
            open_ = self.open_changelog(partitions)
            if not open_ or self._stopping():
                return
            if not told:
                told = True
                # Whose it is matters: a previous owner's ends by its commit
                # markers or the broker's abort; this worker's own would never
                # end while it waits here.
                log.info(
                    "restore waits for open transactions on %s partitions %s "
                    "(last stable offset < high watermark); this worker's "
                    "transaction open: %s, its last one: %s",
                    self.changelog,
                    ", ".join(f"{p} ({lso} < {hw})" for p, (lso, hw) in open_.items()),
                    "yes" if self.txn.txn_open else "no",
                    self.txn.last_end,
                )
            if time.monotonic() > deadline:
                # Never restore past it: the open transaction may be one that
                # committed (its offsets already count) whose markers have not
                # reached the partition; reading to the last stable offset
                # then misses its state. The first version went on after this
                # bound and gave findings short of their evidence in a rolling
                # restart (tests/cluster/test_cluster_faults.py). A dead
                # owner's transaction is aborted by the broker meanwhile. One
                # that never ends is a hanging transaction: the coordinator
                # dropped its markers while the partition had no leader (a
                # single replica whose broker was down; docs/live.md).
                raise BrokerError(
                    f"changelog partitions {sorted(open_)} still have an open transaction "
                    f"after {bound:.0f} s (if it never ends, "
                    "its markers were lost: kafka-transactions.sh find-hanging)",
                    code="TIMEOUT",
                    retriable=True,
                )
            time.sleep(0.1)

    def restore(self, partitions: list[int], committed: list[Any]) -> None:
        """The state of ``partitions`` from the changelog, as of their
        ``committed`` offsets (read stable before: no commit of them is
        pending).

        A transaction open on a changelog partition (last stable offset <
        high watermark) is one of two kinds, and read_committed reads only
        up to it. A committed one whose markers are still on their way: the
        committed offsets count it, so its records are needed, and the
        restore waits for them. Or a departed owner's (frozen, cut off or
        dead) that never sent its offsets: its group generation is over, so
        its offsets would be refused and it can only abort; its records
        must not be restored, and waiting for its abort is the broker's
        transaction timeout when the takeover fence could not run (before
        the source position header, 13.5 s in CI's paused-worker test). The
        changelog records say which: the source position header of the last
        committed transaction reaches the committed offset only in the
        second case. Anything else (no header, no committed offset: the new
        partitions after ``fencewatch migrate``, a faust-written changelog)
        waits, as every open transaction did before."""
        open_ = self.open_changelog(partitions)
        result, took = self._load(partitions, positions=bool(open_))
        if not open_:
            self._restored(partitions, result, took)
            return
        wanted = {tp.partition: tp.offset for tp in committed}
        short = [
            p
            for p in sorted(open_)
            if (c := wanted.get(p)) is None or c < 0 or result.positions.get(p, -1) < c
        ]
        if not short:
            log.info(
                "changelog %s partitions %s: a transaction is open past the committed "
                "offsets (a departed worker's, which can no longer commit); restored up "
                "to the last stable offset without waiting for its abort",
                self.changelog,
                sorted(open_),
            )
            self._restored(partitions, result, took)
            return
        self._drop_state()
        self._wait_changelog_stable(short)
        self._restored(partitions, *self._load(partitions))

    def _load(self, partitions: list[int], *, positions: bool = False) -> tuple[LoadResult, float]:
        """The changelog of ``partitions`` read into the table (up to each
        partition's last stable offset), and the seconds it took."""
        values = self.values
        pending: list[tuple[bytes, bytes | None]] = []
        apply: Callable[[int, bytes, bytes | None], None]
        # In order, deletes included: the table's last word per key is the
        # changelog's.
        if isinstance(values, MemoryTable):  # the dict itself: the restore's hot path

            def apply(_p: int, key: bytes, value: bytes | None) -> None:
                if value is None:
                    values.pop(key, None)
                else:
                    values[key] = value

        else:  # RocksDB takes them in write batches

            def apply(_p: int, key: bytes, value: bytes | None) -> None:
                pending.append((key, value))
                if len(pending) >= _RESTORE_CHUNK:
                    values.write(pending)
                    pending.clear()

        began = time.monotonic()
        result = load_changelog(
            self._client, self.changelog, dict.fromkeys(partitions), apply, positions=positions
        )
        values.write(pending)
        return result, time.monotonic() - began

    def _restored(self, partitions: list[int], result: LoadResult, took: float) -> None:
        self.restored_records += result.records
        log.info(
            "restored %d changelog records (%d keys) of %s partitions %s in %.2f s "
            "(%.0f records/s)",
            result.records,
            len(self.values),
            self.changelog,
            partitions,
            took,
            result.records / took if took > 0 else 0.0,
        )

    def committed(self, partitions: list[int]) -> list[Any]:
        """The group's committed offsets of ``partitions``, stable: under
        read_committed librdkafka sends ``require_stable`` and waits while
        a transaction that commits them is pending."""
        from confluent_kafka import TopicPartition

        tps = [TopicPartition(self.events_topic, p) for p in partitions]
        return list(self.consumer.committed(tps, timeout=60))
