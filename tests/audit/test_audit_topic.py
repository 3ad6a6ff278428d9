"""`fencewatch audit --topic` replays a real topic through the same detector (SPEC §6)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from streams.cli import main

pytestmark = pytest.mark.kafka

FIXTURE = Path(__file__).resolve().parents[2] / "examples" / "reference.jsonl"


def _publish(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for key, value in records:
        producer.produce(topic, key=key, value=value)
    assert producer.flush(30) == 0


def _fixture_records() -> list[tuple[bytes | None, bytes]]:
    out = []
    for line in FIXTURE.read_bytes().splitlines():
        out.append((json.loads(line)["workflow_key"].encode(), line))
    return out


def _audit_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    code = main(["audit", "--format", "json", *argv])
    return code, json.loads(capsys.readouterr().out)


def test_topic_replay_gives_the_fixture_findings(
    kafka_bootstrap: str, unique_topic: Callable[..., str], capsys
) -> None:
    """The fixture, keyed over three partitions, replays to the same four findings as the file."""
    topic = unique_topic(partitions=3)
    _publish(kafka_bootstrap, topic, _fixture_records())
    code, doc = _audit_json(capsys, "--topic", topic, "--bootstrap-servers", kafka_bootstrap)
    assert code == 1
    assert [(f["event_seq"], f["kind"]) for f in doc["findings"]] == [
        (6, "stale_activity"),
        (7, "stale_attempt"),
        (8, "stale_commit"),
        (9, "conflicting_commit"),
    ]
    assert doc["summary"]["events"] == 16 and doc["invalid"] == []
    # Against the file audit: the same findings apart from arrival fields.
    file_code, file_doc = _audit_json(capsys, str(FIXTURE))
    assert file_code == code
    strip = [
        {k: v for k, v in f.items() if k not in ("event_offset", "revision")}
        for f in file_doc["findings"]
    ]
    assert strip == [
        {k: v for k, v in f.items() if k not in ("event_offset", "revision")}
        for f in doc["findings"]
    ]


def test_topic_replay_reports_bad_records_by_partition_and_offset(
    kafka_bootstrap: str, unique_topic: Callable[..., str], capsys
) -> None:
    """A key/workflow_key mismatch and junk are listed with topic/partition and offset."""
    topic = unique_topic(partitions=1)
    good = _fixture_records()
    bad = [(b"other-key", good[0][1]), (b"export-ledger", b"\xff\xfe junk")]
    _publish(kafka_bootstrap, topic, [*good[:3], *bad, *good[3:]])
    code, doc = _audit_json(capsys, "--topic", topic, "--bootstrap-servers", kafka_bootstrap)
    assert code == 1
    assert len(doc["findings"]) == 4
    assert [(i["source"], i["offset"], i["field"]) for i in doc["invalid"]] == [
        (f"{topic}/0", 3, "workflow_key"),
        (f"{topic}/0", 4, "(record)"),
    ]


def test_topic_replay_respects_an_offset_bound(
    kafka_bootstrap: str, unique_topic: Callable[..., str], capsys
) -> None:
    """--to-offset stops before that offset: the first 12 events hold only the stale progress."""
    topic = unique_topic(partitions=1)
    _publish(kafka_bootstrap, topic, _fixture_records())
    code, doc = _audit_json(
        capsys,
        "--topic",
        topic,
        "--bootstrap-servers",
        kafka_bootstrap,
        "--to-offset",
        "12",
        "--fail-on",
        "diagnostic",
    )
    assert code == 1
    assert [f["kind"] for f in doc["findings"]] == ["stale_activity"]
    assert doc["summary"]["events"] == 12


def test_unknown_topic_is_an_input_error(kafka_bootstrap: str, capsys) -> None:
    """Replaying a topic that does not exist exits 2 with a clear message."""
    code = main(
        ["audit", "--topic", "no-such-topic-fencewatch", "--bootstrap-servers", kafka_bootstrap]
    )
    assert code == 2
    # One line that says what is wrong (was librdkafka's "Broker: Unknown topic or partition").
    assert capsys.readouterr().err.splitlines() == [
        f"fencewatch audit: topic no-such-topic-fencewatch does not exist on {kafka_bootstrap} "
        "(check the name; `fencewatch topics create` makes fencewatch's topics)"
    ]
