"""Text output never passes a control character from the data to the
terminal (issue 43): keys, worker ids, effect keys and sinks holding ESC,
CR, LF, BEL or C1 print escaped in `audit`, `findings` and `status` lines
and in error lines that quote data; JSON output keeps them exact (it escapes
them itself). Also from issue 43: a closed stdin is one line, a byte order
mark starts any line of an audited file, a field given twice is invalid."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from streams.cli import main
from streams.cli.findings import render_finding_line
from streams.cli.status import render_status_line
from streams.core.findings import Finding

ROOT = Path(__file__).resolve().parents[2]
#: Any C0 character but the line feed that ends each line, DEL, C1.
RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
#: The colours the text report itself writes (--colour always).
OUR_COLOURS = re.compile(r"\x1b\[(?:1;37;41|1;31|1;33|36|0)m")

KEY = "tenant/\x1b[2J\x1b]0;pwned\x07export\rFAKE LINE\n\x9b31m"
WORKER = "alpha\x1b[31m\r\nINCIDENT  forged"
EFFECT = "release\x00index\x7f\u202e"
SINK = "bucket\x1b[8m"


def _events(key: str, worker: str, effect: str, sink: str) -> list[dict[str, Any]]:
    """The reference fixture's export-ledger story: all four findings on ``key``."""

    def ev(seq: int, type_: str, epoch: int, w: str, **extra: Any) -> dict[str, Any]:
        return {
            "type": type_,
            "workflow_key": key,
            "epoch": epoch,
            "worker_id": w,
            "seq": seq,
            **extra,
        }

    fx = {"effect_key": effect, "sink": sink}
    return [
        ev(1, "lease_acquired", 17, worker),
        ev(4, "lease_acquired", 18, "beta"),
        ev(6, "progress", 17, worker),
        ev(7, "effect_attempted", 17, worker, **fx),
        ev(8, "effect_committed", 17, worker, **fx),
        ev(9, "effect_committed", 18, "beta", **fx),
    ]


def _write(path: Path, docs: list[dict[str, Any]], *extra: bytes) -> Path:
    lines = [json.dumps(d).encode() for d in docs]
    path.write_bytes(b"\n".join([*lines, *extra]) + b"\n")
    return path


@pytest.fixture
def hostile(tmp_path: Path) -> Path:
    # An invalid line too, whose reason quotes the data (an unknown type with ESC).
    bad = json.dumps(
        {"type": "evil\x1b[5m", "workflow_key": KEY, "epoch": 1, "worker_id": WORKER}
    ).encode()
    return _write(tmp_path / "hostile.jsonl", _events(KEY, WORKER, EFFECT, SINK), bad)


@pytest.fixture
def plain(tmp_path: Path) -> Path:
    bad = b'{"type": "evil", "workflow_key": "k", "epoch": 1, "worker_id": "w"}'
    return _write(tmp_path / "plain.jsonl", _events("k", "alpha", "fx", "s"), bad)


