"""Celery's acks_late duplicate with real Redis and real worker processes:
the stalled worker's copy is redelivered, taken over at a new epoch, and the
fence refuses the stale worker's effect."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from celery import Celery

from streams.demo.processes import Child, Children
from streams.fences import FencedSink, open_database

from .conftest import pause_between_transactions, replay_topic, wait_step

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DAY = "2026-07-26"


def _worker(children: Children, tmp: Path, name: str, env: dict[str, str]) -> Child:
    argv = [sys.executable, "-m", "celery", "-A", "celery_app", "worker", "--pool=solo"]
    argv += ["-n", f"{name}@%h", "-Q", "exports", "-l", "warning"]
    argv += ["--without-heartbeat", "--without-gossip", "--without-mingle"]
    return children.start(
        name,
        argv,
        log_path=tmp / f"{name}.log",
        lines=children.lines,
        env=env,
        death_signal=signal.SIGKILL,
    )


def test_redelivered_task_takes_over_and_the_stalled_workers_effect_is_fenced(
    redis_url: str,  # first: torn down after the workers
    children: Children,
    tmp_path: Path,
    kafka_bootstrap: str,
    unique_topic: Callable[..., str],
) -> None:
    """alpha stalls (SIGSTOP) inside an acks_late task past the 3 s visibility
    timeout; Redis redelivers it to beta, which takes the lease at epoch 2 and
    publishes; alpha wakes, the fence refuses its publish, the task fails with
    StaleOwner, and the detector reports alpha's stale_attempt, sink rejected."""
    topic = unique_topic()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(EXAMPLES), os.environ.get("PYTHONPATH", "")]),
        "FENCEWATCH_REDIS_URL": redis_url,
        "KAFKA_BOOTSTRAP": kafka_bootstrap,
        "FENCEWATCH_TOPIC": topic,
        "FENCEWATCH_FENCES_DB": str(tmp_path / "fences.db"),
        "FENCEWATCH_VISIBILITY_S": "3",
    }
    alpha = _worker(children, tmp_path, "alpha", env)
    client = Celery("client", broker=redis_url)
    # 2 s of work: shorter than the visibility timeout, so only a stall makes
    # the broker redeliver (and beta's own run is acknowledged in time).
    task_id = client.send_task("celery_app.export_report", args=[DAY, 2], queue="exports").id
    first = wait_step(children, "alpha", "working", 90)
    pause_between_transactions(alpha, tmp_path / "fences.db")
    assert first["epoch"] == 1 and first["task_id"] == task_id

    _worker(children, tmp_path, "beta", env)
    second = wait_step(children, "beta", "working", 90)
    assert second["task_id"] == task_id and second["epoch"] == 2
    assert second["key"] == first["key"] == f"celery/celery_app.export_report/{task_id}"
    assert wait_step(children, "beta", "effect", 30)["status"] == "committed"

    alpha.resume()
    stale = wait_step(children, "alpha", "stale", 30)
    assert stale["epoch"] == 1 and stale["current_epoch"] == 2
    # The task's evidence is flushed before it ends.
    assert wait_step(children, "alpha", "task_done", 30)["state"] == "FAILURE"
    client.close()

    db = open_database(f"sqlite:///{tmp_path / 'fences.db'}")
    try:
        rows = FencedSink(db, name="ledger").effects(first["key"])
    finally:
        db.close()
    assert [(r.effect_key, r.epoch) for r in rows] == [(f"publish report {DAY}", 2)]

    replay = replay_topic(kafka_bootstrap, topic)
    assert replay.invalid_count == 0
    found = {
        (f.kind.value, f.stale_epoch, f.stale_worker.split("@")[0], f.sink_outcome)
        for f in replay.latest_findings()
    }
    assert ("stale_attempt", 1, "alpha", "rejected") in found
    assert not any(kind == "stale_commit" for kind, *_ in found)


def test_a_copy_that_finds_the_lease_held_retries_instead_of_running(
    tmp_path: Path, kafka_bootstrap: str, unique_topic: Callable[..., str]
) -> None:
    """While another owner holds the task's workflow key (a live first delivery
    renewing its lease), a FencedTask copy does not run its body: it waits
    fence_wait_s, retries, and fails with LeaseHeld when its retries run out;
    once the key is free the same task id runs at the next epoch. (Celery's
    own task machinery in eager mode: no broker needed for this path.)"""
    from streams.fences import SqlLeaseStore
    from streams.integrations.celery import FencedTask, configure
    from streams.sdk import OwnershipReporter, ReporterSettings

    topic = unique_topic()
    db = open_database(f"sqlite:///{tmp_path / 'fences.db'}")
    leases = SqlLeaseStore(db)
    app = Celery("eager", broker="memory://")
    app.conf.task_always_eager = True
    configure(
        app,
        lambda worker: OwnershipReporter(
            ReporterSettings(kafka_bootstrap, worker, topic=topic), leases=leases
        ),
    )
    ran: list[int] = []
    attempts: list[str] = []

    class Counted(FencedTask):  # type: ignore[misc]
        def workflow_key(self, args: tuple[object, ...], kwargs: dict[str, object]) -> str:
            attempts.append(self.request.id)
            return str(super().workflow_key(args, kwargs))

    @app.task(base=Counted, bind=True, fence_ttl=10, fence_wait_s=0.2, max_retries=1)
    def export(self: FencedTask) -> str:
        ran.append(self.owned.epoch)
        return "done"

    first = OwnershipReporter(
        ReporterSettings(kafka_bootstrap, "first", topic=topic), leases=leases
    )
    try:
        with first.own(f"celery/{export.name}/task-1", ttl=10):
            held = export.apply(task_id="task-1")
            # Celery keeps a picklable stand-in of the exception: check its text.
            assert held.state == "FAILURE" and "is held by 'first'" in str(held.result)
            assert ran == [] and attempts == ["task-1", "task-1"]  # the try and one retry
        again = export.apply(task_id="task-1")
        assert (again.state, again.result, ran) == ("SUCCESS", "done", [2])
    finally:
        first.close()
        db.close()
