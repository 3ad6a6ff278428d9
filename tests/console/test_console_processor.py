"""The console shows a stalled processor (issue 42 item 3): a real broker, a
real ``fencewatch run`` worker frozen with SIGSTOP while events keep coming,
and the console's /api/processor, /metrics and list page (headless Chromium)
say so, then clear once the worker is resumed."""

from __future__ import annotations

import json
import re
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from streams.console.app import ConsoleApp, ConsoleSettings
from streams.console.processor import NOT_COMMITTED
from streams.kafka.admin import TopicAdmin, TopicSpec
from streams.kafka.connection import KafkaConnection
from tests.console.browser import Browser
from tests.live.conftest import LiveHarness

STALL_AFTER_S = 3.0


@pytest.fixture
def harness(kafka_bootstrap: str, kafka_admin: TopicAdmin, tmp_path: Path) -> Iterator[LiveHarness]:
    created: list[str] = []

    def topic(partitions: int = 1, prefix: str = "t", config: dict[str, str] | None = None) -> str:
        name = f"console-proc-{prefix}-{uuid.uuid4().hex[:10]}"
        kafka_admin.ensure([TopicSpec(name, partitions, -1, config or {})])
        created.append(name)
        return name

    h = LiveHarness(kafka_bootstrap, topic, tmp_path, 2)
    try:
        yield h
    finally:
        h.close()
        kafka_admin.delete(created)


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as resp:
        body = resp.read()
        return json.loads(body) if resp.headers["Content-Type"] == "application/json" else body


def _until(what: str, probe: Callable[[], Any], timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        got = probe()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not within {timeout_s:g} s")
        time.sleep(0.2)


def test_a_frozen_worker_shows_as_stalled_then_clears(
    harness: LiveHarness, browser: Browser, tmp_path: Path
) -> None:
    """A frozen worker with events arriving: stalled in API, metrics and page; resumed: clear."""
    h = harness
    worker = h.start()
    worker.wait_ready()
    app = ConsoleApp(
        ConsoleSettings(
            KafkaConnection(h.bootstrap),
            port=0,
            events_topic=h.events,
            findings_topic=h.findings,
            status_topic=h.status,
            processor_group=h.app_id,
            stall_after=STALL_AFTER_S,
            processor_every_s=0.5,
        )
    )
    app.start()
    api = app.url + "/api/processor"
    try:
        first = _until("a look", lambda: (d := _get(api))["looked"] and d)
        assert first["message"] == NOT_COMMITTED and not first["stalled"]
        assert first["group"] == h.app_id and first["partitions_total"] == 2

        events = h.fixture_events()
        h.produce(events)
        h.wait_all_committed()
        caught_up = _until(
            "caught up", lambda: (d := _get(api))["committed"] and d["lag"] == 0 and d
        )
        assert caught_up["message"] is None and not caught_up["stalled"]
        assert b"fencewatch_console_processor_stalled 0.0" in _get(app.url + "/metrics")

        worker.pause()
        try:
            h.produce(events)
            stalled = _until("stalled", lambda: (d := _get(api))["stalled"] and d, 30)
            ends = h.end_offsets(h.events)
            committed = {p["partition"]: p["committed"] for p in stalled["partitions"]}
            assert (
                stalled["stalled_lag"]
                == sum(ends[p] - committed[p] for p in stalled["stalled_partitions"])
                > 0
            )
            assert stalled["stalled_for_s"] >= STALL_AFTER_S
            assert re.fullmatch(
                r"processor stalled: partitions? [0-9,]+ with lag [0-9,]+, "
                r"nothing committed for \d+ s",
                stalled["message"],
            ), stalled["message"]
            metrics = _get(app.url + "/metrics")
            assert b"fencewatch_console_processor_stalled 1.0" in metrics
            # The list page, loaded while stalled: the banner, and the poll goes on.
            browser.goto(app.url + "/")
            banner = "document.getElementById('processor')"
            text = browser.wait_for(
                f"!{banner}.hidden && {banner}.getAttribute('data-stalled') === 'true' "
                f"&& document.body.getAttribute('data-version') !== null && {banner}.textContent"
            )
            assert text.startswith("processor stalled: partition")
            assert browser.evaluate(f"{banner}.className") == "banner err"
            browser.screenshot(tmp_path / "console-stalled.png")
        finally:
            worker.resume()
        _until("cleared", lambda: not (d := _get(api))["stalled"] and d["lag"] == 0, 90)
        # The same document clears its banner at its next poll.
        browser.wait_for(f"{banner}.hidden && {banner}.getAttribute('data-stalled') === 'false'")
        assert b"fencewatch_console_processor_stalled 0.0" in _get(app.url + "/metrics")
    finally:
        app.stop()
