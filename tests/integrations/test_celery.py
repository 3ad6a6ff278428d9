"""Celery's acks_late duplicate with real Redis and real worker processes:
the message of a stalled (SIGSTOP) or a live but busy worker is redelivered
to a second worker, taken over at a new epoch, and the stale worker's effect
is refused and reported."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from celery import Celery

from streams.demo.processes import Child, Children
from streams.fences import FencedSink, open_database
from streams.kafka.connection import KafkaConnection

from .conftest import pause_between_transactions, replay_topic, steps_until, wait_step

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DAY = "2026-07-26"


def _env(redis_url: str, bootstrap: str, topic: str, tmp: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(EXAMPLES), os.environ.get("PYTHONPATH", "")]),
        "FENCEWATCH_REDIS_URL": redis_url,
        "FENCEWATCH_BOOTSTRAP_SERVERS": bootstrap,
        "FENCEWATCH_TOPIC": topic,
        "FENCEWATCH_FENCES_DB": str(tmp / "fences.db"),
        "FENCEWATCH_VISIBILITY_S": "3",
    }


def _ledger_rows(tmp: Path, key: str) -> list[tuple[str, int]]:
    db = open_database(f"sqlite:///{tmp / 'fences.db'}")
    try:
        return [(r.effect_key, r.epoch) for r in FencedSink(db, name="ledger").effects(key)]
    finally:
        db.close()


def _findings(bootstrap: str, topic: str) -> set[tuple[str, int | None, str | None, str | None]]:
    replay = replay_topic(bootstrap, topic)
    assert replay.invalid_count == 0
    return {
        (
            f.kind.value,
            f.stale_epoch,
            f.stale_worker.split("@")[0] if f.stale_worker else None,
            f.sink_outcome,
        )
        for f in replay.latest_findings()
    }


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
    env = _env(redis_url, kafka_bootstrap, topic, tmp_path)
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
    # alpha's owner knew on waking that its lease was lost: nothing attempted.
    assert "lease lost" in stale["reason"]
    # The task's evidence is flushed before it ends.
    assert wait_step(children, "alpha", "task_done", 30)["state"] == "FAILURE"
    client.close()

    assert _ledger_rows(tmp_path, first["key"]) == [(f"publish report {DAY}", 2)]
    found = _findings(kafka_bootstrap, topic)
    assert ("stale_attempt", 1, "alpha", "rejected") in found
    assert not any(kind == "stale_commit" for kind, *_ in found)


def test_a_redelivery_takes_the_key_from_a_live_lease_and_the_first_delivery_is_stale(
    redis_url: str,  # first: torn down after the workers
    children: Children,
    tmp_path: Path,
    kafka_bootstrap: str,
    unique_topic: Callable[..., str],
) -> None:
    """The lease (30 s) outlives the visibility timeout (3 s): alpha is frozen
    in the task, Redis redelivers the message to beta marked redelivered, and
    beta takes the key at epoch 2 from alpha's still-live lease (take_over)
    instead of waiting for it; alpha wakes, its publish is refused, the task
    fails with StaleOwner; the ledger holds epoch 2's row only and the
    detector reports alpha's stale_attempt, sink rejected."""
    from streams.core.records import EventType
    from streams.core.validate import parse_event
    from streams.kafka.reader import iter_topic

    topic = unique_topic()
    env = {**_env(redis_url, kafka_bootstrap, topic, tmp_path), "FENCEWATCH_FENCE_TTL": "30"}
    alpha = _worker(children, tmp_path, "alpha", env)
    client = Celery("client", broker=redis_url)
    task_id = client.send_task("celery_app.export_report", args=[DAY, 2], queue="exports").id
    first = wait_step(children, "alpha", "working", 90)
    pause_between_transactions(alpha, tmp_path / "fences.db")
    assert (first["epoch"], first["redelivered"]) == (1, False)

    _worker(children, tmp_path, "beta", env)
    second = wait_step(children, "beta", "working", 90)
    assert (second["task_id"], second["epoch"], second["redelivered"]) == (task_id, 2, True)
    assert wait_step(children, "beta", "effect", 30)["status"] == "committed"

    alpha.resume()
    stale = wait_step(children, "alpha", "stale", 30)
    assert stale["epoch"] == 1 and stale["current_epoch"] == 2
    assert wait_step(children, "alpha", "task_done", 30)["state"] == "FAILURE"
    client.close()

    assert _ledger_rows(tmp_path, first["key"]) == [(f"publish report {DAY}", 2)]
    found = _findings(kafka_bootstrap, topic)
    assert ("stale_attempt", 1, "alpha", "rejected") in found
    assert not any(kind == "stale_commit" for kind, *_ in found)
    events = [
        parse_event(v, key=k)
        for k, v, _p, _o in iter_topic(KafkaConnection(kafka_bootstrap), topic)
        if v
    ]
    acquired = {e.epoch: e.attrs for e in events if e.type == EventType.LEASE_ACQUIRED}
    # Epoch 2 came from the redelivery (take_over), not from the expiry of
    # alpha's 30 s lease: beta was working within seconds of alpha.
    assert acquired == {1: {"ttl_s": 30.0}, 2: {"ttl_s": 30.0, "take_over": True}}


