"""Temporal against a real dev server (``temporal server start-dev``, the CLI
built once into the cache) and the real broker: an activity attempt frozen
past its start-to-close timeout while Temporal's retry runs and completes
wakes up, its effect is refused, and the detector reports the stale attempt."""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from streams.core.records import EventType
from streams.core.validate import parse_event
from streams.errors import StaleOwner
from streams.fences import FencedSink, SqlLeaseStore, open_database
from streams.fences.lease_claim import claim_epoch
from streams.integrations.temporal import FencedActivities, activity_key, owned
from streams.kafka.connection import KafkaConnection
from streams.kafka.reader import iter_topic
from streams.sdk import OwnershipReporter, ReporterSettings
from tests.support.temporal import temporal_server

from .conftest import replay_topic
from .test_docs_snippets import _run

DAY = "2026-07-26"
EFFECT = f"publish report {DAY}"


@pytest.fixture(scope="module")
def temporal_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One dev server for this module's tests, stopped (process group) after."""
    with temporal_server(tmp_path_factory.mktemp("temporal")) as address:
        yield address


@workflow.defn(name="PublishReport")
class PublishReport:
    """Runs ``publish_report`` once, retried by Temporal after a 3 s
    start-to-close timeout (0.2 s backoff, 3 attempts at most)."""

    @workflow.run
    async def run(self, day: str) -> int:
        result: int = await workflow.execute_activity(
            "publish_report",
            day,
            start_to_close_timeout=timedelta(seconds=3),
            retry_policy=RetryPolicy(
                initial_interval=timedelta(milliseconds=200), maximum_attempts=3
            ),
        )
        return result


def _worker(
    client: Client, queue_name: str, reporter: OwnershipReporter, fn: Callable[..., Any], **kw: Any
) -> Worker:
    return Worker(
        client,
        task_queue=queue_name,
        activities=[fn],
        activity_executor=ThreadPoolExecutor(4),
        interceptors=[FencedActivities(reporter)],
        workflow_runner=UnsandboxedWorkflowRunner(),
        **kw,
    )


def _events(bootstrap: str, topic: str) -> list[Any]:
    return [
        parse_event(v, key=k) for k, v, _p, _o in iter_topic(KafkaConnection(bootstrap), topic) if v
    ]


