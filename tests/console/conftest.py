"""One live stack per test module: fresh topics, one live processor worker
(a real ``fencewatch run`` subprocess, as in tests/live), and two consoles
on those topics, one read-only and one with a token; plus a headless
Chromium driven over DevTools (tests/console/browser.py)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from streams.console.app import ConsoleApp, ConsoleSettings
from streams.kafka.admin import TopicAdmin, TopicSpec
from streams.kafka.connection import KafkaConnection
from tests.console.browser import Browser
from tests.live.conftest import LiveHarness

TOKEN = "console-test-token-0123456789"


@dataclass
class Stack:
    harness: LiveHarness
    read_only: ConsoleApp
    with_token: ConsoleApp

    def produce(self, docs: Iterable[dict[str, Any]]) -> None:
        self.harness.produce((d["workflow_key"].encode(), json.dumps(d).encode()) for d in docs)

    def produce_raw(self, topic: str, records: Iterable[tuple[bytes, bytes]]) -> None:
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": self.harness.bootstrap})
        for key, value in records:
            p.produce(topic, value, key=key)
        assert p.flush(30) == 0


@pytest.fixture(scope="module")
def stack(
    kafka_bootstrap: str, kafka_admin: TopicAdmin, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    created: list[str] = []

    def topic(partitions: int = 1, prefix: str = "t", config: dict[str, str] | None = None) -> str:
        name = f"console-{prefix}-{uuid.uuid4().hex[:10]}"
        kafka_admin.ensure([TopicSpec(name, partitions, -1, config or {})])
        created.append(name)
        return name

    h = LiveHarness(kafka_bootstrap, topic, tmp_path_factory.mktemp("console"), 3)
    apps: list[ConsoleApp] = []
    try:
        h.start().wait_ready()
        for token in (None, TOKEN):
            app = ConsoleApp(
                ConsoleSettings(
                    KafkaConnection(kafka_bootstrap),
                    port=0,
                    token=token,
                    events_topic=h.events,
                    findings_topic=h.findings,
                    status_topic=h.status,
                    replay_events=500,
                    processor_group=h.app_id,
                )
            )
            app.start()
            apps.append(app)
        yield Stack(h, apps[0], apps[1])
    finally:
        for app in apps:
            app.stop()
        h.close()
        kafka_admin.delete(created)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    b = Browser()
    try:
        yield b
    finally:
        b.close()
