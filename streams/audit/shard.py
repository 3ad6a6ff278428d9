"""A topic audit over several processes (``fencewatch audit --topic T --jobs
N``): the topic's partitions are split over N processes (this one and N - 1
workers), each reads its partitions into its own replay, and this process
merges the replays into the one a single process would have built, so that
every report format (HTML timelines too) renders exactly as a single
process's.

Keys never span partitions (the events topic is keyed by workflow key), so
partitions are independent shards: the merge is a union of the workers'
key states and findings, their counts added.

::

    audit = run_jobs(conn, "ownership.events", jobs=4, config=DetectorConfig())
    render_json(audit.replay, source=...)

* Workers are forked when this process has no thread but the caller's
  (the plan's Kafka client is closed by then), spawned otherwise: a fork
  copies no other thread, so the locks librdkafka's threads held would stay
  held in the child (:func:`_start_context`). Each worker makes its own
  client. The pool is :class:`concurrent.futures.ProcessPoolExecutor`.
* The split: the parent resolves the bounds once (as the reader does) and
  deals the partitions out largest first, each to the worker with the
  fewest records so far.
* The parent reads the first share itself while the workers read theirs
  (one worker fewer to start, one result fewer pickled across); a worker
  that fails stops the parent's read too.
* Progress: each process writes its figures to shared memory; the parent
  sums them for the one display (:class:`~streams.audit.ports.TopicProgress`).
* Ctrl-C: workers ignore SIGINT; the parent's ``interrupt`` sets an event
  that every worker checks between records (every :data:`CHECK_EVERY`),
  and each returns what it read, marked interrupted.
* Memory: each worker holds its partitions' key states (bounded as in one
  process: ``max_events_per_key``), then hands them to the parent, which
  holds them all, as a single process would, while they are pickled across
  (at the peak a worker's share twice).
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import multiprocessing.context
import os
import signal
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from streams.audit.ports import Interruptible, TopicProgress
from streams.audit.topic import TopicAudit, invalid_order
from streams.core.destinations import Destination
from streams.core.detector import Detector, DetectorConfig, KeyState
from streams.core.findings import Finding
from streams.core.health import Health
from streams.core.replay import Invalid, Replay
from streams.errors import WorkerDied
from streams.kafka.connection import KafkaConnection
from streams.kafka.reader import BEGINNING, END, Bound, iter_topic
from streams.report.coverage import MissingHistory

__all__ = [
    "CHECK_EVERY",
    "MergedReplay",
    "WorkerDied",
    "parse_partitions",
    "plan_partitions",
    "run_jobs",
    "split",
]

_T = TypeVar("_T")

#: Records between two looks at the stop event in a worker (a look is a
#: lock round trip; per record it would cost more than the detector).
CHECK_EVERY = 1024
#: Seconds between two progress updates of the parent's display.
_TICK = 0.2
#: Shared figures per worker: total records, partitions, records done,
#: partitions done, planned (1 once the worker resolved its bounds).
_FIGURES = 5
#: The report's counts made over the key states (Replay.summary).
_STATE_COUNTS = ("redeliveries_dropped", "workflows", "evidence_evicted", "late_beyond_horizon")

#: Longest --partitions text accepted (a list of a few thousand partitions).
MAX_PARTITIONS_TEXT = 65536


def parse_partitions(text: str) -> tuple[int, ...]:
    """``0,3-5`` -> ``(0, 3, 4, 5)``: partitions and inclusive ranges,
    sorted. Raises ValueError naming the piece that is not one."""
    if len(text) > MAX_PARTITIONS_TEXT:
        raise ValueError(f"--partitions is over {MAX_PARTITIONS_TEXT} characters")
    out: set[int] = set()
    for piece in text.split(","):
        piece = piece.strip()
        lo_text, dash, hi_text = piece.partition("-")
        try:
            lo = int(lo_text)
            hi = int(hi_text) if dash else lo
        except ValueError:
            raise ValueError(
                f"--partitions: not a partition or a range (P or P-Q, integers >= 0): {piece!r}"
            ) from None
        if lo < 0 or hi < lo:
            raise ValueError(f"--partitions: {piece!r} is not a range of partitions >= 0")
        if hi - lo >= 1 << 20:
            raise ValueError(f"--partitions: {piece!r} names over a million partitions")
        overlap = out.intersection(range(lo, hi + 1))
        if overlap:
            raise ValueError(f"--partitions: partition {min(overlap)} given twice in {text!r}")
        out.update(range(lo, hi + 1))
    return tuple(sorted(out))


class _Planned(Exception):
    """Raised from the reader's plan callback: the bounds are known, stop."""

    def __init__(self, begin: dict[int, int], stop: dict[int, int]) -> None:
        super().__init__()
        self.begin = begin
        self.stop = stop


