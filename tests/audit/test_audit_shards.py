"""A topic audit split over processes (--jobs) or machines (--partitions, then
``fencewatch report merge``) writes the report one process would (issue 46)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from streams.cli import main
from tests.live.conftest import scenario_events

pytestmark = pytest.mark.kafka

PARTITIONS = 4


def _publish(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for key, value in records:
        producer.produce(topic, key=key, value=value)
    assert producer.flush(30) == 0


@pytest.fixture
def events_topic(kafka_bootstrap: str, unique_topic: Callable[..., str]) -> str:
    """Scenario events keyed over four partitions, with junk in some of them."""
    topic = unique_topic(partitions=PARTITIONS)
    records = scenario_events(n_keys=80, epochs=4)
    # Invalid records among the events: their list must come out in one order.
    junk = [(f"wf-{k:05d}".encode(), b"\xff not json") for k in range(0, 80, 9)]
    records[100:100] = junk[:5]
    records[400:400] = junk[5:]
    _publish(kafka_bootstrap, topic, records)
    return topic


def _audit(
    capsys: pytest.CaptureFixture[str], bootstrap: str, topic: str, *argv: str
) -> tuple[int, str, str]:
    code = main(
        ["audit", "--topic", topic, "--bootstrap-servers", bootstrap, "--colour", "never", *argv]
    )
    out, err = capsys.readouterr()
    return code, out, err


def _merge(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["report", "merge", "--colour", "never", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_jobs_write_the_single_process_report(
    kafka_bootstrap: str, events_topic: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """--jobs 2 and --jobs 3 give the single process's JSON, text and HTML, byte for byte."""
    singles: dict[str, str] = {}
    for fmt in ("json", "text", "html"):
        code, singles[fmt], _ = _audit(capsys, kafka_bootstrap, events_topic, "--format", fmt)
        assert code == 1
        for jobs in ("2", "3"):
            got = _audit(capsys, kafka_bootstrap, events_topic, "--format", fmt, "--jobs", jobs)
            assert got == (code, singles[fmt], ""), (fmt, jobs)
    doc = json.loads(singles["json"])
    # Not a vacuous equality: findings and invalid records from several partitions.
    assert doc["summary"]["findings"] > 20
    assert doc["summary"]["invalid"] == 9
    assert len({i["source"] for i in doc["invalid"]}) > 1
    assert sorted(doc["source"]["partitions"]) == [str(p) for p in range(PARTITIONS)]


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_forked_and_spawned_workers_write_the_same_report(
    kafka_bootstrap: str,
    events_topic: str,
    method: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Workers forked (a one-thread parent) or spawned (one with threads) give the single JSON."""
    import multiprocessing

    from streams.audit import shard

    code, single, _ = _audit(capsys, kafka_bootstrap, events_topic, "--format", "json")
    monkeypatch.setattr(shard, "_start_context", lambda: multiprocessing.get_context(method))
    got = _audit(capsys, kafka_bootstrap, events_topic, "--format", "json", "--jobs", "2")
    assert got == (code, single, "")


def test_merged_shard_reports_equal_the_single_report(
    kafka_bootstrap: str, events_topic: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Reports of --partitions 0,2 and 1,3 merge to the single audit's JSON and text."""
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    code_a, _, _ = _audit(
        capsys,
        kafka_bootstrap,
        events_topic,
        "--format",
        "json",
        "--partitions",
        "0,2",
        "-o",
        str(a),
    )
    code_b, _, _ = _audit(
        capsys,
        kafka_bootstrap,
        events_topic,
        "--format",
        "json",
        "--partitions",
        "1,3",
        "--jobs",
        "2",
        "-o",
        str(b),
    )
    assert code_a == code_b == 1
    shard = json.loads(a.read_text())
    assert sorted(shard["source"]["partitions"]) == ["0", "2"]
    single_code, single_json, _ = _audit(capsys, kafka_bootstrap, events_topic, "--format", "json")
    assert shard["summary"]["findings"] < json.loads(single_json)["summary"]["findings"]
    assert _merge(capsys, str(a), str(b), "--format", "json") == (single_code, single_json, "")
    # The order of the shards on the command line does not matter.
    assert _merge(capsys, str(b), str(a), "--format", "json") == (single_code, single_json, "")
    _, single_text, _ = _audit(capsys, kafka_bootstrap, events_topic)
    assert _merge(capsys, str(a), str(b)) == (single_code, single_text, "")
    out = tmp_path / "merged.txt"
    assert _merge(capsys, str(a), str(b), "-o", str(out))[0] == single_code
    assert out.read_text() == single_text


def test_overlapping_shards_are_refused(
    kafka_bootstrap: str, events_topic: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A partition in two shards is refused in one line naming it and both reports."""
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    for path, parts in ((a, "0-2"), (b, "2-3")):
        _audit(
            capsys,
            kafka_bootstrap,
            events_topic,
            "--format",
            "json",
            "--partitions",
            parts,
            "-o",
            str(path),
        )
    code, out, err = _merge(capsys, str(a), str(b), "--format", "json")
    assert (code, out) == (2, "")
    assert err == (
        f"fencewatch report merge: partition 2 of {events_topic} is in both {a} and {b}: "
        "shards must not overlap\n"
    )
    # The same report twice overlaps too.
    code, _, err = _merge(capsys, str(a), str(a))
    assert (code, err) == (
        2,
        f"fencewatch report merge: {a} is given twice: shards must not overlap\n",
    )


def test_disagreeing_shards_are_refused(
    kafka_bootstrap: str,
    events_topic: str,
    unique_topic: Callable[..., str],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    """Shards of other topics, detector settings or bounds are refused, one line each."""

    def shard(name: str, topic: str, parts: str, *extra: str) -> str:
        path = tmp_path / name
        code, _, err = _audit(
            capsys,
            kafka_bootstrap,
            topic,
            "--format",
            "json",
            "--partitions",
            parts,
            "-o",
            str(path),
            "--fail-on",
            "never",
            *extra,
        )
        assert (code, err) == (0, "")
        return str(path)

    a = shard("a.json", events_topic, "0,1")
    other = unique_topic(partitions=PARTITIONS)
    _publish(kafka_bootstrap, other, scenario_events(n_keys=5, epochs=2))
    for b, why in (
        (shard("t.json", other, "2,3"), f"different topics ({events_topic} and {other})"),
        (
            shard("s.json", events_topic, "2,3", "--max-events-per-key", "64"),
            "different detector settings",
        ),
        (shard("o.json", events_topic, "2,3", "--to-offset", "50"), "different end bounds"),
    ):
        code, out, err = _merge(capsys, a, b, "--format", "json")
        assert (code, out) == (2, ""), why
        assert err.startswith(f"fencewatch report merge: {a} and {b} ") and why in err, err
        assert err.count("\n") == 1
    # Not a report, and a JSON report with no source: one line each.
    junk = tmp_path / "junk.json"
    junk.write_text("[1, 2")
    code, _, err = _merge(capsys, a, str(junk))
    assert code == 2 and err.startswith(f"fencewatch report merge: {junk}: not a JSON report")
    bare = tmp_path / "bare.json"
    doc = json.loads(Path(a).read_text())
    del doc["source"]
    bare.write_text(json.dumps(doc))
    code, _, err = _merge(capsys, str(bare))
    assert code == 2 and f'{bare}: no "source" in the report' in err and err.count("\n") == 1
    code, out, err = _merge(capsys, a, "--format", "html")
    assert (code, out) == (2, "") and "--format html" in err and err.count("\n") == 1


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("x", "argument --partitions: not a partition or a range (P or P-Q, integers >= 0): 'x'"),
        ("3-1", "argument --partitions: '3-1' is not a range of partitions >= 0"),
        ("1,0-2", "argument --partitions: partition 1 given twice in '1,0-2'"),
        ("-1", "argument --partitions: not a partition or a range"),
    ],
)
def test_malformed_partitions_are_a_usage_error(
    kafka_bootstrap: str, value: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A --partitions value that is not partitions and ranges is one line, exit 2."""
    code, out, err = _audit(capsys, kafka_bootstrap, "any-topic", f"--partitions={value}")
    assert (code, out) == (2, "")
    assert message in err and err.count("\n") == 1


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_partition_the_topic_lacks_is_named(
    kafka_bootstrap: str, events_topic: str, jobs: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """--partitions naming partitions past the topic's is one line naming them, exit 2."""
    code, out, err = _audit(
        capsys, kafka_bootstrap, events_topic, "--partitions", "2-5,9", "--jobs", jobs
    )
    assert (code, out) == (2, "")
    assert err == f"fencewatch audit: topic {events_topic} has no partitions 4, 5, 9\n"


def test_jobs_and_partitions_need_a_topic(capsys: pytest.CaptureFixture[str]) -> None:
    """--jobs or --partitions with files, or --jobs with --strict, is a usage error."""
    assert main(["audit", "--jobs", "2", "examples/reference.jsonl"]) == 2
    assert "apply to --topic only" in capsys.readouterr().err
    assert main(["audit", "--partitions", "0", "examples/reference.jsonl"]) == 2
    assert "apply to --topic only" in capsys.readouterr().err
    assert main(["audit", "--topic", "t", "--jobs", "2", "--strict"]) == 2
    assert "give --jobs 1 with it" in capsys.readouterr().err
    assert main(["audit", "--topic", "t", "--jobs", "65"]) == 2
    assert "at most 64 worker processes, got 65" in capsys.readouterr().err
    assert main(["audit", "--topic", "t", "--jobs", "0"]) == 2
    assert "must be at least 1, got 0" in capsys.readouterr().err


class _Recorder:
    """A TopicProgress that records what it is told."""

    def __init__(self) -> None:
        self.topics: list[tuple[str, int, int]] = []
        self.updates: list[tuple[int, int]] = []

    def topic(self, name: str, total_records: int, partitions: int) -> None:
        self.topics.append((name, total_records, partitions))

    def records(self, done: int, partitions_done: int) -> None:
        self.updates.append((done, partitions_done))


def test_the_progress_display_sums_the_workers(kafka_bootstrap: str, events_topic: str) -> None:
    """One topic line with every partition's records, updates ending at all of them read."""
    from streams.audit.shard import run_jobs
    from streams.core.detector import DetectorConfig
    from streams.kafka.connection import KafkaConnection

    progress = _Recorder()
    audit = run_jobs(
        KafkaConnection(kafka_bootstrap),
        events_topic,
        jobs=2,
        config=DetectorConfig(),
        max_event_bytes=1 << 20,
        progress=progress,
    )
    total = sum(stop - begin for begin, stop in audit.bounds().values())
    assert total == audit.replay.records > 0
    assert progress.topics == [(events_topic, total, PARTITIONS)]
    assert progress.updates[-1] == (total, PARTITIONS)
    assert [d for d, _ in progress.updates] == sorted(d for d, _ in progress.updates)


def test_what_if_fenced_with_jobs_is_the_single_process_report(
    kafka_bootstrap: str, events_topic: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """--what-if-fenced replays the merged evidence as the single process does."""
    argv = ("--format", "json", "--what-if-fenced", "(unnamed)")
    code, single, _ = _audit(capsys, kafka_bootstrap, events_topic, *argv)
    assert json.loads(single)["what_if"]["changed"]
    assert _audit(capsys, kafka_bootstrap, events_topic, *argv, "--jobs", "2") == (code, single, "")


def test_missing_history_merges_as_one_audit_reports_it(
    kafka_bootstrap: str,
    unique_topic: Callable[..., str],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    """A partition with deleted records: --jobs and merged shards name the gap and note
    its findings exactly as the single audit does (text and JSON)."""
    from tests.audit.test_audit_missing_history import _truncated_topic

    topic = unique_topic(partitions=2)
    _truncated_topic(kafka_bootstrap, topic)
    for fmt in ("json", "text"):
        single = _audit(capsys, kafka_bootstrap, topic, "--format", fmt)
        mark = '"missing_history"' if fmt == "json" else "earlier evidence may be missing"
        assert single[0] == 1 and mark in single[1]
        assert _audit(capsys, kafka_bootstrap, topic, "--format", fmt, "--jobs", "2") == single
        shards = [str(tmp_path / f"{p}.json") for p in ("0", "1")]
        for p, path in zip(("0", "1"), shards, strict=True):
            _audit(
                capsys, kafka_bootstrap, topic, "--format", "json", "--partitions", p, "-o", path
            )
        assert _merge(capsys, *shards, "--format", fmt) == single


class _Pressed:
    """An Interruptible whose Ctrl-C was pressed before the read."""

    requested = True

    def call(self, fn: Callable[..., object], *args: object) -> object:
        return None


def test_a_ctrl_c_reaches_every_worker(kafka_bootstrap: str, events_topic: str) -> None:
    """Ctrl-C in the parent stops the workers: the merged audit is interrupted, nothing read."""
    from streams.audit.shard import run_jobs
    from streams.core.detector import DetectorConfig
    from streams.kafka.connection import KafkaConnection

    conn = KafkaConnection(kafka_bootstrap)
    audit = run_jobs(
        conn,
        events_topic,
        jobs=2,
        config=DetectorConfig(),
        max_event_bytes=1 << 20,
        interrupt=_Pressed(),
    )
    assert audit.interrupted and audit.partial
    assert audit.replay.records == 0
    whole = run_jobs(conn, events_topic, jobs=2, config=DetectorConfig(), max_event_bytes=1 << 20)
    assert not whole.partial and whole.replay.records > 0


def _killed(task: object) -> object:
    """A worker's shard that ends its process without a result (as the OOM killer would)."""
    import os

    os._exit(9)


def test_a_killed_worker_is_one_line(
    kafka_bootstrap: str,
    events_topic: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker that dies (no result) is one line, exit 2, and no report."""
    import multiprocessing

    from streams.audit import shard

    # Forked, so the worker runs this module's replacement of the shard's work.
    monkeypatch.setattr(shard, "_start_context", lambda: multiprocessing.get_context("fork"))
    monkeypatch.setattr(shard, "_work", _killed)
    code, out, err = _audit(capsys, kafka_bootstrap, events_topic, "--jobs", "2")
    assert (code, out) == (2, "")
    assert err.startswith("fencewatch audit: an audit worker process died") and err.count("\n") == 1
