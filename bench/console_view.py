"""The console's view at scale (issue 21): memory per workflow and the time
to serve a page of the list, at N workflows (default 100,000), each holding
the reference fixture's ``export-ledger`` status record and its four
findings.

Prints the process's growth per workflow (RSS), what the view's bound counts
per workflow, the time to fill the view, and the time of one page request
after a change that moves no workflow and after one that moves one (the
list is re-sorted only then). Usage:
    python bench/console_view.py [--workflows N]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

from streams.console.view import ConsoleView
from streams.core.replay import Replay
from streams.core.status import status_from_replay

FIXTURE = Path(__file__).resolve().parents[1] / "examples" / "reference.jsonl"


def _rss() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--workflows", type=int, default=100_000)
    n = ap.parse_args().workflows
    replay = Replay()
    for i, line in enumerate(FIXTURE.read_bytes().splitlines(), 1):
        replay.feed(line, offset=i, source="t", line=i)
    status = status_from_replay(replay.states, replay.latest.values())["export-ledger"].to_dict()
    findings = [f.to_dict() for f in replay.latest_findings()]
    keys = [f"tenant-{i % 97}/export/{i:06d}" for i in range(n)]
    view = ConsoleView(max_workflows=n)
    before = _rss()
    t0 = time.perf_counter()
    for key in keys:
        doc: dict[str, Any] = {**status, "workflow_key": key}
        view.put_status(key, doc)
        for f in findings:
            view.put_finding({**f, "workflow_key": key})
    fill = time.perf_counter() - t0
    grown = (_rss() - before) / n
    view.page(page=1)
    # A fresher record that moves no workflow (the common change): no re-sort.
    view.put_status(keys[0], {**status, "workflow_key": keys[0], "updated_ms": 1})
    t1 = time.perf_counter()
    view.page(page=1)
    same_s = time.perf_counter() - t1
    # One that moves a workflow (its findings cleared): the list is re-sorted.
    view.put_status(keys[1], {**status, "workflow_key": keys[1], "open": [], "worst_open": None})
    t2 = time.perf_counter()
    view.page(page=1)
    moved_s = time.perf_counter() - t2
    print(f"workflows            {n:,}")
    print(f"RSS growth/workflow  {grown:,.0f} bytes")
    print(f"counted/workflow     {view.used_bytes() / n:,.0f} bytes")
    print(f"fill                 {fill:.1f} s")
    print(f"page, nothing moved  {same_s * 1000:.0f} ms")
    print(f"page, one moved      {moved_s * 1000:.0f} ms (a re-sort)")


if __name__ == "__main__":
    main()