def plan_partitions(
    conn: KafkaConnection,
    topic: str,
    *,
    start: Bound = BEGINNING,
    end: Bound = END,
    partitions: Collection[int] | None = None,
    timeout: float | None = None,
) -> dict[int, int]:
    """Records (by offsets) per partition between the bounds, as the reader
    resolves them, without reading a record. Raises the reader's errors, and
    ValueError for a partition the topic does not have."""

    def plan(b: dict[int, int], e: dict[int, int]) -> None:
        raise _Planned(b, e)

    try:
        for _ in iter_topic(
            conn,
            topic,
            start=start,
            end=end,
            timeout=timeout,
            on_plan=plan,
            only_partitions=partitions,
        ):
            break  # never reached: the plan comes before the first record
    except _Planned as planned:
        found = planned.begin.keys()
        absent = sorted(set(partitions or ()) - found)
        if absent:
            names = ", ".join(map(str, absent))
            raise ValueError(
                f"topic {topic} has no partition{'s' if len(absent) > 1 else ''} {names}"
            ) from None
        return {p: max(0, planned.stop[p] - b) for p, b in planned.begin.items()}
    return {}


def split(sizes: Mapping[int, int], jobs: int) -> list[list[int]]:
    """The partitions dealt to at most ``jobs`` workers, largest first, each
    to the worker with the fewest records so far (ties: the lower worker).
    No worker is left without a partition; each list is sorted."""
    n = max(1, min(jobs, len(sizes)))
    shares: list[list[int]] = [[] for _ in range(n)]
    loads = [0] * n
    for p in sorted(sizes, key=lambda p: (-sizes[p], p)):
        i = min(range(n), key=lambda i: (loads[i], i))
        shares[i].append(p)
        loads[i] += sizes[p]
    return [sorted(s) for s in shares if s]


class MergedReplay:
    """The replay of several workers' partitions, as one: their latest
    findings, health and counts joined (the keys are disjoint, so a count or
    a sink's figures are the sum of each worker's). The key states are
    joined only when kept (``keep_states``: the HTML timelines and
    --what-if-fenced read the evidence); otherwise the workers send what the
    text and JSON reports need of them (each finding's health, the
    per-state counts), not the states, whose pickling cost more than the
    second core saved (measured: 2.7 s of a 200,000-event topic's 5 s).

    It holds the joined :class:`Replay` rather than extending it: the core is
    compiled (mypyc), and an interpreted class cannot inherit from a
    compiled one. What is not merged here is the joined replay's."""

    def __init__(self, detector: Detector, *, max_event_bytes: int) -> None:
        self.replay = Replay(detector, max_event_bytes=max_event_bytes)
        self._sinks: dict[str, list[int]] = {}
        self._health: dict[str, Health] = {}
        self._counts = dict.fromkeys(_STATE_COUNTS, 0)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.replay, name)

    def absorb(self, part: _Result) -> None:
        r = self.replay
        r.states.update((k, KeyState.from_bytes(b)) for k, b in part.states.items())
        self._health.update((t[0], Health(*t)) for t in part.health)
        for k, v in zip(_STATE_COUNTS, part.state_counts, strict=True):
            self._counts[k] += v
        r.latest.update(part.latest)
        r.invalid.extend(Invalid(*t) for t in part.invalid)
        r.invalid_count += part.invalid_count
        r.records += part.records
        r.revisions += part.revisions
        for d in map(_unflat_destination, part.destinations):
            t = self._sinks.setdefault(d.sink, [0, 0, 0])
            t[0] += d.stale_rejected
            t[1] += d.stale_committed
            t[2] += d.current_committed

    def finish(self) -> None:
        """Invalid records in a topic audit's order, to its bound."""
        r = self.replay
        r.invalid.sort(key=invalid_order)
        del r.invalid[r.max_invalid_kept :]

    def health(self) -> list[Health]:
        if self.replay.states:
            return self.replay.health()
        return [self._health[f.finding_id] for f in self.replay.latest_findings()]

    def summary(self, health: list[Health] | None = None) -> dict[str, Any]:
        out = self.replay.summary(self.health() if health is None else health)
        if not self.replay.states:  # the workers counted over their states
            out.update(self._counts)
        return out

    def destinations(self) -> list[Destination]:
        order = {"ignores_fence": 0, "enforces_fence": 1, "unproven": 2}
        out = [Destination(s, *t) for s, t in self._sinks.items()]
        out.sort(key=lambda d: (order[d.verdict.value], d.sink))
        return out


