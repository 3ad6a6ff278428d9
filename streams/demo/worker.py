"""An agent worker built on the SDK: acquire a lease, checkpoint, optionally
run a long tool call, apply one effect through a fenced (or, for contrast,
unfenced) sink, release.

It is deliberately *naive* after the tool call: like a real stale worker that
missed its lease loss, it reports progress and tries its effect even when the
lease store says it was displaced. The fenced sink is what stops it.

Run by ``fencewatch demo worker`` (the split-brain demo starts two of these)
and by ``examples/agent_worker.py``. What it does is reported as :class:`Step`
records through a callback, never printed here: the CLI prints them as text
or as JSON lines (the demo's parent reads the JSON).

Exit status of :func:`run_worker`: 0 when the effect is in place, 3 when the
sink refused it as stale, 2 when the worker gave up or failed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from streams.errors import LeaseHeld
from streams.fences import FencedSink, Lease, SqlLeaseStore, UnfencedSink, open_database
from streams.fences.sink import EffectSink
from streams.kafka.connection import KafkaConnection
from streams.kafka.topics import DEFAULT_EVENTS_TOPIC
from streams.sdk import OwnershipReporter, ReporterSettings

__all__ = [
    "EXIT_EFFECT_IN_PLACE",
    "EXIT_FAILED",
    "EXIT_REJECTED",
    "Step",
    "WorkerPlan",
    "run_worker",
]

EXIT_EFFECT_IN_PLACE = 0
EXIT_FAILED = 2
EXIT_REJECTED = 3

#: Sink names: one per kind, so the findings say which destination answered.
FENCED_SINK_NAME = "ledger"
UNFENCED_SINK_NAME = "unfenced-ledger"
# How often a worker waiting for a held lease asks the store again.
_ACQUIRE_POLL_S = 0.1


@dataclass(frozen=True, slots=True)
class WorkerPlan:
    """What one worker does. ``tool_seconds`` > 0 adds a long tool call after
    the checkpoints (followed by one more checkpoint, its result); that is
    where the demo freezes the worker with SIGSTOP."""

    connection: KafkaConnection
    db_url: str
    workflow_key: str
    worker_id: str
    effect_key: str
    topic: str = DEFAULT_EVENTS_TOPIC
    steps: int = 1
    step_seconds: float = 0.2
    tool_seconds: float = 0.0
    ttl: float = 5.0
    wait_seconds: float = 60.0
    unfenced: bool = False

    def __post_init__(self) -> None:
        if self.steps < 0 or self.step_seconds < 0 or self.tool_seconds < 0:
            raise ValueError("--steps, --step-seconds and --tool-seconds must not be negative")
        if self.wait_seconds <= 0:
            raise ValueError("--wait-seconds must be positive")


@dataclass(frozen=True, slots=True)
class Step:
    """One thing a worker did. ``name`` is one of ``waiting``, ``acquired``,
    ``checkpoint``, ``tool_call``, ``effect``, ``released``, ``gave_up``;
    ``data`` holds its details (all JSON values)."""

    worker: str
    name: str
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> bytes:
        return orjson.dumps({"worker": self.worker, "step": self.name, **self.data})

    @classmethod
    def from_json(cls, line: bytes | str) -> Step:
        """Parse a line written by :meth:`to_json`; ValueError if it is not one."""
        try:
            doc = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"not a worker step: {exc}") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("step"), str):
            raise ValueError("not a worker step: no 'step' field")
        worker, name = str(doc.pop("worker", "?")), doc.pop("step")
        return cls(worker, name, doc)

    def describe(self) -> str:
        """One line for a person."""
        d = self.data
        if self.name == "waiting":
            return f"lease held by {d['holder']} at epoch {d['epoch']}; waiting for it to expire"
        if self.name == "acquired":
            return f"acquired {d['key']} at epoch {d['epoch']} (seq {d['seq']})"
        if self.name == "checkpoint":
            state = "current" if d["current"] else f"DISPLACED by epoch {d['current_epoch']}"
            return f"checkpoint {d['n']} (seq {d['seq']}): {state}"
        if self.name == "tool_call":
            return f"starting a long tool call ({d['seconds']:g} s), lease not renewed meanwhile"
        if self.name == "effect":
            text = f"effect {d['effect_key']!r}: {d['status']}"
            if d.get("reason"):
                text += f" ({d['reason']}, current epoch {d['current_epoch']})"
            return text
        if self.name == "released":
            held = "released" if d["current"] else "nothing to release (displaced)"
            return f"{held} (seq {d['seq']})"
        if self.name == "gave_up":
            return f"gave up: {d['reason']}"
        return f"{self.name} {d}"


def _acquire(plan: WorkerPlan, leases: SqlLeaseStore, emit: Callable[[Step], None]) -> Lease | None:
    deadline = time.monotonic() + plan.wait_seconds
    told = False
    while True:
        try:
            return leases.acquire(plan.workflow_key, plan.worker_id, ttl=plan.ttl)
        except LeaseHeld as held:
            if not told:
                emit(Step(plan.worker_id, "waiting", {"holder": held.holder, "epoch": held.epoch}))
                told = True
            if time.monotonic() > deadline:
                emit(Step(plan.worker_id, "gave_up", {"reason": str(held)}))
                return None
            time.sleep(_ACQUIRE_POLL_S)


def run_worker(plan: WorkerPlan, emit: Callable[[Step], None]) -> int:
    """Play ``plan`` against the real broker and database; report each step
    through ``emit``. Raises FencewatchError (BrokerError, StoreError) on
    infrastructure failures."""
    w = plan.worker_id
    db = open_database(plan.db_url)
    try:
        leases = SqlLeaseStore(db)
        sink: EffectSink = (
            UnfencedSink(db, name=UNFENCED_SINK_NAME)
            if plan.unfenced
            else FencedSink(db, name=FENCED_SINK_NAME)
        )
        settings = ReporterSettings(plan.connection, w, topic=plan.topic)
        with OwnershipReporter(settings, leases=leases) as reporter:
            leases.publisher = reporter  # the store publishes lease_acquired itself
            lease = _acquire(plan, leases, emit)
            if lease is None:
                return EXIT_FAILED
            key, epoch = lease.key, lease.epoch
            emit(
                Step(w, "acquired", {"key": key, "epoch": epoch, "seq": lease.seq, "ttl": plan.ttl})
            )

            def checkpoint(n: int) -> None:
                report = reporter.progress(key, epoch, attrs={"step": n})
                # A careful worker would stop here once displaced; this one
                # carries on, to show what the sink does with a late effect.
                emit(
                    Step(
                        w,
                        "checkpoint",
                        {
                            "n": n,
                            "seq": report.event.seq,
                            "current": report.current,
                            "current_epoch": report.current_epoch,
                        },
                    )
                )

            for n in range(1, plan.steps + 1):
                time.sleep(plan.step_seconds)  # the work
                checkpoint(n)
            if plan.tool_seconds > 0:
                # Evidence so far is on the broker before the (possibly frozen)
                # tool call, so the processor sees it whatever happens next.
                reporter.flush()
                emit(Step(w, "tool_call", {"seconds": plan.tool_seconds}))
                time.sleep(plan.tool_seconds)
                checkpoint(plan.steps + 1)
            with reporter.effect(key, epoch, plan.effect_key, sink=sink.name) as fx:
                payload = orjson.dumps({"by": w, "epoch": epoch})
                receipt = sink.apply(key, epoch, plan.effect_key, payload)
                fx.record(receipt)
            emit(
                Step(
                    w,
                    "effect",
                    {
                        "effect_key": receipt.effect_key,
                        "epoch": epoch,
                        "status": receipt.status,
                        "reason": receipt.reason,
                        "current_epoch": receipt.current_epoch,
                        "sink": receipt.sink,
                        "attempt_seq": fx.attempted.event.seq,
                    },
                )
            )
            released = reporter.release(lease)
            emit(Step(w, "released", {"seq": released.event.seq, "current": released.current}))
        return EXIT_REJECTED if receipt.status == "rejected" else EXIT_EFFECT_IN_PLACE
    finally:
        db.close()
