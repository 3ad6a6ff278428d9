"""The fenced LangGraph checkpointer: checkpoint writes under the thread's
owner epoch, on the real savers (SQLite, PostgreSQL, sync and async), and
langgraph issue 8796 reproduced with two real processes on PostgresSaver."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypedDict

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph

from streams.demo.processes import Child, Children
from streams.errors import StaleOwner
from streams.fences import SqlLeaseStore, open_database
from streams.integrations.langgraph import CONFIG_KEY
from streams.integrations.langgraph_checkpoint import EPOCH_FIELD, FencedCheckpointer
from streams.integrations.runs import OwnedRun
from streams.sdk import OwnershipReporter, ReporterSettings
from tests.fences.conftest import pg_dsn  # noqa: F401  (the session's PostgreSQL)

from .conftest import replay_topic, wait_step

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "langgraph_checkpoints.py"


class Draft(TypedDict, total=False):
    topic: str
    plan: str
    text: str


def _graph(checkpointer: BaseCheckpointSaver[Any]) -> Any:
    """plan -> draft, stopping before draft (a run paused between steps)."""
    g = StateGraph(Draft)
    g.add_node("plan", lambda s: {"plan": f"outline of {s['topic']}"})
    g.add_node("draft", lambda s: {"text": f"{s['plan']}, written"})
    g.add_edge(START, "plan")
    g.add_edge("plan", "draft")
    g.add_edge("draft", END)
    return g.compile(checkpointer=checkpointer, interrupt_before=["draft"])


def _forks(tuples: list[CheckpointTuple]) -> dict[str | None, list[int]]:
    """Parent checkpoint id -> the epochs of its children, where it has two or more."""
    children: dict[str | None, list[int]] = defaultdict(list)
    for t in tuples:
        parent = t.parent_config["configurable"]["checkpoint_id"] if t.parent_config else None
        children[parent].append(int(t.metadata[EPOCH_FIELD]))  # type: ignore[literal-required]
    return {p: sorted(e) for p, e in children.items() if len(e) > 1}


def _found(bootstrap: str, topic: str) -> set[tuple[str, int | None, str | None, str | None]]:
    replay = replay_topic(bootstrap, topic)
    assert replay.invalid_count == 0
    return {
        (f.kind.value, f.stale_epoch, f.stale_worker, f.sink_outcome)
        for f in replay.latest_findings()
    }


class _Two:
    """Two workers' reporters on one lease store: alpha owns the thread,
    then beta takes it over (a new epoch, alpha displaced but unaware)."""

    def __init__(self, leases: SqlLeaseStore, bootstrap: str, topic: str, thread: str) -> None:
        self.thread = thread
        self.key = f"langgraph/{thread}"
        self.alpha = OwnershipReporter(
            ReporterSettings(bootstrap, "alpha", topic=topic), leases=leases
        )
        self.beta = OwnershipReporter(
            ReporterSettings(bootstrap, "beta", topic=topic), leases=leases
        )

    def config(self, reporter: OwnershipReporter, **own: Any) -> dict[str, Any]:
        owner = reporter.own(self.key, ttl=30, **own)
        return {"configurable": {"thread_id": self.thread, CONFIG_KEY: OwnedRun(owner)}}

    def close(self) -> None:
        self.alpha.close()
        self.beta.close()


@pytest.fixture
def sqlite_backend(tmp_path: Path) -> Iterator[tuple[SqlLeaseStore, BaseCheckpointSaver[Any]]]:
    """A SQLite lease store and a SqliteSaver in another file."""
    leases = SqlLeaseStore(open_database(f"sqlite:///{tmp_path / 'fences.db'}"))
    conn = sqlite3.connect(tmp_path / "graph.db", check_same_thread=False, timeout=30)
    try:
        yield leases, SqliteSaver(conn)
    finally:
        conn.close()
        leases.close()


@pytest.fixture
def postgres_backend(pg_dsn: str) -> Iterator[tuple[SqlLeaseStore, BaseCheckpointSaver[Any]]]:  # noqa: F811
    """A PostgreSQL lease store (this test's tables) and a PostgresSaver."""
    leases = SqlLeaseStore(open_database(pg_dsn), prefix=f"t{uuid.uuid4().hex[:10]}_")
    with PostgresSaver.from_conn_string(pg_dsn) as saver:
        saver.setup()
        try:
            yield leases, saver
        finally:
            leases.close()


@pytest.mark.parametrize("backend", ["sqlite_backend", "postgres_backend"])
def test_a_displaced_epoch_writes_no_checkpoint_and_the_owner_continues_the_chain(
    backend: str,
    request: pytest.FixtureRequest,
    kafka_bootstrap: str,
    unique_topic: Callable[..., str],
) -> None:
    """alpha runs `plan` (its checkpoints stamped epoch 1); beta takes the
    thread over at epoch 2; alpha's resume is refused with StaleOwner and
    writes nothing; beta resumes and finishes; one chain, no fork, and the
    detector reports alpha's stale_attempt with the sink's rejection."""
    leases, saver = request.getfixturevalue(backend)
    topic = unique_topic()
    two = _Two(leases, kafka_bootstrap, topic, f"t-{uuid.uuid4().hex[:8]}")
    fenced = FencedCheckpointer(saver, max_threads=2)
    graph = _graph(fenced)
    try:
        as_alpha = two.config(two.alpha)
        graph.invoke({"topic": "fences"}, as_alpha)
        stamped = saver.get_tuple({"configurable": {"thread_id": two.thread}})
        assert stamped is not None
        assert (stamped.metadata[EPOCH_FIELD], stamped.metadata["fencewatch_worker"]) == (  # type: ignore[typeddict-item]
            1,
            "alpha",
        )
        before = len(list(saver.list({"configurable": {"thread_id": two.thread}})))

        as_beta = two.config(two.beta, take_over=True)
        with pytest.raises(StaleOwner) as refused:
            graph.invoke(None, as_alpha)
        assert refused.value.current_epoch == 2
        assert len(list(saver.list({"configurable": {"thread_id": two.thread}}))) == before

        final = graph.invoke(None, as_beta)
        assert final["text"] == "outline of fences, written"
        tuples = list(saver.list({"configurable": {"thread_id": two.thread}}))
        assert _forks(tuples) == {}
        assert tuples[0].metadata[EPOCH_FIELD] == 2  # type: ignore[typeddict-item]
        two.alpha.flush()
        two.beta.flush()
    finally:
        two.close()
        fenced.close()
    found = _found(kafka_bootstrap, topic)
    assert ("stale_attempt", 1, "alpha", "rejected") in found
    assert not any(kind in ("stale_commit", "conflicting_commit") for kind, *_ in found)


def test_async_writes_of_a_displaced_epoch_are_refused_on_async_postgres(
    pg_dsn: str,  # noqa: F811
    kafka_bootstrap: str,
    unique_topic: Callable[..., str],
) -> None:
    """The same on AsyncPostgresSaver through ainvoke (aput, aput_writes): the
    displaced epoch's resume raises StaleOwner and writes nothing; the new
    owner finishes the thread on one chain."""
    topic = unique_topic()
    leases = SqlLeaseStore(open_database(pg_dsn), prefix=f"t{uuid.uuid4().hex[:10]}_")
    two = _Two(leases, kafka_bootstrap, topic, f"t-{uuid.uuid4().hex[:8]}")
    thread = {"configurable": {"thread_id": two.thread}}

    async def scenario() -> tuple[int, int, list[CheckpointTuple]]:
        async with AsyncPostgresSaver.from_conn_string(pg_dsn) as saver:
            await saver.setup()
            fenced = FencedCheckpointer(saver)
            graph = _graph(fenced)
            as_alpha = two.config(two.alpha)
            await graph.ainvoke({"topic": "fences"}, as_alpha)
            before = [t async for t in saver.alist(thread)]
            as_beta = two.config(two.beta, take_over=True)
            with pytest.raises(StaleOwner):
                await graph.ainvoke(None, as_alpha)
            after_refusal = [t async for t in saver.alist(thread)]
            await graph.ainvoke(None, as_beta)
            fenced.close()
            return len(before), len(after_refusal), [t async for t in saver.alist(thread)]

    try:
        before, after_refusal, tuples = asyncio.run(scenario())
        two.alpha.flush()
    finally:
        two.close()
        leases.close()
    assert after_refusal == before
    assert _forks(tuples) == {} and tuples[0].metadata[EPOCH_FIELD] == 2  # type: ignore[typeddict-item]
    assert ("stale_attempt", 1, "alpha", "rejected") in _found(kafka_bootstrap, topic)


def test_a_checkpoint_write_fails_closed_while_the_lease_store_does_not_answer(
    tmp_path: Path, kafka_bootstrap: str, unique_topic: Callable[..., str]
) -> None:
    """While another process holds the SQLite lease store's write lock past its
    0.3 s timeout, the run's checkpoint write fails with StoreUnavailable and
    the saver holds nothing new; once the store answers the run resumes from
    its last checkpoint and finishes."""
    from streams.errors import StoreUnavailable

    fences = tmp_path / "fences.db"
    leases = SqlLeaseStore(open_database(f"sqlite:///{fences}", timeout_s=0.3))
    conn = sqlite3.connect(tmp_path / "graph.db", check_same_thread=False, timeout=30)
    saver = SqliteSaver(conn)
    reporter = OwnershipReporter(
        ReporterSettings(kafka_bootstrap, "alpha", topic=unique_topic()), leases=leases
    )
    fenced = FencedCheckpointer(saver)
    graph = _graph(fenced)
    thread = {"configurable": {"thread_id": "outage"}}
    try:
        with reporter.own("langgraph/outage", ttl=60) as owner:
            config = {**thread["configurable"], CONFIG_KEY: OwnedRun(owner)}
            graph.invoke({"topic": "fences"}, {"configurable": config})
            before = len(list(saver.list(thread)))
            blocker = sqlite3.connect(fences, isolation_level=None)
            blocker.execute("BEGIN IMMEDIATE")
            try:
                with pytest.raises(StoreUnavailable):
                    graph.invoke(None, {"configurable": config})
                assert len(list(saver.list(thread))) == before
            finally:
                blocker.execute("ROLLBACK")
                blocker.close()
            final = graph.invoke(None, {"configurable": config})
        assert final["text"] == "outline of fences, written"
    finally:
        fenced.close()
        reporter.close()
        leases.close()
        conn.close()


def test_the_lease_store_connections_stay_bounded_across_many_runs(
    pg_dsn: str,  # noqa: F811
    kafka_bootstrap: str,
    unique_topic: Callable[..., str],
) -> None:
    """LangGraph writes checkpoints from a new thread pool per run; through the
    fenced checkpointer (max_threads=2) eight runs open no more lease-store
    connections than its two threads, the keeper's and the caller's."""
    import psycopg
    from langgraph.checkpoint.memory import InMemorySaver

    app = f"fw{uuid.uuid4().hex[:12]}"
    dsn = f"{pg_dsn}{'&' if '?' in pg_dsn else '?'}application_name={app}"
    leases = SqlLeaseStore(open_database(dsn), prefix=f"t{uuid.uuid4().hex[:10]}_")
    reporter = OwnershipReporter(
        ReporterSettings(kafka_bootstrap, "alpha", topic=unique_topic()), leases=leases
    )
    fenced = FencedCheckpointer(InMemorySaver(), max_threads=2)
    graph = _graph(fenced)
    try:
        for run in range(8):
            owner = reporter.own(f"langgraph/bound-{run}", ttl=30)
            with owner:
                config = {
                    "configurable": {"thread_id": f"bound-{run}", CONFIG_KEY: OwnedRun(owner)}
                }
                graph.invoke({"topic": "fences"}, config)
        with psycopg.connect(pg_dsn) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (app,)
            ).fetchone()
    finally:
        fenced.close()
        reporter.close()
        leases.close()
    assert row is not None and 1 <= row[0] <= 2 + 2


