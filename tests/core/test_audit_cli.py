"""`fencewatch audit` on files (SPEC §6): formats, exit status, invalid input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from streams.cli import main
from tests.support.schemas import load_schema

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "examples" / "reference.jsonl"


def _report_validator() -> Draft202012Validator:
    finding = load_schema("finding")
    registry = Registry().with_resource(
        "https://fencewatch.dev/schemas/finding.schema.json", Resource.from_contents(finding)
    )
    return Draft202012Validator(load_schema("audit-report"), registry=registry)


def _json_report(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    code = main(["audit", "--format", "json", *argv])
    return code, json.loads(capsys.readouterr().out)


def test_fixture_json_report_has_exactly_the_four_spec_findings(capsys) -> None:
    """The reference fixture audits to the four SPEC §5 findings, sorted, and exit 1."""
    code, doc = _json_report(capsys, str(FIXTURE))
    assert code == 1
    got = [(f["workflow_key"], f["event_seq"], f["kind"]) for f in doc["findings"]]
    assert got == [
        ("export-ledger", 6, "stale_activity"),
        ("export-ledger", 7, "stale_attempt"),
        ("export-ledger", 8, "stale_commit"),
        ("export-ledger", 9, "conflicting_commit"),
    ]
    assert doc["findings"][3]["epochs"] == [17, 18]
    assert doc["invalid"] == []
    assert doc["summary"]["events"] == 16 and doc["summary"]["workflows"] == 3


def test_json_report_validates_against_the_schemas(capsys) -> None:
    """--format json output validates against schemas/audit-report (with finding refs)."""
    _, doc = _json_report(capsys, str(FIXTURE))
    _report_validator().validate(doc)
    broken = dict(doc, findings=[dict(doc["findings"][0], severity="loud")])
    assert not _report_validator().is_valid(broken)  # the finding schema is really applied
    finding_validator = Draft202012Validator(load_schema("finding"))
    for f in doc["findings"]:
        finding_validator.validate(f)


def test_fail_on_threshold_sets_the_exit_status(capsys) -> None:
    """Exit 1 when a finding reaches --fail-on, 0 when none does or with 'never'."""
    assert main(["audit", str(FIXTURE), "--fail-on", "critical"]) == 1
    assert main(["audit", str(FIXTURE), "--fail-on", "never"]) == 0
    capsys.readouterr()


def test_clean_workflows_exit_zero(tmp_path: Path, capsys) -> None:
    """A file with only the control workflows has no finding and exits 0."""
    clean = tmp_path / "clean.jsonl"
    clean.write_bytes(
        b"".join(
            line
            for line in FIXTURE.read_bytes().splitlines(keepends=True)
            if b"export-ledger" not in line
        )
    )
    code, doc = _json_report(capsys, str(clean))
    assert code == 0
    assert doc["findings"] == []
    assert doc["summary"]["events"] == 7


def test_unreadable_path_exits_two_with_a_clear_error(tmp_path: Path, capsys) -> None:
    """A missing file is a clear error on stderr and exit status 2, with no report."""
    code = main(["audit", str(tmp_path / "missing.jsonl")])
    captured = capsys.readouterr()
    assert code == 2
    assert "cannot read" in captured.err and "missing.jsonl" in captured.err
    assert captured.out == ""


def test_usage_error_exits_two(capsys) -> None:
    """An unknown option or format is a usage error: exit 2."""
    assert main(["audit", "--format", "xml", str(FIXTURE)]) == 2
    assert main(["audit", "--topic", "t"]) == 2  # --topic without --bootstrap-servers
    capsys.readouterr()


def test_invalid_lines_are_reported_and_valid_neighbours_still_classified(
    tmp_path: Path, capsys
) -> None:
    """Bad lines are listed with file, line and reason; every valid line is still classified."""
    lines = FIXTURE.read_text().splitlines()
    mixed = [
        lines[0],
        "{not json",
        lines[1],
        '{"type":"progress","epoch":1}',
        *lines[2:8],
        "",
        '{"type":"progress","workflow_key":"x","epoch":true,"worker_id":"w"}',
        *lines[8:],
    ]
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(mixed) + "\n")
    code, doc = _json_report(capsys, str(path))
    assert code == 1
    assert [f["kind"] for f in doc["findings"]] == [
        "stale_activity",
        "stale_attempt",
        "stale_commit",
        "conflicting_commit",
    ]
    inv = [(i["line"], i["field"]) for i in doc["invalid"]]
    assert inv == [(2, "(record)"), (4, "workflow_key"), (12, "epoch")]
    assert "malformed JSON" in doc["invalid"][0]["reason"]
    assert "boolean" in doc["invalid"][2]["reason"]
    assert doc["summary"]["invalid"] == 3 and doc["summary"]["events"] == 16


def test_strict_stops_at_the_first_invalid_record(tmp_path: Path, capsys) -> None:
    """--strict makes an invalid record fatal: exit 2 naming its line."""
    path = tmp_path / "bad.jsonl"
    path.write_text(FIXTURE.read_text().splitlines()[0] + "\n[1,2]\n")
    code = main(["audit", "--strict", str(path)])
    err = capsys.readouterr().err
    assert code == 2
    assert "bad.jsonl:2" in err and "object" in err


def test_several_paths_are_one_stream_with_line_numbers_counting_on(tmp_path: Path, capsys) -> None:
    """Paths are read in order as one stream; offsets count on across files."""
    lines = FIXTURE.read_text().splitlines(keepends=True)
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text("".join(lines[:10]))
    b.write_text("".join(lines[10:]))
    code, doc = _json_report(capsys, str(a), str(b))
    assert code == 1
    offsets = {f["kind"]: f["event_offset"] for f in doc["findings"]}
    assert offsets["conflicting_commit"] == 15  # line 5 of b.jsonl, 15th overall


def test_stdin_dash_and_byte_order_mark(tmp_path: Path) -> None:
    """'-' reads stdin; a UTF-8 byte-order mark at the start is tolerated."""
    data = b"\xef\xbb\xbf" + FIXTURE.read_bytes()
    out = subprocess.run(
        [sys.executable, "-m", "streams", "audit", "--format", "jsonl", "-"],
        input=data,
        capture_output=True,
        check=False,
        cwd=ROOT,
    )
    assert out.returncode == 1, out.stderr
    kinds = [json.loads(line)["kind"] for line in out.stdout.splitlines()]
    assert kinds == ["stale_activity", "stale_attempt", "stale_commit", "conflicting_commit"]


def test_text_report_groups_by_workflow_and_ends_with_a_summary(capsys) -> None:
    """The text format groups findings under their workflow and ends with one summary line."""
    code = main(["audit", "--colour", "never", str(FIXTURE)])
    out = capsys.readouterr().out.rstrip("\n").splitlines()
    assert code == 1
    assert out[0].startswith("export-ledger")
    assert any("CRITICAL" in line and "conflicting_commit" in line for line in out)
    assert out[-1].startswith("fencewatch audit: 16 events, 0 invalid, 3 workflows; 4 findings")
    assert "\x1b[" not in "\n".join(out)


def test_html_report_draws_an_ownership_timeline(tmp_path: Path, capsys) -> None:
    """--format html: one offline page, a timeline for the flagged workflow, clean ones listed."""
    out = tmp_path / "report.html"
    assert main(["audit", "--format", "html", "-o", str(out), str(FIXTURE)]) == 1
    page = out.read_text()
    assert page.count("class='tl'") == 1  # one workflow has findings
    assert "export-ledger" in page and "epoch 17" in page and "epoch 18" in page
    assert "<li>report-index</li>" in page and "2 clean workflows" in page
    assert "http://" not in page and "https://" not in page  # nothing fetched
    capsys.readouterr()


def test_a_giant_line_is_rejected_without_being_held_in_memory(tmp_path: Path, capsys) -> None:
    """A line over --max-event-bytes is reported invalid by line; its neighbours still count."""
    lines = FIXTURE.read_text().splitlines()
    giant = '{"type":"progress","attrs":{"x":"' + "y" * 200_000 + '"}}'
    path = tmp_path / "giant.jsonl"
    path.write_text("\n".join([*lines[:5], giant, *lines[5:]]) + "\n")
    code, doc = _json_report(capsys, "--max-event-bytes", "4096", str(path))
    assert code == 1
    assert len(doc["findings"]) == 4
    assert [(i["line"], i["field"]) for i in doc["invalid"]] == [(6, "(record)")]
    assert "4096 bytes" in doc["invalid"][0]["reason"]
    assert doc["summary"]["records"] == 17 and doc["summary"]["events"] == 16


def test_summary_line_counts_one_event_workflow_and_finding_in_the_singular(
    tmp_path: Path, capsys
) -> None:
    """One event in one workflow: '1 event, 0 invalid, 1 workflow; 0 findings' (was '1 events',
    '1 workflows')."""
    one = tmp_path / "one.jsonl"
    one.write_text('{"type":"progress","workflow_key":"a","epoch":1,"worker_id":"w"}\n')
    assert main(["audit", "--colour", "never", str(one)]) == 0
    last = capsys.readouterr().out.rstrip("\n").splitlines()[-1]
    assert last == "fencewatch audit: 1 event, 0 invalid, 1 workflow; 0 findings; fail-on warning"


def test_summary_line_groups_thousands(tmp_path: Path, capsys) -> None:
    """Counts of long work read at a glance: '1,200 events', '1,200 workflows'."""
    many = tmp_path / "many.jsonl"
    many.write_text(
        "".join(
            f'{{"type":"progress","workflow_key":"k{i}","epoch":1,"worker_id":"w"}}\n'
            for i in range(1200)
        )
    )
    assert main(["audit", "--colour", "never", str(many)]) == 0
    last = capsys.readouterr().out.rstrip("\n").splitlines()[-1]
    assert last.startswith("fencewatch audit: 1,200 events, 0 invalid, 1,200 workflows; ")
