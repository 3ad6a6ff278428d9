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

A second fix, for stalled partitions: ``Consumer.getmany``
(faust/transport/consumer.py) fetches a batch for the *live* set of active
partitions, then yields its records one by one, awaiting the agent between
them, and skips every record whose partition left that set in the meantime
(paused for recovery or a full buffer). The fetcher's position is already past
those records, so they are never fetched again: the partition's acked offsets
have a gap, faust never commits past a gap, and the partition's committed
offset stops moving while the worker reports healthy. The replacement yields
the same records, and seeks a partition that is still assigned back to its
first skipped record, so it is fetched again once the partition is active.
It also hands the records of the live runtime's input topic to its intake
(:mod:`streams.live.intake`) instead of yielding them (faust's per-message
path is the throughput limit), with the same checks before each record.
"""

from __future__ import annotations

from typing import Any

__all__ = ["FETCH_MAX_WAIT_MS", "apply_faust_fixes"]

_MARK = "_fencewatch_fixed"


#: Longest a fetch request may wait at the broker for data (aiokafka's
#: ``fetch_max_wait_ms``); see :func:`_fix_fetch_wait`.
FETCH_MAX_WAIT_MS = 20


def apply_faust_fixes() -> None:
    _fix_getmany()
    _fix_highwaters()
    _fix_fetch_wait()
    _fix_sequential_commit()
    _fix_unstable_offsets()


def _fix_getmany() -> None:
    from faust.transport.consumer import Consumer

    if getattr(Consumer.getmany, _MARK, False):
        return

    async def getmany(self: Any, timeout: float) -> Any:
        records, active_partitions = await self._wait_next_records(timeout)
        generation_id = self.app.consumer_generation_id
        if records is None or self.should_stop:
            return
        if not self.flow_active:
            # As faust: the flow stopped while we waited; rebalance seeks back.
            try:
                await self.perform_seek()
            except Exception as exc:  # faust logs and carries on here too
                self.log.warning(f"exception performing seek when flow not active {exc}")
            return
        to_message = self._to_message
        # The live runtime's intake (streams/live/intake.py) takes the
        # records of its topics instead of faust's per-message path.
        intake: Any = getattr(self.app, "fencewatch_intake", None)
        tapped = intake.topics if intake is not None else frozenset()
        skipped: dict[Any, int] = {}  # tp -> offset of its first record not yielded
        stopped = False
        for tp, record in self.scheduler.iterate(records):
            if stopped:
                continue
            if not self.flow_active or self.app.consumer_generation_id != generation_id:
                # The rebalance that follows seeks every assigned partition to
                # its committed offset, which re-fetches the rest of this batch.
                stopped = True
                continue
            if (
                active_partitions is None
                or tp in active_partitions
                or tp in self._buffered_partitions
            ):
                if tp.topic in tapped:
                    await intake.accept(self, tp, record, generation_id)
                    continue
                self.app.monitor.track_tp_end_offset(tp, self.highwater(tp))
                yield tp, to_message(tp, record)
            elif tp not in skipped:
                skipped[tp] = record.offset
        if skipped and not stopped:
            assigned = self.assignment()
            for tp, offset in skipped.items():
                if tp in assigned:
                    self.log.info("re-fetching %s from %s (skipped while inactive)", tp, offset)
                    await self.seek(tp, offset)

    setattr(getmany, _MARK, True)
    setattr(Consumer, "getmany", getmany)  # noqa: B010


def _fix_highwaters() -> None:
    from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

    if getattr(AIOKafkaConsumerThread._highwaters, _MARK, False):
        return

    async def _highwaters(self: Any, partitions: Any) -> Any:
        consumer = self._ensure_consumer()
        return await consumer.end_offsets(list(partitions))

    setattr(_highwaters, _MARK, True)
    setattr(AIOKafkaConsumerThread, "_highwaters", _highwaters)  # noqa: B010


def _fix_fetch_wait() -> None:
    """faust hard-codes ``fetch_max_wait_ms=1500`` for the worker's consumer
    (``AIOKafkaConsumerThread._create_worker_consumer``). aiokafka sends one
    fetch per broker at a time and leaves out partitions whose fetched
    records are still buffered, so a fetch can go out holding only partitions
    without new data (e.g. faust's leader topic); the broker then keeps it up
    to that wait while new events pile up elsewhere. Measured at 2,000
    events/s: getmany returned nothing for 1.0 s, then 1,000 records 0.5 s
    later, every ~2 s (p50 latency ~1 s). A short wait bounds that stall;
    the cost is an empty fetch round trip every ``FETCH_MAX_WAIT_MS`` on an
    idle topic."""
    from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

    original = AIOKafkaConsumerThread._create_worker_consumer
    if getattr(original, _MARK, False):
        return

    def _create_worker_consumer(self: Any, transport: Any) -> Any:
        consumer = original(self, transport)
        consumer._fetch_max_wait_ms = FETCH_MAX_WAIT_MS  # read by its start()
        return consumer

    setattr(_create_worker_consumer, _MARK, True)
    setattr(AIOKafkaConsumerThread, "_create_worker_consumer", _create_worker_consumer)  # noqa: B010


def _fix_sequential_commit() -> None:
    """faust's ``Producer.commit_transactions`` commits the partitions'
    transactions one after the other (offsets, EndTxn, begin: several broker
    round trips each), so a commit of N partitions takes N times as long,
    and the live runtime's batches wait for it (commit gate). The
    transactions belong to independent producers, so this runs the same
    per-partition steps, under the same per-producer locks, concurrently.
    If one fails the error is raised as before (faust then crashes the
    worker); the others complete, as the earlier ones of the sequential loop
    would have."""
    from faust.transport.drivers.aiokafka import Producer

    if getattr(Producer.commit_transactions, _MARK, False):
        return
    import asyncio

    async def commit_transactions(
        self: Any,
        tid_to_offset_map: Any,
        group_id: str,
        start_new_transaction: bool = True,
    ) -> None:
        async def commit_one(transactional_id: str, offsets: Any) -> None:
            async with self._trn_locks[transactional_id]:
                txp = self._transaction_producers.get(transactional_id)
                if txp is None:
                    self.log.warning(f"Commit invoked for unknown transaction {transactional_id}")
                    return
                await txp.send_offsets_to_transaction(offsets, group_id)
                await txp.commit_transaction()
                if start_new_transaction:
                    await txp.begin_transaction()

        await asyncio.gather(
            *(commit_one(tid, offsets) for tid, offsets in tid_to_offset_map.items())
        )

    setattr(commit_transactions, _MARK, True)
    setattr(Producer, "commit_transactions", commit_transactions)  # noqa: B010


def _fix_unstable_offsets() -> None:
    """After a rebalance faust seeks each assigned partition to its committed
    offset (``perform_seek`` -> ``seek_to_committed``), read with aiokafka's
    OffsetFetch v2. That version cannot ask for *stable* offsets (KIP-447's
    ``require_stable``): when the previous owner's last transaction, which
    committed the offsets, has ended but its commit marker is not yet written
    to ``__consumer_offsets``, the broker answers the older offset, and the
    new owner processes again events whose outputs are already committed --
    duplicates for read_committed readers. Seen with a second worker joining
    mid-stream (``test_a_worker_joining_mid_stream_takes_partitions_without_duplicates``
    failed 2 runs of 3 on faust's own per-event path too).

    The replacement first awaits the app's ``fencewatch_stable_offsets``
    hook, if it has one: the live runtime asks librdkafka (read_committed,
    which sends ``require_stable`` and retries while an offset commit is
    pending) for the same offsets, so when faust reads them they are
    stable."""
    from faust.transport.consumer import ThreadDelegateConsumer

    original = ThreadDelegateConsumer.seek_to_committed
    if getattr(original, _MARK, False):
        return

    async def seek_to_committed(self: Any) -> Any:
        wait_stable = getattr(self.app, "fencewatch_stable_offsets", None)
        if wait_stable is not None:
            await wait_stable(self.assignment())
        return await original(self)

    setattr(seek_to_committed, _MARK, True)
    setattr(ThreadDelegateConsumer, "seek_to_committed", seek_to_committed)  # noqa: B010
