"""The topic audit (SPEC §6, ``fencewatch audit --topic``) as a library call:
read a topic once between two bounds, feed every record to a
:class:`~streams.core.replay.Replay`, and say what the read covered.

::

    audit = audit_topic(KafkaConnection("127.0.0.1:9092"), "ownership.events")
    audit.replay.latest_findings()

* A broker lost mid-read is waited for (the reader's ``timeout``); if it stays
  away, the read ends, :attr:`TopicAudit.lost` says why and
  :attr:`TopicAudit.reached` where each partition got to (resume there). A
  broker unreachable before the read starts raises
  :class:`~streams.kafka.errors.BrokerUnreachable`, as does the reader.
* Partitions whose early records were deleted are in
  :attr:`TopicAudit.missing`, and the workflow keys read from them in
  :attr:`TopicAudit.keys` (their findings may lack earlier evidence).
* Records and not one valid event, the first a finding or a status record:
  :attr:`TopicAudit.holds` names what the topic holds (fencewatch's own output).
* ``interrupt`` (the CLI's Ctrl-C) makes the read stop between two records;
  ``strict`` stops it at the first invalid record.
* ``partitions`` reads those partitions alone (a shard: ``--partitions``,
  ``--jobs``); one the topic does not have is a ``ValueError`` naming it.
* Invalid records are listed in (partition, offset) order once the read
  ends, not in the order partitions happened to interleave: the same list
  however the partitions were read (one process or shards merged).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from typing import Any

import orjson

from streams.audit.ports import Interruptible, TopicProgress
from streams.core.replay import Invalid, Replay
from streams.kafka.connection import KafkaConnection
from streams.kafka.reader import (
    BEGINNING,
    END,
    Bound,
    Offset,
    PartitionOffsets,
    Timestamp,
    TopicRecord,
    Truncated,
)
from streams.report.coverage import INTERRUPTED, Coverage, MissingHistory
from streams.report.source import Source

__all__ = ["TopicAudit", "audit_topic", "invalid_order"]

#: Records between two progress updates (an update of the terminal display
#: takes a lock and formats; per record it would cost more than the detector).
UPDATE_EVERY = 256


class TopicAudit:
    """One audit of ``topic`` into ``replay``; :meth:`run` reads, and the
    attributes say what was read: where each partition started (``begin``),
    was to stop (``stop``) and got to (``reached``), the partitions with
    deleted history (``missing``) and the keys read from them (``keys``),
    and why the read ended early (``lost``), if it did. The state is kept as
    the read goes, so it is there after an exception too."""

    __slots__ = (
        "begin",
        "conn",
        "end",
        "holds",
        "interrupted",
        "keys",
        "lost",
        "missing",
        "partitions",
        "reached",
        "records",
        "replay",
        "start",
        "stop",
        "strict_stop",
        "topic",
    )

    def __init__(
        self,
        conn: KafkaConnection,
        topic: str,
        *,
        replay: Replay | None = None,
        start: Bound = BEGINNING,
        end: Bound = END,
        partitions: Collection[int] | None = None,
    ) -> None:
        self.conn = conn
        #: The partitions to read (None: every partition of the topic).
        self.partitions = None if partitions is None else frozenset(partitions)
        self.topic = topic
        self.replay = replay if replay is not None else Replay()
        self.start = start
        self.end = end
        self.begin: dict[int, int] = {}
        self.stop: dict[int, int] = {}
        self.reached: dict[int, int] = {}
        self.missing: tuple[MissingHistory, ...] = ()
        self.keys: dict[str, int] = {}
        #: Why the read ended before its end bound (broker unreachable), or None.
        self.lost: str | None = None
        self.interrupted = False
        #: The read stopped at the first invalid record (``strict``).
        self.strict_stop = False
        #: ``"findings"`` or ``"status"``: records and no valid event, the
        #: first of them fencewatch's own output of that kind.
        self.holds: str | None = None
        #: Records read.
        self.records = 0

    @property
    def partial(self) -> bool:
        return self.lost is not None or self.interrupted

    def coverage(self, interrupted: bool | None = None) -> Coverage | None:
        """What the report says about the read's coverage; None when whole."""
        if interrupted is None:
            interrupted = self.interrupted
        partial = self.lost or (INTERRUPTED if interrupted else None)
        if partial is None and not self.missing:
            return None
        nexts = dict(self.reached) if partial is not None and self.reached else None
        return Coverage(partial=partial, next_offsets=nexts, missing=self.missing, keys=self.keys)

    def bounds(self) -> dict[int, tuple[int, int]]:
        """Per partition read: the offset the read began at and the one it
        reached (its end bound, unless the read stopped early)."""
        return {p: (b, self.reached.get(p, b)) for p, b in sorted(self.begin.items())}

    def source(self, version: str) -> Source:
        """What was read, for the JSON report (``"source"``): the bounds per
        partition, the bounds asked for, the detector's settings and
        ``version`` (fencewatch's); what merging shard reports checks and joins."""
        config = self.replay.detector.config
        flagged = {f.workflow_key for f in self.replay.latest.values()}
        return Source(
            topic=self.topic,
            bounds=self.bounds(),
            start=_bound_doc(self.start, self.begin),
            end=_bound_doc(self.end, self.begin),
            settings={
                "max_event_bytes": self.replay.max_event_bytes,
                "max_events_per_key": config.max_events_per_key,
                "max_findings_per_key": config.max_findings_per_key,
            },
            version=version,
            history_keys={k: p for k, p in self.keys.items() if k in flagged},
        )

    def latest(self) -> dict[str, dict[str, Any]]:
        """The latest revision of each finding, by finding id (JSON documents)."""
        return {f.finding_id: f.to_dict() for f in self.replay.latest_findings()}

    def run(
        self,
        *,
        strict: bool = False,
        progress: TopicProgress | None = None,
        interrupt: Interruptible | None = None,
        timeout: float | None = None,
    ) -> TopicAudit:
        """Read the topic from ``start`` to ``end`` into the replay. Raises
        the reader's errors (:class:`~streams.errors.BrokerError`,
        ``ValueError`` for a bound) when the read cannot start."""
        from streams.kafka.errors import BrokerUnreachable
        from streams.kafka.reader import iter_topic

        begin, stop, reached, source = self.begin, self.stop, self.reached, self.topic

        asked = self.partitions

        def plan(b: dict[int, int], e: dict[int, int]) -> None:
            if asked is not None and not asked <= b.keys():
                raise ValueError(_no_partition(source, sorted(asked - b.keys())))
            begin.update(b)
            stop.update(e)
            reached.update(b)
            if progress is not None:
                total = sum(max(0, e[p] - b[p]) for p in b)
                progress.topic(source, total, len(b))

        def report() -> None:
            # Offsets, not counts, measure the way: records of aborted
            # transactions and markers are skipped.
            if progress is not None:
                done = sum(reached[p] - begin[p] for p in reached)
                finished = sum(1 for p in reached if reached[p] >= stop[p])
                progress.records(done, finished)

        def truncated(parts: list[Truncated]) -> None:
            self.missing = tuple(
                MissingHistory(source, t.partition, t.asked, t.log_start, t.missing) for t in parts
            )

        records = iter_topic(
            self.conn,
            source,
            start=self.start,
            end=self.end,
            timeout=timeout,
            on_plan=plan,
            on_truncated=truncated,
            only_partitions=asked,
        )
        step = _stepper(records, interrupt)
        replay = self.replay
        # Partitions with deleted history (known before the first record).
        gapped: frozenset[int] = frozenset()
        first: bytes | None = None
        n = 0
        while True:
            try:
                rec = step()
            except BrokerUnreachable as exc:
                if not begin:
                    raise  # before the read started: nothing to report
                self.lost = f"broker unreachable: {exc}"
                break
            if rec is None:
                break
            if n == 0:
                first = rec.value
                gapped = frozenset(m.partition for m in self.missing)
            before = replay.invalid_count
            replay.feed(
                rec.value or b"", key=rec.key, offset=rec.offset, source=f"{source}/{rec.partition}"
            )
            n += 1
            self.records = n
            if strict and replay.invalid_count != before:
                self.strict_stop = True
                break
            if rec.partition in gapped:
                wkey = _key_of(rec.key, rec.value)
                if wkey is not None and wkey in replay.states:
                    self.keys[wkey] = rec.partition
            reached[rec.partition] = min(rec.offset + 1, stop.get(rec.partition, rec.offset + 1))
            if n % UPDATE_EVERY == 0:
                report()
        self.interrupted = interrupt is not None and interrupt.requested
        if stop and not self.interrupted and self.lost is None and not self.strict_stop:
            reached.update(stop)
        if stop:
            report()
        if n and replay.invalid_count == replay.records and not (self.partial or self.strict_stop):
            self.holds = _holds(first)
        replay.invalid.sort(key=invalid_order)
        return self


