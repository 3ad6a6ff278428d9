"""Shared helpers of the live benchmarks (bench/live_*.py). Not a test."""

from __future__ import annotations

import json
import multiprocessing
import os
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from streams.kafka.connection import KafkaConnection
from streams.live.worker_process import WorkerProcess

REPO = Path(__file__).resolve().parents[1]


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
        while not self._stop.is_set():
            for m in self._consumer.consume(500, 0.1):
                if m.error() is None:
                    self.seen.setdefault(m.key().decode(), time.monotonic())

    def wait_for(self, n: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while len(self.seen) < n and time.monotonic() < deadline:
            time.sleep(0.2)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._consumer.close()


class Worker(WorkerProcess):
    """A worker for a benchmark: bootstrap servers given, warnings-only log."""

    def __init__(self, bs: str, env: dict[str, str], log: Path) -> None:
        full = {"FENCEWATCH_LOG_LEVEL": "warning", **env, "FENCEWATCH_BOOTSTRAP_SERVERS": bs}
        super().__init__(full, log, cwd=REPO)

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
            {"bootstrap.servers": bs, "transactional.id": f"bare-{src}", "linger.ms": 0}
        )
        self.dst, self.interval = dst, interval
        self.relayed = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run)

    def run(self) -> None:
        self.relay(self.stop)

    def relay(self, stop: Any) -> None:
        """The relay loop until ``stop`` (a threading or multiprocessing Event) is set."""
        from confluent_kafka import TopicPartition

        p, c = self.p, self.c
        p.init_transactions(30)
        p.begin_transaction()
        positions: dict[tuple[str, int], int] = {}
        pending = 0
        last = time.monotonic()
        while not stop.is_set():
            for m in c.consume(500, 0.005):
                if m.error() is None:
                    p.produce(self.dst, m.value(), key=m.key(), partition=m.partition())
                    positions[m.topic(), m.partition()] = m.offset() + 1
                    pending += 1
            p.poll(0)
            if positions and time.monotonic() - last >= self.interval:
                offsets = [TopicPartition(t, q, o) for (t, q), o in positions.items()]
                p.send_offsets_to_transaction(offsets, c.consumer_group_metadata(), 30)
                p.commit_transaction(30)
                p.begin_transaction()
                self.relayed += pending
                pending = 0
                positions.clear()
                last = time.monotonic()
        p.abort_transaction(30)
        c.close()


def _relay_main(bs: str, src: str, dst: str, partitions: int, interval: float, stop: Any) -> None:
    BareRelay(bs, src, dst, partitions, interval).relay(stop)


class RelayProcess:
    """:class:`BareRelay` in a process of its own, as the worker is: in the
    benchmark's process it would share the interpreter (and its lock) with the
    load generator and the reader whose timings it is compared with."""

    def __init__(self, bs: str, src: str, dst: str, partitions: int, interval: float) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._stop = ctx.Event()
        self.proc = ctx.Process(
            target=_relay_main, args=(bs, src, dst, partitions, interval, self._stop)
        )
        self.proc.start()

    def close(self) -> None:
        self._stop.set()
        self.proc.join(60)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