def _flat(record: Any) -> tuple[Any, ...]:
    """A dataclass record's field values, in order (``cls(*values)`` makes it again)."""
    return tuple(getattr(record, f.name) for f in dataclasses.fields(record))


def _unflat_destination(values: tuple[Any, ...]) -> Destination:
    return Destination(*values)


@dataclass(frozen=True, slots=True)
class _Task:
    index: int
    conn: KafkaConnection
    topic: str
    partitions: tuple[int, ...]
    start: Bound
    end: Bound
    #: DetectorConfig's fields (see _flat).
    config: tuple[Any, ...]
    max_event_bytes: int
    timeout: float | None
    keep_states: bool


@dataclass(frozen=True, slots=True)
class _Result:
    """What a worker read (a :class:`TopicAudit`'s state and its replay's).
    The core's records travel flattened (:func:`_flat`; key states in their
    changelog encoding): the compiled core's frozen dataclasses and key
    states do not survive pickling (the frozen check refuses the unpickler's
    assignments)."""

    states: dict[str, bytes]
    health: list[tuple[Any, ...]]
    #: The summary's counts over the worker's states (_STATE_COUNTS' order).
    state_counts: tuple[int, ...]
    latest: dict[str, Finding]
    invalid: list[tuple[Any, ...]]
    invalid_count: int
    records: int
    revisions: int
    destinations: list[tuple[Any, ...]]
    begin: dict[int, int]
    stop: dict[int, int]
    reached: dict[int, int]
    missing: tuple[MissingHistory, ...]
    keys: dict[str, int]
    lost: str | None
    interrupted: bool
    holds: str | None
    n_records: int


# Worker process state, set by _init (a spawned worker shares nothing else).
_FIG: Any = None
_STOP: Any = None


def _init(figures: Any, stop: Any) -> None:
    global _FIG, _STOP
    # The parent handles Ctrl-C (the whole process group gets it) and tells
    # the workers through the stop event.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _FIG, _STOP = figures, stop


class _SharedProgress:
    """A worker's :class:`TopicProgress`: its figures in shared memory."""

    def __init__(self, index: int) -> None:
        self._base = index * _FIGURES

    def topic(self, name: str, total_records: int, partitions: int) -> None:
        b = self._base
        _FIG[b], _FIG[b + 1], _FIG[b + 4] = total_records, partitions, 1

    def records(self, done: int, partitions_done: int) -> None:
        b = self._base
        _FIG[b + 2], _FIG[b + 3] = done, partitions_done


class _StopEvent:
    """A worker's :class:`Interruptible`: the parent's stop event, looked at
    every :data:`CHECK_EVERY` calls."""

    def __init__(self) -> None:
        self.requested = False
        self._n = 0

    def call(self, fn: Callable[..., _T], *args: Any) -> _T | None:
        # The first call looks too: a Ctrl-C while the workers start up
        # stops them before their first record.
        if self._n % CHECK_EVERY == 0 and _STOP.is_set():
            self.requested = True
        self._n += 1
        if self.requested:
            return None
        return fn(*args)


def _work(task: _Task) -> _Result:
    """One worker's shard: a topic audit of its partitions."""
    from streams.audit.files import batch_gc

    with batch_gc():
        audit = _read(task, _SharedProgress(task.index), _StopEvent())
    return _result(audit, task.keep_states)


def _read(task: _Task, progress: TopicProgress, interrupt: Interruptible) -> TopicAudit:
    """A topic audit of the task's partitions, into a replay of its own."""
    replay = Replay(Detector(DetectorConfig(*task.config)), max_event_bytes=task.max_event_bytes)
    audit = TopicAudit(
        task.conn,
        task.topic,
        replay=replay,
        start=task.start,
        end=task.end,
        partitions=task.partitions,
    )
    return audit.run(progress=progress, interrupt=interrupt, timeout=task.timeout)


