"""`fencewatch audit --topic` whose broker is killed (-9) mid-read: a restart
within --connect-timeout is ridden out and the report is whole; a broker
that stays away gives the report so far, marked partial, with the next
offset of each partition to resume from, one line, and exit 2 (issue 23)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Producer

import streams.kafka.reader as reader
from streams.cli import main
from streams.kafka import TopicAdmin, TopicSpec
from streams.kafka.connection import KafkaConnection
from tests.report.scale import ordinary_workflow

pytestmark = [pytest.mark.kafka, pytest.mark.faults]

N_WORKFLOWS = 2_000  # 20,000 records over 3 partitions
N_RECORDS = 10 * N_WORKFLOWS
KILL_AT = 2_000
# Small fetches and prefetch (the reader's 8 MiB would hold the whole 3.6 MB
# topic): most of it is still on the broker when it is killed, so the read
# really spans the outage.
SMALL_FETCHES = [
    "--kafka-config", "queued.max.messages.kbytes=64",
    "--kafka-config", "fetch.max.bytes=1048576",
    "--kafka-config", "max.partition.fetch.bytes=65536",
]  # fmt: skip


def _topic(bootstrap: str) -> str:
    topic = f"audit-loss-{time.monotonic_ns()}"
    TopicAdmin(KafkaConnection(bootstrap)).ensure([TopicSpec(topic, 3, 1)])
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for k in range(N_WORKFLOWS):
        for doc in ordinary_workflow(k):
            producer.produce(topic, key=doc["workflow_key"].encode(), value=orjson.dumps(doc))
        producer.poll(0)
    assert producer.flush(60) == 0
    return topic


def _after(monkeypatch: pytest.MonkeyPatch, n: int, act: Callable[[], None]) -> None:
    """Run ``act`` (kill the broker) when the audit has taken ``n`` records from the reader."""
    real = reader.iter_topic

    def iter_topic(*args: Any, **kwargs: Any) -> Iterator[reader.TopicRecord]:
        for i, rec in enumerate(real(*args, **kwargs)):
            if i == n:
                act()
            yield rec

    monkeypatch.setattr(reader, "iter_topic", iter_topic)


def test_an_audit_rides_out_a_broker_kill9_and_restart(
    restartable_kafka: Any, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """kill -9 after 2,000 of 20,000 records, the broker started again meanwhile: the audit
    waits (within --connect-timeout), carries on, and reports every record, not partial."""
    broker = restartable_kafka
    topic = _topic(broker.bootstrap)
    restart = threading.Thread(target=broker.start)

    def kill_and_restart() -> None:
        broker.kill9()
        restart.start()

    _after(monkeypatch, KILL_AT, kill_and_restart)
    try:
        code = main(
            ["audit", "--topic", topic, "--bootstrap-servers", broker.bootstrap,
             "--format", "json", "--connect-timeout", "120", *SMALL_FETCHES]
        )  # fmt: skip
    finally:
        if restart.is_alive() or restart.ident is not None:
            restart.join()
    out = capsys.readouterr()
    assert restart.ident is not None, "the broker was never killed"
    assert out.err == ""
    summary = json.loads(out.out)["summary"]
    assert summary["events"] == N_RECORDS and summary["invalid"] == 0
    assert summary["partial"] is False and "next_offsets" not in summary
    assert code == 1  # the stale workflows' findings


def test_an_audit_whose_broker_stays_away_writes_a_partial_report_to_resume_from(
    restartable_kafka: Any, monkeypatch: pytest.MonkeyPatch, capsys, tmp_path: Path
) -> None:
    """kill -9 after 2,000 records, no restart: within --connect-timeout of the last record the
    audit writes the report so far (-o), marked partial with each partition's next offset, says
    in one line that the broker is unreachable, exits 2; --from-offset with those offsets reads
    exactly the rest."""
    broker = restartable_kafka
    topic = _topic(broker.bootstrap)
    report = tmp_path / "partial.json"
    _after(monkeypatch, KILL_AT, broker.kill9)
    try:
        code = main(
            ["audit", "--topic", topic, "--bootstrap-servers", broker.bootstrap,
             "--format", "json", "-o", str(report), "--connect-timeout", "3", *SMALL_FETCHES]
        )  # fmt: skip
    finally:
        broker.start()
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "Traceback" not in err, err
    host, port = broker.bootstrap.rsplit(":", 1)
    assert err.startswith(
        f"fencewatch audit: broker unreachable: cannot connect to broker {host}:{port}: "
        "connection refused"
    ), err
    summary = json.loads(report.read_text())["summary"]
    assert summary["partial"] is True
    assert summary["partial_reason"].startswith("broker unreachable: ")
    nexts = {int(p): o for p, o in summary["next_offsets"].items()}
    assert set(nexts) == {0, 1, 2}
    assert KILL_AT <= summary["events"] == sum(nexts.values()) < N_RECORDS
    resume = ",".join(f"{p}:{o}" for p, o in sorted(nexts.items()))
    assert err.rstrip().endswith(f"the report is PARTIAL; resume with --from-offset {resume}")

    monkeypatch.undo()
    main(["audit", "--topic", topic, "--bootstrap-servers", broker.bootstrap,
          "--format", "json", "--from-offset", resume])  # fmt: skip
    rest = json.loads(capsys.readouterr().out)["summary"]
    assert rest["events"] == N_RECORDS - summary["events"]
    assert "missing_history" not in rest and rest["partial"] is False
