"""The rdkafka engine: the live processor on confluent-kafka, with **one**
transactional producer per worker process (Kafka's exactly-once v2, KIP-447).

The engine holds only consume, commit and restore; what is produced is the
shared :class:`~streams.live.processor.Processor`'s (the faust engine runs the
same one), with the same output topics, changelog topic and record format, so
a deployment switches engine by restarting with the other ``--engine``.

Loop (one thread): ``consume(MAX_BATCH, timeout)`` -> ``process_batch`` ->
findings, dead letters and (a small batch's) status records produced into the
open transaction, state applied to the in-memory table -> every
``commit_interval`` (or :data:`COMMIT_EVENTS` events) the deferred changelog
records (latest per key; big batches' status records too), then
``send_offsets_to_transaction(offsets, consumer_group_metadata())`` and one
``commit_transaction`` in a thread of their own (:class:`PendingCommit`): one
EndTxn per commit whatever the number of partitions. The loop processes on
meanwhile; what it produces waits for the next transaction.

Fencing: the offsets go to the group coordinator with the consumer's
generation and member id, so a worker that lost its partitions (a pause past
the session timeout) cannot commit: its transaction fails and is aborted.
A producer fenced outright (its transaction timed out while it was paused)
is replaced. Either way the worker drops every partition's in-memory state,
goes back to the committed offsets (or rejoins the group, which assigns and
restores), and carries on: one log line, no traceback. The other way round,
the worker that takes a departed worker's partitions fences that worker's
transactional id, named by the committed offsets' metadata, so its open
transaction is aborted at the takeover rather than at the broker's
transaction timeout (:mod:`streams.live.rdkafka.takeover`).
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import time
from pathlib import Path
from typing import Any

import msgspec

from streams.errors import BrokerError, ConfigError
from streams.live.changelog import changelog_topic
from streams.live.group_engine import REFUSED_FOR_PROTOCOL, mixed_engines_message
from streams.live.heap import IdleTrim, release_free_heap
from streams.live.metrics import LiveMetrics
from streams.live.partitions import PartitionGuard, PartitionsChanged
from streams.live.processor import processor_for
from streams.live.rdkafka.commit import FINAL_CALL_S
from streams.live.rdkafka.count_watch import CountWatch
from streams.live.rdkafka.rebalance import Rebalance
from streams.live.rdkafka.restore import ChangelogRestore
from streams.live.rdkafka.table import StateTable, open_table
from streams.live.rdkafka.takeover import DepartedOwners
from streams.live.rdkafka.transaction import TransactionUnit
from streams.live.settings import LiveSettings

__all__ = [
    "COMMIT_EVENTS",
    "CONSUME_SLICE_S",
    "ENCODE_AT_ONCE_BELOW",
    "FINAL_SLICE_S",
    "MAX_BATCH",
    "RdkafkaEngine",
    "transactional_id",
]

log = logging.getLogger(__name__)

#: Records taken from the consumer per batch at most. The batch logic
#: encodes each changed key's state and status once per batch, so a busy
#: worker's larger batches cost less per event (bench/live_batch_cpu.py's
#: events, status on: ~36 CPU µs/event in batches of 500, ~21 in batches of
#: 5,000, a loaded machine, 2026-12-02). A quiet worker's batches are what
#: one CONSUME_SLICE_S brings, whatever this bound.
MAX_BATCH = 5_000
#: A batch smaller than this has its status and changelog records encoded
#: and produced into the open transaction as soon as it is processed (status
#: held, like its findings, and changelog kept for the commit, while a
#: commit is pending), while the loop waits out the commit interval anyway,
#: rather than at the commit. At the commit they cost twice: encoding every
#: changed key's status (~20 µs for a key with a finding: the findings are
#: rebuilt from the state) held the commit's start by 7-87 ms at 2,000
#: events/s (~250 keys a transaction; 2026-12-03); and the partitions'
#: registration in the transaction (AddPartitionsToTxn) and the records' own
#: produce request then went to the broker ahead of the offsets, one after
#: the other: send_offsets_to_transaction took 6.0 / 7.0 ms against 3.4 /
#: 3.5 for the status (paired runs, 2,000 events/s, p99 131 / 129 against
#: 122 / 124 ms; 2026-12-04), and the changelog's registration was most of
#: the commit's 5-7 ms against the relay's 3-4 (docs/performance.md). A
#: small batch means the worker keeps up, and a key changed in several of a
#: transaction's batches gets one record per batch, the newest last (on a
#: compacted topic, extra records of a key cost only bytes). A worker
#: catching up takes batches of up to MAX_BATCH and writes each changed
#: key's status and state once per transaction, at the commit. Why a frozen
#: worker's changelog records in its open transaction do not hold up the
#: next owner: ChangelogRestore.restore.
ENCODE_AT_ONCE_BELOW = 1_000
#: A commit after this many events at the latest, whatever the interval (the
#: bound of the outputs held while a commit is pending). 5,000 made a busy
#: worker commit every 5,000 events instead of every interval as the relay.
COMMIT_EVENTS = 50_000
#: A consume() call waits this long at most for MAX_BATCH records: records
#: are processed and produced into the open transaction as they come, so at
#: the commit little is still on its way to the broker (waiting the whole
#: interval produced everything just before the commit, which then waited
#: for those sends: commits took ~40 ms against the bare relay's ~11 ms at
#: 500 events/s). The relay consumes in 5 ms slices; 5 ms here (tried
#: 2026-12-03) made a worker that catches up with its fetcher take smaller
#: batches (more CPU per event): quiet, back to back, 74,863 / 87,935
#: events/s against 103,172 / 92,858 with 20 ms, and no better p99 at
#: 2,000 events/s (docs/performance.md).
CONSUME_SLICE_S = 0.02
#: The last consume() call before a commit is due waits at most this long,
#: so the batch processed just before the commit is a few ms of records.
#: With CONSUME_SLICE_S up to the due time, the commit started 3.0 ms after
#: it at the median (processing a 20 ms slice of stale checkpoints, each with
#: a finding and a status), and every finding of the transaction waited
#: that long: p99 123 against 117 ms, p50 71 against 66 (2,000 events/s,
#: paired runs, 2026-12-04). The relay consumes in 5 ms slices throughout.
FINAL_SLICE_S = 0.005
#: The consume() slice while a commit that is due waits for the pending one.
_PENDING_SLICE_S = 0.005


class _Rec(msgspec.Struct, gc=False):
    """One consumed record as the processor reads it (a Struct: one per event,
    and a frozen dataclass's ``__init__`` costs several times more)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int | None


def transactional_id(settings: LiveSettings) -> str:
    """The worker slot's stable transactional id: the app id, then a digest
    of this host's name and the absolute data directory (one per worker on a
    host, docs/live.md). A restarted worker gets the same id, so its first
    ``init_transactions`` aborts what its previous run left open at once
    instead of after the transaction timeout."""
    where = f"{socket.gethostname()}:{Path(settings.data_dir).expanduser().absolute()}"
    return f"{settings.app_id}-rdkafka-{hashlib.sha256(where.encode()).hexdigest()[:12]}"


class RdkafkaEngine(Rebalance):
    """Consume, process, commit and restore for one worker process.

    ``run()`` blocks until :meth:`stop` is called (from a signal handler) and
    returns after the stop; the caller bounds the stop's duration. The loop is
    here; the transaction is :attr:`txn`'s (:mod:`~streams.live.rdkafka.transaction`),
    the restore :attr:`restorer`'s (:mod:`~streams.live.rdkafka.restore`), the
    rebalance callbacks and the rewind :class:`~streams.live.rdkafka.rebalance.Rebalance`'s."""

    def __init__(
        self,
        settings: LiveSettings,
        *,
        metrics: LiveMetrics | None = None,
        partitions: int | None = None,
    ) -> None:
        from confluent_kafka import Consumer

        self.settings = settings
        #: The state table of the held partitions: key -> stored value (every
        #: rebalance drops it all: eager assignment, docs/live.md). Opened
        #: first: a state directory another worker holds is refused before
        #: any client starts.
        self.values: StateTable = open_table(
            settings.store_kind, Path(settings.data_dir).expanduser().absolute()
        )
        #: The state's layout: a record or a count past it stops the engine
        #: before anything is processed from split state (streams/live/partitions.py).
        self.guard = (
            PartitionGuard(settings.events_topic, partitions) if partitions is not None else None
        )
        #: The events topic's partition count re-read against the layout.
        self.count_watch = (
            CountWatch(settings.connection, settings.events_topic, self.guard)
            if self.guard is not None
            else None
        )
        self.metrics = metrics or LiveMetrics()
        self.events_topic = settings.events_topic
        self.changelog = changelog_topic(settings.app_id)
        self.eos = settings.exactly_once
        self.processor = processor_for(settings)
        #: Input partitions held (sorted), and the next offset to process in each.
        self.assigned: list[int] = []
        self.positions: dict[int, int] = {}
        self.processed = 0
        self.recovering = False
        self.stopping = False
        #: Assignments received so far (librdkafka does not expose the
        #: group generation to Python; this numbers ours).
        self.generation = 0
        self.txn_id = transactional_id(settings)
        self._txn_timeout_ms = int(settings.transaction_timeout * 1000)
        #: The member id of the current assignment (librdkafka forgets it
        #: once the member is fenced, when it is worth logging).
        self.member = "-"
        #: A failure already logged that the generation is over: the
        #: rebalance that follows needs no second line.
        self._told_stale = False
        #: Bumped by every assignment change and rewind: a consume() call
        #: that saw one returns records of the old state of things.
        self._epoch = 0
        #: When the current consume() call began (see run).
        self._wait_began = 0.0
        self._reset_needed = False
        #: Not before this monotonic time: after a stale generation or a
        #: fenced producer the consumer is first given the time to report
        #: the partitions lost and rejoin (see _failed).
        self._rewind_at = 0.0
        #: The generation is over (a stale generation or a fenced producer):
        #: the partitions are held in name only until the rebalance or rewind.
        self._awaiting_rejoin = False
        #: A revoke or loss during the current consume() call threw away
        #: processed but uncommitted events (see _refetch).
        self._discarded = False
        self._announced: tuple[int, ...] | None = None
        self._next_tick = 0.0
        #: Gives a burst's freed heap back once the worker is quiet (heap.py).
        self._idle_trim = IdleTrim()
        self._highwaters: dict[int, int] = {}
        self._client = settings.connection.librdkafka()
        conf = dict(self._client)
        conf.update(
            {
                "group.id": settings.app_id,
                # The group's members by transactional id: the next owner of
                # a departed worker's partitions fences it (streams/live/rdkafka/takeover.py).
                "client.id": self.txn_id,
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "auto.offset.reset": "earliest",
                # Eager range assignment: every rebalance revokes everything,
                # so there is one point where the whole transaction commits
                # and every partition's state is dropped (docs/live.md).
                "partition.assignment.strategy": "range",
                "session.timeout.ms": int(settings.session_timeout * 1000),
                "heartbeat.interval.ms": int(settings.heartbeat_interval * 1000),
                "max.poll.interval.ms": max(300_000, int(settings.session_timeout * 1000)),
            }
        )
        self.consumer = Consumer(conf)
        self._takeover = DepartedOwners(
            settings.connection,
            group=settings.app_id,
            topic=self.events_topic,
            own=self.txn_id,
            transaction_timeout_ms=self._txn_timeout_ms,
        )
        #: The producer and the open transaction (begin, produce, commit or abort).
        self.txn = TransactionUnit(
            settings,
            self._client,
            self.consumer,
            self.metrics,
            txn_id=self.txn_id,
            changelog=self.changelog,
            on_failure=self._failed,
        )
        #: The held partitions' state from the changelog (assignments, rewinds).
        self.restorer = ChangelogRestore(
            settings,
            self._client,
            self.consumer,
            self.values,
            self.txn,
            changelog=self.changelog,
            drop_state=self._drop_state,
            stopping=lambda: self.stopping,
        )

    # -- the loop ---------------------------------------------------------------

    def stop(self) -> None:
        self.stopping = True
        if self.count_watch is not None:
            self.count_watch.stop()  # its wait ends at once

    @property
    def uncommitted_events(self) -> int:
        """Events processed since the last commit (in the pending commit's
        transaction and the open one)."""
        pending = self.txn.pending
        return self.txn.txn_events + (pending.events if pending is not None else 0)

    def run(self) -> bool:
        """Process until :meth:`stop`; then commit what can be committed and
        leave the group. Returns whether the last transaction committed."""
        self.consumer.subscribe(
            [self.events_topic],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )
        interval = self.settings.commit_interval
        txn = self.txn
        count_watch = self.count_watch
        if count_watch is not None:
            count_watch.start()
        while not self.stopping:
            if txn.pending is not None:
                txn.settle()
            if self._reset_needed and time.monotonic() >= self._rewind_at:
                self._rewind()
            if txn.txn_open:
                timeout = max(0.0, self._due(interval) - time.monotonic())
                if timeout > FINAL_SLICE_S:
                    # Ends FINAL_SLICE_S before the due time, the last slice after it.
                    timeout = min(timeout - FINAL_SLICE_S, CONSUME_SLICE_S)
                if txn.pending is not None:
                    # Its commit is due but waits for the pending one: go
                    # on consuming meanwhile, without spinning.
                    timeout = max(timeout, _PENDING_SLICE_S)
            else:
                timeout = interval
            epoch = self._epoch
            self._discarded = False
            # A transaction that this call's records open counts from here:
            # they may have waited in the call since then (it returns at
            # MAX_BATCH records or at the timeout). Counting from the
            # begin_transaction after it made the cycle two intervals long
            # (one collecting, one in the transaction), so a finding waited
            # up to twice the commit interval; the relay commits every interval.
            self._wait_began = time.monotonic()
            msgs = self.consumer.consume(MAX_BATCH, min(timeout, CONSUME_SLICE_S))
            if self.stopping:
                break  # not processed: their offsets are not committed
            if msgs:
                if epoch != self._epoch and self._discarded and self.assigned:
                    self._refetch()
                else:
                    self._handle(msgs)
            if txn.txn_open and (
                time.monotonic() >= self._due(interval) or txn.txn_events >= COMMIT_EVENTS
            ):
                if not self.eos:
                    txn.commit()
                elif txn.pending is None:
                    txn.start_commit()
                elif txn.txn_events >= COMMIT_EVENTS:
                    # Held outputs stay bounded: wait for the pending commit.
                    txn.settle(block=True)
            if count_watch is not None:
                if count_watch.change is not None:
                    raise PartitionsChanged(count_watch.change)
                if count_watch.failure is not None:
                    raise count_watch.failure
            now = time.monotonic()
            if now >= self._next_tick:
                self._next_tick = now + 1.0
                self.metrics.liveness.turned()
                self._read_highwaters()
                self.refresh_gauges()
                self.announce()
                if self._idle_trim.due(self.processed, now):
                    release_free_heap()
        return self._finish()

    def _due(self, interval: float) -> float:
        """When the open transaction's commit is due: an interval after the
        last commit started, and not before the transaction opened (a
        transaction opened after a quiet spell commits after its first
        batch). Counted from the transaction's first records instead, the
        cycle was the interval plus the commit's start on the loop's thread
        and a consume() slice, 2-16 ms a cycle at 2,000 events/s; the relay
        commits an interval after its last commit."""
        return max(self.txn.txn_began, self.txn.last_start + interval)

    def _refetch(self) -> None:
        """A rebalance ran inside the last ``consume()`` call and threw away
        processed but uncommitted events: drop what the call returned and go
        back to the committed offsets.

        Why not simply drop a batch during which the assignment changed (the
        first version did, and lost events in the rebalance storm):
        librdkafka keeps serving the queue after the rebalance callback
        returns, so the batch can hold records *fetched for the new
        assignment*, from the committed offset on; it has already moved its
        position past them and never returns them again. Those records are
        kept (``_handle`` filters by partition held and position). Records
        fetched before the rebalance are purged from the batch by librdkafka
        when the partition's fetch version changes (its BARRIER op), unless
        the call returned before that op was served; such a stale record is
        the exact continuation of what was processed when the revoke commit
        succeeded (the committed offset is the position), so it is harmless
        then. Only when the revoke or loss aborted processed events does the
        committed offset fall behind such a record: then nothing of the batch
        is processed and the rewind seeks back to the committed offsets."""
        self._reset_needed = True
        self._rewind_at = 0.0

    def _handle(self, msgs: list[Any]) -> None:
        txn = self.txn
        recs: list[_Rec] = []
        append = recs.append
        topic = self.events_topic
        held = set(self.assigned)
        expected = self.positions
        #: The last offset taken per partition (a partition's records come in
        #: order): the offsets to commit, without a second pass over the batch.
        last: dict[int, int] = {}
        top = -1
        for m in msgs:
            err = m.error()
            if err is not None:
                if err.fatal():
                    raise BrokerError(f"consumer failed: {err.str()}", code=err.name())
                if err.name() == REFUSED_FOR_PROTOCOL:
                    # The other engine's workers hold the group (they joined
                    # after the start's check): librdkafka would retry every
                    # 2 s for good, without partitions. Stop, saying why.
                    raise ConfigError(mixed_engines_message(self.settings, None))
                log.warning("consumer: %s", err.str())
                continue
            p = m.partition()
            offset = m.offset()
            # Only the partitions held now, and never an offset already
            # processed (a record fetched again after a rewind or rebalance).
            if p not in held or offset < expected.get(p, -1):
                if p > top:
                    top = p
                continue
            last[p] = offset
            ts_type, ts = m.timestamp()
            append(_Rec(topic, p, offset, m.key(), m.value(), ts if ts_type else None))
        if last:
            top = max(top, max(last))
        guard = self.guard
        if guard is not None and top >= 0:
            # Before any record of the batch is processed: the open transaction
            # stays uncommitted (aborted), so nothing comes from split state.
            # The highest partition of the batch is the one to check.
            change = guard.check_record(top)
            if change is not None:
                raise PartitionsChanged(change)
        if not recs or self._reset_needed:
            return  # refetched after the rewind
        from confluent_kafka import KafkaException

        outcome = self.processor.process_batch(recs, self.values.get)
        try:
            if txn.pending is not None:
                # One transaction at a time: this batch's outputs go into
                # the next one, begun once the pending commit has ended.
                for records in outcome.records.values():
                    txn.held.extend(records)
            else:
                if self.eos and not txn.begun:
                    txn.producer.begin_transaction()
                    txn.begun, txn.begun_at = True, time.monotonic()
                for records in outcome.records.values():
                    for r in records:
                        txn.produce(r)
            if outcome.status:
                if not self.eos:
                    for statuses in outcome.status.values():
                        for sr in statuses:
                            txn.produce(sr)
                            self.metrics.status_records.inc()
                elif len(recs) < ENCODE_AT_ONCE_BELOW:
                    txn.status_now(outcome.status.values())
                else:
                    deferred = txn.deferred
                    for statuses in outcome.status.values():
                        for sr in statuses:
                            deferred[sr.key] = sr  # once per key per transaction
            changes = txn.changes
            if self.eos and txn.pending is None and len(recs) < ENCODE_AT_ONCE_BELOW:
                txn.produce_batch_changes(outcome.states, last)
            else:
                for key, partition, value in outcome.states:
                    changes[key, partition] = value  # once per key per transaction
        except KafkaException as exc:
            self._failed(exc, "sending")
            return
        self.values.write([(key, value) for key, _partition, value in outcome.states])
        offsets, positions = txn.txn_offsets, self.positions
        for p, offset in last.items():
            offsets[p] = positions[p] = offset + 1
        txn.txn_events += len(recs)
        self.processed += len(recs)
        self.metrics.record_batch(len(recs), outcome)
        if not txn.txn_open:
            # "Open" = processed events whose offsets are not committed yet.
            txn.txn_open = True
            txn.txn_began = self._wait_began

    def _failed(self, exc: BaseException, during: str, *, events: int | None = None) -> None:
        """The open transaction cannot commit: abort it (or replace a fenced
        producer: :meth:`TransactionUnit.give_up`), drop every partition's
        state and rewind. One log line. ``events``: the uncommitted events
        given up (default: the open transaction's)."""
        err = exc.args[0] if exc.args else None
        if events is None:
            events = self.txn.txn_events
        what, code, stale = self.txn.give_up(exc, during)
        # The rebalance that follows (partitions lost or revoked) is this.
        self._told_stale = stale
        self._drop_state()
        self._reset_needed = True
        # A generation that is over: the group has given (or is giving) the
        # partitions to another worker, which commits them every interval;
        # rewinding them here would read their committed offsets and wait
        # for their changelog to be stable while that worker writes it (a
        # minute and more, the consumer not polled, so never rejoining: the
        # thawed worker of the paused-worker test processed nothing more).
        # The consumer is polled first, without processing, so it reports
        # the partitions lost or revoked and rejoins; the rewind is the
        # fallback if it does not within a session timeout.
        self._awaiting_rejoin = stale
        self._rewind_at = time.monotonic() + self.settings.session_timeout if stale else 0.0
        log.warning(
            "%s (%s) while %s: generation %d (member %s) gives up partitions %s as they were "
            "at the last commit; %d uncommitted events are aborted, never published, and are "
            "processed again after the rewind or rebalance (%s)",
            what,
            code,
            during,
            self.generation,
            self.member,
            self.assigned,
            events,
            getattr(err, "str", lambda: str(exc))(),
        )

    def _drop_state(self) -> None:
        self.values.clear()
        self.processor.forget()

    # -- stop -------------------------------------------------------------------

    def _finish(self) -> bool:
        events = self.uncommitted_events
        ok = True
        if self.txn.txn_open or self.txn.pending is not None:
            ok = self.txn.commit(timeout=FINAL_CALL_S, final=True)
        if ok:
            log.info(
                "stopping: every processed event committed (%d in the last transaction); "
                "leaving the group",
                events,
            )
        else:
            log.warning(
                "stopping: the last transaction (%d events) was not committed and is aborted; "
                "a restart processes those events again, exactly once",
                events,
            )
        # The revoke on close has nothing left to commit, nor to abort: what
        # is still open is the broker's to abort (or a restart's).
        self.txn.txn_open = self.txn.begun = False
        self.txn.pending = None
        self.consumer.close()
        self.values.close()
        return ok

    # -- health and gauges ------------------------------------------------------

    def health(self) -> dict[str, Any]:
        # Held in name only while a generation that is over awaits its rejoin.
        partitions = [] if self._awaiting_rejoin else list(self.assigned)
        return {
            "ok": not self.stopping,
            "recovering": self.recovering,
            "partitions": partitions,
            "processed": self.processed,
            "exactly_once": self.eos,
            "pid": os.getpid(),
            **self.metrics.liveness.assess(
                partitions=partitions, lag=self.metrics.lag_total, recovering=self.recovering
            ),
        }

    def _read_highwaters(self) -> None:
        """The consumer's cached high watermarks (under read_committed: the
        last stable offsets) of the held partitions; read on the loop's
        thread only, the /metrics thread uses the copy."""
        from confluent_kafka import TopicPartition

        highwaters: dict[int, int] = {}
        for p in self.assigned:
            _lo, hi = self.consumer.get_watermark_offsets(
                TopicPartition(self.events_topic, p), cached=True
            )
            if hi is not None and hi >= 0:
                highwaters[p] = hi
        self._highwaters = highwaters

    def refresh_lag(self) -> None:
        """The lag gauge of every held partition (0 until known)."""
        positions = dict(self.positions)
        highwaters = self._highwaters
        lags: dict[int, int | None] = {}
        for p in list(self.assigned):
            hi, pos = highwaters.get(p), positions.get(p)
            lags[p] = None if hi is None or pos is None else hi - pos
        self.metrics.set_lag(lags)

    def refresh_gauges(self) -> None:
        self.refresh_lag()
        self.metrics.keys.set(len(self.values))
        self.metrics.restored.set(self.restorer.restored_records)

    def announce(self) -> None:
        """The faust engine's line, each time a new set of partitions is processed."""
        if self.recovering or self._reset_needed or not self.generation:
            return  # before the first assignment there is nothing to say
        parts = tuple(self.assigned)
        if parts == self._announced:
            return
        self._announced = parts
        where = ", ".join(map(str, parts)) if parts else "none (other workers have them)"
        log.info(
            "processing %s partitions %s (%s, %s, rdkafka engine)",
            self.events_topic,
            where,
            "exactly-once" if self.eos else "at-least-once",
            self.values.kind,
        )
