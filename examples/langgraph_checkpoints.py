#!/usr/bin/env python3
"""Two processes resume one LangGraph thread on PostgresSaver: the checkpoint
chain forks (langgraph issue 8796) unless the checkpointer is fenced (needs the
`langgraph` extra and a PostgreSQL server; no model calls).

    export FENCEWATCH_BOOTSTRAP_SERVERS=127.0.0.1:9092
    PG=postgresql://user@127.0.0.1:5432/db
    python examples/langgraph_checkpoints.py --db $PG --thread t1 --worker alpha \
        --work-seconds 5 &
    sleep 2; kill -STOP $!     # alpha freezes inside `draft`, after resuming the
                               # thread; its 2 s lease runs out
    python examples/langgraph_checkpoints.py --db $PG --thread t1 --worker beta
                               # beta resumes the same checkpoint, writes the next (epoch 2)
    kill -CONT %1; wait        # alpha wakes: its checkpoint write is REFUSED (exit 3);
                               # with --no-fence it is written: the chain forks
    fencewatch audit --topic ownership.events
                               # fenced: stale_attempt, epoch 1, sink outcome rejected
                               # --no-fence: stale_commit and conflicting_commit (1, 2)

The graph: `plan` → `draft` (sleeps `--work-seconds`: where a worker may stall)
→ END. Both the lease store (`--prefix` tables) and the checkpoints live in
the `--db` PostgreSQL database; the thread is the workflow key
(`langgraph/<thread>`), owned through GraphOwner for `--ttl` seconds. The
checkpointer is `FencedCheckpointer(PostgresSaver(...))`: each checkpoint is
stamped with the writer's epoch, refused from a displaced one (`--no-fence`:
only stamped and reported), and published as evidence with the parent
checkpoint as the effect key. Steps are printed as JSON lines
(tests/integrations/test_langgraph_checkpoint.py reads them). Exit status: 0
when the graph finished, 3 when this worker was refused as stale, 2 on errors.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, TypedDict

from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from fencewatch import (
    FencewatchError,
    OwnershipReporter,
    ReporterSettings,
    SqlLeaseStore,
    StaleOwner,
    open_database,
)
from fencewatch.integrations.langgraph import GraphOwner
from fencewatch.integrations.langgraph_checkpoint import FencedCheckpointer


class Draft(TypedDict, total=False):
    topic: str
    plan: str
    text: str


def say(worker: str, step: str, **data: Any) -> None:
    print(json.dumps({"worker": worker, "step": step, **data}), flush=True)


def build(worker: str, work_seconds: float) -> StateGraph[Draft]:
    def plan(state: Draft) -> Draft:
        return {"plan": f"outline of {state['topic']}"}

    def draft(state: Draft) -> Draft:
        say(worker, "working", node="draft", seconds=work_seconds)
        time.sleep(work_seconds)  # a model call: where a worker may stall
        return {"text": f"{state['plan']}, written by {worker}"}

    g = StateGraph(Draft)
    g.add_node("plan", plan)
    g.add_node("draft", draft)
    g.add_edge(START, "plan")
    g.add_edge("plan", "draft")
    g.add_edge("draft", END)
    return g


def run(args: argparse.Namespace, saver: PostgresSaver) -> int:
    db = open_database(args.db)
    try:
        leases = SqlLeaseStore(db, prefix=args.prefix)
        settings = ReporterSettings(args.bootstrap_servers, args.worker, topic=args.topic)
        # Leaving the reporter's block flushes the evidence: say the outcome after it.
        with OwnershipReporter(settings, leases=leases) as reporter:
            checkpointer = FencedCheckpointer(saver, enforce=not args.no_fence)
            graph: CompiledStateGraph[Draft] = build(args.worker, args.work_seconds).compile(
                checkpointer=checkpointer
            )
            config: Any = {"configurable": {"thread_id": args.thread}}
            owner = GraphOwner(reporter, ttl=args.ttl, wait_s=args.wait)
            try:
                final = owner.run(graph, {"topic": args.thread}, config)
            except StaleOwner as exc:
                stale: StaleOwner | None = exc
            else:
                stale = None
    finally:
        db.close()
    if stale is not None:
        say(args.worker, "stale", reason=stale.reason, current_epoch=stale.current_epoch)
        return 3
    say(args.worker, "done", text=final.get("text"))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--bootstrap-servers", default=os.environ.get("FENCEWATCH_BOOTSTRAP_SERVERS"))
    ap.add_argument("--topic", default="ownership.events")
    ap.add_argument("--db", required=True, help="PostgreSQL URL: leases and checkpoints")
    ap.add_argument("--prefix", default="fw_", help="the lease store's table prefix")
    ap.add_argument("--thread", required=True)
    ap.add_argument("--worker", required=True)
    ap.add_argument("--ttl", type=float, default=2.0)
    ap.add_argument("--work-seconds", type=float, default=0.0)
    ap.add_argument("--wait", type=float, default=30.0, help="wait this long for a held thread")
    ap.add_argument("--no-fence", action="store_true", help="stamp and report, refuse nothing")
    args = ap.parse_args()
    if not args.bootstrap_servers:
        print("give --bootstrap-servers or FENCEWATCH_BOOTSTRAP_SERVERS", file=sys.stderr)
        return 2
    try:
        with PostgresSaver.from_conn_string(args.db) as saver:
            saver.setup()
            return run(args, saver)
    except FencewatchError as exc:
        say(args.worker, "error", error=str(exc))
        return 2


if __name__ == "__main__":
    sys.exit(main())
