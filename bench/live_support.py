"""Shared helpers of the live benchmarks (bench/live_*.py). Not a test."""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import queue
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from streams.kafka.connection import KafkaConnection

REPO = Path(__file__).resolve().parents[1]
# The worker harness is the tests' (tests/support/worker.py, not shipped): the
# benchmarks run workers the way the live tests do.
sys.path.insert(0, str(REPO))

from tests.support.worker import WorkerProcess  # noqa: E402 - needs REPO on sys.path

#: The live engines a bench can measure (``--engines``).
ENGINES = ("faust", "rdkafka")


def add_engines_arg(ap: argparse.ArgumentParser) -> None:
    """``--engines``: which engines the bench measures (default both)."""
    ap.add_argument("--engines", default=",".join(ENGINES), help="comma-separated engines")


def chosen_engines(ap: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    """The engines ``--engines`` names; an empty or unknown one is a usage error."""
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    unknown = [e for e in engines if e not in ENGINES]
    if not engines or unknown:
        ap.error(f"--engines: name one or more of {', '.join(ENGINES)} (got {args.engines!r})")
    return engines


def autogroup() -> str:
    """Whether the kernel shares CPU between sessions first
    (``sched_autogroup_enabled``): "on", "off", or "unknown" where it cannot say."""
    try:
        value = Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip()
    except OSError:
        return "unknown"
    return "on" if value == "1" else "off"


def machine_load() -> str:
    """Cores, load average (1, 5, 15 min) and autogroup, for a figure's note:
    what a multi-process ratio on a shared machine depends on."""
    one, five, fifteen = os.getloadavg()
    return (
        f"{os.cpu_count()} cores, load average {one:.1f} / {five:.1f} / {fifteen:.1f}, "
        f"sched autogroup {autogroup()}"
    )


def bootstrap() -> str:
    env = os.environ.get("KAFKA_BOOTSTRAP")
    if env:
        return env
    return (REPO / ".run" / "kafka" / "bootstrap").read_text().strip()


def create_topics(
    bs: str, names: list[str], partitions: int, config: dict[str, str] | None = None
) -> None:
    """Through the project's own admin (TopicAdmin.ensure): the benches make
    their topics the way the product does, errors and all."""
    from streams.kafka import TopicAdmin, TopicSpec

    TopicAdmin(KafkaConnection(bs)).ensure(
        [TopicSpec(n, partitions, 1, config or {}) for n in names]
    )


def key_events(k: int, epochs: int = 2) -> Iterator[tuple[bytes, bytes]]:
    """A realistic key: per epoch an acquisition, a checkpoint, an attempt and
    a commit of the same effect (a clean handover, no finding)."""
    wkey = f"tenant-{k % 97}/export/{k:07d}"
    seq = 0
    for e in range(1, epochs + 1):
        for kind, fx in (
            ("lease_acquired", None),
            ("progress", None),
            ("effect_attempted", f"fx-{e}"),
            ("effect_committed", f"fx-{e}"),
        ):
            seq += 1
            doc: dict[str, Any] = {
                "type": kind,
                "workflow_key": wkey,
                "epoch": e,
                "worker_id": f"worker-{e}",
                "seq": seq,
                "event_id": f"{wkey}#{seq}",
            }
            if fx:
                doc["effect_key"] = fx
            yield wkey.encode(), json.dumps(doc).encode()


def producer(bs: str, **extra: Any) -> Any:
    from confluent_kafka import Producer

    conf = {
        "bootstrap.servers": bs,
        "partitioner": "murmur2_random",
        "linger.ms": 5,
        "queue.buffering.max.messages": 500_000,
        "compression.type": "lz4",
    }
    conf.update(extra)
    return Producer(conf)


def produce_one(p: Any, topic: str, value: bytes, key: bytes) -> None:
    """Produce, waiting for room when the client's queue is full."""
    while True:
        try:
            p.produce(topic, value, key=key)
            return
        except BufferError:
            p.poll(0.05)


def produce_all(p: Any, topic: str, records: Iterator[tuple[bytes, bytes]]) -> int:
    n = 0
    for key, value in records:
        produce_one(p, topic, value, key)
        n += 1
        if n % 10_000 == 0:
            p.poll(0)
    p.flush(60)
    return n


def reader(bs: str, topic: str, partitions: int, group: str) -> Any:
    """A read_committed consumer of every partition of ``topic`` from the start."""
    from confluent_kafka import Consumer, TopicPartition

    # fetch.wait.max.ms: librdkafka's default (500 ms) would add the reader's
    # own fetch wait to what is measured.
    c = Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 10,
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    return c


class FirstSeen:
    """A background reader of ``topic``: :attr:`seen` maps each record key to
    the monotonic time it was first visible (read_committed)."""

    def __init__(self, bs: str, topic: str, partitions: int, group: str) -> None:
        self.seen: dict[str, float] = {}
        self._consumer = reader(bs, topic, partitions, group)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read)
        self._thread.start()

    def _read(self) -> None:
        # Wait for one record, then take what else is queued without waiting:
        # consume(500, 0.1) returns only once 500 records came or the 0.1 s
        # ran out, so at 2,000/s it stamped most records up to 100 ms after
        # they were there (on both sides alike, which pulled every ratio
        # towards 1).
        c, seen = self._consumer, self.seen
        while not self._stop.is_set():
            first = c.poll(0.1)
            if first is None:
                continue
            now = time.monotonic()
            for m in [first, *c.consume(500, 0)]:
                if m.error() is None:
                    seen.setdefault(m.key().decode(), now)

    def wait_for(self, n: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while len(self.seen) < n and time.monotonic() < deadline:
            time.sleep(0.2)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._consumer.close()


class Worker(WorkerProcess):
    """A worker for a benchmark: bootstrap servers given, warnings-only log.

    ``own_session``: the worker (its supervisor and engine) runs in a session
    of its own. With ``/proc/sys/kernel/sched_autogroup_enabled`` at 1 the
    kernel shares the CPU between sessions first, so workers started in the
    bench's session get together what one process of it would while other
    sessions are busy; in sessions of their own, each gets a session's share,
    as services under systemd do. Such a worker does not get the terminal's
    Ctrl-C: the bench stops it (``stop`` in a ``finally``), and it still dies
    with the bench when the bench is killed (the guard's ``PR_SET_PDEATHSIG``,
    which a new session keeps)."""

    def __init__(
        self, bs: str, env: dict[str, str], log: Path, *, own_session: bool = False
    ) -> None:
        full = {"FENCEWATCH_LOG_LEVEL": "warning", **env, "FENCEWATCH_BOOTSTRAP_SERVERS": bs}
        super().__init__(full, log, cwd=REPO, new_session=own_session)

    def wait_ready(self, timeout: float = 600) -> dict[str, Any]:
        return super().wait_ready(timeout)

    def stop(self, timeout: float = 30) -> None:
        super().stop(timeout)


def doc(key: str, kind: str, epoch: int, worker: str, seq: int) -> bytes:
    """One event's JSON (no effect key): what the latency and failover runs send."""
    return json.dumps(
        {"type": kind, "workflow_key": key, "epoch": epoch, "worker_id": worker, "seq": seq}
    ).encode()


def handovers(keys: list[str]) -> Iterator[tuple[bytes, bytes]]:
    """Per key: epoch 1 acquired by "old", then epoch 2 by "new" (no finding);
    a later ``progress`` of epoch 1 then raises exactly one stale_activity."""
    for k in keys:
        yield k.encode(), doc(k, "lease_acquired", 1, "old", 1)
        yield k.encode(), doc(k, "lease_acquired", 2, "new", 2)


def names(prefix: str) -> tuple[str, str, str, str]:
    tag = uuid.uuid4().hex[:8]
    return (
        f"{prefix}-{tag}.events",
        f"{prefix}-{tag}.findings",
        f"{prefix}-{tag}.dlq",
        f"{prefix}-{tag}",
    )


def worker_env(events: str, findings: str, dlq: str, app_id: str, **extra: str) -> dict[str, str]:
    env = {
        "FENCEWATCH_EVENTS_TOPIC": events,
        "FENCEWATCH_FINDINGS_TOPIC": findings,
        "FENCEWATCH_DLQ_TOPIC": dlq,
        # Run-unique like the others (the worker creates it, compacted).
        "FENCEWATCH_STATUS_TOPIC": f"{events}.status",
        "FENCEWATCH_APP_ID": app_id,
    }
    env.update(extra)
    return env


class BareRelay:
    """confluent-kafka consume -> produce -> transactional commit with the
    offsets every ``interval`` s (read_committed input): the exactly-once
    floor, the limit of bench/live_latency.py (latency) and
    bench/live_throughput.py (throughput). :attr:`relayed` counts the
    records whose transaction committed."""

    def __init__(self, bs: str, src: str, dst: str, partitions: int, interval: float) -> None:
        from confluent_kafka import Consumer, Producer, TopicPartition

        self.c = Consumer(
            {
                "bootstrap.servers": bs,
                "group.id": f"bare-{src}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 10,
            }
        )
        self.c.assign([TopicPartition(src, q, 0) for q in range(partitions)])
        self.p = Producer(
            # linger.ms as the rdkafka engine's producer (5): with 0 the relay
            # sent a ProduceRequest per record, the load the generator's 0 put
            # on the broker, and the comparison would not be like for like.
            {"bootstrap.servers": bs, "transactional.id": f"bare-{src}", "linger.ms": 5}
        )
        self.dst, self.interval = dst, interval
        self.relayed = 0
        #: Wall time (ms) of each send_offsets + commit + begin.
        self.commit_ms: list[float] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run)

    def run(self) -> None:
        self.relay(self.stop)

    def relay(self, stop: Any) -> None:
        """The relay loop until ``stop`` (a threading or multiprocessing Event) is set."""

        p, c = self.p, self.c
        p.init_transactions(30)
        p.begin_transaction()
        positions: dict[tuple[str, int], int] = {}
        pending = 0
        last = time.monotonic()
        while not stop.is_set():
            pending += self.forward(c.consume(500, 0.005), positions)
            p.poll(0)
            if positions and time.monotonic() - last >= self.interval:
                self.commit(positions, pending)
                pending = 0
                last = time.monotonic()
        p.abort_transaction(30)
        c.close()

    def forward(self, msgs: list[Any], positions: dict[tuple[str, int], int]) -> int:
        """Produce what one consume() returned into the open transaction,
        noting each partition's next offset in ``positions``; returns how
        many were relayed. Called per batch, not per record, so a subclass
        changes what is written without a call per event in the loop."""
        produce, dst = self.p.produce, self.dst
        n = 0
        for m in msgs:
            if m.error() is None:
                produce(dst, m.value(), key=m.key(), partition=m.partition())
                positions[m.topic(), m.partition()] = m.offset() + 1
                n += 1
        return n

    def commit(self, positions: dict[tuple[str, int], int], pending: int) -> None:
        """Commit the open transaction with ``positions`` (then cleared) and
        begin the next; ``pending`` records are then relayed."""
        from confluent_kafka import TopicPartition

        p = self.p
        offsets = [TopicPartition(t, q, o) for (t, q), o in positions.items()]
        t0 = time.monotonic()
        p.send_offsets_to_transaction(offsets, self.c.consumer_group_metadata(), 30)
        p.commit_transaction(30)
        p.begin_transaction()
        self.commit_ms.append((time.monotonic() - t0) * 1000)
        self.relayed += pending
        positions.clear()


