"""The HTML report's content (no browser): every finding its own mark,
collapsed runs, caps, the partial banner, escaping."""

from __future__ import annotations

import re
from html import escape
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.detector import (
    DEFAULT_MAX_EVENTS_PER_KEY,
    Detector,
    DetectorConfig,
    epoch_starts,
)
from streams.core.replay import Replay
from streams.report import render_html
from streams.report.html import MAX_MARKS
from tests.core.conftest import replay_events
from tests.strategies import (
    epoch_worker_columns,
    multi_workflow_events,
    takeover_workflow,
    with_sinks,
)

#: One lease_acquired: a workflow with no finding (give it a workflow_key).
CLEAN_EVENT = {"type": "lease_acquired", "epoch": 1, "worker_id": "w", "seq": 1}


def _replay(docs: list[dict], max_events_per_key: int = DEFAULT_MAX_EVENTS_PER_KEY) -> Replay:
    replay = Replay(Detector(DetectorConfig(max_events_per_key=max_events_per_key)))
    for n, doc in enumerate(docs, 1):
        replay.feed(orjson.dumps(doc), offset=n, source="t", line=n)
    return replay


def test_every_finding_has_its_own_mark_even_at_one_position() -> None:
    """Seven findings give seven marks; the two raised at seq 148 are two marks in one column."""
    replay = _replay(takeover_workflow())
    page = render_html(replay)
    ids = re.findall(r"data-finding='(fw1-[0-9a-f]+)'", page)
    assert sorted(ids) == sorted(replay.latest)
    assert len(replay.latest) == 7
    (col148,) = [c for c in page.split("<div class='col") if "class='pos'>148<" in c]
    assert col148.count("class='fmark") == 2


def test_ordinary_progress_is_collapsed_and_lanes_name_epoch_and_worker() -> None:
    """A 300-event workflow draws runs of progress as counted, expandable marks; lanes say who."""
    page = render_html(_replay(takeover_workflow()))
    runs = re.findall(r"<button class='col sum' data-act='run'", page)
    assert len(runs) >= 5
    assert "<b>epoch 6</b><small>ingest-f</small>" in page
    assert "<b>epoch 1</b><small>ingest-a</small>" in page


def test_open_and_cleared_and_overview_counts() -> None:
    """The summary says how many findings are open; each finding row has its status."""
    page = render_html(_replay(takeover_workflow()))
    assert "6 open · 1 cleared" in page
    assert page.count("<span class='pill cleared'>cleared</span>") == 1
    assert page.count("<span class='pill open'>open</span>") == 6


def test_a_huge_workflow_is_capped_and_says_so() -> None:
    """Past MAX_MARKS drawn events a run keeps its count but is not drawn; the page says so."""
    docs = takeover_workflow(n_events=6 * (MAX_MARKS + 400))
    replay = _replay(docs, max_events_per_key=len(docs))
    page = render_html(replay)
    assert "are drawn at most" in page
    assert len(re.findall(r"data-finding='", page)) == len(replay.latest)
    assert page.count("class='ev ") <= MAX_MARKS + 200
    assert len(page) < 2_000_000


def test_findings_whose_raising_event_was_evicted_still_have_a_mark() -> None:
    """Under the per-key evidence bound every finding still gets a mark (in a leading column)."""
    replay = _replay(takeover_workflow(n_events=3000), max_events_per_key=200)
    page = render_html(replay)
    ids = re.findall(r"data-finding='(fw1-[0-9a-f]+)'", page)
    assert sorted(ids) == sorted(replay.latest)


def test_partial_banner_and_escaping() -> None:
    """A partial report says so at the top; workflow keys and workers are escaped."""
    docs = [
        {
            "type": "lease_acquired",
            "workflow_key": "<b>x</b>",
            "epoch": 1,
            "worker_id": "<i>",
            "seq": 1,
        },
        {
            "type": "lease_acquired",
            "workflow_key": "<b>x</b>",
            "epoch": 2,
            "worker_id": "w",
            "seq": 2,
        },
        {"type": "progress", "workflow_key": "<b>x</b>", "epoch": 1, "worker_id": "<i>", "seq": 3},
    ]
    page = render_html(_replay(docs), partial=True)
    assert "PARTIAL REPORT" in page
    assert "<b>x</b>" not in page and "&lt;b&gt;x&lt;/b&gt;" in page
    assert "<i>" not in page


