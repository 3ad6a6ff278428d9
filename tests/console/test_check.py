"""The console's checks of the values it shows (streams/console/check.py):
a record with a value no page can draw is kept as invalid with the reason,
its bad values nulled; the view lists it beside the others; the pages
render it (and any other value) without raising."""

from __future__ import annotations

import re
from typing import Any

import pytest

from streams.console.check import MAX_MS, check_finding, check_status
from streams.console.pages import Chrome, index_page, workflow_page
from streams.console.view import ConsoleView
from tests.console.test_view import _reference

STATUS, FINDINGS = _reference()
GOOD = STATUS["export-ledger"]
CHROME = Chrome("nonce", "read-only", (), "/")


def _bad(**changes: Any) -> dict[str, Any]:
    return {**GOOD, **changes}


def test_a_valid_status_record_is_unchanged() -> None:
    """Every reference status record passes as it is, with no invalid key."""
    for doc in STATUS.values():
        assert check_status(doc) == doc


@pytest.mark.parametrize(
    ("changes", "field", "reason"),
    [
        ({"updated_ms": 2**63 - 1}, "updated_ms", "9223372036854775807 is out of range"),
        ({"updated_ms": MAX_MS + 1}, "updated_ms", "is out of range"),
        ({"updated_ms": -1}, "updated_ms", "-1 is out of range"),
        ({"updated_ms": 1.8e19}, "updated_ms", "must be milliseconds"),
        ({"current_epoch": "two"}, "current_epoch", "must be an integer"),
        ({"current_epoch": True}, "current_epoch", "must be an integer"),
        ({"current_worker": ["w"]}, "current_worker", "must be a string"),
        ({"released": "no"}, "released", "must be true or false"),
        ({"worst_open": "doom"}, "worst_open", "must be a severity"),
    ],
)
def test_a_bad_scalar_is_nulled_and_named(changes: dict[str, Any], field: str, reason: str) -> None:
    """The field becomes null and ``invalid`` names it with the reason."""
    out = check_status(_bad(**changes))
    assert out[field] is None
    assert out["invalid"].startswith(f"{field}: ") and reason in out["invalid"]


def test_a_bad_list_item_is_left_out_and_a_bad_list_emptied() -> None:
    """A stale epoch with a bad value goes (whole); a list that is not a list becomes []."""
    stale = dict(GOOD["stale_epochs"][0])
    out = check_status(
        _bad(stale_epochs=[stale, {**stale, "last_seen_ms": 2**63 - 1}, "x"], cleared=7)
    )
    assert out["stale_epochs"] == [stale]
    assert out["cleared"] == []
    assert "stale_epochs[1].last_seen_ms: 9223372036854775807 is out of range" in out["invalid"]
    assert "stale_epochs[2]: must be an object, got 'x'" in out["invalid"]
    assert "cleared: must be a list, got 7" in out["invalid"]


def test_reasons_are_bounded() -> None:
    """Past five reasons the rest are counted; a long value is cut."""
    out = check_status(
        _bad(
            current_epoch="e" * 1000,
            acquired_seq=-1,
            last_position=-1,
            released="no",
            worst_open=1,
            updated_ms=-1,
            current_worker=0,
        )
    )
    assert out["invalid"].endswith("; and 2 more")
    assert len(out["invalid"]) < 1000


def test_a_finding_with_bad_values_is_kept_as_invalid() -> None:
    """A finding revision's bad scalars and evidence are nulled or left out, and named."""
    good = next(f for f in FINDINGS if f["kind"] == "conflicting_commit")
    assert check_finding(good) == good
    ev = good["evidence"][0]
    out = check_finding(
        {
            **good,
            "event_seq": [1],
            "epochs": [17, "18"],
            "evidence": [ev, {**ev, "position": 2**64}],
        }
    )
    assert out["event_seq"] is None and out["epochs"] is None
    assert out["evidence"] == [ev]
    assert "event_seq: must be an integer" in out["invalid"]
    assert "evidence[1].position: 18446744073709551616 is out of range" in out["invalid"]


