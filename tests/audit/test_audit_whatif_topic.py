"""`fencewatch audit --topic --what-if-fenced` on a real topic (SPEC §6)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from streams.cli import main

pytestmark = pytest.mark.kafka

FIXTURE = Path(__file__).resolve().parents[2] / "examples" / "reference.jsonl"


def test_topic_replay_reports_what_if_fenced(
    kafka_bootstrap: str, unique_topic: Callable[..., str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The fixture on a three-partition topic: --what-if-fenced release-bucket gives the same
    what-if changes as the file audit, next to the four real findings."""
    topic = unique_topic(partitions=3)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    for line in FIXTURE.read_bytes().splitlines():
        producer.produce(topic, key=json.loads(line)["workflow_key"].encode(), value=line)
    assert producer.flush(30) == 0
    argv = ["audit", "--format", "json", "--what-if-fenced", "release-bucket"]
    code = main([*argv, "--topic", topic, "--bootstrap-servers", kafka_bootstrap])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1 and len(doc["findings"]) == 4
    assert main([*argv, str(FIXTURE)]) == 1
    file_doc = json.loads(capsys.readouterr().out)
    assert [(c["change"], c["finding_id"]) for c in doc["what_if"]["changed"]] == [
        ("changed", file_doc["what_if"]["changed"][0]["finding_id"]),
        ("removed", file_doc["what_if"]["changed"][1]["finding_id"]),
        ("removed", file_doc["what_if"]["changed"][2]["finding_id"]),
    ]
    assert doc["what_if"]["changed"] == file_doc["what_if"]["changed"]
