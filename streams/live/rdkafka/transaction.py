"""The rdkafka engine's transaction unit: its one transactional producer and
the transaction it has open. Begin, produce (findings, dead letters, status
and changelog records), send the offsets and commit (the bounded calls of
:mod:`streams.live.rdkafka.commit`, in their own thread) or abort, and the
producer's replacement when it is fenced, failed or stuck in a call.

Why apart. The consume loop (:mod:`streams.live.rdkafka.engine`) hands it
each batch's outputs and offsets and says when a commit is due; what a
transaction holds, when its records are produced and how a commit ends are
all here, testable against a broker without a consumer group's loop
(tests/live/test_rdkafka_transaction.py). A failure it cannot handle alone
(the open transaction is lost: the partitions' state must be dropped and
rewound) goes to the engine's ``on_failure``, which calls back
:meth:`TransactionUnit.give_up`.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable
from typing import Any, Protocol

from streams.errors import BrokerError
from streams.live.changelog import source_position_header
from streams.live.metrics import LiveMetrics
from streams.live.processor import Outgoing, StatusRecord
from streams.live.rdkafka.commit import (
    CALL_TIMEOUT_S,
    HANG_GRACE_S,
    Committer,
    PendingCommit,
    _CallHung,
    code_name,
    failure_action,
)
from streams.live.rdkafka.takeover import owner_metadata
from streams.live.settings import LiveSettings

__all__ = ["TransactionUnit"]

log = logging.getLogger(__name__)


class OnFailure(Protocol):
    """The engine's handling of a transaction that cannot commit (see
    ``RdkafkaEngine._failed``)."""

    def __call__(self, exc: BaseException, during: str, *, events: int | None = None) -> None: ...


class TransactionUnit:
    """The producer and the open transaction of one worker process (see the
    module's docstring); ``consumer``'s group metadata goes with each
    commit's offsets, which name this worker (``takeover.owner_metadata``)."""

    def __init__(
        self,
        settings: LiveSettings,
        client: dict[str, Any],
        consumer: Any,
        metrics: LiveMetrics,
        *,
        txn_id: str,
        changelog: str,
        on_failure: OnFailure,
    ) -> None:
        self.settings = settings
        self._client = client
        self.consumer = consumer
        self.metrics = metrics
        self.txn_id = txn_id
        self.events_topic = settings.events_topic
        self.changelog = changelog
        self.eos = settings.exactly_once
        self._txn_timeout_ms = int(settings.transaction_timeout * 1000)
        #: What a transaction that cannot commit calls (the engine's _failed).
        self._failed = on_failure
        #: Processed events whose offsets are not committed yet, since this
        #: monotonic time (their consume() call's start).
        self.txn_open = False
        self.txn_began = 0.0
        #: How this worker's last transaction ended, as a restore waiting on an
        #: open changelog transaction logs it (whose the open one may be).
        self.last_end = "none yet"
        #: When the last commit started (0: none yet). The next is due an
        #: interval after it, as Kafka Streams' commit.interval.ms counts
        #: (see RdkafkaEngine._due).
        self.last_start = 0.0
        self.txn_events = 0
        self.txn_offsets: dict[int, int] = {}
        #: The transaction's status records from big batches, the latest per
        #: key, produced at the commit (ENCODE_AT_ONCE_BELOW).
        self.deferred: dict[bytes | None, Outgoing] = {}
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
        #: takeover fence did not exist yet; ChangelogRestore.restore).
        self.changes: dict[tuple[bytes, int], bytes] = {}
        #: Findings, dead letters and small batches' status records of events
        #: processed while the previous transaction's commit is pending:
        #: produced once it has committed.
        self.held: list[Outgoing] = []
        #: The commit running in its thread, if any (PendingCommit).
        self.pending: PendingCommit | None = None
        #: The commits' thread (started with the first commit; a new one
        #: after a commit hung in it).
        self._committer: Committer | None = None
        #: The producer has a transaction begun and not yet ended (the
        #: pending one's, or the open one's), since this monotonic time.
        self.begun = False
        self.begun_at = 0.0
        #: Each commit's offsets name this worker (takeover.owner_metadata).
        self._owner = owner_metadata(self.txn_id)
        self.producer: Any = self._new_producer()
        #: Producers given up while a call of theirs still runs in another
        #: thread (PendingCommit): kept referenced, never destroyed under it.
        self._abandoned: list[Any] = []

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
                self.begun = False
                self.last_end = "left to the new producer's init_transactions (aborts it)"
                return
            except KafkaException as exc:
                # The broker is away: nothing can be published meanwhile
                # anyway; a stop signal is bounded by the runner's watchdog.
                log.warning("new transactional producer not ready (%s); retrying", exc)

    @property
    def uncommitted_events(self) -> int:
        """Events processed since the last commit (in the pending commit's
        transaction and the open one)."""
        pending = self.pending
        return self.txn_events + (pending.events if pending is not None else 0)

    def status_now(self, batches: Iterable[list[StatusRecord]]) -> None:
        """A small batch's status records (see ENCODE_AT_ONCE_BELOW),
        produced into the open transaction now, or held with the findings
        while a commit is pending; encoded now either way (a pending status
        read after its key's next batch raises)."""
        deferred, pending = self.deferred, self.pending is not None
        n = 0
        for statuses in batches:
            for sr in statuses:
                # A record deferred by an earlier batch of this transaction
                # is older: it must not be produced after this one.
                deferred.pop(sr.key, None)
                if pending:
                    sr.value  # noqa: B018 -- encoded now, kept in the record
                    self.held.append(sr)
                else:
                    self.produce(sr)
                n += 1
        self._txn_status += n

    def produce(self, r: Outgoing) -> None:
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
                # Positional when there are no headers (see _produce_changelog).
                if headers is None:
                    if partition is None:
                        produce(topic, value, key)
                    else:
                        produce(topic, value, key, partition)
                elif partition is None:
                    produce(topic, value, key, headers=headers)
                else:
                    produce(topic, value, key, partition=partition, headers=headers)
                return
            except BufferError:
                self.producer.poll(0.05)

    def produce_batch_changes(
        self, states: tuple[tuple[bytes, int, bytes], ...], last: dict[int, int]
    ) -> None:
        """A small batch's changelog records, into the open transaction now
        (see ENCODE_AT_ONCE_BELOW); a record kept for the commit from an
        earlier batch of the key is dropped, so the newest goes last. Each
        partition's first record names the position after the batch, which
        the transaction commits at least."""
        batch = {(key, partition): value for key, partition, value in states}
        changes = self.changes
        for kp in batch:
            changes.pop(kp, None)
        self._produce_changelog(batch, {p: offset + 1 for p, offset in last.items()})

    def _produce_changes(self) -> None:
        """The transaction's changelog records kept for the commit, each
        partition's first naming the transaction's offset."""
        self._produce_changelog(self.changes, self.txn_offsets)

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
            # Its arguments positional (topic, value, key, partition: the
            # order of its signature) but for the one record with a header:
            # parsing the keywords partition= and headers=None took ~0.4 µs
            # of the ~1 µs a call cost the loop's thread (docs/performance.md).
            if partition in tagged:
                try:
                    produce(topic, value, key, partition)
                except BufferError:
                    self._send(topic, value, key, partition)
                continue
            tagged.add(partition)
            position = positions.get(partition)
            headers = None if position is None else source_position_header(position)
            try:
                produce(topic, value, key, partition=partition, headers=headers)
            except BufferError:
                self._send(topic, value, key, partition, headers)

    def _produce_status(self, records: list[Outgoing]) -> None:
        """The transaction's status records (the latest per key: SPEC §8),
        as :meth:`produce` would, its calls saved for the usual record
        (the producer's partitioner, no headers)."""
        produce = self.producer.produce
        for r in records:
            if r.headers or r.partition is not None:
                self.produce(r)
                continue
            topic, value, key = r.topic, r.value, r.key
            try:
                produce(topic, value, key)
            except BufferError:
                self._send(topic, value, key)

    def start_commit(self, timeout: float = CALL_TIMEOUT_S, *, final: bool = False) -> None:
        """Put the open transaction's changelog and status records in it and
        start its commit with its offsets (:class:`PendingCommit`); the loop goes
        on while it runs and :meth:`settle` takes its outcome."""
        from confluent_kafka import KafkaException, TopicPartition

        self.last_start = time.monotonic()
        owner = self._owner
        offsets = [
            TopicPartition(self.events_topic, p, o, metadata=owner)
            for p, o in self.txn_offsets.items()
        ]
        deferred = list(self.deferred.values())
        try:
            if not self.begun:
                self.producer.begin_transaction()
                self.begun, self.begun_at = True, time.monotonic()
            self._produce_changes()
            self._produce_status(deferred)
            meta = self.consumer.consumer_group_metadata()
        except KafkaException as exc:
            if final:  # stopping: no new producer, no rewind
                log.debug("final commit failed: %s", exc)
                return
            self._failed(exc, "committing")
            return
        self.pending = PendingCommit(
            self.producer,
            offsets,
            meta,
            timeout,
            timeout + HANG_GRACE_S,
            events=self.txn_events,
            status=len(deferred) + self._txn_status,
        )
        if self._committer is None:
            self._committer = Committer()
        self._committer.submit(self.pending)
        self.clear_txn()

    def settle(self, *, block: bool = False, final: float = 0.0) -> bool | None:
        """The pending commit's outcome once it has one: ``True`` committed
        (or none pending), ``False`` failed (aborted, the rewind arranged,
        unless ``final``), ``None`` still running within its bound (never
        when ``block``). ``final``: the process is stopping, and this is
        the monotonic time by which the commit must have ended. After a
        commit, the events processed meanwhile get their transaction, their
        held outputs produced into it."""
        pending = self.pending
        if pending is None:
            return True
        if block:
            pending.wait(final - time.monotonic() if final else 3_600.0)
        done = pending.done.is_set()
        error = pending.error if done else pending.hung(time.monotonic())
        if not done and error is None and not final:
            return None
        self.pending = None
        if done and error is None:
            self.begun = False
            self.last_end = "committed"
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
        self._failed(error, "committing", events=pending.events + self.txn_events)
        return False

    def _begin_held(self) -> None:
        """The transaction of the events processed while a commit was
        pending: begun, their findings and dead letters produced into it."""
        if not self.txn_open:
            return
        from confluent_kafka import KafkaException

        held, self.held = self.held, []
        try:
            self.producer.begin_transaction()
            self.begun, self.begun_at = True, time.monotonic()
            for r in held:
                self.produce(r)
        except KafkaException as exc:
            self._failed(exc, "sending")

    def commit(self, timeout: float = CALL_TIMEOUT_S, *, final: bool = False) -> bool:
        """Commit what was processed, the pending commit first, and wait for
        it; on failure abort and arrange the rewind (``final``: only try to
        abort, within a second: the process is stopping). Returns whether
        everything committed."""
        from confluent_kafka import KafkaException, TopicPartition

        if not self.eos:
            self.last_start = time.monotonic()
            offsets = [TopicPartition(self.events_topic, p, o) for p, o in self.txn_offsets.items()]
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
            self.last_end = "committed"
            self.metrics.commit_done(time.monotonic() - self.last_start)
            self.clear_txn()
            return True
        # Stopping: both commits within one bound (rdkafka.run.STOP_BOUND_S).
        by = time.monotonic() + 2 * timeout + 1.0 if final else 0.0
        if self.settle(block=True, final=by) is not True:
            return False
        if not self.txn_open:
            return True
        self.start_commit(timeout, final=final)
        if self.pending is None:
            return False  # failed before it could start
        return self.settle(block=True, final=by) is True

    def clear_txn(self) -> None:
        self.txn_open = False
        self.txn_began = 0.0
        self.txn_events = 0
        self.txn_offsets = {}
        self.deferred = {}
        self._txn_status = 0
        self.changes = {}
        self.held = []

    def give_up(self, exc: BaseException, during: str) -> tuple[str, str, bool]:
        """The transaction's half of a failure (``RdkafkaEngine._failed``):
        the open transaction aborted, or its producer replaced when the
        failure calls for it (:func:`~streams.live.rdkafka.commit.failure_action`),
        and the transaction forgotten. Returns the log line's first words,
        the error code, and whether the generation is over."""
        err = exc.args[0] if exc.args else None
        fatal = bool(getattr(err, "fatal", lambda: False)())
        code = code_name(exc)
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
                self.abort()
        self.clear_txn()
        return what, code, stale

    def _which_fence(self) -> str:
        """Which fence struck a fenced producer: the broker aborts a
        transaction open past the transaction timeout (the worker was paused
        or cut off that long), else a newer owner of the transactional id
        fenced it (the next owner of a departed worker's partitions:
        streams/live/rdkafka/takeover.py, or a worker restarted in its slot)."""
        open_for = time.monotonic() - self.begun_at if self.begun_at else 0.0
        if open_for >= self.settings.transaction_timeout:
            return (
                f"producer fenced: the broker aborted its transaction, open {open_for:.0f} s, "
                f"past the {self.settings.transaction_timeout:.0f} s transaction timeout"
            )
        return f"producer fenced by a newer owner of transactional id {self.txn_id}"

    def abort(self) -> None:
        from confluent_kafka import KafkaException

        if not self.eos:
            self.producer.purge()
            return
        if not self.begun:
            return  # only held outputs: nothing at the broker yet
        try:
            self.producer.abort_transaction(CALL_TIMEOUT_S)
            self.begun = False
            self.last_end = "aborted"
        except KafkaException as exc:
            # Fatal (INVALID_TXN_STATE, _FENCED were seen in the cluster
            # tests) or not (a timeout, _CONFLICT): either way no transaction
            # of ours may stay open before a restore waits for the changelog
            # to be stable, and a new producer's init_transactions ends it.
            log.warning("abort failed (%s): replacing the producer", code_name(exc))
            self._replace_producer()
