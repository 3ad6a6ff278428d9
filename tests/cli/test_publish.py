"""`fencewatch publish`: JSON Lines into the events topic, validated as the audit
validates, keyed by workflow key (issue 23)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from streams.cli import main
from streams.cli.publish import _lines
from streams.kafka import TopicAdmin, iter_topic
from streams.kafka.connection import KafkaConnection

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "examples" / "reference.jsonl"


def _records(bootstrap: str, topic: str) -> list[tuple[bytes | None, bytes | None]]:
    return [(key, value) for key, value, _p, _o in iter_topic(KafkaConnection(bootstrap), topic)]


def test_invalid_lines_are_reported_by_line_and_field_and_never_sent(
    kafka_bootstrap: str,
    unique_topic: Callable[..., str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A bad line between good ones: reported as FILE:LINE: field: reason, not sent; every
    valid line sent as is, keyed by its workflow_key; the count said; exit 1."""
    topic = unique_topic(3, prefix="publish")
    good = [ln for ln in FIXTURE.read_bytes().splitlines() if ln.strip()]
    bad = b'{"type": "progress", "workflow_key": "wf/a", "worker_id": "w"}'
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(b"\n".join([good[0], bad, b"", b"not json", *good[1:]]) + b"\n")
    rc = main(["publish", "--bootstrap-servers", kafka_bootstrap, "--topic", topic, str(path)])
    captured = capsys.readouterr()
    assert rc == 1
    first, second = captured.err.splitlines()
    assert first == f"fencewatch publish: {path}:2: epoch: is required (not sent)"
    assert second.startswith(f"fencewatch publish: {path}:4: (record): malformed JSON: ")
    assert second.endswith(" (not sent)")
    assert captured.out == (
        f"published {len(good)} event(s) to {topic}; 2 invalid line(s) not sent\n"
    )
    got = _records(kafka_bootstrap, topic)
    assert sorted(v for _k, v in got if v) == sorted(good)
    assert all(k == json.loads(v or b"")["workflow_key"].encode() for k, v in got)


