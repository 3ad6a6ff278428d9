"""``fencewatch demo split-brain``: two real worker processes, one lease, one
effect, the live processor watching.

The story, with the lease store and the destination in one SQLite file:

1. worker-a acquires the lease (short TTL), checkpoints, and starts a long
   tool call;
2. the demo freezes worker-a with SIGSTOP (a GC pause, a VM migration, a
   laptop lid): its lease runs out by the store's clock while it sleeps;
3. worker-b, waiting for the lease, acquires the next epoch, checkpoints and
   commits the effect through the sink;
4. the demo resumes worker-a with SIGCONT. Like a real stale worker it does
   not notice: it checkpoints and tries the same effect.

With the fenced sink worker-a's effect is refused (a rejection receipt, an
``effect_rejected`` event), and the findings show a rejected near miss:
``stale_attempt`` with sink outcome ``rejected`` and no ``stale_commit``.
With ``unfenced`` the effect is written twice and the findings show
``stale_commit`` and ``conflicting_commit``.
"""

from __future__ import annotations

import queue
import signal
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from streams.demo.expected import check_split_brain
from streams.demo.processes import Child
from streams.demo.session import DemoError, DemoSession, DemoSettings, Output
from streams.demo.worker import (
    EXIT_EFFECT_IN_PLACE,
    EXIT_REJECTED,
    FENCED_SINK_NAME,
    UNFENCED_SINK_NAME,
    Step,
)
from streams.fences import FencedSink, SqlLeaseStore, UnfencedSink, open_database

__all__ = ["SplitBrainPlan", "run_split_brain"]

_FENCED_OUTCOME = (
    "as expected with the fence: worker-a's late effect was REJECTED by the sink; the findings "
    "show a rejected near miss (stale_attempt, sink outcome rejected) and no stale_commit"
)
_UNFENCED_OUTCOME = (
    "as expected without a fence: worker-a's late effect was COMMITTED next to worker-b's "
    "(stale_commit), and the effect now exists under two epochs (conflicting_commit): the "
    "outcome is uncertain until verified"
)


@dataclass(frozen=True, slots=True)
class SplitBrainPlan:
    """``ttl``: worker-a's lease (worker-b waits for it to run out);
    ``tool_seconds``: worker-a's tool call, during which it is frozen (it must
    outlast the moment the demo reacts to its start)."""

    unfenced: bool = False
    ttl: float = 2.0
    tool_seconds: float = 1.0

    def __post_init__(self) -> None:
        if self.ttl <= 0 or self.tool_seconds <= 0:
            raise ValueError("--ttl and --tool-seconds must be positive")


class _Story:
    """Reads the workers' steps (JSON lines) and tells them with timestamps."""

    def __init__(self, session: DemoSession) -> None:
        self.s = session
        self.steps: list[Step] = []
        #: Workers that are paused: a step from one of them means the pause
        #: came too late (its tool call had already ended).
        self.frozen: set[str] = set()

    def until(self, want: str, worker: str, timeout: float) -> Step | None:
        """Tell every line until ``worker`` reports step ``want`` (returned) or
        exits (None). DemoError after ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise DemoError(f"{worker} did not reach '{want}' within {timeout:g} s")
            try:
                at, name, raw = self.s.children.lines.get(timeout=min(left, 0.5))
            except queue.Empty:
                continue
            if raw is None:
                if name == worker:
                    return None
                continue
            try:
                step = Step.from_json(raw)
            except ValueError:
                self.s.say(f"[{name}] {raw.decode('utf-8', 'replace')}", at=at)
                continue
            if step.worker in self.frozen:
                raise DemoError(
                    f"{step.worker} finished its tool call before it was paused "
                    "(a slow machine? try a longer --tool-seconds)"
                )
            self.steps.append(step)
            self.s.say(f"[{step.worker}] {step.describe()}", at=at)
            if step.worker == worker and step.name == want:
                return step

    def exit_of(self, child: Child, timeout: float) -> int:
        """Tell the rest of ``child``'s steps and return its exit status."""
        self.until("(exit)", child.name, timeout)
        status = child.wait(timeout)
        self.s.say(f"{child.name} exited with status {status}")
        return status