def _result(audit: TopicAudit, keep_states: bool) -> _Result:
    """What the merge takes of a shard's audit (see :class:`_Result`)."""
    replay = audit.replay
    summary = replay.summary()
    return _Result(
        states={k: st.to_bytes() for k, st in replay.states.items()} if keep_states else {},
        health=[_flat(h) for h in replay.health()],
        state_counts=tuple(summary[k] for k in _STATE_COUNTS),
        latest=replay.latest,
        invalid=[_flat(i) for i in replay.invalid],
        invalid_count=replay.invalid_count,
        records=replay.records,
        revisions=replay.revisions,
        destinations=[_flat(d) for d in replay.destinations()],
        begin=audit.begin,
        stop=audit.stop,
        reached=audit.reached,
        missing=audit.missing,
        keys=audit.keys,
        lost=audit.lost,
        interrupted=audit.interrupted,
        holds=audit.holds,
        n_records=audit.records,
    )


def run_jobs(
    conn: KafkaConnection,
    topic: str,
    *,
    jobs: int,
    config: DetectorConfig,
    max_event_bytes: int,
    start: Bound = BEGINNING,
    end: Bound = END,
    partitions: Collection[int] | None = None,
    progress: TopicProgress | None = None,
    interrupt: Interruptible | None = None,
    timeout: float | None = None,
    keep_states: bool = False,
) -> TopicAudit:
    """Audit ``topic`` (its ``partitions``, default all) in ``jobs``
    processes (this one and ``jobs - 1`` workers) and return the
    :class:`TopicAudit` one process would have made (its attributes filled
    from the shards'), its ``replay`` the
    :class:`MergedReplay` (with the key states when ``keep_states``: for the
    HTML report and --what-if-fenced). Raises the reader's errors (from the
    plan, or from a worker), :class:`WorkerDied`, and ValueError for an
    absent partition."""
    sizes = plan_partitions(
        conn, topic, start=start, end=end, partitions=partitions, timeout=timeout
    )
    shares = split(sizes, jobs)
    replay = MergedReplay(Detector(config), max_event_bytes=max_event_bytes)
    # A Replay to every reader of the audit: its attributes, through __getattr__.
    audit = TopicAudit(
        conn, topic, replay=cast("Replay", replay), start=start, end=end, partitions=partitions
    )
    if not shares:
        return audit
    ctx = _start_context()
    figures = ctx.Array("q", _FIGURES * len(shares), lock=False)
    stop = ctx.Event()
    # This process reads the first share itself rather than wait for the
    # workers: one worker fewer to start, and one result that is not
    # pickled across (see _Lead).
    tasks = [
        _Task(
            i,
            conn,
            topic,
            tuple(s),
            start,
            end,
            _flat(config),
            max_event_bytes,
            timeout,
            keep_states,
        )
        for i, s in enumerate(shares)
    ]
    from streams.audit.files import batch_gc

    futures: list[Future[_Result]] = []
    with ExitStack() as stack:
        if len(tasks) > 1:
            pool = stack.enter_context(
                ProcessPoolExecutor(
                    max_workers=len(tasks) - 1,
                    mp_context=ctx,
                    initializer=_init,
                    initargs=(figures, stop),
                )
            )
            # The workers start (a fork: now, before this process makes a
            # Kafka client again) and read while this process reads share 0.
            futures = [pool.submit(_work, t) for t in tasks[1:]]
        lead = _Lead(futures, figures, len(tasks), topic, progress, interrupt, stop)
        try:
            with batch_gc():
                own = _read(tasks[0], lead, lead)
        except BaseException:
            stop.set()  # the workers stop at their next look; the pool waits for them
            raise
        first = _result(own, keep_states)
        lead.join_workers()
        try:
            results = [first, *(f.result() for f in futures)]
        except BrokenProcessPool as exc:
            # A worker killed (the OOM killer, a signal): no traceback, the line.
            raise WorkerDied(f"an audit worker process died ({exc})") from None
    _merge(audit, replay, results)
    return audit


def _start_context() -> multiprocessing.context.BaseContext:
    """``fork`` while this process has one thread, else ``spawn``.

    A forked worker starts at once with the parent's modules imported; a
    spawned one starts a new interpreter and imports the compiled core and
    the Kafka client first (0.3-0.8 s of wall time per worker, measured, and
    0.15-0.2 CPU s each, on 2 shared cores). But a fork copies no thread
    but the caller's, so a lock that another thread held (librdkafka's
    threads: a Kafka client alive in the parent) would stay held in the
    child forever. The plan's consumer is closed (its threads joined) by
    the time the workers start, so the CLI forks; a caller that keeps a
    client or a thread of its own gets spawned workers. Where
    ``/proc/self/task`` does not list the threads (not Linux), spawn."""
    try:
        threads = len(os.listdir("/proc/self/task"))
    except OSError:
        threads = 0
    return multiprocessing.get_context("fork" if threads == 1 else "spawn")