def audit_topic(
    conn: KafkaConnection,
    topic: str,
    *,
    replay: Replay | None = None,
    start: Bound = BEGINNING,
    end: Bound = END,
    strict: bool = False,
    progress: TopicProgress | None = None,
    interrupt: Interruptible | None = None,
    timeout: float | None = None,
) -> TopicAudit:
    """Audit ``topic`` from ``start`` to ``end`` (default: the whole topic as
    it is when the read starts) and return what was read and found."""
    audit = TopicAudit(conn, topic, replay=replay, start=start, end=end)
    return audit.run(strict=strict, progress=progress, interrupt=interrupt, timeout=timeout)


def _bound_doc(bound: Bound, read: Collection[int]) -> Any:
    """A bound as JSON; per-partition offsets only for the partitions
    ``read`` (each shard names its own; the merge joins them)."""
    if isinstance(bound, Offset):
        return {"offset": bound.value}
    if isinstance(bound, PartitionOffsets):
        return {"offsets": {str(p): o for p, o in sorted(bound.offsets.items()) if p in read}}
    if isinstance(bound, Timestamp):
        return {"time_ms": bound.ms}
    return "beginning" if bound == BEGINNING else "end"


def invalid_order(inv: Invalid) -> tuple[int, int]:
    """An invalid record's place in a topic audit's list: (partition, offset).
    Its ``source`` is ``topic/partition``."""
    return int(inv.source.rpartition("/")[2]), inv.offset


