"""Harness for live-processor tests: real broker, real worker subprocesses."""

from __future__ import annotations

import json
import random
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from streams.core import Detector, Event, Finding, KeyState
from streams.kafka.admin import TopicAdmin
from streams.kafka.connection import KafkaConnection
from streams.live.settings import DEFAULT_ENGINE
from tests.support.worker import WorkerProcess

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "examples" / "reference.jsonl"
READY_TIMEOUT_S = 60.0
#: Both engines of ``fencewatch run`` (docs/live.md, "Engines").
ENGINES = ("faust", "rdkafka")


def fixture_events() -> list[tuple[bytes, bytes]]:
    out = []
    for line in FIXTURE.read_text().splitlines():
        if line.strip():
            out.append((json.loads(line)["workflow_key"].encode(), line.strip().encode()))
    return out


def scenario_events(n_keys: int, epochs: int, seed: int = 7) -> list[tuple[bytes, bytes]]:
    """Per key: a chain of handovers where the displaced worker sometimes keeps
    going (stale progress, attempts, commits); keys interleaved at random,
    and now and then an event delivered late (after its successor)."""
    rng = random.Random(seed)
    per_key: list[list[tuple[bytes, bytes]]] = []
    for k in range(n_keys):
        wkey = f"wf-{k:05d}"
        evs: list[dict[str, Any]] = []

        def add(
            kind: str,
            epoch: int,
            worker: str,
            effect: str | None = None,
            *,
            wkey: str = wkey,
            evs: list[dict[str, Any]] = evs,
        ) -> None:
            seq = len(evs) + 1
            doc: dict[str, Any] = {
                "type": kind,
                "workflow_key": wkey,
                "epoch": epoch,
                "worker_id": worker,
                "seq": seq,
                "event_id": f"{wkey}-{seq}",
            }
            if effect is not None:
                doc["effect_key"] = effect
            evs.append(doc)

        for e in range(1, epochs + 1):
            worker = f"w{e}"
            add("lease_acquired", e, worker)
            add("progress", e, worker)
            if e > 1 and rng.random() < 0.5:
                old = f"w{e - 1}"
                add("progress", e - 1, old)
                if rng.random() < 0.5:
                    fx = f"fx-{e % 3}"
                    add("effect_attempted", e - 1, old, fx)
                    add(rng.choice(["effect_committed", "effect_rejected"]), e - 1, old, fx)
            add("effect_attempted", e, worker, f"fx-{e % 3}")
            add("effect_committed", e, worker, f"fx-{e % 3}")
        raw = [(wkey.encode(), json.dumps(d).encode()) for d in evs]
        for i in range(1, len(raw)):
            if rng.random() < 0.05:
                raw[i - 1], raw[i] = raw[i], raw[i - 1]
        per_key.append(raw)
    out: list[tuple[bytes, bytes]] = []
    cursors = [0] * n_keys
    live = list(range(n_keys))
    while live:
        k = rng.choice(live)
        out.append(per_key[k][cursors[k]])
        cursors[k] += 1
        if cursors[k] == len(per_key[k]):
            live.remove(k)
    return out


class Worker(WorkerProcess):
    """One ``fencewatch run`` subprocess of a harness, with its own data dir."""

    def __init__(self, harness: LiveHarness, name: str, store: str, extra: dict[str, str]) -> None:
        env = harness.env()
        env.update(
            {
                "FENCEWATCH_DATA_DIR": str(harness.tmp / f"data-{name}"),
                "FENCEWATCH_STORE": store,
            }
        )
        env.update(extra)
        super().__init__(env, harness.tmp / f"{name}.log", name=name, cwd=REPO)

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> dict[str, Any]:
        return super().wait_ready(timeout)


