"""`fencewatch audit --topic` over a partition whose early records were deleted
(retention, delete_records): every format names the gap, with its size, and
the findings on its keys say earlier evidence may be missing (issue 23)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from streams.cli import main

pytestmark = pytest.mark.kafka

FIXTURE = Path(__file__).resolve().parents[2] / "examples" / "reference.jsonl"
LEDGER = "export-ledger"


def _truncated_topic(bootstrap: str, topic: str) -> None:
    """export-ledger's nine events in partition 0, the two other workflows in partition 1;
    then partition 0's first four records deleted (log start offset 4)."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for line in FIXTURE.read_bytes().splitlines():
        key = json.loads(line)["workflow_key"]
        producer.produce(topic, key=key.encode(), value=line, partition=0 if key == LEDGER else 1)
    assert producer.flush(30) == 0
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.delete_records([TopicPartition(topic, 0, 4)], request_timeout=30)
    for future in futures.values():
        assert future.result(timeout=30).low_watermark == 4


def _audit(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["audit", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_deleted_history_is_named_in_text_json_and_html_with_a_confidence_note(
    kafka_bootstrap: str, unique_topic: Callable[..., str], capsys, tmp_path: Path
) -> None:
    """Log start offset 4 in partition 0: text, JSON summary and HTML say 4 records are gone,
    and every finding on export-ledger (partition 0) says earlier evidence may be missing."""
    topic = unique_topic(partitions=2)
    _truncated_topic(kafka_bootstrap, topic)
    base = ["--topic", topic, "--bootstrap-servers", kafka_bootstrap]
    gap = f"partition 0 of {topic} starts at offset 4: 4 records from offset 0 deleted"

    code, text, err = _audit(capsys, *base)
    assert code == 1 and err == ""
    assert "missing history (4 records deleted before the audit;" in text
    assert gap in text
    last = text.rstrip().splitlines()[-1]
    assert last.endswith("; 4 records of history missing; fail-on warning")
    notes = [ln for ln in text.splitlines() if "confidence:" in ln]
    assert notes and all("earlier evidence may be missing: " + gap in ln for ln in notes)

    code, out, _ = _audit(capsys, *base, "--format", "json")
    doc = json.loads(out)
    missing = doc["summary"]["missing_history"]
    assert missing["records"] == 4
    assert missing["partitions"] == [
        {"partition": 0, "from_offset": 0, "log_start_offset": 4, "missing": 4}
    ]
    ledger = [f["finding_id"] for f in doc["findings"] if f["workflow_key"] == LEDGER]
    assert ledger and missing["finding_ids"] == ledger
    assert doc["summary"]["partial"] is False

    html = tmp_path / "r.html"
    code, _, err = _audit(capsys, *base, "--format", "html", "-o", str(html))
    page = html.read_text()
    assert code == 1 and err == ""
    assert "MISSING HISTORY: 4 records deleted before the audit" in page
    assert page.count(f"<div class='hnote'>earlier evidence may be missing: {gap}") == len(ledger)


@pytest.mark.parametrize(("start", "missing"), [("2", 2), ("4", None), ("1:3,0:1", 3)])
def test_from_offset_counts_only_what_the_read_asked_for(
    kafka_bootstrap: str, unique_topic: Callable[..., str], capsys, start: str, missing: int | None
) -> None:
    """--from-offset 2 misses offsets 2-3 (2 records); from 4 misses nothing; per partition
    (0:1) it misses offsets 1-3 of partition 0."""
    topic = unique_topic(partitions=2)
    _truncated_topic(kafka_bootstrap, topic)
    code, out, err = _audit(
        capsys, "--topic", topic, "--bootstrap-servers", kafka_bootstrap, "--format", "json",
        "--from-offset", start,
    )  # fmt: skip
    assert code == 1 and err == ""
    summary = json.loads(out)["summary"]
    if missing is None:  # nothing asked for was deleted
        assert "missing_history" not in summary
    else:
        assert summary["missing_history"]["records"] == missing
        assert summary["missing_history"]["partitions"][0]["log_start_offset"] == 4


def test_from_offset_rejects_a_malformed_partition_list(capsys) -> None:
    """--from-offset 0:1,x is a usage error naming the bad part (exit 2, one line)."""
    code, _, err = _audit(capsys, "--topic", "t", "--from-offset", "0:1,x")
    assert code == 2
    assert "not PARTITION:OFFSET (two integers >= 0): 'x'" in err
    assert "Traceback" not in err


def test_a_since_start_says_nothing_of_deleted_history(
    kafka_bootstrap: str, unique_topic: Callable[..., str], capsys
) -> None:
    """--since: the deleted records' times are unknown, so no missing history is claimed."""
    topic = unique_topic(partitions=2)
    _truncated_topic(kafka_bootstrap, topic)
    code, out, err = _audit(
        capsys, "--topic", topic, "--bootstrap-servers", kafka_bootstrap, "--format", "json",
        "--since", "0",
    )  # fmt: skip
    assert code == 1 and err == ""
    summary = json.loads(out)["summary"]
    assert "missing_history" not in summary and summary["events"] == 12
