"""A status record with a value no page can show (``updated_ms`` of 2^63-1,
as an attacker with write access to ``ownership.status`` sent) against a
real broker and a real console, checked in headless Chromium: its row shows
as invalid with the reason, every other row is drawn, the poll goes on, and
its workflow page is a page, not a 400. No live processor: the records are
produced to the status topic as they would be by anyone who can write to it."""

from __future__ import annotations

import os
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from streams.console.app import ConsoleApp, ConsoleSettings
from streams.console.view import workflow_href
from streams.kafka.admin import TopicAdmin, TopicSpec
from streams.kafka.connection import KafkaConnection
from tests.console.browser import Browser
from tests.console.test_console_live import _wait_view

#: Where the list's screenshot goes when set (else the test's tmp_path).
SHOTS = os.environ.get("FENCEWATCH_CONSOLE_SCREENSHOTS")

GOOD = ("good/alpha", "good/bravo", "good/charlie")
HUGE_TIME = "bad/updated-ms-2-63"
MIXED = "bad/mixed-values"


def _status(key: str, **changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "workflow_key": key,
        "current_epoch": 2,
        "current_worker": "agent-b",
        "acquired_seq": 2,
        "acquisition_implied": False,
        "released": False,
        "last_position": 3,
        "stale_epochs": [
            {
                "epoch": 1,
                "worker": "agent-a",
                "events": 1,
                "last_position": 3,
                "last_seen_ms": 1_700_000_000_000,
            }
        ],
        "open": [
            {"finding_id": "f" * 64, "kind": "stale_commit", "severity": "incident", "revision": 0}
        ],
        "cleared": [],
        "worst_open": "incident",
        "updated_ms": 1_700_000_000_000,
    }
    doc.update(changes)
    return doc


class _Console:
    def __init__(self, app: ConsoleApp, bootstrap: str, status_topic: str) -> None:
        self.app = app
        self.bootstrap = bootstrap
        self.status_topic = status_topic

    def produce(self, docs: list[dict[str, Any]]) -> None:
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": self.bootstrap})
        for doc in docs:
            p.produce(self.status_topic, orjson.dumps(doc), key=doc["workflow_key"].encode())
        assert p.flush(30) == 0

    def get(self, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(self.app.url + path, timeout=30) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()


@pytest.fixture(scope="module")
def console(kafka_bootstrap: str, kafka_admin: TopicAdmin) -> Iterator[_Console]:
    names = {t: f"console-invalid-{t}-{uuid.uuid4().hex[:10]}" for t in ("ev", "fi", "st")}
    kafka_admin.ensure([TopicSpec(n, 1, -1, {}) for n in names.values()])
    app = ConsoleApp(
        ConsoleSettings(
            KafkaConnection(kafka_bootstrap),
            port=0,
            events_topic=names["ev"],
            findings_topic=names["fi"],
            status_topic=names["st"],
        )
    )
    app.start()
    try:
        c = _Console(app, kafka_bootstrap, names["st"])
        c.produce(
            [
                *(_status(k) for k in GOOD),
                _status(HUGE_TIME, updated_ms=2**63 - 1),
                _status(
                    MIXED,
                    current_epoch="two",
                    stale_epochs=[
                        {
                            "epoch": -1,
                            "worker": "agent-a",
                            "events": 1,
                            "last_position": 3,
                            "last_seen_ms": 2**63 - 1,
                        }
                    ],
                ),
            ]
        )
        _wait_view(app, lambda v: len(v) == len(GOOD) + 2)
        yield c
    finally:
        app.stop()
        kafka_admin.delete(list(names.values()))


def test_the_api_lists_every_row_and_marks_the_invalid_ones(console: _Console) -> None:
    """/api/workflows is 200 with all five rows; the two bad ones say why, bad values null."""
    code, body = console.get("/api/workflows")
    assert code == 200
    rows = {r["workflow_key"]: r for r in orjson.loads(body)["workflows"]}
    assert set(rows) == {*GOOD, HUGE_TIME, MIXED}
    assert all("invalid" not in rows[k] for k in GOOD)
    assert rows[HUGE_TIME]["updated_ms"] is None
    assert "updated_ms: 9223372036854775807 is out of range" in rows[HUGE_TIME]["invalid"]
    assert rows[HUGE_TIME]["worst_open"] == "incident"  # its valid values still count
    assert rows[MIXED]["current_epoch"] is None and rows[MIXED]["stale_epochs"] == []
    assert "current_epoch: must be an integer" in rows[MIXED]["invalid"]
    assert "stale_epochs[0].epoch: -1 is out of range" in rows[MIXED]["invalid"]


def test_the_workflow_page_of_an_invalid_record_is_a_page(console: _Console) -> None:
    """/w/<key> of the 2^63-1 record is 200 with the reason, not the 400 it was."""
    code, body = console.get(workflow_href(HUGE_TIME))
    assert code == 200
    page = body.decode()
    assert "id='status-invalid'" in page and "9223372036854775807 is out of range" in page
    code, body = console.get(f"/api/w/{HUGE_TIME.replace('/', '%2F')}")
    assert code == 200 and orjson.loads(body)["status"]["invalid"]


def test_chromium_draws_every_row_and_keeps_polling(
    console: _Console, browser: Browser, tmp_path: Path
) -> None:
    """The list draws the good rows and the bad ones as invalid, then still shows a new record."""
    browser.goto(console.app.url + "/")
    browser.wait_for("document.querySelectorAll('#rows tr').length === 5")
    invalid = browser.evaluate(
        "Array.from(document.querySelectorAll('#rows tr.invalid-row')).map(function(tr){"
        " return [tr.getAttribute('data-key'), tr.querySelector('.sev.invalid').title]; })"
    )
    assert sorted(k for k, _ in invalid) == sorted([HUGE_TIME, MIXED])
    assert all("out of range" in why for _, why in invalid)
    drawn = browser.evaluate(
        "Array.from(document.querySelectorAll('#rows tr:not(.invalid-row) td.key a'))"
        ".map(function(a){ return a.textContent; })"
    )
    assert sorted(drawn) == sorted(GOOD)
    assert browser.evaluate("document.getElementById('live').textContent").startswith("live ·")
    # One page of five: neither pager link is shown.
    assert browser.evaluate("document.getElementById('next').hidden") is True
    assert browser.evaluate("document.getElementById('prev').hidden") is True
    shot = Path(SHOTS) / "console-invalid-row.png" if SHOTS else tmp_path / "list.png"
    browser.screenshot(shot)
    assert shot.stat().st_size > 10_000
    # The poll goes on after drawing the bad rows: a record produced now appears.
    console.produce([_status("good/delta")])
    browser.wait_for("document.querySelectorAll('#rows tr').length === 6")
    # Its link leads to its page (was a 400), which says what is wrong with the record.
    browser.navigate_by(
        f"document.querySelector('#rows tr[data-key=\"{HUGE_TIME}\"] td.key a').click()"
    )
    banner = browser.evaluate("document.getElementById('status-invalid').textContent")
    assert "updated_ms: 9223372036854775807 is out of range" in banner
    if SHOTS:
        browser.screenshot(Path(SHOTS) / "console-invalid-workflow.png")
    assert browser.console_errors == []