def test_destinations_table_and_confidence_per_finding() -> None:
    """The destinations (SPEC §6) are a table with verdicts; each finding shows its confidence."""
    page = render_html(_replay(takeover_workflow()))
    assert "<h2>Destinations</h2>" in page
    ledger = page[page.index("<td class='key' data-l='sink'>ledger</td>") :]
    assert ledger[: ledger.index("</tr>")].count("ignores fence") == 1
    warehouse = page[page.index("<td class='key' data-l='sink'>warehouse</td>") :]
    assert "enforces fence" in warehouse[: warehouse.index("</tr>")]
    assert page.count("<span class='pill high'") == 6
    assert page.count("<span class='pill medium'") == 1  # the attempt with no answer


def test_what_if_fenced_section_lists_the_changes_next_to_the_real_findings(
    tmp_path, capsys
) -> None:
    """--what-if-fenced with --format html: a section with each change; real findings all kept."""
    from streams.cli import main

    out = tmp_path / "r.html"
    fixture = Path(__file__).resolve().parents[2] / "examples" / "reference.jsonl"
    code = main(
        [
            "audit",
            "--format",
            "html",
            "--what-if-fenced",
            "release-bucket",
            "-o",
            str(out),
            str(fixture),
        ]
    )
    assert code == 1 and capsys.readouterr().err == ""
    page = out.read_text()
    assert "What if release-bucket had enforced the fence" in page
    section = page[page.index("What if release-bucket") : page.index("<h2>Flagged workflows")]
    assert section.count("<span class='pill cleared'>removed</span>") == 2
    assert "a rejected near miss" in section
    assert len(re.findall(r"data-finding='", page)) == 4  # the real findings, all drawn


def test_too_many_finding_positions_scroll_inside_the_timeline_and_say_so() -> None:
    """Past what fits 1400 px the timeline scrolls itself (not the page) and a note says so."""
    docs = takeover_workflow(n_events=32_000, takeovers=80)
    page = render_html(_replay(docs, max_events_per_key=len(docs)))
    assert "class='tl dense free'" in page
    assert "too many to fit the width" in page


def _stale_commit_workflow(key: str) -> list[dict]:
    """Two owners; the displaced one commits after the new one: three findings, worst critical."""
    rows = [
        ("lease_acquired", 1, "old", None),
        ("lease_acquired", 2, "new", None),
        ("effect_committed", 2, "new", "push"),
        ("effect_attempted", 1, "old", "push"),
        ("effect_committed", 1, "old", "push"),
    ]
    docs = []
    for seq, (t, epoch, worker, effect) in enumerate(rows, 1):
        doc = {"type": t, "workflow_key": key, "epoch": epoch, "worker_id": worker, "seq": seq}
        if effect:
            doc["effect_key"] = effect
        docs.append(doc)
    return docs


def test_the_page_stays_under_5_mb_at_any_size_and_says_what_it_left_out() -> None:
    """5,000 flagged workflows with 500-character keys (15,000 findings): the page stays under
    5 MB, says how many workflows and findings it does not list and where they are; counts have
    thousands separators."""
    docs = []
    for k in range(5_000):
        docs += _stale_commit_workflow(f"{k:06d}/" + "x" * 493)
    replay = _replay(docs)
    assert len(replay.latest) == 15_000
    page = render_html(replay)
    assert len(page.encode()) < 5_000_000
    note = re.search(r"<p class='note left-out'>([^<]*)</p>", page)
    assert note is not None
    assert re.search(r"[\d,]+ flagged workflows are not in the overview", note[1])
    assert re.search(r"[\d,]+ findings are not listed; --format json lists every one", note[1])
    assert "5,000 critical · 5,000 incident · 5,000 warning" in page
    assert "<div class='v'>15,000</div>" in page