class WritesRelay(BareRelay):
    """The bare relay writing, per event, what the live processor must write
    when every event is another key, and nothing else: a state record (to a
    compacted topic, the source partition, ``state_bytes`` long) and a status
    document (SPEC §8's fields, from the parsed event, ``orjson``) in place of
    the relayed copy, in the same transaction as the offsets. No detection,
    no state kept: the I/O floor of any exactly-once processor of the
    workload in this runtime (bench/live_peer.py)."""

    def __init__(
        self, bs: str, src: str, dst: str, partitions: int, interval: float, state_bytes: int
    ) -> None:
        super().__init__(bs, src, dst, partitions, interval)
        self.state = b"s" * state_bytes
        self.changelog, self.status = f"{dst}.changelog", f"{dst}.status"

    def forward(self, msgs: list[Any], positions: dict[tuple[str, int], int]) -> int:
        import orjson

        produce, loads, dumps = self.p.produce, orjson.loads, orjson.dumps
        changelog, status, state = self.changelog, self.status, self.state
        n = 0
        for m in msgs:
            if m.error() is None:
                key, q, offset = m.key(), m.partition(), m.offset()
                event = loads(m.value())
                doc = {
                    "workflow_key": event["workflow_key"],
                    "current_epoch": event["epoch"],
                    "current_worker": event["worker_id"],
                    "acquired_seq": event.get("seq"),
                    "acquisition_implied": False,
                    "released": False,
                    "last_position": event.get("seq"),
                    "stale_epochs": [],
                    "open": [],
                    "cleared": [],
                    "worst_open": None,
                    "updated_ms": m.timestamp()[1],
                }
                produce(changelog, state, key, partition=q)
                produce(status, dumps(doc), key)
                positions[m.topic(), q] = offset + 1
                n += 1
        return n


