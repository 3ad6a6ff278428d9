"""LangGraph under an owner epoch: two real worker processes on one thread
(real langgraph, real SQLite checkpointer, real broker), the first frozen
with SIGSTOP past its lease inside its effect, after its owner's checks."""

from __future__ import annotations

import signal
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path

from langgraph.checkpoint.sqlite import SqliteSaver

from streams.demo.processes import Children
from streams.fences import FencedSink, open_database

from .conftest import pause_between_transactions, replay_topic, wait_step

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "langgraph_worker.py"
THREAD = "report-2026-07-26"
TTL = 1.5


def _worker(children: Children, tmp: Path, name: str, topic: str, bootstrap: str, send: float):
    argv = [
        sys.executable,
        str(EXAMPLE),
        "--bootstrap-servers",
        bootstrap,
        "--topic",
        topic,
        "--fences",
        str(tmp / "fences.db"),
        "--checkpoints",
        str(tmp / "graph.db"),
        "--thread",
        THREAD,
        "--worker",
        name,
        "--ttl",
        str(TTL),
        "--send-seconds",
        str(send),
    ]
    return children.start(
        name, argv, log_path=tmp / f"{name}.log", lines=children.lines, death_signal=signal.SIGKILL
    )


def test_stale_graph_worker_is_fenced_and_the_findings_show_the_rejected_attempt(
    children: Children, tmp_path: Path, kafka_bootstrap: str, unique_topic: Callable[..., str]
) -> None:
    """alpha is frozen past its lease while sending `publish` (its owner's
    checks and stamp already passed); beta resumes the thread from the
    checkpoint and publishes at epoch 2, then runs the deferrable `index`;
    alpha wakes, the ledger's compare-and-set refuses its publish (exit 3),
    and the detector reports stale_attempt, sink rejected."""
    topic = unique_topic()
    alpha = _worker(children, tmp_path, "alpha", topic, kafka_bootstrap, send=4)
    assert wait_step(children, "alpha", "sending", 60)["epoch"] == 1
    pause_between_transactions(alpha, tmp_path / "fences.db", tmp_path / "graph.db")
    beta = _worker(children, tmp_path, "beta", topic, kafka_bootstrap, send=0)
    done = wait_step(children, "beta", "done", 60)
    assert beta.wait(30) == 0, beta.tail()
    assert done["published_by"] == "beta"
    # beta did not redo `gather`: it resumed alpha's thread from its checkpoint.
    assert done["log"] == ["gather@1", "publish@2", "index@2"]
    alpha.resume()
    stale = wait_step(children, "alpha", "stale", 60)
    assert alpha.wait(30) == 3, alpha.tail()
    # Refused by the destination itself, not by alpha's owner.
    assert stale["current_epoch"] == 2 and "ledger refused" in stale["reason"]
    assert "stale_epoch" in stale["reason"]

    db = open_database(f"sqlite:///{tmp_path / 'fences.db'}")
    try:
        rows = FencedSink(db, name="ledger").effects(f"langgraph/{THREAD}")
    finally:
        db.close()
    assert [(r.effect_key, r.epoch) for r in rows] == [(f"publish report {THREAD}", 2)]

    with sqlite3.connect(tmp_path / "graph.db", check_same_thread=False) as conn:
        saved = SqliteSaver(conn).get_tuple({"configurable": {"thread_id": THREAD}})
    assert saved is not None

    replay = replay_topic(kafka_bootstrap, topic)
    assert replay.invalid_count == 0
    found = {
        (f.kind.value, f.stale_epoch, f.stale_worker, f.sink_outcome)
        for f in replay.latest_findings()
    }
    assert ("stale_attempt", 1, "alpha", "rejected") in found
    assert not any(kind == "stale_commit" for kind, *_ in found)
