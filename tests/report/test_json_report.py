"""The JSON report's bytes: msgspec encodes it, formatted exactly as orjson's OPT_INDENT_2 was."""

from __future__ import annotations

import io

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.replay import Replay
from streams.core.whatif import what_if_fenced
from streams.report import render_json
from streams.report.coverage import Coverage
from tests.core.conftest import replay_events, replay_fixture
from tests.strategies import multi_workflow_events, with_sinks


def _orjson_form(text: str) -> str:
    """The same document as orjson indents it (the report's format until msgspec wrote it)."""
    return orjson.dumps(orjson.loads(text), option=orjson.OPT_INDENT_2).decode() + "\n"


def test_fixture_report_is_byte_for_byte_the_indented_format() -> None:
    """The SPEC §5 fixture's report with a what-if and an invalid line is orjson's indented form."""
    replay = replay_fixture()
    bad = b'{"type": "progress", "workflow_key": "k\xc3\xa9", "epoch": -1}\n'
    replay.feed_stream(io.BytesIO(bad).read, source="bad", offset=100)
    assert replay.invalid_count == 1
    text = render_json(
        replay,
        what_if=what_if_fenced(replay, ["release-bucket"]),
        coverage=Coverage(partial="interrupted", next_offsets={0: 12}),
    )
    assert text == _orjson_form(text)
    doc = orjson.loads(text)
    assert doc["findings"] == [f.to_dict() for f in replay.latest_findings()]
    assert doc["summary"]["partial_reason"] == "interrupted"


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_any_report_is_the_indented_format_with_the_records_as_to_dict(data: st.DataObject) -> None:
    """For any evidence the report is orjson's indented form and its findings their to_dict."""
    replay: Replay = replay_events(data.draw(with_sinks(data.draw(multi_workflow_events()))))
    text = render_json(replay)
    assert text == _orjson_form(text)
    assert orjson.loads(text)["findings"] == [f.to_dict() for f in replay.latest_findings()]
