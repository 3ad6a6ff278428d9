"""``fencewatch findings`` and ``fencewatch status`` against a real broker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from streams.cli import main
from streams.kafka.connection import KafkaConnection
from tests.findings.conftest import (
    fixture_event_lines,
    fixture_findings,
    jsonl,
    produce_findings,
    produce_raw,
    synthetic_findings,
)

REPO = Path(__file__).resolve().parents[2]


def test_findings_jsonl_shows_latest_revisions_and_json_is_one_document(
    kafka_bootstrap: str, findings_topic: Callable[..., str], capsys: pytest.CaptureFixture[str]
) -> None:
    """jsonl prints the four latest findings; json one document with the same ones."""
    topic = findings_topic()
    args = ["findings", "--bootstrap-servers", kafka_bootstrap, "--topic", topic]
    assert main([*args, "--format", "jsonl"]) == 0
    lines = jsonl(capsys.readouterr().out)
    assert sorted((d["kind"], d["revision"]) for d in lines) == [
        ("conflicting_commit", 1), ("stale_activity", 1), ("stale_attempt", 2), ("stale_commit", 1),
    ]  # fmt: skip
    assert main([*args, "--format", "json", "--min-severity", "critical"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [f["kind"] for f in doc["findings"]] == ["conflicting_commit"]


def test_findings_text_names_each_finding_once(
    kafka_bootstrap: str, findings_topic: Callable[..., str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The text view has one line per finding id and a count."""
    topic = findings_topic()
    assert main(["findings", "--bootstrap-servers", kafka_bootstrap, "--topic", topic]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == f"4 finding(s) on {topic}"
    assert sum("stale_attempt" in line for line in out) == 1
    assert "r2" in next(line for line in out if "stale_attempt" in line)


def test_findings_on_an_events_topic_says_so_and_exits_2(
    kafka_bootstrap: str, unique_topic: Callable[..., str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Records that are not findings: exit 2, pointing at fencewatch audit."""
    topic = unique_topic(1, prefix="events")
    produce_raw(kafka_bootstrap, topic, fixture_event_lines())
    assert main(["findings", "--bootstrap-servers", kafka_bootstrap, "--topic", topic]) == 2
    err = capsys.readouterr().err
    assert "holds no findings" in err and "fencewatch audit --topic" in err


def test_findings_unknown_topic_is_one_line_exit_2(
    kafka_bootstrap: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A missing topic is a one-line error naming it, exit 2."""
    rc = main(["findings", "--bootstrap-servers", kafka_bootstrap, "--topic", "no-such-x1"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "no-such-x1" in err


def test_follow_marks_a_newer_revision_as_an_update(
    kafka_bootstrap: str, findings_topic: Callable[..., str]
) -> None:
    """`--follow` prints each new revision once, the second marked UPDATE of r1."""
    topic = findings_topic([], partitions=1)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "streams", "findings", "--bootstrap-servers", kafka_bootstrap,
         "--topic", topic, "--follow"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        one, two = synthetic_findings(1, revisions=2)
        produce_findings(kafka_bootstrap, topic, [one, one, two])
        assert proc.stdout is not None
        first = proc.stdout.readline()
        second = proc.stdout.readline()
    finally:
        proc.terminate()
        proc.wait(20)
    assert "f-00000 r1" in first and "UPDATE" not in first
    assert "f-00000 r2  UPDATE of r1" in second
    assert proc.returncode == 0


def _status(key: str, worst: str | None, n_open: int, epoch: int = 2) -> bytes:
    opened = [
        {"finding_id": f"{key}-{i}", "kind": "stale_commit", "severity": worst, "revision": 1}
        for i in range(n_open)
    ]
    return json.dumps(
        {
            "workflow_key": key, "current_epoch": epoch, "current_worker": "w2",
            "acquired_seq": 1, "acquisition_implied": False, "released": False,
            "last_position": 9, "stale_epochs": [], "open": opened, "cleared": [],
            "worst_open": worst, "updated_ms": 1,
        }
    ).encode()  # fmt: skip


def test_status_on_a_topic_of_other_records_is_one_line_exit_2(
    kafka_bootstrap: str, unique_topic: Callable[..., str], capsys: pytest.CaptureFixture[str]
) -> None:
    """`status` on records of no known kind names the first record and the missing field."""
    topic = unique_topic(1, prefix="other")
    produce_raw(kafka_bootstrap, topic, [b'{"workflow_key": "wf/x", "hello": 1}'])
    assert main(["status", "--bootstrap-servers", kafka_bootstrap, "--topic", topic]) == 2
    err = capsys.readouterr().err
    assert "is not a status record" in err and "is required" in err and err.count("\n") == 1


def test_status_on_the_findings_topic_names_fencewatch_findings(
    kafka_bootstrap: str, findings_topic: Callable[..., str], capsys: pytest.CaptureFixture[str]
) -> None:
    """`status --topic <findings>`: one line saying it holds findings and the command to use
    (was: `acquired_seq: is required`)."""
    topic = findings_topic()
    assert main(["status", "--bootstrap-servers", kafka_bootstrap, "--topic", topic]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"fencewatch status: {topic} holds findings, not status records (SPEC §8): "
        f"read it with fencewatch findings --topic {topic}\n"
    )


def test_findings_on_the_status_topic_names_fencewatch_status(
    kafka_bootstrap: str, unique_topic: Callable[..., str], capsys: pytest.CaptureFixture[str]
) -> None:
    """`findings --topic <status>` points at `fencewatch status`, not at `audit --topic`."""
    topic = unique_topic(1, prefix="status", config={"cleanup.policy": "compact"})
    _produce_status(kafka_bootstrap, topic, "wf/x")
    assert main(["findings", "--bootstrap-servers", kafka_bootstrap, "--topic", topic]) == 2
    err = capsys.readouterr().err
    assert f"read it with fencewatch status --topic {topic}" in err
    assert "audit" not in err and err.count("\n") == 1


def _produce_status(bootstrap: str, topic: str, key: str) -> None:
    """One status record, keyed (a compacted topic refuses records without a key)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap})
    p.produce(topic, _status(key, "critical", 1), key=key.encode())
    assert p.flush(30) == 0


def test_a_workflow_that_matches_nothing_gets_a_hint(
    kafka_bootstrap: str,
    findings_topic: Callable[..., str],
    unique_topic: Callable[..., str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`status --workflow nope` and `findings --workflow nope` say why nothing is listed
    (and `status` names keys that are there), not just "0 ..."."""
    status = unique_topic(1, prefix="status", config={"cleanup.policy": "compact"})
    _produce_status(kafka_bootstrap, status, "wf/x")
    assert main(
        ["status", "--bootstrap-servers", kafka_bootstrap, "--topic", status, "--workflow", "nope"]
    ) == 0  # fmt: skip
    err = capsys.readouterr().err
    assert "no workflow matches 'nope' (1 on" in err and "'wf/x'" in err and "--prefix" in err
    topic = findings_topic()
    assert main(
        ["findings", "--bootstrap-servers", kafka_bootstrap, "--topic", topic, "--workflow", "no"]
    ) == 0  # fmt: skip
    err = capsys.readouterr().err
    assert "no finding of 'no': --workflow takes an exact key" in err


def test_status_prints_worst_first_last_record_per_key_wins(
    kafka_bootstrap: str, unique_topic: Callable[..., str], capsys: pytest.CaptureFixture[str]
) -> None:
    """One line per workflow, worst first; --open, --prefix and --workflow select."""
    from confluent_kafka import Producer

    topic = unique_topic(2, prefix="status", config={"cleanup.policy": "compact"})
    p = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})  # in order
    for key, value in [
        ("a/ok", _status("a/ok", None, 0)),
        ("b/warn", _status("b/warn", "critical", 1)),  # superseded below
        ("c/crit", _status("c/crit", "critical", 2)),
        ("b/warn", _status("b/warn", "warning", 1, epoch=3)),
    ]:
        p.produce(topic, value, key=key.encode())
    assert p.flush(30) == 0
    base = ["status", "--bootstrap-servers", kafka_bootstrap, "--topic", topic]
    assert main(base) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:2] for line in lines[:3]] == [
        ["critical", "c/crit"], ["warning", "b/warn"], ["ok", "a/ok"],
    ]  # fmt: skip
    assert "epoch 3" in lines[1]
    assert main([*base, "--open", "--format", "jsonl"]) == 0
    assert [d["workflow_key"] for d in jsonl(capsys.readouterr().out)] == ["c/crit", "b/warn"]
    assert main([*base, "--prefix", "a/", "--workflow", "b/warn", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [d["workflow_key"] for d in doc["workflows"]] == ["b/warn", "a/ok"]


def test_audit_of_a_findings_topic_points_to_fencewatch_findings(
    kafka_bootstrap: str, findings_topic: Callable[..., str], capsys: pytest.CaptureFixture[str]
) -> None:
    """`audit --topic` on findings: exit 2, one line saying it holds findings, not events."""
    topic = findings_topic()
    rc = main(["audit", "--topic", topic, "--bootstrap-servers", kafka_bootstrap])
    err = capsys.readouterr().err
    assert rc == 2
    assert f"topic {topic} holds findings, not events" in err
    assert f"fencewatch findings --bootstrap-servers {kafka_bootstrap} --topic {topic}" in err
    assert err.count("\n") == 1


def test_audit_of_a_status_topic_points_to_fencewatch_status(
    kafka_bootstrap: str,
    unique_topic: Callable[..., str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`audit --topic` on status records: exit 2, one line naming fencewatch status and the
    broker, also when the address comes from FENCEWATCH_BOOTSTRAP_SERVERS."""
    from confluent_kafka import Producer

    topic = unique_topic(1, prefix="status", config={"cleanup.policy": "compact"})
    p = Producer({"bootstrap.servers": kafka_bootstrap})
    p.produce(topic, _status("wf/s", "critical", 1), key=b"wf/s")
    assert p.flush(30) == 0
    monkeypatch.setenv("FENCEWATCH_BOOTSTRAP_SERVERS", kafka_bootstrap)
    assert main(["audit", "--topic", topic]) == 2
    err = capsys.readouterr().err
    assert f"topic {topic} holds per-workflow status records (SPEC §8), not events" in err
    assert f"fencewatch status --bootstrap-servers {kafka_bootstrap} --topic {topic}" in err
    assert err.count("\n") == 1


def test_verify_takes_the_current_epoch_from_the_status_topic(
    kafka_bootstrap: str, unique_topic: Callable[..., str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --epoch, verify publishes for the status record's current_epoch."""
    from confluent_kafka import Producer

    status = unique_topic(1, prefix="status", config={"cleanup.policy": "compact"})
    events = unique_topic(1, prefix="events")
    p = Producer({"bootstrap.servers": kafka_bootstrap})
    p.produce(status, _status("wf/x", "critical", 1, epoch=7), key=b"wf/x")
    p.produce(events, _attempt("wf/x", "fx"), key=b"wf/x")  # the evidence verify looks for
    assert p.flush(30) == 0
    rc = main(
        ["verify", "--bootstrap-servers", kafka_bootstrap, "--status-topic", status,
         "--events-topic", events, "--workflow", "wf/x", "--effect", "fx", "--by", "carol"]
    )  # fmt: skip
    assert rc == 0, capsys.readouterr().err
    from streams.kafka.tail import TopicTail

    tail = TopicTail(KafkaConnection(kafka_bootstrap), events, stop_at_end=True)
    try:
        tail.poll(10)  # the effect_attempted produced above
        rec = tail.poll(10)
    finally:
        tail.close()
    assert rec is not None and rec.key == b"wf/x"
    ev = json.loads(rec.value or b"")
    assert (ev["type"], ev["epoch"], ev["worker_id"], ev["effect_key"]) == (
        "outcome_verified", 7, "person:carol", "fx",
    )  # fmt: skip


def _attempt(key: str, effect: str, epoch: int = 7) -> bytes:
    return json.dumps(
        {"type": "effect_attempted", "workflow_key": key, "epoch": epoch, "worker_id": "w",
         "effect_key": effect}
    ).encode()  # fmt: skip


def _end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    from streams.kafka import end_offsets

    return dict(end_offsets(KafkaConnection(bootstrap), topic))


def test_verify_refuses_an_effect_the_workflow_has_no_evidence_of(
    kafka_bootstrap: str, unique_topic: Callable[..., str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A mistyped --effect is one line naming the effects there, exit 2, nothing
    published; --force publishes it; the right effect key publishes."""
    events = unique_topic(1, prefix="events")
    other = unique_topic(1, prefix="events")
    produce_raw(kafka_bootstrap, events, [_attempt("wf/y", "send invoice 7"), _attempt("z", "x")])
    base = ["verify", "--bootstrap-servers", kafka_bootstrap, "--events-topic", events,
            "--workflow", "wf/y", "--by", "dana", "--epoch", "7"]  # fmt: skip
    before = _end_offsets(kafka_bootstrap, events)
    assert main([*base, "--effect", "send invoice 8"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "fencewatch verify: workflow 'wf/y' has no evidence of effect 'send invoice 8' (its "
        f"effects on {events}: 'send invoice 7'); check --workflow and --effect, or give "
        "--force to record it anyway\n"
    )
    assert _end_offsets(kafka_bootstrap, events) == before  # nothing published
    assert main([*base[:4], other, *base[5:], "--effect", "x"]) == 2
    assert f"{other} holds no event of it" in capsys.readouterr().err
    assert main([*base, "--effect", "send invoice 7"]) == 0
    assert main([*base, "--effect", "send invoice 8", "--force"]) == 0
    assert sum(_end_offsets(kafka_bootstrap, events).values()) == sum(before.values()) + 2


def test_verify_with_epoch_and_a_wrong_broker_answers_within_the_connect_timeout(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--epoch and a "broker" that accepts TCP and never answers: one line within about
    --connect-timeout (was 30 s of silence: nothing asked the broker before the producer's
    wait)."""
    import socket
    import time

    with socket.socket() as silent:  # connections complete in the backlog, nothing answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        started = time.monotonic()
        rc = main(
            ["verify", "--bootstrap-servers", f"127.0.0.1:{port}", "--connect-timeout", "2",
             "--workflow", "wf/y", "--effect", "e", "--by", "dana", "--epoch", "7"]
        )  # fmt: skip
        took = time.monotonic() - started
    assert rc == 2 and took < 5, took
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"127.0.0.1:{port}" in err


def test_no_position_is_stored_unless_group_names_one(
    kafka_bootstrap: str, findings_topic: Callable[..., str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A plain read commits nothing under the reader's internal group id; --group NAME does."""
    from confluent_kafka import Consumer, TopicPartition

    topic = findings_topic(partitions=3)
    base = ["findings", "--bootstrap-servers", kafka_bootstrap, "--topic", topic]
    assert main(base) == 0
    group = f"g-{topic}"
    assert main([*base, "--group", group]) == 0
    capsys.readouterr()

    def committed(group_id: str) -> list[int]:
        c = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group_id})
        try:
            tps = [TopicPartition(topic, p) for p in range(3)]
            return [t.offset for t in c.committed(tps, timeout=20)]
        finally:
            c.close()

    assert all(o < 0 for o in committed("fencewatch-findings-reader"))
    # Past every record (one key: one partition holds them; the empty ones need no position).
    assert sum(max(o, 0) for o in committed(group)) == len(fixture_findings())
