"""A nemesis soak (issue 42, items 4 and 6): live ``fencewatch run`` workers on
the three-broker cluster, a producer at a steady rate, and a seeded random
schedule of faults for a set duration; then the findings are checked against
the audit. ``make soak`` (scripts/soak) runs a long one, and
``test_cluster_soak.py`` a short one on each engine; docs/reliability.md,
"Nemesis soak".

One fault at a time, each undone before the next (a soak that stacks faults
until the cluster has no quorum tests nothing but the quorum). The schedule
is drawn from the seed up front, so a failing run replays with the same
faults in the same order; what a fault hits (the group coordinator's node,
a partition's leader, a worker) is resolved when it fires, from the
cluster's state then, and written to the report with its times.

Workers are only ever frozen, thawed or killed through
:class:`~tests.support.worker.WorkerProcess`'s ``pause``/``resume``/``kill``
(never ``os.kill`` on a pid): what "the worker" is (the ``fencewatch run``
process or the engine it supervises) is that class's business. A worker
process that is gone is started again, as an orchestrator would; one the
soak did not kill is an unexplained exit, and fails the run.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import random
import re
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tests.cluster.conftest import LocalCluster
from tests.live.conftest import LiveHarness, Worker
from tests.support.worker import WorkerProcessError

__all__ = [
    "FAULT_KINDS",
    "MAX_EVENTS",
    "Fault",
    "Injected",
    "Soak",
    "SoakConfig",
    "SoakReport",
    "classify_engine_restarts",
    "contained_crashes",
    "coordinator_node",
    "group_coordinator_partition",
    "java_string_hash",
    "leader",
    "log_time",
    "schedule",
    "unexplained_lines",
]

#: Most events one run is asked for (rate x duration). They are generated up
#: front, half as many again in reserve (faults that overrun the duration keep
#: the traffic going), a few hundred bytes each: this bounds the soak's memory.
#: How long a worker may take to answer /health ok after the run (it may be
#: rejoining after the last fault).
HEALTH_GRACE_S = 120.0
MAX_EVENTS = 600_000
#: Events per workflow of the scenario (4 epochs), a little under its mean.
_EVENTS_PER_KEY = 18

#: Every kind of fault the nemesis injects.
FAULT_KINDS = (
    "broker-kill",  # kill -9 of a node, started again after hold_s
    "broker-pause",  # SIGSTOP of a node for hold_s, then SIGCONT: a grey failure
    "broker-isolate",  # a node's loopback packets dropped for hold_s, then healed
    "worker-kill",  # kill -9 of a worker; the soak starts it again
    "worker-pause",  # SIGSTOP of a worker past its session timeout, then SIGCONT
    "worker-rolling",  # every worker stopped (SIGTERM) and started again, one by one
)
#: What a broker fault is aimed at (resolved when it fires): the node that is
#: the consumer group's coordinator, or the leader of a partition of the
#: events, findings or transaction-state topic.
BROKER_ROLES = ("coordinator", "events-leader", "findings-leader", "txn-state-leader")

#: Lines in a worker's log that no injected fault explains: a crash of the
#: interpreter or of a native library, a Python traceback, faust's crash line.
UNEXPLAINED = re.compile(
    r"Traceback \(most recent call last\)|Segmentation fault|Fatal Python error"
    r"|core dumped|App Crashed|Assertion .* failed"
)
#: A coordinator request's child process crashed and the worker went on
#: (streams/kafka/coordinator.py: librdkafka issue 5040, contained): counted,
#: not a crash of the worker, though its line quotes the child's stack.
CONTAINED_CRASH = re.compile(r"streams\.kafka\.coordinator: .* crashed its child process")
#: The supervisor's line for an engine it restarts or gives up on
#: (streams/live/supervisor.py): the engine, what it died of or how it stalled.
ENGINE_RESTART = re.compile(
    r"the (?:faust|rdkafka) engine \(pid \d+\) (?P<why>.+?), holding .*?"
    r"(?P<then>; restarting it|giving up)"
)
#: A log line's local time (both engines' formats start with it).
LOG_TIME = re.compile(r"^\[?(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})")
#: How long after a fault is undone a stall restart still counts as its doing:
#: the supervisor restarts after 3 x the stall timeout (180 s by default), and
#: the stall may begin as the fault ends.
STALL_AFTER_FAULT_S = 300.0


@dataclass(frozen=True, slots=True)
class Fault:
    """One planned fault: ``kind`` at ``at_s`` seconds into the run, aimed at
    ``target`` (a broker role, or a worker's index), held ``hold_s`` seconds."""

    at_s: float
    kind: str
    target: str
    hold_s: float


@dataclass(frozen=True, slots=True)
class Injected:
    """A fault as it happened: when it began and was undone (seconds into the
    run), what it hit, and what was seen meanwhile."""

    fault: Fault
    began_s: float
    undone_s: float
    hit: str
    note: str = ""
    #: The same two moments as wall-clock time (to match the workers' log lines).
    began_at: float = 0.0
    undone_at: float = 0.0


@dataclass(frozen=True, slots=True)
class SoakConfig:
    seed: int
    minutes: float = 20.0
    engine: str = "rdkafka"
    workers: int = 2
    #: Events produced per second, for the whole run.
    rate: float = 50.0
    #: The workers' session timeout; a frozen worker is held past it.
    session_timeout_s: int = 20
    #: Quiet seconds between one fault undone and the next, drawn in this range.
    gap_s: tuple[float, float] = (20.0, 50.0)
    partitions: int = 3


@dataclass(slots=True)
class SoakReport:
    seed: int
    engine: str
    minutes: float
    workers: int
    events: int = 0
    delivery_errors: int = 0
    findings: int = 0
    revisions: int = 0
    faults: list[Injected] = field(default_factory=list)
    worker_restarts: list[str] = field(default_factory=list)
    #: Engine restarts by a worker's supervisor, with the reason it logged.
    engine_restarts: list[str] = field(default_factory=list)
    #: Coordinator requests whose child process crashed (the worker went on).
    contained_crashes: list[str] = field(default_factory=list)
    unexplained: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    logs: list[str] = field(default_factory=list)
    took_s: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems and not self.unexplained

    def to_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["ok"] = self.ok
        return doc

    def render(self) -> str:
        """The report as an operator reads it: outcome, figures, the schedule
        with its times, what went wrong, and where the logs are."""
        lines = [
            f"soak seed={self.seed} engine={self.engine} minutes={self.minutes:g} "
            f"workers={self.workers}: {'PASSED' if self.ok else 'FAILED'} in {self.took_s:.0f} s",
            f"events produced {self.events} (delivery errors {self.delivery_errors}), "
            f"findings {self.findings}, finding revisions {self.revisions}, "
            f"faults injected {len(self.faults)}, worker processes started again "
            f"{len(self.worker_restarts)}, engine restarts {len(self.engine_restarts)}, "
            f"contained coordinator-request crashes {len(self.contained_crashes)}",
            "faults (seconds into the run):",
        ]
        for f in self.faults:
            lines.append(
                f"  {f.began_s:7.1f}-{f.undone_s:7.1f}  {f.fault.kind:<15} {f.hit}"
                f"  (planned at {f.fault.at_s:.0f} s, hold {f.fault.hold_s:.0f} s)"
                + (f"  {f.note}" if f.note else "")
            )
        lines += [f"worker started again: {r}" for r in self.worker_restarts]
        lines += [f"engine restarted by its supervisor: {r}" for r in self.engine_restarts]
        lines += [f"contained coordinator-request crash: {r}" for r in self.contained_crashes]
        lines += [f"UNEXPLAINED: {u}" for u in self.unexplained]
        lines += [f"PROBLEM: {p}" for p in self.problems]
        lines += [f"log: {p}" for p in self.logs]
        return "\n".join(lines)


def schedule(config: SoakConfig) -> list[Fault]:
    """The faults of a run, drawn from ``config.seed`` alone: the first ones a
    shuffle of every kind (so a short run still meets several), then kinds at
    random. ``at_s`` assumes each fault takes its hold plus half a minute to
    undo; the run fires each at that time but never sooner than the smallest
    gap after the previous one was undone, so a slow recovery shifts the
    rest, never stacks them."""
    rng = random.Random(config.seed)
    kinds = list(FAULT_KINDS)
    rng.shuffle(kinds)
    out: list[Fault] = []
    t = rng.uniform(*config.gap_s)
    total = config.minutes * 60.0
    while t < total:
        kind = kinds[len(out)] if len(out) < len(kinds) else rng.choice(FAULT_KINDS)
        if kind.startswith("broker-"):
            role = rng.choice(BROKER_ROLES)
            target = role if role == "coordinator" else f"{role}:{rng.randrange(config.partitions)}"
        elif kind == "worker-rolling":
            target = "all"
        else:
            target = f"w{rng.randrange(config.workers) + 1}"
        if kind == "broker-kill":
            hold = rng.uniform(0.0, 15.0)
        elif kind == "broker-pause":
            hold = rng.uniform(10.0, 30.0)
        elif kind == "broker-isolate":
            hold = rng.uniform(15.0, 40.0)
        elif kind == "worker-pause":
            hold = config.session_timeout_s + rng.uniform(5.0, 15.0)
        else:
            hold = 0.0
        out.append(Fault(round(t, 1), kind, target, round(hold, 1)))
        t += hold + 30.0 + rng.uniform(*config.gap_s)
    return out


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units, 32-bit wrap)."""
    data = s.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def group_coordinator_partition(group_id: str, offsets_partitions: int) -> int:
    """The ``__consumer_offsets`` partition whose leader coordinates
    ``group_id`` (Kafka's ``Utils.abs(groupId.hashCode()) % partitions``).
    Computed, not asked: asking is the AdminClient coordinator request that
    crashed librdkafka when the coordinator's node died (issue 5040), and the
    soak must not fall over the fault it studies."""
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % offsets_partitions


def leader(cluster: LocalCluster, topic: str, partition: int) -> int:
    """The node leading ``topic``/``partition`` now (waits while there is none;
    ``partition`` wraps around the topic's count). Metadata only."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            meta = admin.list_topics(topic, timeout=10).topics[topic]
            part = meta.partitions.get(partition % max(1, len(meta.partitions)))
        except Exception:  # metadata briefly unavailable during an election
            part = None
        if part is not None and part.leader >= 0:
            return int(part.leader)
        time.sleep(0.5)
    raise AssertionError(f"{topic}/{partition} has no leader")


def coordinator_node(cluster: LocalCluster, group_id: str) -> tuple[int, int]:
    """The node coordinating ``group_id`` now, and its ``__consumer_offsets`` partition."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topics = admin.list_topics("__consumer_offsets", timeout=10).topics
    p = group_coordinator_partition(group_id, len(topics["__consumer_offsets"].partitions))
    return leader(cluster, "__consumer_offsets", p), p


def unexplained_lines(log: str) -> list[str]:
    """The lines of a worker's log that say it crashed rather than recovered."""
    return [
        line
        for line in log.splitlines()
        if UNEXPLAINED.search(line) and not CONTAINED_CRASH.search(line)
    ]


def contained_crashes(log: str) -> list[str]:
    """The lines of a worker's log for coordinator requests whose child crashed."""
    return [line.strip() for line in log.splitlines() if CONTAINED_CRASH.search(line)]


def log_time(line: str) -> float | None:
    """The wall-clock time a worker's log line was written (None if it has none)."""
    m = LOG_TIME.match(line)
    if m is None:
        return None
    # Naive on purpose: the workers log local time, and timestamp() reads it so.
    at = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")
    return at.timestamp() + int(m.group(2)) / 1000


def classify_engine_restarts(log: str, faults: list[Injected]) -> tuple[list[str], list[str]]:
    """The supervisor's restart lines in ``log``: (explained, unexplained).
    A death by a signal (a native crash: what issue 5040 was) and a
    supervisor giving up are never explained; a stall is, when it came during
    a fault or within :data:`STALL_AFTER_FAULT_S` of its end."""
    explained: list[str] = []
    unexplained: list[str] = []
    for line in log.splitlines():
        m = ENGINE_RESTART.search(line)
        if m is None:
            continue
        at = log_time(line)
        during = at is not None and any(
            f.began_at <= at <= f.undone_at + STALL_AFTER_FAULT_S for f in faults
        )
        crash = m.group("why").startswith("died of") or m.group("then") == "giving up"
        (unexplained if crash or not during else explained).append(line.strip()[:300])
    return explained, unexplained


class Soak:
    """One soak run on ``cluster`` (every node up at the start)."""

    def __init__(
        self,
        cluster: LocalCluster,
        harness: LiveHarness,
        config: SoakConfig,
        *,
        say: Callable[[str], None] = print,
    ) -> None:
        self.cluster = cluster
        self.h = harness
        self.config = config
        self.say = say
        self.report = SoakReport(config.seed, config.engine, config.minutes, config.workers)
        self.workers: list[Worker] = []
        #: Every process ever started for worker slot i (for the log check).
        self.history: list[list[Worker]] = []
        self._started = time.monotonic()
        self._stop_producing = threading.Event()
        self._produced = 0
        self._delivery_errors = 0

    # -- clock and log ------------------------------------------------------------

    def now(self) -> float:
        return time.monotonic() - self._started

    def log(self, line: str) -> None:
        self.say(f"soak {self.now():7.1f}s  {line}")

    # -- workers ------------------------------------------------------------------

    def _extra(self) -> dict[str, str]:
        return {
            "FENCEWATCH_SESSION_TIMEOUT": str(self.config.session_timeout_s),
            # As docs/operate.md asks of a cluster: a changelog partition with
            # one replica loses its leader with its node (tests/cluster).
            "FENCEWATCH_REPLICATION": "3",
        }

    def _start_worker(self, slot: int) -> Worker:
        n = len(self.history[slot]) if slot < len(self.history) else 0
        # A new name per process: its own log (a restart must not truncate the
        # log that explains why it was needed).
        name = f"w{slot + 1}" if n == 0 else f"w{slot + 1}-{n}"
        w = self.h.start(name, extra=self._extra())
        if slot < len(self.history):
            self.history[slot].append(w)
            self.workers[slot] = w
        else:
            self.history.append([w])
            self.workers.append(w)
        return w

    def _wait_ready(self, w: Worker, timeout: float = 300.0) -> str:
        """Wait until ``w`` processes; '' or what kept it from it (a problem of
        the run: a worker started again must be back within ``timeout``)."""
        try:
            w.wait_ready(timeout)
        except WorkerProcessError as exc:
            why = str(exc).splitlines()[0][:300]
            self.report.problems.append(f"{self.now():.1f}s {why}")
            return why
        return ""

    def _check_workers(self) -> None:
        """A worker process the soak did not end is an unexplained exit: record
        it, and start the slot again (as an orchestrator would)."""
        for slot, w in enumerate(self.workers):
            code = w.poll()
            if code is None:
                continue
            self.report.unexplained.append(
                f"{self.now():.1f}s worker {w.name} exited with {code} (log {w.log_path})"
            )
            self.log(f"worker {w.name} exited with {code} by itself: starting it again")
            w.stop()
            nw = self._start_worker(slot)
            self.report.worker_restarts.append(f"{self.now():.1f}s {w.name} -> {nw.name} (exit)")

    def _sleep(self, seconds: float) -> None:
        """Sleep, watching the workers meanwhile."""
        end = time.monotonic() + seconds
        while True:
            self._check_workers()
            left = end - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(0.5, left))

    # -- the producer ---------------------------------------------------------------

    def _produce(self, events: list[tuple[bytes, bytes]]) -> None:
        """``events`` at ``config.rate`` per second until told to stop; a record
        the broker refuses for good is counted (the audit reads the topic, so
        it judges only what was written)."""
        from confluent_kafka import Producer

        def delivered(err: object, _msg: object) -> None:
            if err is not None:
                self._delivery_errors += 1

        p = Producer(
            {
                "bootstrap.servers": self.h.bootstrap,
                "partitioner": "murmur2_random",
                "enable.idempotence": True,
                # Longer than any fault is held: a record waits out a node's absence.
                "message.timeout.ms": 600_000,
            }
        )
        start = time.monotonic()
        for i, (key, value) in enumerate(events):
            if self._stop_producing.is_set():
                break
            delay = start + i / self.config.rate - time.monotonic()
            if delay > 0:
                self._stop_producing.wait(delay)
            while True:
                try:
                    p.produce(self.h.events, value, key=key, on_delivery=delivered)
                    break
                except BufferError:  # the local queue is full while a node is away
                    p.poll(0.5)
            self._produced += 1
            p.poll(0)
        left = p.flush(600)
        self._delivery_errors += left

    # -- targets --------------------------------------------------------------------

    def _node_for(self, target: str) -> tuple[int, str]:
        """The node a broker fault's ``target`` names now, and how it was found."""
        if target == "coordinator":
            node, p = coordinator_node(self.cluster, self.h.app_id)
            return node, f"group coordinator (__consumer_offsets/{p})"
        role, _, index = target.partition(":")
        topic = {
            "events-leader": self.h.events,
            "findings-leader": self.h.findings,
            "txn-state-leader": "__transaction_state",
        }[role]
        node = leader(self.cluster, topic, int(index))
        # With three nodes a leader is often the coordinator's node too: say so,
        # the coordinator's death is what issue 42 was about.
        also = " (also the group coordinator)"
        coordinating = coordinator_node(self.cluster, self.h.app_id)[0] == node
        return node, f"leader of {topic}/{index}" + (also if coordinating else "")

    # -- faults -----------------------------------------------------------------------

    def _inject(self, fault: Fault) -> Injected:
        began, began_at = self.now(), time.time()
        note = ""
        if fault.kind.startswith("broker-"):
            node, why = self._node_for(fault.target)
            hit = f"node {node}, {why}"
            self.log(f"{fault.kind} {hit} for {fault.hold_s:.0f} s")
            if fault.kind == "broker-kill":
                self.cluster.broker(node, "kill")
                self._sleep(fault.hold_s)
                self.cluster.broker(node, "start")
            elif fault.kind == "broker-pause":
                pid = int(self.cluster.broker(node, "pid"))
                os.kill(pid, signal.SIGSTOP)
                try:
                    self._sleep(fault.hold_s)
                finally:
                    os.kill(pid, signal.SIGCONT)
            else:
                self.cluster.run("isolate", str(node))
                try:
                    self._sleep(fault.hold_s)
                finally:
                    self.cluster.run("heal", str(node))
        elif fault.kind == "worker-rolling":
            hit = "every worker, in turn"
            self.log(f"{fault.kind}: {hit}")
            notes = []
            for slot in range(len(self.workers)):
                old = self.workers[slot]
                code = old.stop()
                # A SIGTERMed worker stops cleanly within the stop bound (docs/operate.md).
                if code != 0:
                    self.report.problems.append(
                        f"{self.now():.1f}s worker {old.name} exited with {code} on SIGTERM "
                        f"(log {old.log_path})"
                    )
                w = self._start_worker(slot)
                self.report.worker_restarts.append(
                    f"{self.now():.1f}s {old.name} -> {w.name} (rolling)"
                )
                if why := self._wait_ready(w):
                    notes.append(f"{w.name}: {why}")
            note = "; ".join(notes)
        else:
            slot = int(fault.target[1:]) - 1
            w = self.workers[slot]
            hit = f"worker {w.name} (pid {w.pid})"
            self.log(f"{fault.kind} {hit} for {fault.hold_s:.0f} s")
            if fault.kind == "worker-kill":
                w.kill()
                if w.poll() is not None:
                    w.stop()
                    nw = self._start_worker(slot)
                    self.report.worker_restarts.append(
                        f"{self.now():.1f}s {w.name} -> {nw.name} (killed)"
                    )
                    w = nw
                note = self._wait_ready(w)
            else:
                w.pause()
                try:
                    self._sleep(fault.hold_s)
                finally:
                    w.resume()
        undone = self.now()
        self.cluster.ensure_all_up()
        self.log(f"{fault.kind} undone" + (f" ({note})" if note else ""))
        return Injected(fault, round(began, 1), round(undone, 1), hit, note, began_at, time.time())

    # -- the run ------------------------------------------------------------------------

    def run(self) -> SoakReport:
        """Start the workers and the producer, inject the schedule until the
        duration has passed, then let everything settle and check."""
        cfg = self.config
        total = cfg.minutes * 60.0
        if cfg.rate * total > MAX_EVENTS:
            raise ValueError(f"{cfg.rate:g} events/s for {cfg.minutes:g} min is over {MAX_EVENTS}")
        plan = schedule(cfg)
        self.log(
            f"seed {cfg.seed}, engine {cfg.engine}, {cfg.workers} workers, "
            f"{cfg.minutes:g} min at {cfg.rate:g} events/s, {len(plan)} faults planned"
        )
        for f in plan:
            self.log(f"  planned at {f.at_s:6.1f}s: {f.kind} {f.target} hold {f.hold_s:.0f} s")
        # Enough workflows for the duration at the rate and half as much again
        # (the traffic runs until the last fault is undone), interleaved at random.
        n_keys = math.ceil(cfg.rate * total * 1.5 / _EVENTS_PER_KEY) + 20
        events = self.h.scenario_events(n_keys=n_keys, epochs=4, seed=cfg.seed)
        for slot in range(cfg.workers):
            self._start_worker(slot)
        for w in self.workers:
            if self._wait_ready(w):
                return self._finish()
        self._started = time.monotonic()  # the schedule's clock starts with the traffic
        producer = threading.Thread(target=self._produce, args=(events,), daemon=True)
        producer.start()
        try:
            # Every planned fault fires, however long the earlier ones took to
            # undo (a replay meets the same faults); traffic runs at least the
            # duration, and past it until the last fault is undone.
            quiet_from = 0.0
            for fault in plan:
                self._sleep(max(0.0, fault.at_s - self.now(), quiet_from - self.now()))
                try:
                    self.report.faults.append(self._inject(fault))
                    quiet_from = self.now() + cfg.gap_s[0]
                except Exception as exc:  # the harness failed, not the product: say which
                    self.report.problems.append(
                        f"{self.now():.1f}s could not inject {fault}: {str(exc)[:500]}"
                    )
                    self.cluster.ensure_all_up()
                    break
            self._sleep(max(0.0, total - self.now()))
        finally:
            self._stop_producing.set()
            producer.join(700)
        self.log(f"produced {self._produced} events; settling")
        self.report.events = self._produced
        self.report.delivery_errors = self._delivery_errors
        return self._finish(check=True)

    def _finish(self, check: bool = False) -> SoakReport:
        r = self.report
        if check:
            self._check_workers()
            try:
                self.h.wait_all_committed(timeout=900)
            except AssertionError as exc:
                r.problems.append(str(exc).splitlines()[0][:500])
            self._check_findings()
            for w in self.workers:
                if w.poll() is not None:
                    r.problems.append(f"worker {w.name} is not running at the end")
                elif not self._healthy_within(w, HEALTH_GRACE_S):
                    r.problems.append(
                        f"worker {w.name} does not answer /health ok within "
                        f"{HEALTH_GRACE_S:.0f} s at the end"
                    )
        for slot in self.history:
            for w in slot:
                r.logs.append(str(w.log_path))
                text = w.log_path.read_text("utf-8", "replace") if w.log_path.exists() else ""
                r.unexplained += [f"{w.name}: {line[:300]}" for line in unexplained_lines(text)]
                r.contained_crashes += [f"{w.name}: {x[:200]}" for x in contained_crashes(text)]
                explained, crashes = classify_engine_restarts(text, r.faults)
                r.engine_restarts += [f"{w.name}: {line}" for line in explained + crashes]
                r.unexplained += [f"{w.name}: engine restart: {line}" for line in crashes]
        r.took_s = round(self.now(), 1)
        return r

    def _healthy_within(self, w: Any, grace_s: float) -> bool:
        """Whether ``w`` answers /health ok within ``grace_s``: a fault that
        ended just before the check (a worker frozen past its session, so
        fenced and rejoining; seed 930055 on faust) leaves a live worker
        restoring for a few seconds, and the other worker may have committed
        everything meanwhile. Alive means it gets there, not that it is there
        at the instant of one probe."""
        deadline = time.monotonic() + grace_s
        while True:
            if w.poll() is not None:
                return False
            if (w.health() or {}).get("ok"):
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(1.0)

    def _check_findings(self) -> None:
        """What tests/cluster and tests/faults check (no_duplicates_and_audit),
        as a list of problems rather than the first failed assert."""
        r = self.report
        latest, seen = self.h.live_findings()
        r.findings = len(latest)
        r.revisions = len(seen)
        twice = [x for x, n in Counter(seen).items() if n > 1]
        if twice:
            r.problems.append(f"{len(twice)} (finding id, revision) seen twice, e.g. {twice[:3]}")
        revs: dict[str, set[int]] = {}
        for fid, rev in seen:
            revs.setdefault(fid, set()).add(rev)
        gaps = [fid for fid, rs in revs.items() if rs != set(range(1, max(rs) + 1))]
        if gaps:
            r.problems.append(f"{len(gaps)} findings with a revision gap, e.g. {gaps[:3]}")
        audit = self.h.audit()
        missing = sorted(set(audit) - set(latest))
        extra = sorted(set(latest) - set(audit))
        differ = sorted(k for k in set(audit) & set(latest) if audit[k] != latest[k])
        if missing or extra or differ:
            r.problems.append(
                f"live findings differ from the audit of {len(audit)}: {len(missing)} missing "
                f"{missing[:3]}, {len(extra)} extra {extra[:3]}, {len(differ)} differ {differ[:3]}"
            )
        if not audit:
            r.problems.append("the audit found no finding: the soak's traffic proves nothing")
        dead = self.h.read(self.h.dlq)
        if dead:
            r.problems.append(f"{len(dead)} dead letters")

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(self.report.to_dict(), indent=2, default=str) + "\n")
