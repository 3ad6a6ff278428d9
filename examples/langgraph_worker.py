#!/usr/bin/env python3
"""A LangGraph worker whose graph thread is owned and whose effect is fenced
(needs the `langgraph` extra; no model calls: every node is deterministic).

    FENCEWATCH_BOOTSTRAP_SERVERS=127.0.0.1:9092 python examples/langgraph_worker.py \
        --fences .run/fences.db --checkpoints .run/graph.db --thread report-2026-07-26 \
        --worker alpha [--ttl 2] [--tool-seconds 3] [--send-seconds 3] [--wait 30]
        [--topic ownership.events]

The graph: `gather` (counts the day's rows) → `publish` (renders the report —
a slow tool call — then publishes it through the fenced sink `ledger`, behind
a slow network: `--send-seconds` pass between the owner's checks and the
write) → `index` (a deferrable effect: it may commit later if the lease store
is away). The thread is the workflow key (`langgraph/<thread>`), owned for
`--ttl` seconds and renewed while the graph runs; the SQLite checkpointer
lets another worker resume the thread where it stopped.

The split brain, by hand (tests/integrations/test_langgraph.py runs it):

    python examples/langgraph_worker.py ... --worker alpha --send-seconds 5 &
    sleep 2; kill -STOP $!      # alpha freezes while sending `publish`, after the
                                # owner's checks passed; its lease runs out
    python examples/langgraph_worker.py ... --worker beta
                                # beta resumes the thread at `publish`, commits (epoch 2)
    kill -CONT %1; wait         # alpha wakes, the ledger's compare-and-set REFUSES it
    fencewatch audit --topic ownership.events   # reads FENCEWATCH_BOOTSTRAP_SERVERS too
                                # stale_attempt, epoch 1 (alpha), sink outcome: rejected

(With `--tool-seconds 5` instead, alpha freezes before the effect; when it
wakes its owner already knows the lease is lost: nothing is attempted, the
refusal is reported as `effect_rejected`, reason `lease_lost`.)

Each step is printed as a JSON line. Exit status: 0 when the graph finished
(the report is published), 3 when this worker was stale and the fence refused
its effect (or it noticed it was displaced), 2 on errors.
"""

from __future__ import annotations

import argparse
import json
import operator
import os
import sqlite3
import sys
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph

from fencewatch import (
    Database,
    FencedSink,
    FencewatchError,
    OwnershipReporter,
    Receipt,
    ReporterSettings,
    SqlLeaseStore,
    StaleOwner,
    open_database,
)
from fencewatch.integrations.langgraph import GraphOwner, fenced
from fencewatch.integrations.runs import OwnedRun


class Report(TypedDict, total=False):
    day: str
    rows: int
    published_by: str
    log: Annotated[list[str], operator.add]


def say(worker: str, step: str, **data: Any) -> None:
    print(json.dumps({"worker": worker, "step": step, **data}), flush=True)


class SlowNetwork:
    """A destination behind a slow network: ``seconds`` pass between the
    call and the write, after the owner's checks (a worker may stall there:
    only the destination's compare-and-set can still refuse it)."""

    def __init__(self, sink: FencedSink, worker: str, seconds: float) -> None:
        self.sink, self.worker, self.seconds = sink, worker, seconds
        self.name = sink.name
        self.max_payload_bytes = sink.max_payload_bytes

    def apply(self, key: str, epoch: int, effect_key: str, payload: bytes, **kw: Any) -> Receipt:
        say(self.worker, "sending", effect_key=effect_key, epoch=epoch, seconds=self.seconds)
        time.sleep(self.seconds)
        return self.sink.apply(key, epoch, effect_key, payload, **kw)


def build(db: Database, worker: str, tool_seconds: float, send_seconds: float) -> StateGraph:
    ledger = SlowNetwork(FencedSink(db, name="ledger"), worker, send_seconds)
    search = FencedSink(db, name="search-index")

    @fenced
    def gather(state: Report, run: OwnedRun) -> Report:
        say(worker, "node", node="gather", epoch=run.epoch)
        return {"rows": 7 * len(state["day"]), "log": [f"gather@{run.epoch}"]}

    @fenced  # irreversible (the default): a publication fails closed
    def publish(state: Report, run: OwnedRun) -> Report:
        say(worker, "tool_call", node="publish", epoch=run.epoch, seconds=tool_seconds)
        time.sleep(tool_seconds)  # rendering the report: where a worker may stall
        body = json.dumps({"day": state["day"], "rows": state["rows"], "by": worker}).encode()
        out = run.effect(ledger, f"publish report {state['day']}", body)
        say(worker, "effect", status=out.status, epoch=run.epoch)
        return {"published_by": worker, "log": [f"publish@{run.epoch}"]}

    @fenced(risk="deferrable")  # an index can be committed once the store is back
    def index(state: Report, run: OwnedRun) -> Report:
        out = run.effect(search, f"index report {state['day']}", state["day"].encode())
        say(worker, "effect", node="index", status=out.status, epoch=run.epoch)
        return {"log": [f"index@{run.epoch}"]}

    g = StateGraph(Report)
    g.add_node("gather", gather)
    g.add_node("publish", publish)
    g.add_node("index", index)
    g.add_edge(START, "gather")
    g.add_edge("gather", "publish")
    g.add_edge("publish", "index")
    g.add_edge("index", END)
    return g


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap-servers", default=os.environ.get("FENCEWATCH_BOOTSTRAP_SERVERS"))
    ap.add_argument("--topic", default="ownership.events")
    ap.add_argument("--fences", required=True, help="SQLite file: lease store and ledger")
    ap.add_argument("--checkpoints", required=True, help="SQLite file: LangGraph checkpoints")
    ap.add_argument("--thread", required=True)
    ap.add_argument("--worker", required=True)
    ap.add_argument("--ttl", type=float, default=2.0)
    ap.add_argument("--tool-seconds", type=float, default=0.0)
    ap.add_argument("--send-seconds", type=float, default=0.0)
    ap.add_argument("--wait", type=float, default=30.0, help="wait this long for a held thread")
    args = ap.parse_args()
    if not args.bootstrap_servers:
        print("give --bootstrap-servers or FENCEWATCH_BOOTSTRAP_SERVERS", file=sys.stderr)
        return 2

    for path in (args.fences, args.checkpoints):  # the store makes no directory
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    db = open_database(f"sqlite:///{args.fences}")
    conn = sqlite3.connect(args.checkpoints, check_same_thread=False, timeout=30)
    try:
        leases = SqlLeaseStore(db)
        settings = ReporterSettings(args.bootstrap_servers, args.worker, topic=args.topic)
        # Leaving the reporter's block flushes the evidence: say the outcome after it.
        with OwnershipReporter(settings, leases=leases) as reporter:
            graph = build(db, args.worker, args.tool_seconds, args.send_seconds).compile(
                checkpointer=SqliteSaver(conn)
            )
            owner = GraphOwner(reporter, ttl=args.ttl, wait_s=args.wait)
            config = {"configurable": {"thread_id": args.thread}}
            try:
                final = owner.run(graph, {"day": args.thread, "log": []}, config)
            except StaleOwner as exc:
                stale = exc
            else:
                stale = None
    except FencewatchError as exc:
        say(args.worker, "error", error=str(exc))
        return 2
    finally:
        conn.close()
        db.close()
    if stale is not None:
        say(args.worker, "stale", reason=stale.reason, current_epoch=stale.current_epoch)
        return 3
    say(args.worker, "done", published_by=final.get("published_by"), log=final["log"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