def test_stdin_through_python_m_fencewatch_exits_0(
    kafka_bootstrap: str, unique_topic: Callable[..., str]
) -> None:
    """`python -m fencewatch publish -` reads stdin; all valid: exit 0, the count on stdout."""
    topic = unique_topic(1, prefix="publish")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FENCEWATCH_")}
    proc = subprocess.run(
        [sys.executable, "-m", "fencewatch", "publish", "--bootstrap-servers", kafka_bootstrap,
         "--topic", topic, "-"],
        input=FIXTURE.read_bytes(), capture_output=True, cwd=REPO,
        env={**env, "PYTHONPATH": str(REPO)}, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.decode() == f"published 16 event(s) to {topic}\n"
    assert len(_records(kafka_bootstrap, topic)) == 16


def test_a_topic_that_does_not_exist_is_one_line_and_is_not_created(
    kafka_bootstrap: str, kafka_admin: TopicAdmin, capsys: pytest.CaptureFixture[str]
) -> None:
    """--topic with a typo: exit 2, one line, and the broker did not auto-create it."""
    topic = f"publish-missing-{os.getpid()}"
    rc = main(["publish", "--bootstrap-servers", kafka_bootstrap, "--topic", topic, str(FIXTURE)])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and f"topic {topic} does not exist" in err
    assert kafka_admin.partitions([topic]) == {}


def test_an_unreadable_file_or_unreachable_broker_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A missing file is named before anything is sent; a closed port is one line, exit 2."""
    assert main(["publish", "--bootstrap-servers", "127.0.0.1:1", str(tmp_path / "x")]) == 2
    assert capsys.readouterr().err == (
        f"fencewatch publish: {tmp_path / 'x'}: No such file or directory\n"
    )
    assert main(["publish", "--bootstrap-servers", "127.0.0.1:1", str(FIXTURE)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "127.0.0.1:1" in err


def test_a_line_over_the_limit_is_skipped_without_being_held_whole() -> None:
    """The line reader yields None for a line longer than the limit and goes on after it."""
    data = b'{"a": 1}\n' + b"x" * 100 + b"\n" + b'{"b": 2}\n'
    got = list(_lines(io.BytesIO(data), limit=20))
    assert got == [(1, b'{"a": 1}\n'), (2, None), (3, b'{"b": 2}\n')]


def test_publishing_a_file_twice_changes_no_finding(
    kafka_bootstrap: str, unique_topic: Callable[..., str], tmp_path: Path
) -> None:
    """Events without seq get a deterministic event_id, so a second publish of the same file
    is dropped as redelivered: the topic's audit equals the file's (two equal lines of the
    file still count twice); with --no-event-ids the repeat makes a duplicate_commit."""
    from streams.core.replay import Replay

    def ev(t: str, epoch: int, worker: str, effect: str | None = None) -> bytes:
        doc = {"type": t, "workflow_key": "pub/twice", "epoch": epoch, "worker_id": worker}
        if effect is not None:
            doc["effect_key"] = effect
        return json.dumps(doc).encode()

    lines = [
        ev("lease_acquired", 1, "a"),
        ev("effect_committed", 1, "a", "x"),
        ev("lease_acquired", 2, "b"),
        ev("progress", 1, "a"),
        ev("progress", 1, "a"),  # an equal line: counted twice, as in the file audit
    ]
    path = tmp_path / "twice.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")

    def audit(topic: str) -> tuple[list[tuple[str, str]], int]:
        r = Replay()
        for key, value, p, o in iter_topic(KafkaConnection(kafka_bootstrap), topic):
            r.feed(value or b"", key=key, offset=o, source=f"{topic}/{p}")
        kinds = sorted((f.kind.value, f.finding_id) for f in r.latest_findings())
        return kinds, r.summary()["redeliveries_dropped"]

    file_audit = Replay()
    with path.open("rb") as fh:
        file_audit.feed_stream(fh.read, source=str(path))
    expected = sorted((f.kind.value, f.finding_id) for f in file_audit.latest_findings())

    topic = unique_topic(1, prefix="publish")
    base = ["publish", "--bootstrap-servers", kafka_bootstrap, "--topic", topic, str(path)]
    assert main(base) == 0
    assert main(base) == 0
    assert audit(topic) == (expected, len(lines))

    raw = unique_topic(1, prefix="publish")
    argv = ["publish", "--no-event-ids", "--bootstrap-servers", kafka_bootstrap, "--topic", raw]
    assert main([*argv, str(path)]) == 0
    assert main([*argv, str(path)]) == 0
    kinds, redeliveries = audit(raw)
    assert redeliveries == 0 and ("duplicate_commit" in {k for k, _ in kinds})


@pytest.mark.parametrize(
    ("content", "hint"),
    [
        (
            b"\x1f\x8b\x08\x00" + bytes(40),
            "is it gzip-compressed? try: zcat {path} | fencewatch publish -",
        ),
        (
            b'[{"type": "progress"},\n {"type": "progress"}]\n',
            "it looks like one JSON array; publish reads JSON Lines, one event object per line: "
            "jq -c '.[]' {path} | fencewatch publish -",
        ),
    ],
    ids=["gzip", "json-array"],
)
def test_a_gzip_file_or_a_json_array_is_one_line_with_audits_hint(
    content: bytes, hint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not JSON Lines: one line with the same hint audit gives, exit 2, before any connection."""
    path = tmp_path / "events.jsonl"
    path.write_bytes(content)
    assert main(["publish", "--bootstrap-servers", "127.0.0.1:1", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.err == (
        f"fencewatch publish: {path}: not JSON Lines ({hint.format(path=path)})\n"
    )
    assert captured.out == ""


def test_a_gzip_stream_on_stdin_is_named_as_stdin() -> None:
    """Piped gzip: the hint names stdin, exit 2, and nothing waits for a broker."""
    proc = subprocess.run(
        [sys.executable, "-m", "streams", "publish", "--bootstrap-servers", "127.0.0.1:1", "-"],
        input=b"\x1f\x8b\x08\x00" + bytes(100),
        capture_output=True,
        cwd=REPO,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.decode() == (
        "fencewatch publish: stdin: not JSON Lines "
        "(is it gzip-compressed? try: ... | zcat | fencewatch publish -)\n"
    )


def test_audit_gives_the_same_hint_for_a_gzip_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """audit of a gzip file: its one line carries the shared hint, worded for audit."""
    path = tmp_path / "events.jsonl.gz"
    path.write_bytes(b"\x1f\x8b\x08\x00" + bytes(40) + b"\n")
    assert main(["audit", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"(is it gzip-compressed? try: zcat {path} | fencewatch audit -)" in err
    assert len(err.splitlines()) == 1


def test_a_byte_order_mark_is_not_sent_and_a_repeated_field_is_refused(
    kafka_bootstrap: str,
    unique_topic: Callable[..., str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A BOM at the start of the file and of a later line (files concatenated): both events
    sent without it; a line naming a field twice is invalid, naming it; exit 1."""
    topic = unique_topic(1, prefix="publish")
    good = [ln for ln in FIXTURE.read_bytes().splitlines() if ln.strip()][:2]
    twice = (
        b'{"type": "progress", "workflow_key": "wf/a", "epoch": 1, "worker_id": "w", "epoch": 2}'
    )
    bom = b"\xef\xbb\xbf"
    path = tmp_path / "bom.jsonl"
    path.write_bytes(bom + good[0] + b"\n" + bom + good[1] + b"\n" + twice + b"\n")
    argv = ["publish", "--bootstrap-servers", kafka_bootstrap, "--topic", topic, "--no-event-ids"]
    assert main([*argv, str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.err == (
        f"fencewatch publish: {path}:3: epoch: is given twice (a duplicate JSON key; parsers"
        " differ on which one counts) (not sent)\n"
    )
    assert sorted(v for _k, v in _records(kafka_bootstrap, topic) if v) == sorted(good)
