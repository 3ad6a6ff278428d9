"""Effect risk per LangGraph node (real langgraph, real SQLite checkpointer,
real broker): with the lease store too slow, a default (irreversible) node
fails closed and a @fenced(risk="deferrable") node goes on, its effect
committed once the store answers."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

import pytest
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph

from streams.errors import EffectRefused
from streams.fences import FencedSink, SqlLeaseStore, open_database
from streams.integrations.langgraph import GraphOwner, fenced
from streams.integrations.runs import OwnedRun
from streams.sdk import OwnershipReporter, ReporterSettings


class State(TypedDict, total=False):
    day: str
    status: str


def _graph(node: Callable[[State, Any], Any], conn: sqlite3.Connection) -> Any:
    g = StateGraph(State)
    g.add_node("act", node)
    g.add_edge(START, "act")
    g.add_edge("act", END)
    return g.compile(checkpointer=SqliteSaver(conn))


@pytest.mark.parametrize("risk", ["irreversible", "deferrable"])
def test_node_risk_decides_when_the_lease_store_is_too_slow(
    risk: str, tmp_path: Path, kafka_bootstrap: str, unique_topic: Callable[..., str]
) -> None:
    """Another connection holds the store's write lock past its timeout inside
    the node: irreversible raises EffectRefused out of the run and writes
    nothing; deferrable returns 'deferred', the graph finishes, and the effect
    is committed once the lock is let go."""
    path = tmp_path / "fences.db"
    db = open_database(f"sqlite:///{path}", timeout_s=0.3)
    sink = FencedSink(db, name="ledger")
    conn = sqlite3.connect(tmp_path / "graph.db", check_same_thread=False)
    holder: list[sqlite3.Connection] = []
    timers: list[threading.Timer] = []

    def act(state: State, run: OwnedRun) -> State:
        lock = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        lock.execute("BEGIN IMMEDIATE")
        holder.append(lock)
        timer = threading.Timer(1.0, lock.rollback)
        timers.append(timer)
        timer.start()
        out = run.effect(sink, f"publish {state['day']}", b"x")
        return {"status": out.status}

    node = fenced(act) if risk == "irreversible" else fenced(risk="deferrable")(act)
    settings = ReporterSettings(kafka_bootstrap, "alpha", topic=unique_topic())
    try:
        with OwnershipReporter(settings, leases=SqlLeaseStore(db)) as rep:
            owner = GraphOwner(rep, ttl=10)
            config = {"configurable": {"thread_id": f"t-{risk}"}}
            if risk == "irreversible":
                with pytest.raises(EffectRefused) as info:
                    owner.run(_graph(node, conn), {"day": "d1"}, config)
                assert info.value.reason == "store_unavailable"
                timers[0].join(10)
                assert sink.effects(f"langgraph/t-{risk}") == []
            else:
                final = owner.run(_graph(node, conn), {"day": "d1"}, config)
                assert final["status"] == "deferred"
                rows = sink.effects(f"langgraph/t-{risk}")
                assert [(r.effect_key, r.epoch) for r in rows] == [("publish d1", 1)]
    finally:
        for timer in timers:
            timer.join(10)
        for lock in holder:
            lock.close()
        conn.close()
        db.close()