def _no_partition(topic: str, absent: list[int]) -> str:
    """``topic T has no partition 7`` (--partitions names one it lacks)."""
    which = ", ".join(map(str, absent))
    return f"topic {topic} has no partition{'s' if len(absent) > 1 else ''} {which}"


def _stepper(
    records: Iterator[TopicRecord], interrupt: Interruptible | None
) -> Callable[[], TopicRecord | None]:
    if interrupt is None:
        return lambda: next(records, None)
    return lambda: interrupt.call(next, records, None)


def _key_of(key: bytes | None, value: bytes | None) -> str | None:
    """The workflow key of a record (its Kafka key, else its value's field)."""
    if key is not None:
        return key.decode("utf-8", "replace")
    try:
        doc = orjson.loads(value or b"")
    except orjson.JSONDecodeError:
        return None
    wkey = doc.get("workflow_key") if isinstance(doc, dict) else None
    return wkey if isinstance(wkey, str) else None


def _holds(first: bytes | None) -> str | None:
    """``"findings"`` or ``"status"`` when the first record is fencewatch's
    own output of that kind (someone pointed the audit at it), else None."""
    from streams.core.status import WorkflowStatus
    from streams.findings.select import NotAFinding, decode_finding

    try:
        decode_finding(first)
        return "findings"
    except NotAFinding:
        pass
    try:
        WorkflowStatus.from_dict(orjson.loads(first or b""))
    except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError, ValueError):
        return None
    return "status"