# -- langgraph issue 8796: two processes resume one thread on PostgresSaver --


def _worker(
    children: Children,
    tmp: Path,
    name: str,
    dsn: str,
    prefix: str,
    thread: str,
    topic: str,
    bootstrap: str,
    *,
    work: float,
    fence: bool,
) -> Child:
    argv = [sys.executable, str(EXAMPLE), "--db", dsn, "--prefix", prefix, "--thread", thread]
    argv += ["--worker", name, "--topic", topic, "--ttl", "2", "--work-seconds", str(work)]
    argv += [] if fence else ["--no-fence"]
    env = {**os.environ, "FENCEWATCH_BOOTSTRAP_SERVERS": bootstrap}
    return children.start(
        name,
        argv,
        log_path=tmp / f"{name}.log",
        lines=children.lines,
        env=env,
        death_signal=signal.SIGKILL,
    )


def _pause_outside_lease_lock(child: Child, dsn: str, prefix: str, key: str) -> None:
    """SIGSTOP ``child`` at a moment it holds no lock on the thread's lease
    row (its keeper renews in short transactions): a worker frozen inside one
    would block the next owner's acquisition, which is not the story here."""
    import psycopg

    for _ in range(100):
        child.pause()
        with psycopg.connect(dsn) as conn:
            try:
                conn.execute(
                    f"SELECT 1 FROM {prefix}leases WHERE workflow_key = %s FOR UPDATE NOWAIT",
                    (key,),
                )
                return
            except psycopg.errors.LockNotAvailable:
                pass
        child.resume()
        time.sleep(0.02)
    pytest.fail(f"{child.name} held its lease row at every try", pytrace=False)