def _start_worker(
    s: DemoSession, name: str, plan: SplitBrainPlan, db_url: str, key: str, effect: str, **kw: str
) -> Child:
    argv = [
        sys.executable,
        "-m",
        "streams",
        "demo",
        "worker",
        "--json",
        "--topic",
        s.events_topic,
        "--db",
        db_url,
        "--key",
        key,
        "--worker",
        name,
        "--effect",
        effect,
        "--ttl",
        str(plan.ttl),
        "--steps",
        "1",
        *(a for k, v in kw.items() for a in (f"--{k.replace('_', '-')}", v)),
    ]
    if plan.unfenced:
        argv.append("--unfenced")
    s.say(f"starting {name}")
    # SIGKILL: a worker frozen with SIGSTOP would not act on SIGTERM.
    return s.children.start(
        name,
        argv,
        log_path=s.tmp / f"{name}.log",
        env=s.child_env(),
        lines=s.children.lines,
        death_signal=signal.SIGKILL,
    )


def _lease_line(leases: SqlLeaseStore, key: str) -> str:
    epoch, holder, expires_at = leases.holder(key)
    if holder is None:
        return f"lease store: epoch {epoch}, released"
    left = expires_at - time.time()
    state = f"expires in {left:.1f} s" if left > 0 else f"EXPIRED {-left:.1f} s ago"
    return f"lease store: epoch {epoch} held by {holder}, {state} (store clock)"


def run_split_brain(settings: DemoSettings, plan: SplitBrainPlan, out: Output) -> bool:
    """Run the demo; True when the findings match the expectation for the
    sink (fenced or unfenced). Raises DemoError (or another FencewatchError)
    when it cannot run to its end."""
    day = datetime.now(UTC).date().isoformat()
    key, effect = f"release/{day}", f"publish release index for {day}"
    mode = "UNFENCED destination, the naive baseline" if plan.unfenced else "fenced destination"
    with DemoSession(settings, f"split-brain, {mode}", out) as s:
        db_url = f"sqlite:///{s.tmp / 'fences.db'}"
        s.say(f"lease store and destination: SQLite {s.tmp / 'fences.db'}")
        s.say(f"workflow {key!r}, effect {effect!r}, lease TTL {plan.ttl:g} s")
        s.start_processor()
        story = _Story(s)
        wait = settings.timeout
        a = _start_worker(
            s, "worker-a", plan, db_url, key, effect, tool_seconds=str(plan.tool_seconds)
        )
        if story.until("acquired", "worker-a", wait) is None:
            raise DemoError(f"worker-a exited early:\n{a.tail()}")
        # worker-b starts now and waits for the lease; it gets it once
        # worker-a's TTL has run out by the store's clock.
        b = _start_worker(s, "worker-b", plan, db_url, key, effect, tool_seconds="0")
        if story.until("tool_call", "worker-a", wait) is None:
            raise DemoError(f"worker-a exited early:\n{a.tail()}")
        a.pause()
        story.frozen.add(a.name)
        s.say("demo: SIGSTOP worker-a, frozen in its tool call")
        db = open_database(db_url)
        try:
            leases = SqlLeaseStore(db)
            s.say(_lease_line(leases, key))
            status_b = story.exit_of(b, wait)
            s.say(_lease_line(leases, key))
            a.resume()
            story.frozen.discard(a.name)
            s.say("demo: SIGCONT worker-a; it wakes up still believing it owns the workflow")
            status_a = story.exit_of(a, wait)
            if plan.unfenced:
                writes = UnfencedSink(db, name=UNFENCED_SINK_NAME).count(key, effect)
                sink_line = (
                    f"destination '{UNFENCED_SINK_NAME}': the effect was written {writes} time(s)"
                )
                sink_ok = writes == 2
            else:
                rows = FencedSink(db, name=FENCED_SINK_NAME).effects(key)
                sink_line = f"destination '{FENCED_SINK_NAME}': " + (
                    ", ".join(f"{r.effect_key!r} by epoch {r.epoch}" for r in rows) or "empty"
                )
                sink_ok = [(r.effect_key, r.epoch) for r in rows] == [(effect, 2)]
        finally:
            db.close()
        s.say(sink_line)
        findings = s.show_findings()
        problems = check_split_brain(
            findings, unfenced=plan.unfenced, workflow_key=key, stale_epoch=1
        )
        want_a = EXIT_EFFECT_IN_PLACE if plan.unfenced else EXIT_REJECTED
        if status_a != want_a:
            problems.append(f"worker-a exited {status_a}, expected {want_a}")
        if status_b != EXIT_EFFECT_IN_PLACE:
            problems.append(f"worker-b exited {status_b}, expected {EXIT_EFFECT_IN_PLACE}")
        if not sink_ok:
            problems.append("the destination does not hold what it should")
        return s.conclude(
            findings, problems, _UNFENCED_OUTCOME if plan.unfenced else _FENCED_OUTCOME
        )
