"""The topic audit as a library call (streams.audit.topic): what the CLI and the
demos run, its result object saying what the read covered."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from streams.audit.topic import audit_topic
from streams.core.replay import Replay
from streams.kafka.connection import KafkaConnection
from streams.kafka.reader import Offset

pytestmark = pytest.mark.kafka

FIXTURE = Path(__file__).resolve().parents[2] / "examples" / "reference.jsonl"


def _publish(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for value in values:
        key = json.loads(value).get("workflow_key", "k").encode()
        producer.produce(topic, key=key, value=value)
    assert producer.flush(30) == 0


def test_audit_topic_finds_what_the_file_audit_finds(
    kafka_bootstrap: str, unique_topic: Callable[..., str]
) -> None:
    """audit_topic over the published fixture gives the file audit's four findings; the
    result says the read was whole, reached every end offset and holds events."""
    topic = unique_topic(partitions=3)
    lines = [line for line in FIXTURE.read_bytes().splitlines() if line.strip()]
    _publish(kafka_bootstrap, topic, lines)
    audit = audit_topic(KafkaConnection(kafka_bootstrap), topic)
    file_replay = Replay()
    for n, line in enumerate(lines):
        file_replay.feed(line, offset=n, source="fixture")
    strip = ("event_offset", "revision")
    assert [{k: v for k, v in d.items() if k not in strip} for d in audit.latest().values()] == [
        {k: v for k, v in f.to_dict().items() if k not in strip}
        for f in file_replay.latest_findings()
    ]
    assert len(audit.latest()) == 4
    assert (audit.records, audit.partial, audit.holds, audit.coverage()) == (16, False, None, None)
    assert audit.reached == audit.stop and sum(audit.stop.values()) == 16


def test_audit_topic_names_a_findings_topic_and_honours_bounds(
    kafka_bootstrap: str, unique_topic: Callable[..., str]
) -> None:
    """Pointed at finding records the result says the topic holds findings; an Offset
    start bound skips the records before it."""
    events = unique_topic(partitions=1)
    lines = [line for line in FIXTURE.read_bytes().splitlines() if line.strip()]
    _publish(kafka_bootstrap, events, lines)
    conn = KafkaConnection(kafka_bootstrap)
    whole = audit_topic(conn, events)
    findings = unique_topic(partitions=1)
    _publish(kafka_bootstrap, findings, [json.dumps(d).encode() for d in whole.latest().values()])
    assert audit_topic(conn, findings).holds == "findings"
    late = audit_topic(conn, events, start=Offset(10))
    assert late.records == 6 and late.begin == {0: 10}
