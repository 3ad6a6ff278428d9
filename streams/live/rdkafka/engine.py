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
``commit_transaction`` in a thread of their own (:class:`_Pending`): one
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

import contextlib
import hashlib
import logging
import os
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from streams.errors import BrokerError, ConfigError
from streams.live.changelog import (
    LoadResult,
    changelog_topic,
    load_changelog,
    source_position_header,
)
from streams.live.group_engine import REFUSED_FOR_PROTOCOL, mixed_engines_message
from streams.live.metrics import LiveMetrics
from streams.live.partitions import PartitionChange, PartitionGuard, PartitionsChanged
from streams.live.processor import Outgoing, StatusRecord, processor_for
from streams.live.rdkafka.table import MemoryTable, StateTable, open_table
from streams.live.rdkafka.takeover import DepartedOwners, owner_metadata
from streams.live.settings import LiveSettings

if TYPE_CHECKING:
    from streams.kafka.admin import TopicAdmin

__all__ = [
    "COMMIT_EVENTS",
    "CONSUME_SLICE_S",
    "COUNT_CHECK_S",
    "ENCODE_AT_ONCE_BELOW",
    "FINAL_SLICE_S",
    "MAX_BATCH",
    "FailureAction",
    "RdkafkaEngine",
    "failure_action",
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
#: next owner: RdkafkaEngine._restore.
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
#: The events topic's partition count is re-read this often, in a thread of
#: its own: a metadata round trip to the broker (seconds when it is away) that
#: the loop's thread made every 2 s, holding up the records consumed meanwhile.
COUNT_CHECK_S = 2.0
#: Bound of one transactional call while running.
_CALL_TIMEOUT_S = 10.0
#: Past its own bound, a transactional call is given this long before it is
#: taken for hung (librdkafka issue 5456) and its producer abandoned.
_HANG_GRACE_S = 5.0
#: Bound of each transactional call of the last commit when stopping: the
#: two commits (a pending one, then the open transaction's) end within
#: 2 x this + 1 s, inside rdkafka_run.STOP_BOUND_S.
_FINAL_CALL_S = 3.0
#: The consume() slice while a commit that is due waits for the pending one.
_PENDING_SLICE_S = 0.005
#: Commit retries of a retriable failure (a broker timing out) before abort.
_COMMIT_RETRIES = 3
#: Changelog records written to a RocksDB table per write batch while restoring.
_RESTORE_CHUNK = 10_000
#: The consumer and librdkafka errors that mean "this member's generation is
#: over": the transaction's offsets were refused by the group coordinator.
_STALE_GENERATION = ("ILLEGAL_GENERATION", "UNKNOWN_MEMBER_ID", "FENCED_INSTANCE_ID",
                     "REBALANCE_IN_PROGRESS")  # fmt: skip
#: Errors of the idempotent producer's own bookkeeping (its sequence numbers
#: out of step with a partition leader's after leaders moved: a rolling
#: restart logged the first two). librdkafka may raise them as fatal for a
#: transactional producer, which must then be replaced; but no other worker
#: took anything over, so the worker rewinds at once.
_PRODUCER_STATE = ("OUT_OF_ORDER_SEQUENCE_NUMBER", "_INCONSISTENT", "UNKNOWN_PRODUCER_ID",
                   "DUPLICATE_SEQUENCE_NUMBER")  # fmt: skip


@dataclass(frozen=True, slots=True)
class FailureAction:
    """What a transaction that cannot commit calls for."""

    #: Its log line's first words.
    what: str
    #: The producer is unusable: a new one with the same transactional id
    #: (its ``init_transactions`` aborts the open transaction at the broker);
    #: else ``abort_transaction``.
    new_producer: bool
    #: This member's generation is over (another worker has or gets the
    #: partitions): poll to rejoin before any rewind.
    generation_over: bool


#: The error codes of a transactional call that ran out of time.
_TIMEOUTS = ("_TIMED_OUT", "_TIMED_OUT_QUEUE", "REQUEST_TIMED_OUT", "HUNG")


def failure_action(code: str, *, fatal: bool, committing: bool = False) -> FailureAction:
    """The action for a failed transactional call's error ``code`` (the
    librdkafka error name), whether librdkafka called it ``fatal``, and
    whether the call was the commit (``send_offsets_to_transaction`` or
    ``commit_transaction``).

    A fatal error is a fenced producer (a successor with this transactional
    id, or the coordinator aborted a transaction that outlived its timeout
    while the worker was paused: its generation is over too), unless it is
    one of the producer's own sequence errors, which end the producer only.
    A commit that failed otherwise (timed out, the broker away) leaves the
    producer in a state no later call can be trusted in: an
    ``abort_transaction`` after a commit that timed out may itself hang or
    fail (librdkafka issues 3003, 3297 and 5423), so the producer is
    replaced before anything else is sent: the new one's
    ``init_transactions`` aborts the open transaction at the broker."""
    if fatal and code in _PRODUCER_STATE:
        return FailureAction("producer failed", new_producer=True, generation_over=False)
    if fatal:
        return FailureAction("producer fenced", new_producer=True, generation_over=True)
    if code in _STALE_GENERATION:
        return FailureAction("stale generation", new_producer=False, generation_over=True)
    if committing:
        what = "commit timed out" if code in _TIMEOUTS else "commit failed"
        return FailureAction(what, new_producer=True, generation_over=False)
    return FailureAction("transaction failed", new_producer=False, generation_over=False)


class _Rec(msgspec.Struct, gc=False):
    """One consumed record as the processor reads it (a Struct: one per event,
    and a frozen dataclass's ``__init__`` costs several times more)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int | None


class _CallHung(Exception):
    """A librdkafka call that did not return within its bound."""


class _Pending:
    """A transaction's commit (``send_offsets_to_transaction`` then
    ``commit_transaction``) running in the :class:`_Committer`'s thread while the loop goes
    on consuming and processing the next events (their outputs are held
    until it ends: a transactional producer has one transaction at a time).

    Why a thread: the commit is a round trip to the group coordinator and
    one to the transaction coordinator, which waits for every record of the
    transaction to be acknowledged: 10-40 ms per commit on this machine, a
    tenth to a third of every 0.1 s commit interval in which, synchronous,
    the loop consumed and processed nothing (the bare relay still does).

    And a bound: ``send_offsets_to_transaction(..., timeout)`` ignores its
    timeout when the group coordinator is gone at the wrong moment
    (librdkafka issues 5456 and 5511, open in 2.16: the coordinator request
    is never retried nor timed out). After a clean broker restart the
    engine's thread waited in it for good: the worker stayed up and never
    committed again (tests/faults/test_broker_restart_midstream.py). A call
    still running ``bound`` seconds after it began is taken for hung
    (:meth:`hung`); the thread is left to finish, or not, on its own."""

    __slots__ = (
        "began", "bound", "call", "call_began", "done", "ended", "error", "events", "meta",
        "offsets", "producer", "status", "timeout",
    )  # fmt: skip

    def __init__(
        self,
        producer: Any,
        offsets: list[Any],
        meta: Any,
        timeout: float,
        bound: float,
        *,
        events: int,
        status: int,
    ) -> None:
        self.producer = producer
        self.events = events
        #: Status records in the transaction (counted once it commits).
        self.status = status
        self.bound = bound
        self.call = "send-offsets" if offsets else "commit"
        self.call_began = self.began = self.ended = time.monotonic()
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.offsets, self.meta, self.timeout = offsets, meta, timeout

    def run(self) -> None:
        """The commit's calls (in the :class:`_Committer`'s thread)."""
        from confluent_kafka import KafkaException

        producer, offsets, meta, timeout = self.producer, self.offsets, self.meta, self.timeout
        self.call_began = time.monotonic()
        try:
            if offsets:
                producer.send_offsets_to_transaction(offsets, meta, timeout)
            self.call, self.call_began = "commit", time.monotonic()
            for attempt in range(_COMMIT_RETRIES):
                try:
                    producer.commit_transaction(timeout / _COMMIT_RETRIES)
                    break
                except KafkaException as exc:
                    err = exc.args[0] if exc.args else None
                    retry = getattr(err, "retriable", lambda: False)()
                    if not retry or attempt == _COMMIT_RETRIES - 1:
                        raise
        except BaseException as exc:  # handed to the loop's thread
            self.error = exc
        finally:
            self.ended = time.monotonic()
            self.done.set()

    def hung(self, now: float) -> _CallHung | None:
        """The call still running past its bound, if it is."""
        if self.done.is_set() or now < self.call_began + self.bound:
            return None
        return _CallHung(f"{self.call} did not return within {self.bound:.0f} s")

    def wait(self, timeout: float) -> None:
        """Until it ends, is hung, or ``timeout`` seconds have passed."""
        end = time.monotonic() + timeout
        while not self.done.is_set():
            now = time.monotonic()
            limit = min(end, self.call_began + self.bound)
            if now >= limit:
                return
            self.done.wait(limit - now)


class _Committer:
    """The thread that runs the commits (:meth:`_Pending.run`), one at a
    time, started once. A thread started per commit held the loop up to
    several ms per commit on a loaded machine (``Thread.start`` waits until
    the new thread has run): 2.8 % of the loop's wall time at 2,000 events/s
    (py-spy, load average 14-17, 2026-12-03). A commit found hung keeps its
    thread: the engine starts a new committer and leaves that one to finish,
    or not (as it left a hung commit's own thread before)."""

    __slots__ = ("_jobs",)

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[_Pending] = queue.SimpleQueue()
        threading.Thread(target=self._serve, name="fencewatch-commit", daemon=True).start()

    def submit(self, pending: _Pending) -> None:
        self._jobs.put(pending)

    def _serve(self) -> None:
        while True:
            self._jobs.get().run()


def transactional_id(settings: LiveSettings) -> str:
    """The worker slot's stable transactional id: the app id, then a digest
    of this host's name and the absolute data directory (one per worker on a
    host, docs/live.md). A restarted worker gets the same id, so its first
    ``init_transactions`` aborts what its previous run left open at once
    instead of after the transaction timeout."""
    where = f"{socket.gethostname()}:{Path(settings.data_dir).expanduser().absolute()}"
    return f"{settings.app_id}-rdkafka-{hashlib.sha256(where.encode()).hexdigest()[:12]}"


def _code_name(exc: BaseException) -> str:
    err = exc.args[0] if exc.args else None
    name = getattr(err, "name", None)
    return str(name()) if callable(name) else type(exc).__name__


class RdkafkaEngine:
    """Consume, process, commit and restore for one worker process.

    ``run()`` blocks until :meth:`stop` is called (from a signal handler) and
    returns after the stop; the caller bounds the stop's duration."""

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
        self._counter: TopicAdmin | None = None
        #: A change of the partition count seen by the count watch (its thread).
        self._count_change: PartitionChange | None = None
        #: A count read that failed otherwise than a broker error (its thread
        #: ends; the loop raises it, as when the loop read the count itself).
        self._count_failure: BaseException | None = None
        #: Set by stop(): the count watch's wait ends at once.
        self._stopped = threading.Event()
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
        self.restored_records = 0
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
        #: Watermark probes of the changelog (read_committed, read_uncommitted).
        self._probes: tuple[Any, Any] | None = None
        self._txn_open = False
        #: How this worker's last transaction ended, as a restore waiting on an
        #: open changelog transaction logs it (whose the open one may be).
        self._last_end = "none yet"
        self._txn_began = 0.0
        #: When the last commit started (0: none yet). The next is due an
        #: interval after it, as Kafka Streams' commit.interval.ms counts
        #: (see _due).
        self._last_start = 0.0
        #: When the current consume() call began (see run).
        self._wait_began = 0.0
        self._txn_events = 0
        self._txn_offsets: dict[int, int] = {}
        #: The transaction's status records from big batches, the latest per
        #: key, produced at the commit (ENCODE_AT_ONCE_BELOW).
        self._deferred: dict[bytes | None, Outgoing] = {}
        #: Status records of small batches, produced (or held) at once: counted
        #: in the status metric once the transaction commits.
        self._txn_status = 0
        #: The transaction's changelog records kept for the commit: the
        #: latest state per (key, source partition) of big batches and of
        #: batches processed while a commit was pending (ENCODE_AT_ONCE_BELOW).
        #: A key changed in several batches of one transaction is written
        #: once (the bench's keys recur every ~1,000 events: 5 writes of 6
        #: saved at 0.1 s); a small batch's record of the key, produced at
        #: once, replaces the one kept. Small batches' records were kept for
        #: the commit too until the source position header (session 19): a
        #: worker frozen with changelog records in its open transaction holds
        #: the changelog's last stable offset, and the next owner could not
        #: tell that transaction from a committed one whose markers were
        #: still on their way, so it waited for the broker's transaction
        #: timeout (13.5 s in CI's paused-worker test with 90b6cbe, when the
        #: takeover fence did not exist yet; RdkafkaEngine._restore).
        self._changes: dict[tuple[bytes, int], bytes] = {}
        #: Findings, dead letters and small batches' status records of events
        #: processed while the previous transaction's commit is pending:
        #: produced once it has committed.
        self._held: list[Outgoing] = []
        #: The commit running in its thread, if any (_Pending).
        self._pending: _Pending | None = None
        #: The commits' thread (started with the first commit; a new one
        #: after a commit hung in it).
        self._committer: _Committer | None = None
        #: The producer has a transaction begun and not yet ended (the
        #: pending one's, or the open one's), since this monotonic time.
        self._begun = False
        self._begun_at = 0.0
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
        #: Each commit's offsets name this worker (takeover.owner_metadata).
        self._owner = owner_metadata(self.txn_id)
        self.producer: Any = self._new_producer()
        #: Producers given up while a call of theirs still runs in another
        #: thread (_Pending): kept referenced, never destroyed under it.
        self._abandoned: list[Any] = []

    # -- producer ---------------------------------------------------------------

    def _new_producer(self) -> Any:
        from confluent_kafka import Producer

        conf = dict(self._client)
        conf.update(
            {
                # murmur2: the Java client's and aiokafka's partitioner, so a
                # key's status record lands where the faust engine puts it.
                "partitioner": "murmur2_random",
                "linger.ms": 5,
                "queue.buffering.max.messages": 1_000_000,
            }
        )
        if self.eos:
            conf["transactional.id"] = self.txn_id
            conf["transaction.timeout.ms"] = self._txn_timeout_ms
        producer = Producer(conf)
        if self.eos:
            producer.init_transactions(60)
        return producer

    def _replace_producer(self, *, abandon: bool = False) -> None:
        """A new producer with the same transactional id (its
        ``init_transactions`` fences the old one and aborts its open
        transaction). ``abandon``: a call of the old one still runs in
        another thread; it is kept referenced and left alone."""
        old = self.producer
        if abandon:
            self._abandoned.append(old)
        else:
            try:
                old.purge()
            except Exception:  # a fenced producer may refuse even this; it is dropped anyway
                log.debug("purge of the fenced producer failed", exc_info=True)
        from confluent_kafka import KafkaException

        while True:
            try:
                self.producer = self._new_producer()
                self._begun = False
                self._last_end = "left to the new producer's init_transactions (aborts it)"
                return
            except KafkaException as exc:
                # The broker is away: nothing can be published meanwhile
                # anyway; a stop signal is bounded by the runner's watchdog.
                log.warning("new transactional producer not ready (%s); retrying", exc)

    # -- the loop ---------------------------------------------------------------

    def stop(self) -> None:
        self.stopping = True
        self._stopped.set()

    @property
    def uncommitted_events(self) -> int:
        """Events processed since the last commit (in the pending commit's
        transaction and the open one)."""
        pending = self._pending
        return self._txn_events + (pending.events if pending is not None else 0)

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
        if self.guard is not None:
            threading.Thread(
                target=self._watch_count,
                args=(self.guard,),
                name="fencewatch-partitions",
                daemon=True,
            ).start()
        while not self.stopping:
            if self._pending is not None:
                self._settle()
            if self._reset_needed and time.monotonic() >= self._rewind_at:
                self._rewind()
            if self._txn_open:
                timeout = max(0.0, self._due(interval) - time.monotonic())
                if timeout > FINAL_SLICE_S:
                    # Ends FINAL_SLICE_S before the due time, the last slice after it.
                    timeout = min(timeout - FINAL_SLICE_S, CONSUME_SLICE_S)
                if self._pending is not None:
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
            if self._txn_open and (
                time.monotonic() >= self._due(interval) or self._txn_events >= COMMIT_EVENTS
            ):
                if not self.eos:
                    self._commit()
                elif self._pending is None:
                    self._start_commit()
                elif self._txn_events >= COMMIT_EVENTS:
                    # Held outputs stay bounded: wait for the pending commit.
                    self._settle(block=True)
            if self._count_change is not None:
                raise PartitionsChanged(self._count_change)
            if self._count_failure is not None:
                raise self._count_failure
            now = time.monotonic()
            if now >= self._next_tick:
                self._next_tick = now + 1.0
                self.metrics.liveness.turned()
                self._read_highwaters()
                self.refresh_gauges()
                self.announce()
        return self._finish()

    def _due(self, interval: float) -> float:
        """When the open transaction's commit is due: an interval after the
        last commit started, and not before the transaction opened (a
        transaction opened after a quiet spell commits after its first
        batch). Counted from the transaction's first records instead, the
        cycle was the interval plus the commit's start on the loop's thread
        and a consume() slice, 2-16 ms a cycle at 2,000 events/s; the relay
        commits an interval after its last commit."""
        return max(self._txn_began, self._last_start + interval)

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

    def _watch_count(self, guard: PartitionGuard) -> None:
        """The count check every :data:`COUNT_CHECK_S` until a change (handed
        to the loop, which raises it before its next batch) or the stop."""
        while not self._stopped.is_set():
            try:
                change = self._count_check(guard)
            except BaseException as exc:  # the loop raises it (no stray thread traceback)
                self._count_failure = exc
                return
            if change is not None:
                self._count_change = change
                return
            self._stopped.wait(COUNT_CHECK_S)

    def _count_check(self, guard: PartitionGuard) -> PartitionChange | None:
        """The events topic's partition count re-read; a broker that does not
        answer is no change (the next check retries), as in the faust
        engine. (It was an exception out of the loop: a worker checking the
        count while the broker restarted exited with "no answer from broker",
        tests/faults/test_broker_restart_midstream.py.)"""
        from streams.kafka.admin import TopicAdmin

        try:
            if self._counter is None:
                self._counter = TopicAdmin(self.settings.connection)
            return guard.check_count(self._counter)
        except BrokerError as exc:
            log.debug("partition count of %s not read: %s", self.events_topic, exc)
            return None

    def _handle(self, msgs: list[Any]) -> None:
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
            if self._pending is not None:
                # One transaction at a time: this batch's outputs go into
                # the next one, begun once the pending commit has ended.
                for records in outcome.records.values():
                    self._held.extend(records)
            else:
                if self.eos and not self._begun:
                    self.producer.begin_transaction()
                    self._begun, self._begun_at = True, time.monotonic()
                for records in outcome.records.values():
                    for r in records:
                        self._produce(r)
            if outcome.status:
                if not self.eos:
                    for statuses in outcome.status.values():
                        for sr in statuses:
                            self._produce(sr)
                            self.metrics.status_records.inc()
                elif len(recs) < ENCODE_AT_ONCE_BELOW:
                    self._status_now(outcome.status.values())
                else:
                    deferred = self._deferred
                    for statuses in outcome.status.values():
                        for sr in statuses:
                            deferred[sr.key] = sr  # once per key per transaction
            changes = self._changes
            if self.eos and self._pending is None and len(recs) < ENCODE_AT_ONCE_BELOW:
                self._produce_batch_changes(outcome.states, last)
            else:
                for key, partition, value in outcome.states:
                    changes[key, partition] = value  # once per key per transaction
        except KafkaException as exc:
            self._failed(exc, "sending")
            return
        self.values.write([(key, value) for key, _partition, value in outcome.states])
        offsets, positions = self._txn_offsets, self.positions
        for p, offset in last.items():
            offsets[p] = positions[p] = offset + 1
        self._txn_events += len(recs)
        self.processed += len(recs)
        self.metrics.record_batch(len(recs), outcome)
        if not self._txn_open:
            # "Open" = processed events whose offsets are not committed yet.
            self._txn_open = True
            self._txn_began = self._wait_began

    def _status_now(self, batches: Iterable[list[StatusRecord]]) -> None:
        """A small batch's status records (see ENCODE_AT_ONCE_BELOW),
        produced into the open transaction now, or held with the findings
        while a commit is pending; encoded now either way (a pending status
        read after its key's next batch raises)."""
        deferred, pending = self._deferred, self._pending is not None
        n = 0
        for statuses in batches:
            for sr in statuses:
                # A record deferred by an earlier batch of this transaction
                # is older: it must not be produced after this one.
                deferred.pop(sr.key, None)
                if pending:
                    sr.value  # noqa: B018 -- encoded now, kept in the record
                    self._held.append(sr)
                else:
                    self._produce(sr)
                n += 1
        self._txn_status += n

    def _produce(self, r: Outgoing) -> None:
        self._send(r.topic, r.value, r.key, r.partition, list(r.headers) if r.headers else None)

    def _send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        partition: int | None = None,
        headers: list[Any] | None = None,
    ) -> None:
        """One record produced, waiting while the producer's queue is full
        (``BufferError``); ``partition`` None: the producer's partitioner."""
        produce = self.producer.produce
        while True:
            try:
                if partition is None:
                    produce(topic, value, key, headers=headers)
                else:
                    produce(topic, value, key, partition=partition, headers=headers)
                return
            except BufferError:
                self.producer.poll(0.05)

    def _produce_batch_changes(
        self, states: tuple[tuple[bytes, int, bytes], ...], last: dict[int, int]
    ) -> None:
        """A small batch's changelog records, into the open transaction now
        (see ENCODE_AT_ONCE_BELOW); a record kept for the commit from an
        earlier batch of the key is dropped, so the newest goes last. Each
        partition's first record names the position after the batch, which
        the transaction commits at least."""
        batch = {(key, partition): value for key, partition, value in states}
        changes = self._changes
        for kp in batch:
            changes.pop(kp, None)
        self._produce_changelog(batch, {p: offset + 1 for p, offset in last.items()})

    def _produce_changes(self) -> None:
        """The transaction's changelog records kept for the commit, each
        partition's first naming the transaction's offset."""
        self._produce_changelog(self._changes, self._txn_offsets)

    def _produce_changelog(
        self, records: dict[tuple[bytes, int], bytes], positions: dict[int, int]
    ) -> None:
        """``records`` (the latest state per key and source partition: the
        changelog partition is the source partition) produced, the first of
        each partition with its ``positions`` entry as
        :data:`~streams.live.changelog.SOURCE_POSITION_HEADER`."""
        topic = self.changelog
        produce = self.producer.produce
        tagged: set[int] = set()
        for (key, partition), value in records.items():
            # produce() itself, _send (which waits) only when the queue is
            # full: one record per changed key per transaction, and two
            # interpreted calls per record were a fifth of the commit's CPU.
            headers = None
            if partition not in tagged:
                tagged.add(partition)
                position = positions.get(partition)
                headers = None if position is None else source_position_header(position)
            try:
                produce(topic, value, key, partition=partition, headers=headers)
            except BufferError:
                self._send(topic, value, key, partition, headers)

    def _produce_status(self, records: list[Outgoing]) -> None:
        """The transaction's status records (the latest per key: SPEC §8),
        as :meth:`_produce` would, its calls saved for the usual record
        (the producer's partitioner, no headers)."""
        produce = self.producer.produce
        for r in records:
            if r.headers or r.partition is not None:
                self._produce(r)
                continue
            topic, value, key = r.topic, r.value, r.key
            try:
                produce(topic, value, key)
            except BufferError:
                self._send(topic, value, key)

    def _start_commit(self, timeout: float = _CALL_TIMEOUT_S, *, final: bool = False) -> None:
        """Put the open transaction's changelog and status records in it and
        start its commit with its offsets (:class:`_Pending`); the loop goes
        on while it runs and :meth:`_settle` takes its outcome."""
        from confluent_kafka import KafkaException, TopicPartition

        self._last_start = time.monotonic()
        owner = self._owner
        offsets = [
            TopicPartition(self.events_topic, p, o, metadata=owner)
            for p, o in self._txn_offsets.items()
        ]
        deferred = list(self._deferred.values())
        try:
            if not self._begun:
                self.producer.begin_transaction()
                self._begun, self._begun_at = True, time.monotonic()
            self._produce_changes()
            self._produce_status(deferred)
            meta = self.consumer.consumer_group_metadata()
        except KafkaException as exc:
            if final:  # stopping: no new producer, no rewind
                log.debug("final commit failed: %s", exc)
                return
            self._failed(exc, "committing")
            return
        self._pending = _Pending(
            self.producer,
            offsets,
            meta,
            timeout,
            timeout + _HANG_GRACE_S,
            events=self._txn_events,
            status=len(deferred) + self._txn_status,
        )
        if self._committer is None:
            self._committer = _Committer()
        self._committer.submit(self._pending)
        self._clear_txn()

    def _settle(self, *, block: bool = False, final: float = 0.0) -> bool | None:
        """The pending commit's outcome once it has one: ``True`` committed
        (or none pending), ``False`` failed (aborted, the rewind arranged,
        unless ``final``), ``None`` still running within its bound (never
        when ``block``). ``final``: the process is stopping, and this is
        the monotonic time by which the commit must have ended. After a
        commit, the events processed meanwhile get their transaction, their
        held outputs produced into it."""
        pending = self._pending
        if pending is None:
            return True
        if block:
            pending.wait(final - time.monotonic() if final else 3_600.0)
        done = pending.done.is_set()
        error = pending.error if done else pending.hung(time.monotonic())
        if not done and error is None and not final:
            return None
        self._pending = None
        if done and error is None:
            self._begun = False
            self._last_end = "committed"
            self.metrics.commit_done(pending.ended - pending.began)
            if pending.status:
                self.metrics.status_records.inc(pending.status)
            self._begin_held()
            return True
        if final:
            log.debug("final commit failed: %s", error)
            if done:
                from confluent_kafka import KafkaException

                with contextlib.suppress(KafkaException):
                    self.producer.abort_transaction(1.0)
            return False
        assert error is not None
        self._failed(error, "committing", events=pending.events + self._txn_events)
        return False

    def _begin_held(self) -> None:
        """The transaction of the events processed while a commit was
        pending: begun, their findings and dead letters produced into it."""
        if not self._txn_open:
            return
        from confluent_kafka import KafkaException

        held, self._held = self._held, []
        try:
            self.producer.begin_transaction()
            self._begun, self._begun_at = True, time.monotonic()
            for r in held:
                self._produce(r)
        except KafkaException as exc:
            self._failed(exc, "sending")

    def _commit(self, timeout: float = _CALL_TIMEOUT_S, *, final: bool = False) -> bool:
        """Commit what was processed, the pending commit first, and wait for
        it; on failure abort and arrange the rewind (``final``: only try to
        abort, within a second: the process is stopping). Returns whether
        everything committed."""
        from confluent_kafka import KafkaException, TopicPartition

        if not self.eos:
            self._last_start = time.monotonic()
            offsets = [
                TopicPartition(self.events_topic, p, o) for p, o in self._txn_offsets.items()
            ]
            try:
                self._produce_changes()
                if self.producer.flush(timeout) > 0:
                    raise BrokerError("outputs not delivered in time", code="TIMEOUT")
                if offsets:
                    self.consumer.commit(offsets=offsets, asynchronous=False)
            except (KafkaException, BrokerError) as exc:
                if final:
                    log.debug("final commit failed: %s", exc)
                    return False
                self._failed(exc, "committing")
                return False
            self._last_end = "committed"
            self.metrics.commit_done(time.monotonic() - self._last_start)
            self._clear_txn()
            return True
        # Stopping: both commits within one bound (rdkafka_run.STOP_BOUND_S).
        by = time.monotonic() + 2 * timeout + 1.0 if final else 0.0
        if self._settle(block=True, final=by) is not True:
            return False
        if not self._txn_open:
            return True
        self._start_commit(timeout, final=final)
        if self._pending is None:
            return False  # failed before it could start
        return self._settle(block=True, final=by) is True

    def _clear_txn(self) -> None:
        self._txn_open = False
        self._txn_began = 0.0
        self._txn_events = 0
        self._txn_offsets = {}
        self._deferred = {}
        self._txn_status = 0
        self._changes = {}
        self._held = []

    def _failed(self, exc: BaseException, during: str, *, events: int | None = None) -> None:
        """The open transaction cannot commit: abort it (or replace a fenced
        producer), drop every partition's state and rewind. One log line.
        ``events``: the uncommitted events given up (default: the open
        transaction's)."""
        err = exc.args[0] if exc.args else None
        fatal = bool(getattr(err, "fatal", lambda: False)())
        code = _code_name(exc)
        if events is None:
            events = self._txn_events
        if isinstance(exc, _CallHung):
            # Its producer is stuck in that call: a new one fences it and
            # aborts its transaction at the broker (init_transactions).
            what, code, stale = "transactional call hung", "HUNG", False
            self._committer = None  # its thread is the one stuck in the call
            self._replace_producer(abandon=True)
        else:
            action = failure_action(code, fatal=fatal, committing=during == "committing")
            what, stale = action.what, action.generation_over
            if action.what == "producer fenced":
                what = self._which_fence()
            if action.new_producer:
                self._replace_producer()
            else:
                self._abort()
        # The rebalance that follows (partitions lost or revoked) is this.
        self._told_stale = stale
        self._clear_txn()
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

    def _which_fence(self) -> str:
        """Which fence struck a fenced producer: the broker aborts a
        transaction open past the transaction timeout (the worker was paused
        or cut off that long), else a newer owner of the transactional id
        fenced it (the next owner of a departed worker's partitions:
        streams/live/rdkafka/takeover.py, or a worker restarted in its slot)."""
        open_for = time.monotonic() - self._begun_at if self._begun_at else 0.0
        if open_for >= self.settings.transaction_timeout:
            return (
                f"producer fenced: the broker aborted its transaction, open {open_for:.0f} s, "
                f"past the {self.settings.transaction_timeout:.0f} s transaction timeout"
            )
        return f"producer fenced by a newer owner of transactional id {self.txn_id}"

    def _abort(self) -> None:
        from confluent_kafka import KafkaException

        if not self.eos:
            self.producer.purge()
            return
        if not self._begun:
            return  # only held outputs: nothing at the broker yet
        try:
            self.producer.abort_transaction(_CALL_TIMEOUT_S)
            self._begun = False
            self._last_end = "aborted"
        except KafkaException as exc:
            # Fatal (INVALID_TXN_STATE, _FENCED were seen in the cluster
            # tests) or not (a timeout, _CONFLICT): either way no transaction
            # of ours may stay open before a restore waits for the changelog
            # to be stable, and a new producer's init_transactions ends it.
            log.warning("abort failed (%s): replacing the producer", _code_name(exc))
            self._replace_producer()

    def _member(self) -> str:
        try:
            return str(self.consumer.memberid())
        except Exception:  # before the first join there is none
            return "-"

    def _drop_state(self) -> None:
        self.values.clear()
        self.processor.forget()

    # -- assignment and restore -----------------------------------------------

    def _open_changelog(self, partitions: list[int]) -> dict[int, tuple[int, int]]:
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
            open_ = self._open_changelog(partitions)
            if not open_ or self.stopping:
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
                    "yes" if self._txn_open else "no",
                    self._last_end,
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

    def _restore(self, partitions: list[int], committed: list[Any]) -> None:
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
        open_ = self._open_changelog(partitions)
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

    def _committed(self, partitions: list[int]) -> list[Any]:
        """The group's committed offsets of ``partitions``, stable: under
        read_committed librdkafka sends ``require_stable`` and waits while
        a transaction that commits them is pending."""
        from confluent_kafka import TopicPartition

        tps = [TopicPartition(self.events_topic, p) for p in partitions]
        return list(self.consumer.committed(tps, timeout=60))

    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        self._epoch += 1
        self.generation += 1
        parts = sorted(tp.partition for tp in partitions if tp.topic == self.events_topic)
        self._drop_state()
        self.recovering = True
        try:
            if self.eos:
                # Before the committed offsets are read: a departed owner's
                # commit in flight then either completes or is aborted.
                self._takeover.fence(parts)
            committed = self._committed(parts)
            self._restore(parts, committed)
        except Exception as exc:  # retried by the loop's rewind
            log.warning("restore of partitions %s failed, retrying: %s", parts, exc)
            self._drop_state()
            self._reset_needed = True
            committed = partitions
        finally:
            self.recovering = False
        self.positions = {
            tp.partition: tp.offset for tp in committed if tp.offset is not None and tp.offset >= 0
        }
        self.assigned = parts
        self.member = self._member()
        consumer.assign(committed)

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        self._settle(block=True)  # a failure aborts and arranges the rewind
        if self._txn_open and not self._reset_needed:
            self._commit()  # before the partitions go (a failure aborts)
        elif self._txn_open or self._begun:
            self._abort()
            self._clear_txn()
        # A failed commit, or a failure before: processed events were thrown
        # away, the committed offsets are behind the positions (_refetch).
        self._discarded = self._discarded or self._reset_needed
        self._release()

    def _on_lost(self, consumer: Any, partitions: list[Any]) -> None:
        lost = self.assigned
        # A commit already sent lands or not as the group coordinator
        # decides (it checks the generation); either way it has ended here.
        self._settle(block=True)
        events = self._txn_events
        self._discarded = self._discarded or self._txn_open or self._reset_needed
        if self._txn_open or self._begun:
            self._abort()  # never publish from a generation that is over
            self._clear_txn()
        if not self._told_stale:
            log.warning(
                "partitions %s lost (generation %d, member %s left the group): %d uncommitted "
                "events aborted, never published; rejoining",
                lost,
                self.generation,
                self.member,
                events,
            )
        self._release()

    def _release(self) -> None:
        self._epoch += 1
        self._told_stale = False
        self._drop_state()
        self._reset_needed = False
        self._rewind_at = 0.0
        self._awaiting_rejoin = False
        self.assigned = []
        self.positions = {}

    def _rewind(self) -> None:
        """Back to the committed offsets, with the state restored to them."""
        if not self.assigned:
            self._reset_needed = False
            self._awaiting_rejoin = False
            return
        from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition

        if self._settle(block=True) is False:
            return  # failed: rewinds again, from what it left
        parts = list(self.assigned)
        self.recovering = True
        try:
            committed = self._committed(parts)
            self._drop_state()
            self._restore(parts, committed)
            for tp in committed:
                offset = tp.offset if tp.offset is not None and tp.offset >= 0 else OFFSET_BEGINNING
                self.consumer.seek(TopicPartition(self.events_topic, tp.partition, offset))
        except (KafkaException, BrokerError) as exc:
            self._drop_state()
            log.warning("rewind of partitions %s failed, retrying in 1 s: %s", parts, exc)
            self._rewind_at = time.monotonic() + 1.0
            return
        finally:
            self.recovering = False
        self.positions = {tp.partition: tp.offset for tp in committed if tp.offset >= 0}
        self._epoch += 1
        self._reset_needed = False
        self._awaiting_rejoin = False

    # -- stop -------------------------------------------------------------------

    def _finish(self) -> bool:
        events = self.uncommitted_events
        ok = True
        if self._txn_open or self._pending is not None:
            ok = self._commit(timeout=_FINAL_CALL_S, final=True)
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
        self._txn_open = self._begun = False
        self._pending = None
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
        self.metrics.restored.set(self.restored_records)

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