def _tangled_workflow(key: str, takeovers: int = 8) -> list[dict]:
    """``takeovers`` changes of owner, each displaced owner attempting an effect the sink
    refuses: one warning per takeover, over ``takeovers + 1`` epochs."""
    docs: list[dict] = []

    def ev(t: str, epoch: int, effect: str | None = None) -> None:
        doc = {"type": t, "workflow_key": key, "epoch": epoch, "worker_id": f"w{epoch}"}
        doc["seq"] = len(docs) + 1
        if effect:
            doc["effect_key"] = effect
        docs.append(doc)

    ev("lease_acquired", 1)
    for e in range(2, takeovers + 2):
        ev("lease_acquired", e)
        ev("effect_attempted", e - 1, f"step-{e}")
        ev("effect_rejected", e - 1, f"step-{e}")
    return docs


def test_timelines_go_to_the_most_informative_workflows_and_the_page_says_the_rule() -> None:
    """300 single-takeover critical workflows and 5 tangled ones (8 takeovers, 8 warnings each):
    the five get the first timelines (findings x epochs; they got none, being less severe), and
    the page states the ranking."""
    docs = []
    for k in range(300):
        docs += _stale_commit_workflow(f"a-single-{k:03d}")
    complex_keys = [f"z-complex-{i}" for i in range(5)]
    for key in complex_keys:
        docs += _tangled_workflow(key)
    page = render_html(_replay(docs))
    heads = re.findall(r"<section class='wf' id='w\d+'><div class='wf-head'><h3>([^<]*)<", page)
    assert heads[:5] == complex_keys
    assert "ranked by findings &times; epochs" in page
    # Every flagged workflow is in the overview data, whether it has a timeline or not.
    data = orjson.loads(re.search(r"id='fw-data'>(.*?)</script>", page)[1])
    assert len(data["wf"]) == 305
    assert {row[0] for row in data["wf"] if row[10]} == set(heads)


def test_render_timeline_draws_one_workflow_on_its_own() -> None:
    """The timeline renderer is callable for one workflow (the console reuses it)."""
    from streams.report.html import render_timeline

    replay = _replay(takeover_workflow())
    findings = replay.latest_findings()
    health = {h.finding_id: h for h in replay.health()}
    state = replay.states["tenant-7/nightly-export"]
    html = render_timeline(state.timeline(), findings, health)
    assert html.startswith("<div class='tl")
    assert len(re.findall(r"data-finding='", html)) == len(findings)


@pytest.mark.parametrize(
    ("n_events", "takeovers", "kept"),
    [(5_000, 3, None), (2_000, 100, None), (300, 7, 100), (20_000, 1, 6_000), (60, 2, 20)],
)
def test_a_lazy_timeline_with_columns_draws_what_the_full_timeline_draws(
    n_events: int, takeovers: int, kept: int | None
) -> None:
    """Drawn from KeyState's columns and a lazy timeline, the page's timeline
    is byte for byte the one drawn from the whole Evidence list (long runs,
    dense marks, evicted evidence)."""
    from streams.report.html import LazyTimeline, render_timeline

    docs = takeover_workflow(n_events=n_events, takeovers=takeovers)
    replay = _replay(docs, max_events_per_key=kept or len(docs))
    findings = replay.latest_findings()
    health = {h.finding_id: h for h in replay.health()}
    (state,) = replay.states.values()
    full = state.timeline()
    positions, epochs, workers, types = state.timeline_columns()
    assert positions == [e.position for e in full] and epochs == [e.epoch for e in full]
    assert workers == [e.worker_id for e in full] and types == [e.type for e in full]
    lazy = LazyTimeline(state)
    assert len(lazy) == len(full) and [lazy[i] for i in range(len(full))] == full
    drawn = render_timeline(lazy, findings, health)
    assert drawn == render_timeline(full, findings, health)
    assert len(re.findall(r"data-finding='", drawn)) == len(findings)


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_any_workflow_draws_the_same_timeline_lazily(data: st.DataObject) -> None:
    """For any evidence, each workflow's timeline drawn lazily from columns equals the list's."""
    from streams.report.html import LazyTimeline, render_timeline

    replay: Replay = replay_events(data.draw(with_sinks(data.draw(multi_workflow_events()))))
    health = {h.finding_id: h for h in replay.health()}
    for key, state in replay.states.items():
        findings = [f for f in replay.latest_findings() if f.workflow_key == key]
        lazy = render_timeline(LazyTimeline(state), findings, health)
        assert lazy == render_timeline(state.timeline(), findings, health)