def commit_summary(commit_ms: list[float]) -> dict[str, float]:
    """Count, mean, p50, p99 and max (ms) of a relay's transaction commits."""
    if not commit_ms:
        return {"commits": 0, "mean": 0.0, "p50": 0.0, "p99": 0.0, "max": 0.0}
    ordered = sorted(commit_ms)
    n = len(ordered)
    return {
        "commits": n,
        "mean": sum(ordered) / n,
        "p50": ordered[n // 2],
        "p99": ordered[min(n - 1, int(0.99 * n))],
        "max": ordered[-1],
    }


def _relay_main(
    bs: str, src: str, dst: str, partitions: int, interval: float, stop: Any, report: Any
) -> None:
    relay = BareRelay(bs, src, dst, partitions, interval)
    try:
        relay.relay(stop)
    finally:
        report.put(commit_summary(relay.commit_ms))


class RelayProcess:
    """:class:`BareRelay` in a process of its own, as the worker is: in the
    benchmark's process it would share the interpreter (and its lock) with the
    load generator and the reader whose timings it is compared with.
    :meth:`close` returns its commit durations (:func:`commit_summary`): a
    commit that took seconds is the broker's stall, not the reader's."""

    def __init__(self, bs: str, src: str, dst: str, partitions: int, interval: float) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._stop = ctx.Event()
        self._report = ctx.Queue()
        self.proc = ctx.Process(
            target=_relay_main,
            args=(bs, src, dst, partitions, interval, self._stop, self._report),
        )
        self.proc.start()

    def close(self) -> dict[str, float] | None:
        self._stop.set()
        try:
            summary: dict[str, float] | None = self._report.get(timeout=60)
        except queue.Empty:
            summary = None
        self.proc.join(60)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
        return summary


def paced(
    p: Any, topic: str, keys: list[str], rate: int, value: Callable[[str], bytes]
) -> tuple[list[float], list[float], float]:
    """Produce one record per key at ``rate`` on an absolute schedule. Returns
    the monotonic time each was handed to the client, the time the broker
    acknowledged it (NaN if it did not), and how far (ms) the generator fell
    behind its schedule at worst (a starved generator sends a burst, which
    then queues: the generator's delay, not the processor's)."""
    sent: list[float] = []
    acked = [math.nan] * len(keys)

    def ack(i: int) -> Callable[[Any, Any], None]:
        def done(err: Any, _msg: Any) -> None:
            if err is None:
                acked[i] = time.monotonic()

        return done

    behind = 0.0
    start = time.monotonic()
    for i, k in enumerate(keys):
        delay = start + i / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        elif -delay > behind:
            behind = -delay
        p.produce(topic, value(k), key=k.encode(), on_delivery=ack(i))
        sent.append(time.monotonic())
        p.poll(0)
    p.flush(60)
    return sent, acked, behind * 1000


def key_value(k: str) -> bytes:
    """The record value the relay relays: the key itself."""
    return k.encode()


def stale_progress(k: str) -> bytes:
    """A stale checkpoint of epoch 1 after :func:`handovers`: one finding each."""
    return doc(k, "progress", 1, "old", 3)


#: The load generator's producer: what an agent's reporter sends with
#: (streams/sdk/reporter.py: idempotent, acks=all, ``linger.ms`` 5). With
#: ``linger.ms`` 0 it sent one ProduceRequest per record, 2,000 a second on
#: one connection, which the broker answers one at a time: that took 0.74-1.13
#: of a core, and with a relay or a worker beside it the broker fell behind
#: and acknowledged records seconds late, a backlog that was most of every
#: p99 (docs/live.md, "Latency: the load generator's linger.ms").
GENERATOR: dict[str, Any] = {"linger.ms": 5, "enable.idempotence": True, "acks": "all"}


def _generate_main(
    bs: str,
    topic: str,
    warm: list[str],
    keys: list[str],
    rate: int,
    value: Callable[[str], bytes],
    go: Any,
    conn: Any,
) -> None:
    p = producer(bs, **GENERATOR)
    paced(p, topic, warm, rate, value)
    conn.send("warm")
    if not go.wait(300):
        return
    start = time.monotonic()
    sent, acked, behind = paced(p, topic, keys, rate, value)
    # The rate handed to the client (the final flush waits for the broker's acks).
    actual = len(keys) / max(1e-9, sent[-1] - start) if sent else 0.0
    conn.send((sent, acked, behind, actual))


class LoadGenerator:
    """Paced produce (:func:`paced`) in a process of its own: first ``warm``
    (unmeasured), then, after :meth:`go`, ``keys``. Kept out of the
    process that reads the output and stamps what it sees, so the reader's
    timestamps never wait for the generator's interpreter (or the other way
    round). Monotonic time is system-wide on Linux, so the two processes'
    stamps compare."""

    def __init__(
        self,
        bs: str,
        topic: str,
        warm: list[str],
        keys: list[str],
        rate: int,
        value: Callable[[str], bytes],
    ) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._go = ctx.Event()
        self._conn, child = ctx.Pipe(duplex=False)
        self.proc = ctx.Process(
            target=_generate_main, args=(bs, topic, warm, keys, rate, value, self._go, child)
        )
        self.proc.start()
        child.close()

    def warm_sent(self, timeout: float) -> bool:
        """Whether every warm-up record was handed to the client (waits up to ``timeout``)."""
        return bool(self._conn.poll(timeout)) and self._conn.recv() == "warm"

    def go(self) -> None:
        self._go.set()

    def result(self, timeout: float) -> tuple[list[float], list[float], float, float]:
        """(send time per key, broker ack time per key, worst lag behind
        schedule in ms, actual rate)."""
        if not self._conn.poll(timeout):
            raise TimeoutError("the load generator sent no result")
        sent, acked, behind, rate = self._conn.recv()
        return sent, acked, behind, rate

    def close(self) -> None:
        self._go.set()
        self.proc.join(30)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
