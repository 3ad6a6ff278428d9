"""The console's view: worst first, filters, 500 per page, and the memory
bound per workflow (stated in streams/console/view.py) held at 100,000
workflows and against a workflow that floods it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson
import pytest

from streams.console.view import (
    ENTRY_OVERHEAD,
    FINDINGS_BYTES,
    PAGE_SIZE,
    STATUS_BYTES,
    ConsoleView,
)
from streams.core.replay import Replay
from streams.core.status import status_from_replay

FIXTURE = Path(__file__).resolve().parents[2] / "examples" / "reference.jsonl"


def _reference() -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    replay = Replay()
    for n, line in enumerate(FIXTURE.read_bytes().splitlines(), 1):
        replay.feed(line, offset=n, source="t", line=n)
    status = {
        k: s.to_dict() for k, s in status_from_replay(replay.states, replay.latest.values()).items()
    }
    return status, [f.to_dict() for f in replay.latest_findings()]


def _as(doc: dict[str, Any], key: str) -> dict[str, Any]:
    return {**doc, "workflow_key": key}


def test_worst_first_filters_and_pages_of_500() -> None:
    """Critical before clean; prefix and severity filters; 500 rows a page."""
    status, _ = _reference()
    view = ConsoleView()
    view.put_status("export-ledger", status["export-ledger"])
    for i in range(1200):
        view.put_status(f"clean-{i:04d}", _as(status["checkout-sync"], f"clean-{i:04d}"))
    first = view.page()
    assert first.rows[0]["workflow_key"] == "export-ledger"
    assert first.rows[0]["open_count"] == 4 and first.rows[0]["worst_open"] == "critical"
    assert len(first.rows) == PAGE_SIZE and first.pages == 3 and first.total == 1201
    assert len(view.page(page=3).rows) == 1201 - 2 * PAGE_SIZE
    assert [r["workflow_key"] for r in view.page(min_severity="incident").rows] == ["export-ledger"]
    assert view.page(min_severity="open").total == 1
    assert view.page(prefix="clean-11").total == 100
    assert view.page(prefix="nothing").rows == []


def test_a_tombstone_removes_the_workflow_and_revisions_are_kept_once() -> None:
    """A null status record drops the key; a repeated revision is not stored twice."""
    status, findings = _reference()
    view = ConsoleView()
    view.put_status("export-ledger", status["export-ledger"])
    for f in findings + findings:
        view.put_finding(f)
    data = view.workflow("export-ledger")
    assert data is not None
    assert sorted(len(f["revisions"]) for f in data["findings"]) == [1, 1, 1, 1]
    view.put_status("report-index", status["report-index"])
    view.put_status("report-index", None)
    assert view.workflow("report-index") is None


def test_one_flooded_workflow_stays_within_its_bound() -> None:
    """300 findings x 4 revisions with big evidence and a 2,000-finding status record:
    the kept bytes stay under the stated bound; superseded revisions go first; drops counted."""
    status, findings = _reference()
    big = dict(status["export-ledger"])
    big["open"] = [dict(big["open"][0], finding_id=f"{i:064x}") for i in range(2000)]
    view = ConsoleView()
    view.put_status("export-ledger", big)
    template = findings[-1]
    for n in range(300):
        for rev in range(1, 5):
            evidence = template["evidence"] * 40  # past REVISION_BYTES: evidence left out
            view.put_finding(dict(template, finding_id=f"id-{n}", revision=rev, evidence=evidence))
    key = "export-ledger"
    assert view.used_bytes() <= len(key) + STATUS_BYTES + FINDINGS_BYTES + ENTRY_OVERHEAD
    data = view.workflow(key)
    assert data is not None and data["dropped_revisions"] > 0
    assert data["status"]["open_count"] == 2000  # the count is the record's, not the kept list's
    assert data["status"]["trimmed"]["open"] > 0
    # Only the latest revision of each kept finding survives the flood.
    assert all(len(f["revisions"]) == 1 for f in data["findings"][:-1])


def _rss() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.faults
def test_memory_bound_at_100000_workflows() -> None:
    """100,000 workflows (status record and 4 finding revisions each): the process grows by
    less than the stated bound per workflow, close to what the view counts; past
    max_workflows a workflow is refused and counted."""
    status, findings = _reference()
    n = 100_000
    view = ConsoleView(max_workflows=n)
    keys = [f"tenant-{i % 97}/export/{i:06d}" for i in range(n)]
    before = _rss()
    for key in keys:
        view.put_status(key, _as(status["export-ledger"], key))
        for f in findings:
            view.put_finding(_as(f, key))
    per_workflow = (_rss() - before) / n
    bound = len(keys[0]) + STATUS_BYTES + FINDINGS_BYTES + ENTRY_OVERHEAD
    assert per_workflow <= bound, per_workflow
    counted = view.used_bytes() / n
    assert per_workflow <= 1.25 * counted, (per_workflow, counted)
    assert len(view) == n
    view.put_status("one-too-many", _as(status["checkout-sync"], "one-too-many"))
    assert len(view) == n and view.refused == 1
    page = view.page(page=7)
    assert len(page.rows) == PAGE_SIZE and page.pages == n // PAGE_SIZE
    assert page.rows[0]["workflow_key"] == sorted(keys)[6 * PAGE_SIZE]


def test_status_record_larger_than_its_bound_is_cut_to_fit() -> None:
    """A record with a 64 KiB worker id is still held, within STATUS_BYTES."""
    status, _ = _reference()
    doc = dict(status["export-ledger"], current_worker="w" * 65536)
    view = ConsoleView()
    view.put_status("export-ledger", doc)
    assert len(orjson.dumps(view.workflow("export-ledger"))) < STATUS_BYTES + 1024
