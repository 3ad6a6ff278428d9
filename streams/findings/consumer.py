"""Consume the findings topic as typed records: the findings consumer API.

::

    from fencewatch import FindingsConsumer, FindingsSettings, KafkaConnection

    settings = FindingsSettings(KafkaConnection.from_env(), group="pager", follow=True)
    with FindingsConsumer(settings) as findings:
        findings.run(lambda d: page(d.finding, key=d.idempotency_key))

Guarantees (docs/operate.md):

* **Latest revision wins.** A record is delivered only when its revision is
  higher than every revision delivered for its ``finding_id`` in this run, so
  ``(finding_id, revision)`` never reaches the handler twice in one run, and an
  older revision never follows a newer one. ``Delivery.previous_revision``
  says which revision a delivery supersedes (an *update*).
* **At least once across restarts.** With a ``group``, the position is
  committed only past records whose handler returned (or that were skipped):
  a crash re-delivers at most the records after the last commit, so handlers
  use ``Delivery.idempotency_key`` (``finding_id/revision``) to drop repeats.
  Without a group nothing is committed and every run starts from ``start``.
* ``read_committed``: findings of an aborted processor transaction are never seen.
* Bounded memory: the revisions seen are kept for ``max_tracked`` finding ids
  (see :class:`~streams.findings.select.RevisionTracker` for what happens at
  the bound); a read holds at most one batch (``DEFAULT_BATCH`` records, or
  what :meth:`FindingsConsumer.poll_batch` asks for) not handed out yet;
  acknowledgements pending are bounded by what the caller keeps in flight.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Protocol

from streams.core.findings import Finding
from streams.errors import CommitFailed, FencewatchError, TooManyFindings
from streams.findings.contents import record_kind
from streams.findings.select import (
    DEFAULT_MAX_TRACKED,
    FindingFilter,
    NotAFinding,
    RevisionTracker,
    decode_finding_body,
    encode_finding,
)
from streams.kafka.connection import KafkaConnection, require_connection
from streams.kafka.reader import BEGINNING, Bound, TopicRecord
from streams.kafka.tail import TopicTail
from streams.kafka.topics import DEFAULT_FINDINGS_TOPIC

__all__ = [
    "DEFAULT_FINDINGS_TOPIC",
    "CommitFailed",
    "ConsumerStats",
    "Delivery",
    "FindingsConsumer",
    "FindingsSettings",
    "TooManyFindings",
    "TopicReader",
]

#: Findings a bounded read (:meth:`FindingsConsumer.latest`) holds at most.
DEFAULT_MAX_FINDINGS = 1_000_000
#: Records one :meth:`FindingsConsumer.poll_batch` reads at most (by default).
DEFAULT_BATCH = 500
_MAX_KEPT_ERRORS = 5


class TopicReader(Protocol):
    """The port the consumer reads through (:class:`~streams.kafka.tail.TopicTail`)."""

    @property
    def finished(self) -> bool: ...

    def poll(self, timeout: float) -> TopicRecord | None: ...

    def consume(self, max_records: int, timeout: float) -> list[TopicRecord]: ...

    def commit(self, positions: Mapping[int, int], *, asynchronous: bool) -> None: ...

    def commit_results(self) -> list[tuple[int, int, str | None]]: ...

    def settle_commits(self) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Delivery:
    """One finding revision handed to a handler, with where it was read."""

    finding: Finding
    partition: int
    offset: int
    #: Kafka timestamp of the record (epoch ms; -1 if none).
    timestamp_ms: int
    #: The revision of this finding delivered before in this run, if any.
    previous_revision: int | None
    #: :attr:`body`, once asked for (a cache, not part of the value). Not an
    #: ``__init__`` argument, so ``dataclasses.replace`` never carries it to a
    #: delivery of another finding (the copy encodes its own).
    _body: bytes | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def body(self) -> bytes:
        """The finding's JSON (:func:`~streams.findings.select.encode_finding`,
        the bytes of ``Finding.to_json()``), encoded at the first use and then
        shared: the follower writes it as the ``--format jsonl`` line and
        sends it as the webhook body (or a command's stdin), where each use
        encoded it again (~1 CPU µs per finding per use). Two threads asking
        at once each encode the same bytes; either result may stay."""
        body = self._body
        if body is None:
            body = encode_finding(self.finding)
            object.__setattr__(self, "_body", body)  # frozen: the cache only
        return body

    @property
    def update(self) -> bool:
        """A newer revision of a finding already delivered in this run."""
        return self.previous_revision is not None

    @property
    def idempotency_key(self) -> str:
        """``finding_id/revision``: the key a handler de-duplicates on."""
        return f"{self.finding.finding_id}/{self.finding.revision}"


def _delivery_maker() -> Callable[[Finding, int, int, int, int | None, bytes | None], Delivery]:
    """``Delivery(...)`` for the consumer's own reads, at half the cost: a
    frozen dataclass's ``__init__`` sets each field through
    ``object.__setattr__`` (1.6 CPU µs a delivery on a loaded host, 0.7 this
    way, by the slots' own setters). Every field, in declaration order; a
    test compares the two for every field."""
    names = [f.name for f in fields(Delivery)]
    setters = [getattr(Delivery, n).__set__ for n in names]
    if names != ["finding", "partition", "offset", "timestamp_ms", "previous_revision", "_body"]:
        raise AssertionError(f"Delivery's fields changed ({names}): update _delivery_maker")
    s_finding, s_partition, s_offset, s_timestamp, s_previous, s_body = setters
    new = object.__new__

    def make(
        finding: Finding,
        partition: int,
        offset: int,
        timestamp_ms: int,
        previous: int | None,
        body: bytes | None,
    ) -> Delivery:
        d: Delivery = new(Delivery)
        s_finding(d, finding)
        s_partition(d, partition)
        s_offset(d, offset)
        s_timestamp(d, timestamp_ms)
        s_previous(d, previous)
        s_body(d, body)
        return d

    return make


_new_delivery = _delivery_maker()


@dataclass(frozen=True, slots=True)
class FindingsSettings:
    """Where to read and what to keep. ``connection``: the brokers, security
    and timeouts (:class:`~streams.kafka.connection.KafkaConnection`)."""

    connection: KafkaConnection
    topic: str = DEFAULT_FINDINGS_TOPIC
    #: A consumer group that stores the position (None: nothing is committed).
    group: str | None = None
    #: Where to start when the group has no committed position.
    start: Bound = BEGINNING
    #: Keep reading new records; False ends at the end offsets captured at start.
    follow: bool = False
    filter: FindingFilter = field(default_factory=FindingFilter)
    max_tracked: int = DEFAULT_MAX_TRACKED
    #: Seconds between commits of the acknowledged position (and at close).
    commit_interval_s: float = 0.5

    def __post_init__(self) -> None:
        require_connection(self.connection, "FindingsSettings.connection")


@dataclass(slots=True)
class ConsumerStats:
    records: int = 0
    delivered: int = 0
    #: Records whose revision was not newer than one delivered (redelivered or superseded).
    repeated: int = 0
    filtered: int = 0
    #: Records that are not findings, and the first reasons.
    not_findings: int = 0
    errors: list[str] = field(default_factory=list)
    #: What the first record that is not a finding is (see
    #: :func:`streams.findings.contents.record_kind`), if known.
    other_kind: str | None = None
    #: Finding ids the revision tracker forgot at its bound.
    forgotten: int = 0
    #: Asynchronous commits the broker did not store (each is made again),
    #: and the last reason.
    commit_failures: int = 0
    last_commit_failure: str | None = None
    #: Whether the last commit result was a failure (the broker not storing).
    commits_failing: bool = False


class _Positions:
    """Per partition: the offsets handed out and not yet acknowledged, and
    the committable position (every offset before it acknowledged)."""

    def __init__(self) -> None:
        self._open: dict[int, deque[int]] = {}
        self._acked: dict[int, set[int]] = {}
        self.next: dict[int, int] = {}
        #: Per partition, the offset after the last one begun.
        self._read: dict[int, int] = {}

    def begin(self, partition: int, offset: int) -> bool:
        """Hand out ``offset``; False if it was handed out before in this run
        (the client read it again: a fetch position reset after a broker
        restart). Such a record is not begun again: its first reading's
        acknowledgement moves the position, and a second entry for the same
        offset would never be matched (one acknowledgement per offset), so
        the position would stop there for good."""
        if offset < self._read.get(partition, 0):
            return False
        self._read[partition] = offset + 1
        # Not setdefault(partition, deque()): that made a deque per record.
        open_ = self._open.get(partition)
        if open_ is None:
            open_ = self._open[partition] = deque()
        open_.append(offset)
        return True

    def ack(self, partition: int, offset: int) -> None:
        self.ack_many(partition, (offset,))

    def ack_many(self, partition: int, offsets: Iterable[int]) -> None:
        """Acknowledge ``offsets`` of ``partition`` (in any order): the
        position moves past every acknowledged offset at the head."""
        pending = self._open.get(partition)
        if not pending:
            return
        done = self._acked.setdefault(partition, set())
        done.update(offsets)
        if pending[0] not in done:
            return  # the head is still out: nothing moves (answers out of order)
        popleft, discard = pending.popleft, done.discard
        o = pending[0]
        while pending and pending[0] in done:
            o = popleft()
            discard(o)
        self.next[partition] = o + 1

    @property
    def in_flight(self) -> int:
        # Acknowledged behind one that is not: still open, but not in flight.
        return sum(len(d) for d in self._open.values()) - sum(len(s) for s in self._acked.values())


class FindingsConsumer:
    """Reads findings; deliver them with :meth:`run`, by iterating (each
    item is acknowledged when the next is asked for), or with
    :meth:`poll` and :meth:`ack` (acks may come from other threads, in any
    order). Use as a context manager or call :meth:`close`."""

    def __init__(
        self,
        settings: FindingsSettings,
        *,
        tail: Callable[..., TopicReader] = TopicTail,
        on_commit_state: Callable[[str | None], object] | None = None,
    ) -> None:
        """``on_commit_state`` is called on the polling thread when the broker stops
        storing this group's positions (with the reason) and when it stores them
        again (with None): once per change, never once per failed commit."""
        self.settings = settings
        self.stats = ConsumerStats()
        self._on_commit_state = on_commit_state
        self._tracker = RevisionTracker(settings.max_tracked)
        #: The filter keeps every finding (the follower's default): not asked
        #: per record.
        self._keep_all = settings.filter == FindingFilter()
        #: Bounded reads: finding id -> a newer revision the filter refused.
        self._superseded: dict[str, int] = {}
        self._positions = _Positions()
        #: Deliveries read (a batch) and not handed out yet by poll().
        self._ready: deque[Delivery] = deque()
        #: Acknowledged deliveries, a sequence per put (ack_all): the
        #: deliveries themselves, not a (partition, offset) pair made for
        #: each (the window acknowledges thousands a second). A deque: its
        #: append and popleft are atomic, and draining it raises nothing when
        #: it is empty (queue.Empty was raised at each drain).
        self._acks: deque[Sequence[Delivery]] = deque()
        #: Positions sent to the broker, and those it confirmed stored.
        self._committed: dict[int, int] = {}
        self._stored: dict[int, int] = {}
        self._last_commit = time.monotonic()
        self._stopping = False
        self._closed = False
        self._tail = tail(
            settings.connection,
            settings.topic,
            group=settings.group,
            start=settings.start,
            stop_at_end=not settings.follow,
        )

    # -- reading --------------------------------------------------------------

    @property
    def finished(self) -> bool:
        """A bounded read (``follow=False``) has reached its end snapshot and
        handed out every delivery read."""
        return self._tail.finished and not self._ready

    @property
    def stopping(self) -> bool:
        return self._stopping

    def stop(self) -> None:
        """Make :meth:`run` and iteration return after the current record
        (safe from a signal handler or another thread)."""
        self._stopping = True

    def poll(self, timeout: float = 1.0) -> Delivery | None:
        """The next finding revision to deliver, or None if none came within
        ``timeout``. Records not delivered (filtered, not newer, not a
        finding) are acknowledged here; a delivery must be :meth:`ack`-ed."""
        # Read a batch at a time (one call into the client per batch, not
        # per record) and hand it out one by one; what is not handed out yet
        # waits in _ready, begun but not acknowledged (so not committed).
        ready = self._ready
        if not ready:
            ready.extend(self._read_batch(DEFAULT_BATCH, timeout))
            if not ready:
                return None
        return ready.popleft()

    def poll_batch(self, max_records: int = DEFAULT_BATCH, timeout: float = 1.0) -> list[Delivery]:
        """The finding revisions to deliver among the next (at most)
        ``max_records`` records, in read order; empty if none came within
        ``timeout``. As :meth:`poll`, one batch at a time: one read from the
        client, not one per record. Each delivery must be acknowledged
        (:meth:`ack` or :meth:`ack_all`)."""
        ready = self._ready
        if ready:  # left by poll(): handed out first, in order
            n = min(max_records, len(ready))
            return [ready.popleft() for _ in range(n)]
        return self._read_batch(max_records, timeout)

    def _read_batch(self, max_records: int, timeout: float) -> list[Delivery]:
        deadline = time.monotonic() + timeout
        positions = self._positions
        while True:
            self._drain_acks()
            self.maybe_commit()
            left = deadline - time.monotonic()
            recs = self._tail.consume(max_records, max(left, 0.0))
            if not recs:
                return []
            out: list[Delivery] = []
            for rec in recs:
                if not positions.begin(rec.partition, rec.offset):
                    self.stats.records += 1
                    self.stats.repeated += 1
                    continue
                delivery = self._admit(rec)
                if delivery is None:
                    positions.ack(rec.partition, rec.offset)
                else:
                    out.append(delivery)
            if out or left <= 0:
                return out

    def _admit(self, rec: TopicRecord) -> Delivery | None:
        st = self.stats
        st.records += 1
        try:
            finding, body = decode_finding_body(rec.value)
        except NotAFinding as exc:
            st.not_findings += 1
            if st.not_findings == 1:
                st.other_kind = record_kind(rec.value)
            if len(st.errors) < _MAX_KEPT_ERRORS:
                st.errors.append(f"{self.settings.topic}/{rec.partition}@{rec.offset}: {exc}")
            return None
        if not self._keep_all and not self.settings.filter.accepts(finding):
            # Only the kind can leave the filter between revisions (severity
            # never drops, the workflow never changes): a duplicate_commit
            # that escalated to conflicting_commit, under --kind.
            prev = self._tracker.previous(finding.finding_id)
            escalated = prev is not None and finding.revision > prev
            if not (escalated and self.settings.follow):
                st.filtered += 1
                if escalated:
                    # A bounded read's latest() must not show the older one.
                    self._superseded[finding.finding_id] = finding.revision
                return None
            # Following: a finding already delivered is followed through its
            # escalation, as an update, so the handler (a pager) learns of it.
        new, previous = self._tracker.offer(finding.finding_id, finding.revision)
        st.forgotten = self._tracker.forgotten
        if not new:
            st.repeated += 1
            return None
        st.delivered += 1
        return _new_delivery(finding, rec.partition, rec.offset, rec.timestamp_ms, previous, body)

    def ack(self, delivery: Delivery) -> None:
        """The handler is done with ``delivery``: its position may be
        committed. Thread-safe."""
        self._acks.append((delivery,))

    def ack_all(self, deliveries: Sequence[Delivery]) -> None:
        """:meth:`ack` for each of ``deliveries``, in one hand-off. Thread-safe.
        The sequence is kept until the polling thread applies it: the caller
        must not change it after (a tuple, or a list it lets go)."""
        if deliveries:
            self._acks.append(deliveries)

    def _drain_acks(self) -> None:
        ack_many = self._positions.ack_many
        acks = self._acks
        while acks:
            done = acks.popleft()  # the polling thread is the only taker
            # By partition: one position update per partition and hand-off
            # (a window's answers come back out of order, many at a time).
            by_partition: dict[int, list[int]] = {}
            for d in done:
                p = d.partition
                offsets = by_partition.get(p)
                if offsets is None:
                    by_partition[p] = [d.offset]
                else:
                    offsets.append(d.offset)
            for p, offsets in by_partition.items():
                ack_many(p, offsets)

    @property
    def in_flight(self) -> int:
        """Records handed out and not acknowledged yet."""
        self._drain_acks()
        return self._positions.in_flight - len(self._ready)

    # -- positions ------------------------------------------------------------

    def maybe_commit(self, *, force: bool = False) -> None:
        """Commit the acknowledged position if the commit interval has passed
        (or ``force``: synchronously). A no-op without a group."""
        now = time.monotonic()
        if not force and now - self._last_commit < self.settings.commit_interval_s:
            return
        self._last_commit = now
        self._drain_acks()
        for p, o, reason in self._tail.commit_results():
            if reason is None:
                if o < self._stored.get(p, o):
                    # An older commit answered after a newer one was stored:
                    # the client retried it (the coordinator moved in a broker
                    # restart), so it landed last and the broker now holds the
                    # older position. Commit the newer one again (else a
                    # restart would repeat what came between them).
                    self._committed.pop(p, None)
                self._stored[p] = o
            else:
                # Not stored (a broker outage): commit that position again.
                self._committed.pop(p, None)
                self.stats.commit_failures += 1
                self.stats.last_commit_failure = reason
            failing = reason is not None
            if failing != self.stats.commits_failing:
                self.stats.commits_failing = failing
                # At close the outcome is said once, by close() itself.
                if self._on_commit_state is not None and not force:
                    self._on_commit_state(reason)
        # At close, every position not confirmed stored, synchronously: an
        # asynchronous commit may still be failing unseen.
        sent = self._stored if force else self._committed
        changed = {p: o for p, o in self._positions.next.items() if sent.get(p) != o}
        if not changed:
            return
        self._tail.commit(changed, asynchronous=not force)
        self._committed.update(changed)
        if force:
            self._stored.update(changed)

    # -- delivery styles ------------------------------------------------------

    def run(self, handler: Callable[[Delivery], object], *, idle: float = 0.5) -> ConsumerStats:
        """Call ``handler`` for each delivery, acknowledging after it returns;
        until the bounded read ends (``follow=False``) or :meth:`stop`. An
        exception from the handler propagates (its record is not acknowledged,
        so it is delivered again after a restart)."""
        for delivery in self._iterate(idle):
            handler(delivery)
            self.ack(delivery)
        return self.stats

    def __iter__(self) -> Iterator[Delivery]:
        # The loop body is the handler: an item is acknowledged when the next
        # one is asked for, so a crash inside the body leaves it uncommitted.
        for delivery in self._iterate(0.5):
            yield delivery
            self.ack(delivery)

    def _iterate(self, idle: float) -> Iterator[Delivery]:
        while not self._stopping and not self.finished:
            d = self.poll(idle)
            if d is not None:
                yield d

    def latest(self, *, max_findings: int = DEFAULT_MAX_FINDINGS) -> list[Finding]:
        """A bounded read's latest revision of each finding that the filter
        accepts (the filter applies to the latest revision: a finding whose
        newer revision changed kind out of ``kinds`` is left out), in arrival
        order of each finding's first record. Raises :class:`TooManyFindings`
        past ``max_findings`` distinct ids (rather than forget some)."""
        if self.settings.follow:
            raise ValueError("latest() needs a bounded read (follow=False)")
        held: dict[str, Finding] = {}
        for d in self:
            if d.finding.finding_id not in held and len(held) >= max_findings:
                raise TooManyFindings(
                    f"more than {max_findings} findings on {self.settings.topic}; "
                    "narrow the read with filters, or raise the bound"
                )
            cur = held.get(d.finding.finding_id)
            # Past the tracker's bound an older revision may come through again.
            if cur is None or d.finding.revision > cur.revision:
                held[d.finding.finding_id] = d.finding
        gone = self._superseded
        return [f for f in held.values() if f.revision > gone.get(f.finding_id, 0)]

    # -- lifecycle ------------------------------------------------------------

    def close(self) -> None:
        """Commit what was acknowledged (synchronously) and close; idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            # Learn first which asynchronous commits were stored: a position the
            # broker stored before it went away needs no commit now (which
            # would fail and say a restart repeats what it would not).
            self._tail.settle_commits()
            self.maybe_commit(force=True)
        except FencewatchError as exc:
            action = f"committing the position of group {self.settings.group}"
            reason = str(exc).removeprefix(f"{action}: ")
            raise CommitFailed(
                f"{action} failed ({reason}): a restart delivers again what came "
                "after the last committed position"
            ) from None
        finally:
            self._tail.close()

    def __enter__(self) -> FindingsConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