def test_the_view_lists_an_invalid_row_beside_the_others() -> None:
    """A 2^63-1 record is listed, as invalid, in its place; the other rows are as they were."""
    view = ConsoleView()
    view.put_status("ok", {**GOOD, "workflow_key": "ok"})
    view.put_status("bad", {**_bad(updated_ms=2**63 - 1), "workflow_key": "bad"})
    rows = {r["workflow_key"]: r for r in view.page().rows}
    assert rows["bad"]["updated_ms"] is None and "updated_ms" in rows["bad"]["invalid"]
    assert rows["bad"]["worst_open"] == rows["ok"]["worst_open"] == "critical"
    assert "invalid" not in rows["ok"]


def test_a_finding_whose_identity_is_not_a_string_is_refused() -> None:
    """A workflow_key that is not a string would break the list's sort: ValueError, not kept."""
    view = ConsoleView()
    with pytest.raises(ValueError, match="must be strings"):
        view.put_finding({**FINDINGS[0], "workflow_key": 5})
    assert len(view) == 0


def test_the_workflow_page_renders_any_status_value() -> None:
    """The page of a record with out-of-range or wrong-typed values renders, saying why."""
    view = ConsoleView()
    key = "bad"
    view.put_status(key, {**_bad(updated_ms=2**63 - 1, current_epoch="x"), "workflow_key": key})
    for f in FINDINGS:
        view.put_finding({**f, "workflow_key": key, "event_offset": -5})
    data = view.workflow(key)
    assert data is not None
    page = workflow_page(CHROME, key, data, "", "", None)
    assert "id='status-invalid'" in page and "9223372036854775807 is out of range" in page
    assert "finding-invalid" in page and "event_offset: -5 is out of range" in page
    # Unchecked input too (the renderers never raise): a time past year 9999.
    unchecked = {"status": {**GOOD, "updated_ms": 2**63 - 1}, "findings": []}
    assert "invalid time (9223372036854775807 ms)" in workflow_page(
        CHROME, key, unchecked, "", "", None
    )


def test_the_pager_links_are_hidden_until_the_script_knows_the_pages() -> None:
    """The list page renders both pager links hidden (the script shows the ones that exist)."""
    page = index_page(CHROME, prefix="", severity="", page=1)
    links = re.findall(r"<a id='(prev|next)'[^>]*>", page)
    assert links == ["prev", "next"]
    assert all(re.search(rf"<a id='{name}'[^>]* hidden>", page) for name in links)


def test_the_stale_epochs_findings_cell_counts_by_each_findings_stale_epoch() -> None:
    """A cut latest revision counts by an earlier revision's epoch; an odd epoch is not counted."""
    key = "export-ledger"
    view = ConsoleView()
    view.put_status(key, {**GOOD, "workflow_key": key})
    for f in FINDINGS:
        view.put_finding({**f, "workflow_key": key})
    data = view.workflow(key)
    assert data is not None
    cells = re.compile(r"<tr class='stale-row (\w+)'([^>]*)>.*?<td class='stands'>([^<]*)</td>")
    page = workflow_page(CHROME, key, data, "", "", None)
    assert cells.findall(page) == [("acting", " data-stale-epoch='17'", "4 open")]
    # One finding cleared, another's latest revision cut to fit (no stale_epoch left).
    cleared = data["findings"][0]["finding_id"]
    data["status"]["cleared"] = [{"finding_id": cleared}]
    data["findings"][1]["revisions"].append({"revision": 9, "kind": "stale_attempt"})
    page = workflow_page(CHROME, key, data, "", "", None)
    assert cells.findall(page) == [("acting", " data-stale-epoch='17'", "3 open · 1 cleared")]
    data["status"]["cleared"] = [{"finding_id": f["finding_id"]} for f in data["findings"]]
    data["status"]["stale_epochs"].append({"epoch": None, "worker": "gamma", "events": 1})
    page = workflow_page(CHROME, key, data, "", "", None)
    assert cells.findall(page) == [
        ("settled", " data-stale-epoch='17'", "all 4 cleared"),
        ("settled", "", "no finding"),
    ]
