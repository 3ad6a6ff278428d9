"""The lines docs/integrations.md tells an author to add run as written against
the real runtimes (opentelemetry-sdk, langgraph with its SQLite checkpointer,
Celery's task machinery in eager mode) and a real broker: each snippet is
executed with only the names it leaves to the author's own code defined."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from streams.fences import FencedSink, SqlLeaseStore, open_database
from streams.kafka.connection import KafkaConnection
from tests.fences.conftest import pg_dsn  # noqa: F401  (the session's PostgreSQL)

DOC = Path(__file__).resolve().parents[2] / "docs" / "integrations.md"


def _snippet(section: str) -> str:
    """The first ```python block under the ``## section`` heading."""
    text = DOC.read_text()
    match = re.search(rf"^## {re.escape(section)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert match, f"no section {section!r} in {DOC.name}"
    block = re.search(r"```python\n(.*?)```", match.group(1), re.S)
    assert block, f"no python block in section {section!r}"
    return block.group(1)


def _run(section: str, names: dict[str, Any], broker: str | None = None) -> dict[str, Any]:
    """Execute the section's snippet with ``names``; the placeholder
    ``"broker:9092"`` becomes ``broker`` (source text), the rest is as written."""
    code = _snippet(section)
    if broker is not None:
        assert '"broker:9092"' in code
        code = code.replace('"broker:9092"', broker)
    names.setdefault("__name__", "docs")
    exec(compile(code, f"<{DOC.name}: {section}>", "exec"), names)
    return names


def test_the_opentelemetry_lines_forward_an_evidence_span_to_the_topic(
    kafka_bootstrap: str, unique_topic: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The OpenTelemetry snippet (its tracing, instrument, the span processor, an
    evidence span) runs as written, and its span reaches the topic as the
    effect_attempted it declares."""
    from streams.integrations import otel

    topic = unique_topic()
    monkeypatch.setenv("FENCEWATCH_BOOTSTRAP_SERVERS", kafka_bootstrap)
    code = _snippet("OpenTelemetry")
    # to_kafka's default topic is the production one: this test's instead.
    assert "to_kafka(bootstrap)" in code
    code = code.replace("to_kafka(bootstrap)", f"to_kafka(bootstrap, topic={topic!r})")
    names: dict[str, Any] = {"__name__": "docs"}
    try:
        exec(compile(code, f"<{DOC.name}: OpenTelemetry>", "exec"), names)
    finally:
        if "provider" in names:
            names["provider"].shutdown()
        otel.uninstrument()
    from streams.core.validate import parse_event
    from streams.kafka.reader import iter_topic

    events = [
        parse_event(v, key=k)
        for k, v, _p, _o in iter_topic(KafkaConnection(kafka_bootstrap), topic)
        if v
    ]
    assert [(e.type.value, e.workflow_key, e.epoch, e.worker_id, e.effect_key) for e in events] == [
        ("effect_attempted", "tenant/otel-export/2026-07-26", 1, "alpha", "release-index")
    ]


def test_the_langgraph_lines_run_the_thread_under_an_epoch_and_fence_the_effect(
    kafka_bootstrap: str, unique_topic: Callable[..., str], tmp_path: Path
) -> None:
    """The LangGraph snippet (a @fenced node, a SQLite checkpointer, GraphOwner.run
    on the thread) runs as written: the ledger holds the publish at epoch 1
    under the thread's workflow key."""
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, StateGraph
    from typing_extensions import TypedDict

    from streams.sdk import OwnershipReporter, ReporterSettings

    class State(TypedDict, total=False):
        day: str
        published: bool

    db = open_database(f"sqlite:///{tmp_path / 'fences.db'}")
    conn = sqlite3.connect(tmp_path / "graph.db", check_same_thread=False)
    builder = StateGraph(State)
    builder.add_edge(START, "publish")
    builder.add_edge("publish", END)
    settings = ReporterSettings(kafka_bootstrap, "alpha", topic=unique_topic())
    try:
        with OwnershipReporter(settings, leases=SqlLeaseStore(db)) as reporter:
            names = {
                "ledger": FencedSink(db, name="ledger"),
                "render": lambda state: repr(state).encode(),
                "builder": builder,
                "SqliteSaver": SqliteSaver,
                "conn": conn,
                "reporter": reporter,
                "day": "2026-07-26",
            }
            _run("LangGraph", names)
        rows = FencedSink(db, name="ledger").effects("langgraph/2026-07-26")
        assert [(r.effect_key, r.epoch) for r in rows] == [("publish report 2026-07-26", 1)]
    finally:
        conn.close()
        db.close()


def test_the_celery_lines_run_a_fenced_task_whose_effects_are_stamped(
    kafka_bootstrap: str, unique_topic: Callable[..., str], tmp_path: Path
) -> None:
    """The Celery snippet (configure, a FencedTask with acks_late, a checkpoint,
    an irreversible and a deferrable effect) runs as written in eager mode: both
    effects are in their sinks at the task's epoch."""
    from celery import Celery

    from streams.sdk import OwnershipReporter, ReporterSettings

    topic = unique_topic()
    db = open_database(f"sqlite:///{tmp_path / 'fences.db'}")
    app = Celery("docs", broker="memory://")
    app.conf.task_always_eager = True
    ledger, search = FencedSink(db, name="ledger"), FencedSink(db, name="search-index")

    def settings(bootstrap: str, worker_id: str) -> ReporterSettings:
        return ReporterSettings(bootstrap, worker_id, topic=topic)

    names = {
        "app": app,
        "OwnershipReporter": OwnershipReporter,
        "ReporterSettings": settings,
        "SqlLeaseStore": SqlLeaseStore,
        "db": db,
        "ledger": ledger,
        "search": search,
        "render": lambda day: day.encode(),
    }
    try:
        _run("Celery", names, repr(kafka_bootstrap))
        result = names["export_report"].apply(args=["2026-07-26"], task_id="t-1")
        assert result.state == "SUCCESS", result.traceback
        key = "celery/docs.export_report/t-1"
        found = [(r.effect_key, r.epoch) for s in (ledger, search) for r in s.effects(key)]
        assert found == [("publish report 2026-07-26", 1), ("index 2026-07-26", 1)]
    finally:
        from streams.integrations.celery import _close_reporters

        _close_reporters()
        db.close()


def test_the_langgraph_checkpoint_lines_stamp_and_report_each_checkpoint(
    kafka_bootstrap: str,
    unique_topic: Callable[..., str],
    pg_dsn: str,  # noqa: F811
) -> None:
    """The LangGraph checkpoints snippet (FencedCheckpointer around a
    PostgresSaver, GraphOwner.run) runs as written on a real PostgreSQL: the
    thread's checkpoints carry epoch 1, and each was reported committed to
    the `checkpoints` sink under the thread's key."""
    import uuid

    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.graph import END, START, StateGraph
    from typing_extensions import TypedDict

    from streams.core.records import EventType
    from streams.core.validate import parse_event
    from streams.kafka.reader import iter_topic
    from streams.sdk import OwnershipReporter, ReporterSettings

    class Draft(TypedDict, total=False):
        topic: str
        text: str

    builder = StateGraph(Draft)
    builder.add_node("write", lambda s: {"text": f"on {s['topic']}"})
    builder.add_edge(START, "write")
    builder.add_edge("write", END)
    topic = unique_topic()
    prefix = f"t{uuid.uuid4().hex[:10]}_"
    leases = SqlLeaseStore(open_database(pg_dsn), prefix=prefix)
    # The snippet's thread id is fixed: start from an empty thread.
    with PostgresSaver.from_conn_string(pg_dsn) as saver:
        saver.setup()
        saver.delete_thread("draft-7")
    try:
        with OwnershipReporter(
            ReporterSettings(kafka_bootstrap, "alpha", topic=topic), leases=leases
        ) as reporter:
            _run(
                "LangGraph checkpoints",
                {"PG_URL": pg_dsn, "builder": builder, "reporter": reporter},
            )
        with PostgresSaver.from_conn_string(pg_dsn) as saver:
            saved = list(saver.list({"configurable": {"thread_id": "draft-7"}}))
    finally:
        leases.close()
    assert saved and {t.metadata["fencewatch_epoch"] for t in saved} == {1}  # type: ignore[typeddict-item]
    events = [
        parse_event(v, key=k)
        for k, v, _p, _o in iter_topic(KafkaConnection(kafka_bootstrap), topic)
        if v
    ]
    commits = [
        e.effect_key
        for e in events
        if e.type == EventType.EFFECT_COMMITTED and e.sink == "checkpoints"
    ]
    assert {e.workflow_key for e in events} == {"langgraph/draft-7"}
    assert len(commits) == len(saved) and "checkpoint after start" in commits


def test_the_celery_redelivery_lines_take_the_key_from_a_live_holder(
    kafka_bootstrap: str, unique_topic: Callable[..., str], tmp_path: Path
) -> None:
    """The Celery redelivery snippet runs as written (eager mode): a delivery
    marked redelivered (the header the Redis transport sets) takes the task's
    key at epoch 2 from a live holder at epoch 1, whose effect is then refused."""
    from celery import Celery

    from streams.errors import StaleOwner
    from streams.integrations.runs import OwnedRun
    from streams.sdk import OwnershipReporter, ReporterSettings

    topic = unique_topic()
    db = open_database(f"sqlite:///{tmp_path / 'fences.db'}")
    app = Celery("docs", broker="memory://")
    app.conf.task_always_eager = True
    ledger = FencedSink(db, name="ledger")

    def settings(bootstrap: str, worker_id: str) -> ReporterSettings:
        return ReporterSettings(bootstrap, worker_id, topic=topic)

    names = {
        "app": app,
        "OwnershipReporter": OwnershipReporter,
        "ReporterSettings": settings,
        "SqlLeaseStore": SqlLeaseStore,
        "db": db,
        "ledger": ledger,
        "render": lambda day: day.encode(),
    }
    first = OwnershipReporter(
        ReporterSettings(kafka_bootstrap, "first", topic=topic), leases=SqlLeaseStore(db)
    )
    try:
        _run("Celery redelivery", names, repr(kafka_bootstrap))
        # Were the redelivery to wait for the holder (600 s), fail at once instead.
        names["export_report"].fence_wait_s = 0
        names["export_report"].max_retries = 0
        key = "celery/docs.export_report/t-1"
        with first.own(key, ttl=600) as holder:
            result = names["export_report"].apply(
                args=["2026-07-26"], task_id="t-1", headers={"redelivered": True}
            )
            assert result.state == "SUCCESS", result.traceback
            with pytest.raises(StaleOwner):
                OwnedRun(holder).effect(ledger, "publish report 2026-07-26", b"late")
        assert [(r.effect_key, r.epoch) for r in ledger.effects(key)] == [
            ("publish report 2026-07-26", 2)
        ]
    finally:
        from streams.integrations.celery import _close_reporters

        first.close()
        _close_reporters()
        db.close()