@given(epoch_worker_columns())
def test_epoch_starts_gives_each_epochs_first_index_and_first_four_workers(
    columns: tuple[list[int], list[str]],
) -> None:
    """epoch_starts gives each epoch's first index and its first four distinct workers."""
    epochs, workers = columns
    firsts, names = epoch_starts(epochs, workers, 4)
    assert firsts == {ep: epochs.index(ep) for ep in epochs}
    expected: dict[int, list[str]] = {}
    for ep, w in zip(epochs, workers, strict=True):
        seen = expected.setdefault(ep, [])
        if w not in seen and len(seen) < 4:
            seen.append(w)
    assert names == expected


def _clean_list(page: str) -> tuple[list[str], str]:
    """The clean workflows' list items and what follows the list."""
    body = page.split("<ul class='cleanlist'>", 1)[1]
    items, after = body.split("</ul>", 1)
    return re.findall(r"<li>(.*?)</li>", items), after.split("</details>", 1)[0]


@pytest.mark.parametrize("odd", ["a<b>", "a\x00<b>"], ids=["plain", "nul"])
def test_clean_workflows_are_listed_escaped_in_key_order(odd: str) -> None:
    """Clean keys are listed sorted and escaped, also beside a key holding a NUL."""
    keys = ["b<&>'\"", odd, "c"]
    page = render_html(_replay([{**CLEAN_EVENT, "workflow_key": k} for k in keys]))
    listed, after = _clean_list(page)
    assert listed == [escape(k) for k in sorted(keys)]
    assert "more (not listed)" not in after


def test_the_clean_list_stops_at_its_byte_budget_and_counts_the_rest() -> None:
    """Long clean keys fill _CLEAN_BYTES: the items that fit are listed, the rest counted."""
    from streams.report.html import _CLEAN_BYTES

    keys = [f"{i:04d}-" + "k" * 200 for i in range(2_000)]
    page = render_html(_replay([{**CLEAN_EVENT, "workflow_key": k} for k in keys]))
    listed, after = _clean_list(page)
    fit = _CLEAN_BYTES // len(f"<li>{keys[0]}</li>")
    assert listed == keys[:fit]
    assert f"… and {len(keys) - fit:,} more (not listed)." in after


def test_numeric_columns_are_in_numeric_order() -> None:
    """Positions 9, 10, 100 in that order (not as text: 10, 100, 9); the overview by open
    count 10, 9, 3, 2 (issue 43: the report has no client-side sort; its orders are numeric)."""

    def commits(key: str, seqs: list[int]) -> list[dict]:
        docs = [
            {"type": "lease_acquired", "workflow_key": key, "epoch": e, "worker_id": w, "seq": e}
            for e, w in ((1, "a"), (2, "b"))
        ]
        return docs + [
            {
                "type": "effect_committed",
                "workflow_key": key,
                "epoch": 1,
                "worker_id": "a",
                "seq": s,
                "effect_key": f"fx{s}",
            }
            for s in seqs
        ]

    docs = commits("positions", [100, 9, 10])
    for key, n in (("w10", 10), ("w2", 2), ("w9", 9)):
        docs += commits(key, list(range(3, 3 + n)))
    page = render_html(_replay(docs))
    section = page[page.index("<h3>positions</h3>") :]
    assert re.findall(r"data-l='at'>seq (\d+)", section)[:3] == ["9", "10", "100"]
    blob = re.search(r"<script type='application/json' id='fw-data'>(.*?)</script>", page, re.S)
    assert blob is not None
    assert [(r[0], r[6]) for r in orjson.loads(blob.group(1))["wf"]] == [
        ("w10", 10),
        ("w9", 9),
        ("positions", 3),
        ("w2", 2),
    ]