class LiveHarness:
    fixture_events = staticmethod(fixture_events)
    scenario_events = staticmethod(scenario_events)

    def __init__(
        self,
        bootstrap: str,
        unique_topic: Callable[..., str],
        tmp: Path,
        partitions: int,
        engine: str = DEFAULT_ENGINE,
    ) -> None:
        self.bootstrap = bootstrap
        #: The workers' ``FENCEWATCH_ENGINE`` (a worker's ``extra`` may override it).
        self.engine = engine
        self.partitions = partitions
        self.tmp = tmp
        self.events = unique_topic(partitions, prefix="live-events")
        self.findings = unique_topic(partitions, prefix="live-findings")
        self.dlq = unique_topic(partitions, prefix="live-dlq")
        self.status = unique_topic(
            partitions, prefix="live-status", config={"cleanup.policy": "compact"}
        )
        self.app_id = f"fw-test-{uuid.uuid4().hex[:10]}"
        self.workers: list[Worker] = []

    def env(self) -> dict[str, str]:
        return {
            "FENCEWATCH_BOOTSTRAP_SERVERS": self.bootstrap,
            "FENCEWATCH_EVENTS_TOPIC": self.events,
            "FENCEWATCH_FINDINGS_TOPIC": self.findings,
            "FENCEWATCH_DLQ_TOPIC": self.dlq,
            "FENCEWATCH_STATUS_TOPIC": self.status,
            "FENCEWATCH_APP_ID": self.app_id,
            "FENCEWATCH_COMMIT_INTERVAL": "0.1",
            "FENCEWATCH_SESSION_TIMEOUT": "6",
            "FENCEWATCH_HEARTBEAT_INTERVAL": "1",
            "FENCEWATCH_LOG_LEVEL": "info",
            "FENCEWATCH_ENGINE": self.engine,
        }

    def start(
        self, name: str = "w1", store: str = "memory://", extra: dict[str, str] | None = None
    ) -> Worker:
        w = Worker(self, name, store, extra or {})
        self.workers.append(w)
        return w

    def produce(self, records: Iterable[tuple[bytes | None, bytes]]) -> None:
        from confluent_kafka import Producer

        # murmur2: the partitioner of the Java client and of aiokafka.
        p = Producer({"bootstrap.servers": self.bootstrap, "partitioner": "murmur2_random"})
        for key, value in records:
            while True:
                try:
                    p.produce(self.events, value, key=key)
                    break
                except BufferError:
                    p.poll(0.1)
        assert p.flush(30) == 0

    def end_offsets(self, topic: str, timeout: float = 120.0) -> dict[int, int]:
        """Each partition's high watermark. Asked right after a broker fault
        (a SIGCONT, a restart), the client's metadata can still lack the
        partition's leader (UNKNOWN_PARTITION, seen in CI): ask again until
        ``timeout``, as any client would, rather than fail the test on it."""
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "probe"})
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    return {
                        p: c.get_watermark_offsets(
                            TopicPartition(topic, p), timeout=10, cached=False
                        )[1]
                        for p in range(self.partitions)
                    }
                except KafkaException:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
        finally:
            c.close()

    def committed(self) -> dict[int, int]:
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.app_id})
        try:
            tps = [TopicPartition(self.events, p) for p in range(self.partitions)]
            return {tp.partition: tp.offset for tp in c.committed(tps, timeout=10)}
        finally:
            c.close()

    def wait_all_committed(self, timeout: float = 60.0) -> None:
        """Until the group's committed offsets reach the input's end: every
        output of every event is then committed too (same transactions)."""
        end = self.end_offsets(self.events)
        deadline = time.monotonic() + timeout
        last: dict[int, int] = {}
        from confluent_kafka import KafkaException

        while time.monotonic() < deadline:
            try:
                last = self.committed()
            except KafkaException:
                # Not answered in time: a transaction that commits offsets
                # is still pending (the read asks for stable offsets), e.g.
                # while a worker recovers from a broker restart. Not yet.
                continue
            if all(end[p] == 0 or last.get(p, -1) >= end[p] for p in end):
                self.wait_outputs_stable(deadline)
                return
            time.sleep(0.2)
        logs = "\n".join(w.tail() for w in self.workers)
        raise AssertionError(f"committed {last} never reached {end}\n{logs}")

    @contextmanager
    def output_probe(
        self, also: Sequence[str] = ()
    ) -> Iterator[Callable[[], dict[tuple[str, int], tuple[int, int]]]]:
        """A reader of (last stable offset, high watermark) of each output
        partition (findings, status, dead letters, and the topics ``also``):
        below it, a transaction is open. Its two consumers and the partition
        counts are made once, for every reading inside the block."""
        from confluent_kafka import Consumer, TopicPartition

        base = {"bootstrap.servers": self.bootstrap, "group.id": "probe"}
        stable = Consumer({**base, "isolation.level": "read_committed"})
        raw = Consumer({**base, "isolation.level": "read_uncommitted"})
        # Each output topic's own partitions: they need not follow the events
        # topic's count (it grows in tests/live/test_partition_growth.py; they do not).
        topics = [self.findings, self.status, self.dlq, *also]
        counts = TopicAdmin(KafkaConnection(self.bootstrap)).partitions(topics)
        tps = [TopicPartition(t, p) for t in topics for p in range(counts.get(t, self.partitions))]

        def marks() -> dict[tuple[str, int], tuple[int, int]]:
            return {
                (tp.topic, tp.partition): (
                    stable.get_watermark_offsets(tp, timeout=10, cached=False)[1],
                    raw.get_watermark_offsets(tp, timeout=10, cached=False)[1],
                )
                for tp in tps
            }

        try:
            yield marks
        finally:
            stable.close()
            raw.close()

    def wait_outputs_stable(self, deadline: float, also: Sequence[str] = ()) -> None:
        """Until no transaction is open on the output topics and ``also``
        (last stable offset = high watermark): a worker killed mid-transaction
        leaves one open until the broker times it out, and read_committed
        readers see nothing past it meanwhile (the rdkafka engine's
        transactional id belongs to the dead worker's slot; docs/live.md).
        A committed transaction's markers, too, reach each partition a moment
        after the group's offsets are readable."""
        from confluent_kafka import KafkaException

        with self.output_probe(also) as marks:
            while True:
                try:
                    behind = [tp for tp, (lso, hw) in marks().items() if lso < hw]
                except KafkaException:
                    # Metadata not refreshed yet after a broker fault: not yet.
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
                    continue
                if not behind:
                    return
                if time.monotonic() > deadline:
                    logs = "\n".join(w.tail() for w in self.workers)
                    raise AssertionError(f"transactions still open on {behind}\n{logs}")
                time.sleep(0.2)

    def read(self, topic: str) -> list[Any]:
        """Every committed record of ``topic`` (read_committed, to the end)."""
        from streams.kafka.reader import iter_topic

        return list(iter_topic(KafkaConnection(self.bootstrap), topic, timeout=20))

    def read_with_headers(self, topic: str) -> list[tuple[bytes | None, bytes, dict[str, str]]]:
        from confluent_kafka import Consumer, KafkaError, TopicPartition

        c = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": "probe",
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
                "enable.auto.commit": False,
            }
        )
        out: list[tuple[bytes | None, bytes, dict[str, str]]] = []
        try:
            c.assign([TopicPartition(topic, p, 0) for p in range(self.partitions)])
            pending = set(range(self.partitions))
            deadline = time.monotonic() + 20
            while pending and time.monotonic() < deadline:
                m = c.poll(1.0)
                if m is None:
                    continue
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        pending.discard(m.partition())
                    continue
                hdrs = {k: v.decode() for k, v in (m.headers() or [])}
                out.append((m.key(), m.value(), hdrs))
        finally:
            c.close()
        return out

    def audit(self) -> dict[str, dict[str, Any]]:
        """Latest revision per finding id from the core detector over the
        events topic in partition order (what ``fencewatch audit --topic`` does)."""
        from streams.core.replay import Replay
        from streams.kafka.reader import iter_topic

        r = Replay()
        for key, value, partition, offset in iter_topic(
            KafkaConnection(self.bootstrap), self.events
        ):
            r.feed(value or b"", key=key, offset=offset, source=f"{self.events}/{partition}")
        return {f.finding_id: f.to_dict() for f in r.latest_findings()}

    def audit_status(self) -> dict[str, dict[str, Any]]:
        """Per-workflow status (SPEC §8, Kafka timestamps aside) from a replay
        of the events topic, as the audit computes it."""
        from streams.core.replay import Replay
        from streams.core.status import status_from_replay
        from streams.kafka.reader import iter_topic

        r = Replay()
        for key, value, partition, offset in iter_topic(
            KafkaConnection(self.bootstrap), self.events
        ):
            r.feed(value or b"", key=key, offset=offset, source=f"{self.events}/{partition}")
        return {k: s.content() for k, s in status_from_replay(r.states, r.latest.values()).items()}

    def cli_audit_health(self) -> dict[str, dict[str, list[str]]]:
        """Per workflow, the finding ids open and cleared in the health view
        of ``fencewatch audit --topic EVENTS --format json`` (the CLI itself)."""
        import contextlib
        import io

        from streams.cli import main

        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = main(
                ["audit", "--topic", self.events, "--bootstrap-servers", self.bootstrap,
                 "--format", "json", "--fail-on", "never"]
            )  # fmt: skip
        assert rc == 0, rc
        health: dict[str, dict[str, list[str]]] = {}
        for h in json.loads(out.getvalue())["health"]:
            by = health.setdefault(h["workflow_key"], {"open": [], "cleared": []})
            by[h["status"]].append(h["finding_id"])
        return {k: {s: sorted(ids) for s, ids in v.items()} for k, v in health.items()}

    def live_status(self) -> dict[str, dict[str, Any]]:
        """The status topic as compaction leaves it: latest record per key
        (a key's records are in one partition, in offset order)."""
        latest: dict[str, dict[str, Any]] = {}
        for key, value, _p, _o in self.read(self.status):
            assert key is not None and value is not None
            latest[key.decode()] = json.loads(value)
        return latest

    def live_findings(self) -> tuple[dict[str, dict[str, Any]], list[tuple[str, int]]]:
        """(latest revision per id, every (id, revision) seen) on the findings topic."""
        latest: dict[str, dict[str, Any]] = {}
        seen: list[tuple[str, int]] = []
        for _key, value, _p, _o in self.read(self.findings):
            doc = json.loads(value or b"{}")
            seen.append((doc["finding_id"], doc["revision"]))
            cur = latest.get(doc["finding_id"])
            if cur is None or doc["revision"] > cur["revision"]:
                latest[doc["finding_id"]] = doc
        return latest, seen

    def close(self) -> None:
        for w in self.workers:
            w.stop()


@pytest.fixture
def live(
    kafka_bootstrap: str, unique_topic: Callable[..., str], tmp_path: Path
) -> Iterator[Callable[..., LiveHarness]]:
    """Factory: ``live(partitions=3, engine="faust")`` -> a harness with fresh
    topics and app id whose workers run ``engine`` (the default engine unless
    told)."""
    made: list[LiveHarness] = []

    def make(partitions: int = 3, engine: str = DEFAULT_ENGINE) -> LiveHarness:
        h = LiveHarness(kafka_bootstrap, unique_topic, tmp_path, partitions, engine)
        made.append(h)
        return h

    yield make
    for h in made:
        h.close()


class ExplodingDetector:
    """Raises on one event after mutating the state, to stand in for a
    detector bug. Wraps a Detector (the detector may be compiled, and a
    compiled class cannot be subclassed from Python)."""

    def __init__(self) -> None:
        self.inner = Detector()

    def new_state(self) -> KeyState:
        return self.inner.new_state()

    def process(self, state: KeyState, event: Event, offset: int) -> list[Finding]:
        if event.workflow_key == "export-ledger" and offset == 5:
            self.inner.process(state, event, offset)  # mutate, then fail
            raise RuntimeError("boom")
        return self.inner.process(state, event, offset)
