"""The HTML report in a real browser (headless Chromium, Debian package
``chromium``): at 1400 px the page never scrolls sideways, every finding's
mark is on screen and on top, and the lanes are labelled."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from streams.core.detector import Detector, DetectorConfig
from streams.core.replay import Replay
from streams.report import render_html
from tests.report.chromium import check_layout
from tests.strategies import takeover_workflow

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "examples" / "reference.jsonl"
WIDTH = 1400
EXPAND_ALL = "document.querySelectorAll('[data-act=all]').forEach(function(b){b.click()});"


def _replay(lines: list[bytes]) -> Replay:
    replay = Replay()
    for n, line in enumerate(lines, 1):
        replay.feed(line, offset=n, source="t", line=n)
    return replay


def _fixture() -> Replay:
    return _replay(FIXTURE.read_bytes().splitlines())


def _takeovers() -> Replay:
    return _replay([orjson.dumps(d) for d in takeover_workflow(n_events=300, takeovers=5)])


def _assert_fits(result: dict[str, Any], replay: Replay) -> None:
    width = result["clientWidth"]
    assert result["scrollWidth"] <= width, "the page scrolls sideways"
    marks = result["marks"]
    assert sorted(m["id"] for m in marks) == sorted(replay.latest), "a finding has no mark"
    for m in marks:
        assert m["width"] > 0 and m["height"] > 0, m
        assert m["left"] >= 0 and m["right"] <= width, m
        assert m["onTop"], f"finding mark {m['text']} is covered"


@pytest.mark.parametrize(
    ("name", "build", "lanes"),
    [
        ("fixture", _fixture, ["epoch 18 beta", "epoch 17 alpha"]),
        ("takeovers", _takeovers, [f"epoch {k} ingest-{'abcdef'[k - 1]}" for k in range(6, 0, -1)]),
    ],
)
def test_report_fits_1400px_and_every_finding_is_visible(
    name: str, build: Any, lanes: list[str]
) -> None:
    """At 1400 px: no sideways page scroll, every finding mark on screen and on top, lanes named."""
    replay = build()
    result = check_layout(render_html(replay), width=WIDTH)
    _assert_fits(result, replay)
    assert [label["text"] for label in result["labels"]] == lanes
    assert all(label["width"] > 0 and label["height"] > 0 for label in result["labels"])
    assert result["timelines"] == 1, name


def test_expanded_timeline_scrolls_inside_with_lane_labels_kept_in_view() -> None:
    """After 'expand all' and scrolling the timeline to its end: no page scroll, labels in view."""
    replay = _takeovers()
    scroll_to_end = (
        "document.querySelectorAll('.tl-scroll').forEach(function(x){x.scrollLeft=1e6});"
    )
    result = check_layout(render_html(replay), width=WIDTH, before=EXPAND_ALL + scroll_to_end)
    assert result["scrollWidth"] <= result["clientWidth"], "the page scrolls sideways"
    assert result["scrolled"][0] > 1000  # the expanded timeline really scrolled inside
    assert len(result["marks"]) == len(replay.latest)
    assert all(m["width"] > 0 for m in result["marks"])
    labels = result["labels"]
    assert len(labels) == 6
    assert all(0 < label["left"] < 200 for label in labels), labels  # sticky at the left


def test_a_dense_timeline_still_shows_every_finding_in_the_width() -> None:
    """30 takeovers (42 findings at 36 positions): marks draw smaller and all stay on screen."""
    docs = takeover_workflow(n_events=3_000, takeovers=30)
    replay = Replay(Detector(DetectorConfig(max_events_per_key=len(docs))))
    for n, doc in enumerate(docs, 1):
        replay.feed(orjson.dumps(doc), offset=n, source="t", line=n)
    page = render_html(replay)
    assert "class='tl dense'" in page
    _assert_fits(check_layout(page, width=WIDTH), replay)


def _takeovers_and_fixture() -> Replay:
    lines = [orjson.dumps(d) for d in takeover_workflow(n_events=300, takeovers=5)]
    return _replay(lines + FIXTURE.read_bytes().splitlines())


@pytest.mark.parametrize("width", [500, 800, WIDTH])
def test_tables_never_widen_or_clip_the_page_at_any_width(width: int) -> None:
    """Narrow windows: a table wider than its box scrolls inside the box (it was clipped by
    overflow:hidden, or widened the page); the page never scrolls sideways; every finding keeps
    its mark. At 1400 px every table fits without scrolling."""
    replay = _takeovers_and_fixture()
    result = check_layout(render_html(replay), width=width)
    assert result["scrollWidth"] <= result["clientWidth"], "the page scrolls sideways"
    tables = result["tables"]
    assert len(tables) == 4  # workflows, destinations, two findings tables
    for t in tables:
        assert t["width"] <= t["box"] or t["overflowX"] in ("auto", "scroll"), t
        if width == WIDTH:
            assert t["width"] <= t["box"], t
    marks = result["marks"]
    assert sorted(m["id"] for m in marks) == sorted(replay.latest)
    assert all(m["width"] > 0 and m["height"] > 0 for m in marks)