@pytest.mark.parametrize("fence", [False, True], ids=["unfenced", "fenced"])
def test_two_processes_resuming_one_thread_fork_the_chain_unless_fenced(
    fence: bool,
    pg_dsn: str,  # noqa: F811
    children: Children,
    tmp_path: Path,
    kafka_bootstrap: str,
    unique_topic: Callable[..., str],
) -> None:
    """Issue 8796 with two real processes on PostgresSaver: alpha resumes the
    thread, runs `plan` and is frozen inside `draft` past its 2 s lease; beta
    resumes the same checkpoint and writes the next one at epoch 2; alpha
    wakes. Unfenced, alpha's checkpoint is written too: two children of one
    parent in the saver, and the detector reports stale_commit and
    conflicting_commit (epochs 1, 2). Fenced, alpha's write is refused (exit
    3): one chain, stale_attempt with the sink's rejection, no commit found stale."""
    topic = unique_topic()
    prefix = f"t{uuid.uuid4().hex[:10]}_"
    thread = f"t-{uuid.uuid4().hex[:8]}"
    with PostgresSaver.from_conn_string(pg_dsn) as saver:
        saver.setup()  # once, before two processes race to create the tables
    common = (pg_dsn, prefix, thread, topic, kafka_bootstrap)
    alpha = _worker(children, tmp_path, "alpha", *common, work=4, fence=fence)
    wait_step(children, "alpha", "working", 60)
    _pause_outside_lease_lock(alpha, pg_dsn, prefix, f"langgraph/{thread}")
    beta = _worker(children, tmp_path, "beta", *common, work=0, fence=fence)
    assert wait_step(children, "beta", "done", 60)["text"].endswith("written by beta")
    assert beta.wait(30) == 0, beta.tail()
    alpha.resume()
    if fence:
        stale = wait_step(children, "alpha", "stale", 60)
        assert alpha.wait(30) == 3, alpha.tail()
        assert stale["current_epoch"] == 2
    else:
        assert wait_step(children, "alpha", "done", 60)["text"].endswith("written by alpha")
        assert alpha.wait(30) == 0, alpha.tail()

    with PostgresSaver.from_conn_string(pg_dsn) as saver:
        tuples = list(saver.list({"configurable": {"thread_id": thread}}))
    found = _found(kafka_bootstrap, topic)
    if fence:
        assert _forks(tuples) == {}
        assert ("stale_attempt", 1, "alpha", "rejected") in found
        assert not any(kind in ("stale_commit", "conflicting_commit") for kind, *_ in found)
    else:
        assert list(_forks(tuples).values()) == [[1, 2]]
        assert ("stale_commit", 1, "alpha", "committed") in found
        assert ("conflicting_commit", 1, "alpha", "committed") in found