def test_a_frozen_attempt_that_wakes_after_the_retry_is_fenced_and_reported(
    temporal_address: str,
    kafka_bootstrap: str,
    unique_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    """Attempt 1 (worker alpha) heartbeats, then is frozen past its 3 s
    start-to-close timeout; Temporal retries on beta, whose attempt 2 claims
    epoch 2, publishes and completes the workflow. Alpha's attempt wakes,
    heartbeats and publishes: refused (StaleOwner); the ledger holds only
    epoch 2's row and the detector reports alpha's stale_activity and
    stale_attempt (sink rejected), no stale_commit."""
    topic = unique_topic()
    db_path = tmp_path / "fences.db"
    steps: queue.Queue[tuple[str, int, Any]] = queue.Queue()
    thaw = threading.Event()
    ledgers: dict[str, FencedSink] = {}

    @activity.defn(name="publish_report")
    def publish_report(day: str) -> int:
        run = owned()
        attempt = activity.info().attempt
        activity.heartbeat("rendered")
        steps.put(("started", attempt, (run.worker_id, run.epoch, run.key)))
        if attempt == 1:
            thaw.wait(60)  # frozen: Temporal times the attempt out and retries
            activity.heartbeat("woke")
        try:
            outcome = run.effect(ledgers[run.worker_id], f"publish report {day}", b"report")
        except StaleOwner as exc:
            steps.put(("stale", attempt, exc))
            raise
        steps.put(("committed", attempt, outcome.status))
        return attempt

    def step(name: str, timeout: float = 60) -> tuple[int, Any]:
        while True:
            got, attempt, detail = steps.get(timeout=timeout)
            if got == name:
                return attempt, detail

    def reporter(worker: str) -> OwnershipReporter:
        db = open_database(f"sqlite:///{db_path}")
        ledgers[worker] = FencedSink(db, name="ledger")
        settings = ReporterSettings(kafka_bootstrap, worker, topic=topic)
        return OwnershipReporter(settings, leases=SqlLeaseStore(db))

    alpha, beta = reporter("alpha"), reporter("beta")

    async def scenario() -> tuple[str, str, int]:
        client = await Client.connect(temporal_address)
        queue_name = f"reports-{topic}"
        # alpha runs one activity at a time: while attempt 1 is frozen it
        # polls for no other, so the retry goes to beta.
        first = _worker(
            client,
            queue_name,
            alpha,
            publish_report,
            workflows=[PublishReport],
            max_concurrent_activities=1,
        )
        async with first:
            handle = await client.start_workflow(
                PublishReport.run, DAY, id=f"publish-{topic}", task_queue=queue_name
            )
            attempt, (worker, epoch, _) = await asyncio.to_thread(step, "started")
            assert (attempt, worker, epoch) == (1, "alpha", 1)
            # Its own connection, as another worker process would have (one
            # client may not run two workers on one task queue).
            other = await Client.connect(temporal_address)
            async with _worker(other, queue_name, beta, publish_report):
                result = await handle.result()
                thaw.set()
                attempt, exc = await asyncio.to_thread(step, "stale")
                assert attempt == 1 and (exc.epoch, exc.current_epoch) == (1, 2)
        description = await handle.describe()
        return handle.id, description.run_id, result

    try:
        workflow_id, run_id, result = asyncio.run(scenario())
    finally:
        thaw.set()
        alpha.close()
        beta.close()
    assert result == 2  # the retry did the work

    key = f"temporal/default/{workflow_id}/{run_id}/1"
    db = open_database(f"sqlite:///{db_path}")
    try:
        rows = FencedSink(db, name="ledger").effects(key)
    finally:
        db.close()
    assert [(r.effect_key, r.epoch) for r in rows] == [(EFFECT, 2)]

    replay = replay_topic(kafka_bootstrap, topic)
    assert replay.invalid_count == 0
    found = {
        (f.kind.value, f.workflow_key, f.stale_epoch, f.stale_worker, f.sink_outcome)
        for f in replay.latest_findings()
    }
    assert ("stale_attempt", key, 1, "alpha", "rejected") in found
    assert ("stale_activity", key, 1, "alpha", None) in found
    assert not any(kind in ("stale_commit", "conflicting_commit") for kind, *_ in found)

    # The evidence: each attempt's acquisition at its attempt number; alpha's
    # refused publish after epoch 2 was acquired.
    events = [e for e in _events(kafka_bootstrap, topic) if e.workflow_key == key]
    acquired = [(e.epoch, e.worker_id) for e in events if e.type is EventType.LEASE_ACQUIRED]
    assert acquired == [(1, "alpha"), (2, "beta")]
    alpha_effects = [e for e in events if e.epoch == 1 and e.effect_key is not None]
    assert [e.type for e in alpha_effects] == [EventType.EFFECT_REJECTED]
    assert all(e.seq is not None for e in events)


def test_an_attempt_numbered_below_a_claimed_epoch_is_refused_until_one_passes_it(
    temporal_address: str,
    kafka_bootstrap: str,
    unique_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    """With epoch 2 already claimed for the activity's key (as after
    `temporal activity reset` restarted the count), attempts 1 and 2 fail
    with StaleOwner before the activity body runs; Temporal retries, attempt
    3 passes, runs once and publishes at epoch 3."""
    topic = unique_topic()
    db_path = tmp_path / "fences.db"
    ran: list[int] = []
    db = open_database(f"sqlite:///{db_path}")
    ledger = FencedSink(db, name="ledger")
    key = f"reports/{topic}"
    claim_epoch(SqlLeaseStore(db), key, 2, "earlier", 60)

    @activity.defn(name="publish_report")
    def publish_report(day: str) -> int:
        ran.append(activity.info().attempt)
        owned().effect(ledger, f"publish report {day}", b"report")
        return activity.info().attempt

    settings = ReporterSettings(kafka_bootstrap, "alpha", topic=topic)
    reporter = OwnershipReporter(settings, leases=SqlLeaseStore(db))

    async def scenario() -> int:
        client = await Client.connect(temporal_address)
        queue_name = f"reports-{topic}"
        async with Worker(
            client,
            task_queue=queue_name,
            workflows=[PublishReport],
            activities=[publish_report],
            activity_executor=ThreadPoolExecutor(2),
            interceptors=[FencedActivities(reporter, key=lambda info: key)],
            workflow_runner=UnsandboxedWorkflowRunner(),
        ):
            result: int = await client.execute_workflow(
                PublishReport.run, DAY, id=f"reset-{topic}", task_queue=queue_name
            )
            return result

    try:
        assert asyncio.run(scenario()) == 3
        reporter.close()
        rows = [(r.effect_key, r.epoch) for r in ledger.effects(key)]
    finally:
        db.close()
    assert ran == [3]
    assert rows == [(EFFECT, 3)]
    acquired = [
        (e.epoch, e.worker_id)
        for e in _events(kafka_bootstrap, topic)
        if e.type is EventType.LEASE_ACQUIRED
    ]
    assert acquired == [(3, "alpha")]


def test_an_async_activity_is_fenced_and_an_activity_left_out_runs_unowned(
    temporal_address: str,
    kafka_bootstrap: str,
    unique_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    """With activities={"publish_report"}: the async publish_report runs at
    epoch 1, its heartbeat reported as progress and its effect (off the event
    loop, as the docs advise) committed; another activity on the same worker
    gets no owner (owned() raises RuntimeError) and no evidence."""
    topic = unique_topic()
    db = open_database(f"sqlite:///{tmp_path / 'fences.db'}")
    ledger = FencedSink(db, name="ledger")
    unowned: list[str] = []

    @activity.defn(name="publish_report")
    async def publish_report(day: str) -> int:
        activity.heartbeat("rendered")
        run = owned()
        await asyncio.to_thread(run.effect, ledger, f"publish report {day}", b"report")
        return run.epoch

    @activity.defn(name="render")
    async def render(day: str) -> None:
        try:
            owned()
        except RuntimeError as exc:
            unowned.append(str(exc))

    reporter = OwnershipReporter(
        ReporterSettings(kafka_bootstrap, "alpha", topic=topic), leases=SqlLeaseStore(db)
    )

    async def scenario() -> tuple[int, str, str]:
        client = await Client.connect(temporal_address)
        queue_name = f"reports-{topic}"
        fence = FencedActivities(reporter, activities={"publish_report"}, progress_interval_s=0)
        async with Worker(
            client,
            task_queue=queue_name,
            workflows=[RenderThenPublish],
            activities=[render, publish_report],
            interceptors=[fence],
            workflow_runner=UnsandboxedWorkflowRunner(),
        ):
            handle = await client.start_workflow(
                RenderThenPublish.run, DAY, id=f"async-{topic}", task_queue=queue_name
            )
            epoch = await handle.result()
            return epoch, handle.id, (await handle.describe()).run_id

    try:
        epoch, workflow_id, run_id = asyncio.run(scenario())
        reporter.close()
        key = f"temporal/default/{workflow_id}/{run_id}/2"  # the second activity
        rows = [(r.effect_key, r.epoch) for r in ledger.effects(key)]
    finally:
        db.close()
    assert epoch == 1 and rows == [(EFFECT, 1)]
    assert len(unowned) == 1 and "FencedActivities" in unowned[0]
    events = _events(kafka_bootstrap, topic)
    assert {e.workflow_key for e in events} == {key}
    # The heartbeat's progress is reported on another thread: any order.
    assert sorted(e.type.value for e in events) == [
        "effect_attempted",
        "effect_committed",
        "lease_acquired",
        "lease_released",
        "progress",
    ]
    assert all(e.epoch == 1 and e.seq is not None for e in events)


@workflow.defn(name="RenderThenPublish")
class RenderThenPublish:
    """``render`` (activity 1, not fenced), then ``publish_report`` (activity 2)."""

    @workflow.run
    async def run(self, day: str) -> int:
        await workflow.execute_activity("render", day, start_to_close_timeout=timedelta(seconds=30))
        epoch: int = await workflow.execute_activity(
            "publish_report", day, start_to_close_timeout=timedelta(seconds=30)
        )
        return epoch


def test_the_temporal_lines_run_an_activity_attempt_as_epoch_one(
    temporal_address: str,
    kafka_bootstrap: str,
    unique_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    """The Temporal snippet of docs/integrations.md runs as written on a real
    worker: the activity's publish lands in the ledger at epoch 1 (its first
    attempt) under the activity's workflow key."""
    topic = unique_topic()
    db = open_database(f"sqlite:///{tmp_path / 'fences.db'}")
    seen: list[str] = []

    async def scenario(names: dict[str, Any]) -> tuple[str, str]:
        client = await Client.connect(temporal_address)
        names["client"] = client
        _run("Temporal", names, f"{kafka_bootstrap!r}, topic={topic!r}")
        worker: Worker = names["worker"]
        queue_name = worker.task_queue
        async with (
            Worker(
                client,
                task_queue=queue_name,
                workflows=[RunOnce],
                workflow_runner=UnsandboxedWorkflowRunner(),
            ),
            worker,
        ):
            handle = await client.start_workflow(
                RunOnce.run, DAY, id=f"docs-{topic}", task_queue=queue_name
            )
            await handle.result()
            return handle.id, (await handle.describe()).run_id

    names: dict[str, Any] = {
        "ledger": FencedSink(db, name="ledger"),
        "render": lambda day: f"report {day}".encode(),
        "db": db,
    }
    try:
        workflow_id, run_id = asyncio.run(scenario(names))
        names["reporter"].close()
        key = f"temporal/default/{workflow_id}/{run_id}/1"
        rows = FencedSink(db, name="ledger").effects(key)
        seen = [f"{r.effect_key}@{r.epoch}" for r in rows]
    finally:
        db.close()
    assert seen == [f"{EFFECT}@1"]


@workflow.defn(name="RunOnce")
class RunOnce:
    """The docs' activity, run once."""

    @workflow.run
    async def run(self, day: str) -> None:
        await workflow.execute_activity(
            "publish_report", day, start_to_close_timeout=timedelta(seconds=30)
        )


def test_activity_key_is_one_activity_execution() -> None:
    """The default key names the namespace, the workflow run and the activity
    id (a standalone activity: its own id and run id)."""
    from temporalio.testing import ActivityEnvironment

    info = ActivityEnvironment.default_info()
    assert activity_key(info) == (
        f"temporal/{info.workflow_namespace}/{info.workflow_id}/{info.workflow_run_id}"
        f"/{info.activity_id}"
    )
