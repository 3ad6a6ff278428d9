"""A Celery app with one fenced task: the classic acks_late duplicate, caught
(needs the `celery` extra and a Redis server).

    export FENCEWATCH_REDIS_URL=redis://127.0.0.1:6379/0
    export FENCEWATCH_BOOTSTRAP_SERVERS=127.0.0.1:9092
    export FENCEWATCH_FENCES_DB=.run/celery-fences.db FENCEWATCH_VISIBILITY_S=3
    cd examples
    celery -A celery_app worker --pool=solo -n alpha@%h -Q exports &     # worker 1
    python -c 'import celery_app; celery_app.export_report.delay("2026-07-26", 6)'
    kill -STOP %1          # alpha stalls inside the task (a GC pause, a frozen VM)
    celery -A celery_app worker --pool=solo -n beta@%h -Q exports &      # worker 2
                           # 3 s later Redis gives the unacknowledged message to beta,
                           # beta takes the lease at epoch 2 and publishes
    kill -CONT %1          # alpha wakes: its publish is REFUSED by the fence
    fencewatch audit --topic ownership.events   # reads FENCEWATCH_BOOTSTRAP_SERVERS too
                           # stale_attempt, epoch 1 (alpha@...), sink outcome: rejected

The other classic case, alive but slow: the first worker is still running
when the broker redelivers, but busy in a call that never releases the GIL
(a C extension, a catastrophic regex), so not even the lease keeper's thread
can renew. Give that worker FENCEWATCH_BUSY_S=8 (it holds the GIL that long
before its work; no SIGSTOP): the second worker takes the lease at epoch 2
while the first one runs, and when the first one comes out of its call its
owner already knows the lease is lost: its publish is refused, not attempted,
and reported (`effect_rejected`, reason `lease_lost`).

`export_report` runs under `FencedTask`: the lease of its workflow key (the
task id, so the redelivered copy competes for the same key) for as long as
the broker's visibility timeout, renewed while it runs; its effects go
through the owner to the fenced sinks `ledger` (irreversible: the task's
default `fence_risk`) and `search-index` (deferrable: committed once the lease
store answers again if it is away), in a SQLite file shared by the workers.
The task prints its steps as JSON lines (tests/integrations/test_celery.py
reads them). Settings come from the environment: FENCEWATCH_REDIS_URL,
FENCEWATCH_BOOTSTRAP_SERVERS, FENCEWATCH_TOPIC (ownership.events), FENCEWATCH_FENCES_DB,
FENCEWATCH_VISIBILITY_S (3), FENCEWATCH_FENCE_TTL (the lease; default: the
visibility timeout), FENCEWATCH_BUSY_S (0, per worker), FENCEWATCH_BUSY_UNTIL
(a file whose first byte, once non-zero, ends the busy call early: the
tests release the worker once the second one committed, however long a
loaded machine took to start it).

A redelivered message takes the task's key over even while the first
delivery's lease is live (give FENCEWATCH_FENCE_TTL=30 to see it: the
redelivery, not the lease's expiry, displaces the first worker).
"""

from __future__ import annotations

import json
import mmap
import os
import sys
import time
from functools import cache
from pathlib import Path
from typing import Any

from celery import Celery, signals

from fencewatch import (
    FencedSink,
    OwnershipReporter,
    ReporterSettings,
    SqlLeaseStore,
    StaleOwner,
    open_database,
)
from fencewatch.integrations.celery import FencedTask, configure

VISIBILITY_S = float(os.environ.get("FENCEWATCH_VISIBILITY_S", "3"))
# The lease; unset: the visibility timeout. Longer, the redelivery itself
# displaces a first delivery whose lease is still live.
FENCE_TTL = (
    float(os.environ["FENCEWATCH_FENCE_TTL"]) if "FENCEWATCH_FENCE_TTL" in os.environ else None
)
BUSY_S = float(os.environ.get("FENCEWATCH_BUSY_S", "0"))
BUSY_UNTIL = os.environ.get("FENCEWATCH_BUSY_UNTIL")