@pytest.mark.faults
def test_a_live_busy_worker_loses_its_task_to_the_redelivery_and_its_effect_is_refused(
    redis_url: str,  # first: torn down after the workers
    children: Children,
    tmp_path: Path,
    kafka_bootstrap: str,
    unique_topic: Callable[..., str],
) -> None:
    """Alive but slow, real workers: alpha runs an acks_late task and is busy
    in a call that holds the GIL (no SIGSTOP: it keeps running, but its lease
    keeper cannot renew) until the test releases it; after the 3 s visibility
    timeout Redis redelivers the message to beta while alpha still runs; beta
    takes the lease at epoch 2 and commits; released, alpha comes out of its
    call (however long beta took to start on a loaded machine), its owner
    refuses the publish (nothing attempted, effect_rejected lease_lost), the
    task fails with StaleOwner; the ledger holds only epoch 2's row and the
    detector reports alpha's stale_attempt, sink rejected."""
    from streams.core.records import EventType
    from streams.core.validate import parse_event
    from streams.kafka.reader import iter_topic

    topic = unique_topic()
    env = _env(redis_url, kafka_bootstrap, topic, tmp_path)
    release = tmp_path / "release"
    release.write_bytes(b"\0")
    busy = {"FENCEWATCH_BUSY_S": "300", "FENCEWATCH_BUSY_UNTIL": str(release)}
    alpha = _worker(children, tmp_path, "alpha", {**env, **busy})
    client = Celery("client", broker=redis_url)
    task_id = client.send_task("celery_app.export_report", args=[DAY, 1], queue="exports").id
    first = wait_step(children, "alpha", "working", 90)
    assert first["epoch"] == 1 and first["task_id"] == task_id

    _worker(children, tmp_path, "beta", env)
    seen = steps_until(children, "beta", "effect", 90)
    assert seen[-1][1]["status"] == "committed" and seen[-1][1]["epoch"] == 2
    second = next(doc for name, doc in seen if name == "beta" and doc["step"] == "working")
    assert (second["task_id"], second["epoch"]) == (task_id, 2)
    # The redelivery reached beta while alpha was still inside its task: alpha
    # has not come out of its busy call, and its process was never stopped.
    assert not any(name == "alpha" for name, _ in seen), seen
    assert alpha.proc.poll() is None

    # alpha's busy call ends now. In place: a truncating write would pull the
    # page from under alpha's memory map (SIGBUS).
    with release.open("r+b") as fh:
        fh.write(b"\1")

    rest = steps_until(children, "alpha", "stale", 60)
    assert [doc["step"] for name, doc in rest if name == "alpha"] == ["busy_done", "stale"]
    stale = rest[-1][1]
    assert stale["epoch"] == 1 and stale["current_epoch"] == 2
    assert "lease lost" in stale["reason"]
    assert wait_step(children, "alpha", "task_done", 30)["state"] == "FAILURE"
    client.close()

    assert _ledger_rows(tmp_path, first["key"]) == [(f"publish report {DAY}", 2)]
    found = _findings(kafka_bootstrap, topic)
    assert ("stale_attempt", 1, "alpha", "rejected") in found
    assert not any(kind == "stale_commit" for kind, *_ in found)
    # The evidence of alpha's refused publish: stamped after epoch 2, not attempted.
    events = [
        parse_event(v, key=k)
        for k, v, _p, _o in iter_topic(KafkaConnection(kafka_bootstrap), topic)
        if v
    ]
    alpha_effects = [e for e in events if e.epoch == 1 and e.effect_key is not None]
    assert [(e.type, (e.attrs or {}).get("reason")) for e in alpha_effects] == [
        (EventType.EFFECT_REJECTED, "lease_lost")
    ]
    assert alpha_effects[0].seq is not None and alpha_effects[0].sink == "ledger"


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
