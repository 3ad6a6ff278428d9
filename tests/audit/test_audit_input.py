"""`fencewatch audit` at first contact (SPEC §6, issue 9): input that is not
JSON Lines, bad limits, empty input, stdin on a terminal, the progress display
and Ctrl-C."""

from __future__ import annotations

import fcntl
import gzip
import json
import os
import pty
import select
import signal
import subprocess
import sys
import termios
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from streams.cli import main
from tests.support.waiting import blocked_reading, wait_until

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "examples" / "reference.jsonl"
CLI = [sys.executable, "-m", "streams", "audit"]


def _audit(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["audit", *argv])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def test_gzip_file_is_unreadable_input(tmp_path: Path, capsys) -> None:
    """A gzip-compressed fixture holds records but no event: exit 2, one line naming gzip."""
    path = tmp_path / "events.jsonl.gz"
    path.write_bytes(gzip.compress(FIXTURE.read_bytes()))
    code, out, err = _audit(capsys, str(path))
    assert code == 2 and out == ""
    assert err.count("\n") == 1
    assert "no valid event" in err and "gzip" in err and str(path) in err


def test_strict_on_a_gzip_file_names_gzip(tmp_path: Path, capsys) -> None:
    """--strict stops at the first record of a gzip file and says what the file looks like."""
    path = tmp_path / "events.jsonl.gz"
    path.write_bytes(gzip.compress(FIXTURE.read_bytes()))
    code, _, err = _audit(capsys, "--strict", str(path))
    assert code == 2
    assert err.count("\n") == 1 and "--strict" in err and "gzip-compressed" in err


def test_fixture_as_one_json_array_is_unreadable_input(tmp_path: Path, capsys) -> None:
    """The fixture written as one JSON array (hiding a critical finding) exits 2, saying so."""
    path = tmp_path / "events.json"
    path.write_text(json.dumps([json.loads(x) for x in FIXTURE.read_text().splitlines()]))
    code, out, err = _audit(capsys, "--format", "json", str(path))
    assert code == 2 and out == ""
    assert "no valid event in 1 record" in err and "JSON array" in err


def test_every_line_over_the_size_limit_is_unreadable_input(capsys) -> None:
    """When every line is over --max-event-bytes there is no event: exit 2 naming the limit."""
    code, out, err = _audit(capsys, "--max-event-bytes", "20", str(FIXTURE))
    assert code == 2 and out == ""
    assert "no valid event in 16 records" in err and "--max-event-bytes 20" in err


def test_a_file_of_other_text_is_unreadable_and_the_first_reason_is_given(
    tmp_path: Path, capsys
) -> None:
    """The wrong file (plain text) exits 2 with the first line's reason."""
    path = tmp_path / "notes.txt"
    path.write_text("hello\nworld\n")
    code, _, err = _audit(capsys, str(path))
    assert code == 2
    assert "no valid event in 2 records" in err and "notes.txt:1" in err


def test_one_valid_event_among_invalid_lines_is_a_report(tmp_path: Path, capsys) -> None:
    """One valid event is enough: the invalid lines are reported, exit by findings (0)."""
    path = tmp_path / "mixed.jsonl"
    path.write_text("junk\n" + FIXTURE.read_text().splitlines()[0] + "\n")
    code, out, _ = _audit(capsys, "--format", "json", str(path))
    assert code == 0
    assert json.loads(out)["summary"]["invalid"] == 1


@pytest.mark.parametrize("value", ["0", "-1"])
def test_max_event_bytes_below_one_is_a_usage_error(value: str, capsys) -> None:
    """--max-event-bytes 0 or negative is a usage error: exit 2, nothing on stdout."""
    code, out, err = _audit(capsys, f"--max-event-bytes={value}", str(FIXTURE))
    assert code == 2 and out == ""
    assert "--max-event-bytes" in err and "at least 1" in err


def test_empty_input_is_an_empty_report(tmp_path: Path, capsys) -> None:
    """No record at all (an empty or blank file) is not an error: an empty report, exit 0."""
    path = tmp_path / "empty.jsonl"
    path.write_text("\n\n")
    code, out, _ = _audit(capsys, "--format", "json", str(path))
    assert code == 0
    doc = json.loads(out)
    assert doc["findings"] == [] and doc["summary"]["records"] == 0
    assert doc["summary"]["partial"] is False