app = Celery(
    "celery_app", broker=os.environ.get("FENCEWATCH_REDIS_URL", "redis://127.0.0.1:6379/0")
)
app.conf.update(
    task_acks_late=True,
    task_default_queue="exports",
    worker_prefetch_multiplier=1,
    # Task prints are the example's output, not log records.
    worker_redirect_stdouts=False,
    broker_transport_options={
        "visibility_timeout": VISIBILITY_S,
        # Sweep for expired unacknowledged messages every second (the default
        # is every 10 x 10 s), so a short visibility timeout is honoured.
        "unacked_restore_interval": 1,
        "unacked_restore_throttle": 1,
    },
)


@cache
def stores() -> tuple[SqlLeaseStore, FencedSink, FencedSink]:
    """The lease store and the destinations, one SQLite file (per process)."""
    fences_db = Path(os.environ["FENCEWATCH_FENCES_DB"])
    fences_db.parent.mkdir(parents=True, exist_ok=True)  # the store makes no directory
    db = open_database(f"sqlite:///{fences_db}")
    return SqlLeaseStore(db), FencedSink(db, name="ledger"), FencedSink(db, name="search-index")


def make_reporter(worker_id: str) -> OwnershipReporter:
    settings = ReporterSettings(
        os.environ["FENCEWATCH_BOOTSTRAP_SERVERS"],
        worker_id,
        topic=os.environ.get("FENCEWATCH_TOPIC", "ownership.events"),
    )
    return OwnershipReporter(settings, leases=stores()[0])


def hold_the_gil(seconds: float, until: str | None = None) -> None:
    """Busy for ``seconds`` without letting any other thread of this process
    run, like a long call into a C extension that never releases the GIL.
    Emulated in Python with a switch interval longer than the work: the
    interpreter then never asks this thread to hand the GIL over.

    ``until``: a file whose first byte, once non-zero, ends the call early.
    It is read through a shared memory map: indexing one keeps the GIL (a
    read or a stat would release it, and the lease keeper would renew)."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(seconds + 60)
    flag: mmap.mmap | None = None
    if until is not None:
        with open(until, "rb") as fh:
            flag = mmap.mmap(fh.fileno(), 1, access=mmap.ACCESS_READ)
    try:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if flag is not None and flag[0]:
                break
    finally:
        sys.setswitchinterval(old)
        if flag is not None:
            flag.close()


configure(app, make_reporter)


def say(step: str, **data: Any) -> None:
    print(json.dumps({"step": step, "pid": os.getpid(), **data}), flush=True)


@signals.task_postrun.connect
def _finished(task_id: str, state: str, **_: Any) -> None:
    # After FencedTask flushed the task's evidence to Kafka.
    say("task_done", task_id=task_id, state=state)


@app.task(base=FencedTask, bind=True, acks_late=True, fence_ttl=FENCE_TTL)
def export_report(self: FencedTask, day: str, work_seconds: float) -> str:
    run = self.owned
    worker = run.worker_id
    run.checkpoint(step="render")
    redelivered = bool((self.request.delivery_info or {}).get("redelivered"))
    say(
        "working",
        worker=worker,
        epoch=run.epoch,
        task_id=self.request.id,
        key=run.key,
        redelivered=redelivered,
    )
    if BUSY_S:
        hold_the_gil(BUSY_S, BUSY_UNTIL)  # alive and running, but the keeper cannot renew
        say("busy_done", worker=worker, epoch=run.epoch, lost=run.lost.is_set())
    time.sleep(work_seconds)  # rendering: where a worker may stall
    _, ledger, search = stores()
    body = json.dumps({"day": day, "by": worker}).encode()
    try:
        out = run.effect(ledger, f"publish report {day}", body)  # irreversible
    except StaleOwner as exc:
        say(
            "stale",
            worker=worker,
            epoch=run.epoch,
            current_epoch=exc.current_epoch,
            reason=exc.reason,
        )
        raise
    say("effect", worker=worker, epoch=run.epoch, status=out.status)
    # An index may wait for the lease store: committed later if it is away.
    run.effect(search, f"index report {day}", day.encode(), risk="deferrable")
    return out.status