class _Lead:
    """This process's :class:`TopicProgress` and :class:`Interruptible`
    while it reads its own share (the first), then the wait for the
    workers (:meth:`join_workers`): its figures go where a
    worker's would (``figures``' first row) and the display is fed the sum
    every :data:`_TICK`; every :data:`CHECK_EVERY` records it passes the
    caller's Ctrl-C on to the workers (the stop event) and stops this read
    when a worker failed (its error is raised once the workers are done)."""

    def __init__(
        self,
        futures: Sequence[Future[_Result]],
        figures: Any,
        n: int,
        topic: str,
        progress: TopicProgress | None,
        interrupt: Interruptible | None,
        stop: Any,
    ) -> None:
        self.requested = False
        #: The display was given the topic's totals (see _show).
        self.shown = False
        self._futures = futures
        self._figures = figures
        self._n = n
        self._topic = topic
        self._progress = progress
        self._interrupt = interrupt
        self._stop = stop
        self._calls = 0
        self._next_show = 0.0

    def topic(self, name: str, total_records: int, partitions: int) -> None:
        self._figures[0], self._figures[1], self._figures[4] = total_records, partitions, 1
        self._tick()

    def records(self, done: int, partitions_done: int) -> None:
        self._figures[2], self._figures[3] = done, partitions_done
        self._tick()

    def _tick(self) -> None:
        if self._progress is not None and time.monotonic() >= self._next_show:
            self.shown = _show(self._progress, self._topic, self._figures, self._n, self.shown)
            self._next_show = time.monotonic() + _TICK

    def call(self, fn: Callable[..., _T], *args: Any) -> _T | None:
        # The first call looks too, as a worker's does.
        if self._calls % CHECK_EVERY == 0:
            self._look()
        self._calls += 1
        if self.requested:
            return None
        if self._interrupt is None:
            return fn(*args)
        out = self._interrupt.call(fn, *args)
        if self._interrupt.requested:  # a Ctrl-C while this process waited
            self._look()
        return out

    def _look(self) -> None:
        if self._interrupt is not None and self._interrupt.requested:
            self.requested = True
            self._stop.set()
        if any(f.done() and f.exception() is not None for f in self._futures):
            self.requested = True
            self._stop.set()

    def join_workers(self) -> None:
        """Once this process's share is read, wait for the workers: the
        display fed their summed figures, a Ctrl-C passed on (the stop
        event), the first failure ending the wait (its error is raised by
        the caller's ``result()``)."""
        pending: set[Future[_Result]] = set(self._futures)
        while True:
            if self._interrupt is not None and self._interrupt.requested:
                self._stop.set()
            if self._progress is not None:
                self.shown = _show(self._progress, self._topic, self._figures, self._n, self.shown)
            if not pending:
                return
            done, pending = wait(pending, timeout=_TICK, return_when=FIRST_EXCEPTION)
            if any(f.exception() is not None for f in done):
                self._stop.set()  # the others stop soon
                return


def _show(progress: TopicProgress, topic: str, figures: Any, n: int, shown: bool) -> bool:
    """The display fed the workers' summed figures: the topic's totals once
    every worker has planned, then how far they got. Returns ``shown``."""
    fig = list(figures)
    rows = [fig[i * _FIGURES : (i + 1) * _FIGURES] for i in range(n)]
    if not shown and all(r[4] for r in rows):
        progress.topic(topic, sum(r[0] for r in rows), sum(r[1] for r in rows))
        shown = True
    if shown:
        progress.records(sum(r[2] for r in rows), sum(r[3] for r in rows))
    return shown


def _merge(audit: TopicAudit, replay: MergedReplay, results: list[_Result]) -> None:
    missing: list[MissingHistory] = []
    for r in results:
        replay.absorb(r)
        audit.begin.update(r.begin)
        audit.stop.update(r.stop)
        audit.reached.update(r.reached)
        audit.keys.update(r.keys)
        missing.extend(r.missing)
        audit.records += r.n_records
        if r.lost is not None and audit.lost is None:
            audit.lost = r.lost
        audit.interrupted = audit.interrupted or r.interrupted
    replay.finish()
    audit.missing = tuple(sorted(missing, key=lambda m: m.partition))
    # What the topic holds, when no record was an event: the first worker's
    # answer that names one (a single read would look at its first record).
    if replay.records and replay.invalid_count == replay.records and not audit.partial:
        audit.holds = next((r.holds for r in results if r.holds is not None), None)
