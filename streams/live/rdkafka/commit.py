"""The rdkafka engine's bounded transactional calls: a transaction's commit
(``send_offsets_to_transaction`` then ``commit_transaction``) run in a thread
of its own and taken for hung past its bound, and what a transactional call
that failed calls for (:func:`failure_action`).

Why apart. These know nothing of the engine's state: a :class:`PendingCommit`
runs against any transactional producer, and :func:`failure_action` is a
function of a librdkafka error code, so each is testable alone
(tests/live/test_rdkafka_engine.py). The transaction unit
(:mod:`streams.live.rdkafka.transaction`) starts them and takes their outcome.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CALL_TIMEOUT_S",
    "FINAL_CALL_S",
    "HANG_GRACE_S",
    "Committer",
    "FailureAction",
    "PendingCommit",
    "code_name",
    "failure_action",
]

#: Bound of one transactional call while running.
CALL_TIMEOUT_S = 10.0
#: Past its own bound, a transactional call is given this long before it is
#: taken for hung (librdkafka issue 5456) and its producer abandoned.
HANG_GRACE_S = 5.0
#: Bound of each transactional call of the last commit when stopping: the
#: two commits (a pending one, then the open transaction's) end within
#: 2 x this + 1 s, inside rdkafka.run.STOP_BOUND_S.
FINAL_CALL_S = 3.0

#: Commit retries of a retriable failure (a broker timing out) before abort.
_COMMIT_RETRIES = 3

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


class _CallHung(Exception):
    """A librdkafka call that did not return within its bound."""


class PendingCommit:
    """A transaction's commit (``send_offsets_to_transaction`` then
    ``commit_transaction``) running in the :class:`Committer`'s thread while the loop goes
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
        """The commit's calls (in the :class:`Committer`'s thread)."""
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


class Committer:
    """The thread that runs the commits (:meth:`PendingCommit.run`), one at a
    time, started once. A thread started per commit held the loop up to
    several ms per commit on a loaded machine (``Thread.start`` waits until
    the new thread has run): 2.8 % of the loop's wall time at 2,000 events/s
    (py-spy, load average 14-17, 2026-12-03). A commit found hung keeps its
    thread: the engine starts a new committer and leaves that one to finish,
    or not (as it left a hung commit's own thread before)."""

    __slots__ = ("_jobs",)

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[PendingCommit] = queue.SimpleQueue()
        threading.Thread(target=self._serve, name="fencewatch-commit", daemon=True).start()

    def submit(self, pending: PendingCommit) -> None:
        self._jobs.put(pending)

    def _serve(self) -> None:
        while True:
            self._jobs.get().run()


def code_name(exc: BaseException) -> str:
    err = exc.args[0] if exc.args else None
    name = getattr(err, "name", None)
    return str(name()) if callable(name) else type(exc).__name__
