"""A Celery app with one fenced task: the classic acks_late duplicate, caught
(needs the `celery` extra and a Redis server).

    export FENCEWATCH_REDIS_URL=redis://127.0.0.1:6379/0 KAFKA_BOOTSTRAP=127.0.0.1:9092
    export FENCEWATCH_FENCES_DB=.run/celery-fences.db FENCEWATCH_VISIBILITY_S=3
    cd examples
    celery -A celery_app worker --pool=solo -n alpha@%h -Q exports &     # worker 1
    python -c 'import celery_app; celery_app.export_report.delay("2026-07-26", 6)'
    kill -STOP %1          # alpha stalls inside the task (a GC pause, a frozen VM)
    celery -A celery_app worker --pool=solo -n beta@%h -Q exports &      # worker 2
                           # 3 s later Redis gives the unacknowledged message to beta,
                           # beta takes the lease at epoch 2 and publishes
    kill -CONT %1          # alpha wakes: its publish is REFUSED by the fence
    fencewatch audit --topic ownership.events --bootstrap-servers $KAFKA_BOOTSTRAP
                           # stale_attempt, epoch 1 (alpha@...), sink outcome: rejected

`export_report` runs under `FencedTask`: the lease of its workflow key (the
task id, so the redelivered copy competes for the same key) for as long as
the broker's visibility timeout, renewed while it runs; its effect goes
through the fenced sink `ledger` (a SQLite file shared by the workers). The
task prints its steps as JSON lines (tests/integrations/test_celery.py reads
them). Settings come from the environment: FENCEWATCH_REDIS_URL,
KAFKA_BOOTSTRAP, FENCEWATCH_TOPIC (ownership.events), FENCEWATCH_FENCES_DB,
FENCEWATCH_VISIBILITY_S (3).
"""

from __future__ import annotations

import json
import os
import time
from functools import cache
from typing import Any

from celery import Celery, signals

from streams.errors import StaleOwner
from streams.fences import FencedSink, SqlLeaseStore, open_database
from streams.integrations.celery import FencedTask, configure
from streams.sdk import OwnershipReporter, ReporterSettings

VISIBILITY_S = float(os.environ.get("FENCEWATCH_VISIBILITY_S", "3"))

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
def stores() -> tuple[SqlLeaseStore, FencedSink]:
    """The lease store and the destination, one SQLite file (per process)."""
    db = open_database(f"sqlite:///{os.environ['FENCEWATCH_FENCES_DB']}")
    return SqlLeaseStore(db), FencedSink(db, name="ledger")


def make_reporter(worker_id: str) -> OwnershipReporter:
    settings = ReporterSettings(
        os.environ["KAFKA_BOOTSTRAP"],
        worker_id,
        topic=os.environ.get("FENCEWATCH_TOPIC", "ownership.events"),
    )
    return OwnershipReporter(settings, leases=stores()[0])


configure(app, make_reporter)


def say(step: str, **data: Any) -> None:
    print(json.dumps({"step": step, "pid": os.getpid(), **data}), flush=True)


@signals.task_postrun.connect
def _finished(task_id: str, state: str, **_: Any) -> None:
    # After FencedTask flushed the task's evidence to Kafka.
    say("task_done", task_id=task_id, state=state)


@app.task(base=FencedTask, bind=True, acks_late=True)
def export_report(self: FencedTask, day: str, work_seconds: float) -> str:
    run = self.owned
    worker = run.worker_id
    run.checkpoint(step="render")
    say("working", worker=worker, epoch=run.epoch, task_id=self.request.id, key=run.key)
    time.sleep(work_seconds)  # rendering: where a worker may stall
    body = json.dumps({"day": day, "by": worker}).encode()
    try:
        receipt = run.effect(stores()[1], f"publish report {day}", body)
    except StaleOwner as exc:
        say("stale", worker=worker, epoch=run.epoch, current_epoch=exc.current_epoch)
        raise
    say("effect", worker=worker, epoch=run.epoch, status=receipt.status)
    return receipt.status