def test_audit_text_escapes_every_control_character(
    hostile: Path, plain: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No raw control byte reaches stdout; as many lines as with plain values; escapes shown."""
    assert main(["audit", str(hostile)]) == 1
    out = capsys.readouterr().out
    assert RAW_CONTROL.search(out) is None
    assert main(["audit", str(plain)]) == 1
    assert out.count("\n") == capsys.readouterr().out.count("\n")  # no forged lines
    assert "tenant/\\x1b[2J\\x1b]0;pwned\\x07export\\rFAKE LINE\\n\\x9b31m" in out
    assert "alpha\\x1b[31m\\r\\nINCIDENT  forged" in out
    assert "release\\x00index\\x7f\\u202e" in out
    assert "bucket\\x1b[8m" in out
    assert "unknown event type 'evil\\x1b[5m'" in out


def test_audit_text_in_colour_has_only_its_own_escape_sequences(
    hostile: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--colour always: the report's colours, and nothing else, are escape sequences."""
    assert main(["audit", "--colour", "always", str(hostile)]) == 1
    out = capsys.readouterr().out
    assert OUR_COLOURS.search(out) is not None
    assert RAW_CONTROL.search(OUR_COLOURS.sub("", out)) is None


def test_audit_json_keeps_the_values_exact(
    hostile: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """JSON output is JSON: the values come back exact, and no raw C0 byte (JSON escapes
    those; DEL, C1 and the bidi controls are valid raw in JSON and stay so)."""
    assert main(["audit", "--format", "json", str(hostile)]) == 1
    out = capsys.readouterr().out
    assert re.search("[\x00-\x09\x0b-\x1f]", out) is None
    doc = json.loads(out)
    assert {f["workflow_key"] for f in doc["findings"]} == {KEY}
    assert {f["effect_key"] for f in doc["findings"] if f["effect_key"]} == {EFFECT}
    assert WORKER in {f["stale_worker"] for f in doc["findings"]}


def test_error_lines_that_quote_data_are_one_escaped_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file name and an invalid record's reason in an error line: escaped, one line."""
    missing = str(tmp_path / "no\x1b]0;x\x07such\nfile.jsonl")
    assert main(["audit", missing]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and RAW_CONTROL.search(err) is None
    assert "no\\x1b]0;x\\x07such\\nfile.jsonl" in err
    bad = tmp_path / "bad\rname.jsonl"
    bad.write_bytes(b'{"type": "progress", "workflow_key": "k\\u001b[31m", "epoch": -1}\n')
    assert main(["audit", "--strict", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and RAW_CONTROL.search(err) is None
    assert "bad\\rname.jsonl:1: epoch: is out of range" in err


def test_findings_and_status_lines_escape_their_records() -> None:
    """The lines `fencewatch findings` and `fencewatch status` print for hostile records."""
    from streams.core.replay import Replay

    replay = Replay()
    for n, doc in enumerate(_events(KEY, WORKER, EFFECT, SINK), 1):
        replay.feed(json.dumps(doc).encode(), offset=n, source="t", line=n)
    findings = replay.latest_findings()
    assert len(findings) == 4
    for f in findings:
        line = render_finding_line(Finding.from_dict(f.to_dict()), previous_revision=0)
        assert RAW_CONTROL.search(line) is None and "\n" not in line
        assert "tenant/\\x1b[2J" in line
    status = {
        "workflow_key": KEY,
        "current_epoch": 18,
        "current_worker": WORKER,
        "released": False,
        "open": [{"finding_id": "f", "kind": "stale_commit\x1b[0m", "severity": "incident"}],
        "cleared": [],
        "stale_epochs": [{"epoch": 17, "events": 3}],
        "worst_open": "incident",
    }
    line = render_status_line(status)
    assert RAW_CONTROL.search(line) is None and "\n" not in line
    assert f"epoch 18 ({WORKER.encode('unicode_escape').decode()})" in line


def test_audit_of_a_closed_stdin_is_one_line() -> None:
    """`fencewatch audit - <&-` (and with no PATH): exit 2, one line, no traceback."""
    for argv in (["audit", "-"], ["audit"], ["publish", "-"]):
        out = subprocess.run(
            [sys.executable, "-m", "streams", *argv],
            capture_output=True,
            check=False,
            cwd=ROOT,
            preexec_fn=lambda: os.close(0),
        )
        assert out.returncode == 2, out.stderr
        assert out.stderr.decode() == (
            f"fencewatch {argv[0]}: cannot read stdin: it is closed (no descriptor 0)\n"
        )


def test_a_byte_order_mark_may_start_any_line_of_an_audited_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two files that each began with a BOM, concatenated: every line an event."""
    fixture = (ROOT / "examples" / "reference.jsonl").read_bytes()
    lines = [ln for ln in fixture.splitlines() if ln.strip()]
    half = len(lines) // 2
    a = b"\xef\xbb\xbf" + b"\n".join(lines[:half]) + b"\n"
    b = b"\xef\xbb\xbf" + b"\n".join(lines[half:]) + b"\n"
    path = tmp_path / "cat.jsonl"
    path.write_bytes(a + b)
    assert main(["audit", "--format", "json", str(path)]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["invalid"] == [] and doc["summary"]["events"] == len(lines)
    assert len(doc["findings"]) == 4


def test_a_field_given_twice_is_invalid_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A repeated name (also when one is escaped, or null) is an invalid line naming the field."""
    path = tmp_path / "dup.jsonl"
    path.write_bytes(
        b'{"type": "progress", "workflow_key": "k", "epoch": 17, "worker_id": "w", "epoch": 18}\n'
        b'{"type": "progress", "workflow_key": "k", "epoch": 1, "\\u0065poch": 2,'
        b' "worker_id": "w"}\n'
        b'{"type": "progress", "workflow_key": "k", "epoch": 1, "worker_id": "w", "seq": 4,'
        b' "seq": null}\n'
        b'{"type": "progress", "workflow_key": "k", "epoch": 1, "worker_id": "w", "v": 1,'
        b' "attrs": {"a": 1, "a": 2, "s": "\\"epoch\\""}}\n'
    )
    assert main(["audit", "--format", "json", str(path)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(i["line"], i["field"]) for i in doc["invalid"]] == [
        (1, "epoch"),
        (2, "epoch"),
        (3, "seq"),
    ]
    assert all("is given twice" in i["reason"] for i in doc["invalid"])
    assert doc["summary"]["events"] == 1  # a repeat inside attrs is not checked


def _status_record(key: object, **changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "workflow_key": key,
        "current_epoch": 18,
        "current_worker": WORKER,
        "acquired_seq": 4,
        "acquisition_implied": False,
        "released": False,
        "last_position": 9,
        "stale_epochs": [],
        "open": [
            {"finding_id": "f", "kind": "stale_commit", "severity": "incident", "revision": 0}
        ],
        "cleared": [],
        "worst_open": "incident",
        "updated_ms": 2**63 - 1,
    }
    doc.update(changes)
    return doc


def test_status_on_a_real_topic_escapes_its_lines_and_refuses_a_key_that_is_not_a_string(
    kafka_bootstrap: str, unique_topic: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """`fencewatch status`: a hostile key, an odd severity and updated_ms 2^63-1 print as
    escaped lines; a record whose workflow_key is a number is one line, exit 2 (was a
    traceback in the sort)."""
    from confluent_kafka import Producer

    topic = unique_topic(1, prefix="status-hostile")
    p = Producer({"bootstrap.servers": kafka_bootstrap})
    for doc in (_status_record(KEY), _status_record("odd", worst_open="worse", open=[])):
        p.produce(topic, json.dumps(doc).encode(), key=str(doc["workflow_key"]).encode())
    assert p.flush(30) == 0
    argv = ["status", "--bootstrap-servers", kafka_bootstrap, "--topic", topic]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert RAW_CONTROL.search(out) is None
    assert out.splitlines()[0].startswith("incident   tenant/\\x1b[2J")
    # Not a severity: ranked as none, printed as it is. (A value of another
    # type, a list, is not a status record: the compiled core refuses it.)
    assert out.splitlines()[1].startswith("worse      odd  epoch 18")
    assert out.count("\n") == 3  # two records and the count line
    p.produce(topic, json.dumps(_status_record(5)).encode(), key=b"5")
    assert p.flush(30) == 0
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.endswith(
        "is not a status record (SPEC §8): workflow_key must be a string, got int\n"
    )