def _read_all(fd: int, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> bytes:
    """Everything written to a pty master until the child exits."""
    out = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # EIO: the child closed its end
                break
            if not chunk:
                break
            out += chunk
        elif proc.poll() is not None:
            break
    return out


def _on_a_terminal(argv: list[str]) -> tuple[int, str]:
    """Run ``argv`` with stderr on a pseudo-terminal (stdout discarded): its
    exit status and what it showed there."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=slave,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "100", "TERM": "xterm"},
    )
    os.close(slave)
    try:
        shown = _read_all(master, proc, timeout=60)
    finally:
        os.close(master)
    return proc.wait(timeout=30), shown.decode(errors="replace")


def test_no_path_on_a_terminal_says_it_reads_stdin(tmp_path: Path) -> None:
    """With no PATH and stdin a terminal, one line on stderr says it is reading stdin."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [*CLI, "--format", "jsonl"],
        stdin=slave,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    os.close(slave)
    try:
        for line in FIXTURE.read_bytes().splitlines():
            os.write(master, line + b"\n")
        os.write(master, b"\x04")  # Ctrl-D: end of input
        out, err = proc.communicate(timeout=60)
    finally:
        os.close(master)
    assert proc.returncode == 1, err
    assert b"reading events from stdin" in err and err.count(b"\n") == 1
    assert len(out.splitlines()) == 4


def test_events_typed_at_a_terminal_get_no_progress_display() -> None:
    """stdin and stderr the same terminal (a person typing events): the note and no
    progress display redrawn over the line being typed (was: a bar that
    overwrote the typing)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        CLI, stdin=slave, stdout=subprocess.DEVNULL, stderr=slave, cwd=ROOT,
        env={**os.environ, "COLUMNS": "100", "TERM": "xterm"},
    )  # fmt: skip
    os.close(slave)
    try:
        # A person looks before typing: once the audit waits on stdin, a display it
        # meant to show would be up.
        wait_until(lambda: blocked_reading(proc.pid), timeout=30, what="the audit reading stdin")
        for line in FIXTURE.read_bytes().splitlines():
            os.write(master, line + b"\n")
        os.write(master, b"\x04")  # Ctrl-D
        shown = _read_all(master, proc, timeout=60).decode(errors="replace")
    finally:
        os.close(master)
    assert proc.wait(timeout=30) == 1
    assert "reading events from stdin" in shown
    assert "<stdin>" not in shown and "bytes" not in shown and "\x1b[?25l" not in shown, shown


def _big_input(tmp_path: Path, copies: int = 400) -> Path:
    """The fixture repeated under distinct workflow keys (enough bytes for a display)."""
    lines = FIXTURE.read_text().splitlines()
    path = tmp_path / "big.jsonl"
    with path.open("w") as fh:
        for i in range(copies):
            for line in lines:
                doc = json.loads(line)
                doc["workflow_key"] = f"{doc['workflow_key']}-{i}"
                doc.pop("event_id", None)
                fh.write(json.dumps(doc) + "\n")
    return path


def test_progress_shows_on_a_terminal_and_not_on_a_pipe(tmp_path: Path) -> None:
    """stderr a terminal: a progress display (bytes, events); a pipe: stderr stays empty."""
    clean = tmp_path / "clean.jsonl"
    clean.write_text(
        "".join(x + "\n" for x in FIXTURE.read_text().splitlines() if "export-ledger" not in x)
    )
    piped = subprocess.run(
        [*CLI, "--format", "json", str(clean)], capture_output=True, cwd=ROOT, check=False
    )
    assert piped.returncode == 0 and piped.stderr == b""

    big = _big_input(tmp_path)
    code, text = _on_a_terminal(
        [*CLI, "--format", "json", "-o", str(tmp_path / "r.json"), str(big)]
    )
    assert code == 1
    assert "big.jsonl" in text and "events" in text, text
    assert json.loads((tmp_path / "r.json").read_text())["summary"]["events"] == 16 * 400


def _pipe_unread(fd: int) -> int:
    buf = fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0")
    return int.from_bytes(buf, sys.byteorder)


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_sigint_prints_the_partial_report_and_exits_130(fmt: str) -> None:
    """Ctrl-C while reading a slow pipe: the report so far, marked PARTIAL, exit 130."""
    lines = FIXTURE.read_bytes().splitlines(keepends=True)
    # export-ledger up to alpha's stale commit (seq 8), without beta's commit
    # (seq 9) that makes the conflicting commit: the rest never arrives.
    head = [x for x in lines if b"export-ledger" in x and b'"seq":9' not in x]
    proc = subprocess.Popen(
        [*CLI, "--format", fmt, "-"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    assert proc.stdin is not None
    # ... and the first half of the next line: a partial line is not a record.
    proc.stdin.write(b"".join(head) + lines[-1][:40])
    proc.stdin.flush()
    # It has read and fed them when it blocks on the pipe again, waiting for more.
    wait_until(
        lambda: not _pipe_unread(proc.stdin.fileno()) and blocked_reading(proc.pid),
        timeout=30,
        what="the audit waiting on the pipe with everything read",
    )
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)  # closes stdin too late to matter
    assert proc.returncode == 130, err
    assert b"Traceback" not in err and b"PARTIAL" in err
    if fmt == "json":
        doc = json.loads(out)
        assert doc["summary"]["partial"] is True
        assert doc["invalid"] == []
        kinds = [f["kind"] for f in doc["findings"]]
        assert kinds == ["stale_activity", "stale_attempt", "stale_commit"]
    else:
        text = out.decode()
        assert text.startswith("PARTIAL REPORT")
        assert "stale_commit" in text and "conflicting_commit" not in text


@pytest.mark.kafka
def test_topic_progress_shows_records_rate_and_partitions_on_a_terminal(
    kafka_bootstrap: str, unique_topic: Callable[..., str], tmp_path: Path
) -> None:
    """audit --topic on a terminal shows records of the end offsets and partitions done."""
    from confluent_kafka import Producer

    topic = unique_topic(partitions=3)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    lines = FIXTURE.read_bytes().splitlines()
    for i in range(50):
        for line in lines:
            doc = json.loads(line)
            doc["workflow_key"] = f"{doc['workflow_key']}-{i}"
            doc.pop("event_id", None)
            producer.produce(topic, key=doc["workflow_key"].encode(), value=json.dumps(doc))
    assert producer.flush(30) == 0
    report = tmp_path / "r.json"
    argv = [*CLI, "--topic", topic, "--bootstrap-servers", kafka_bootstrap, "--format", "json"]
    code, shown = _on_a_terminal([*argv, "-o", str(report)])
    assert code == 1
    assert "/800" in shown and "partitions" in shown and "/3" in shown, shown
    assert json.loads(report.read_text())["summary"]["events"] == 800
