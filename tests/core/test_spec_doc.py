"""docs/spec.md is the specification every "SPEC §N" refers to (issue 44):
each reference in the code, the schemas and the docs names a section that
exists there, its rule tables list what the code implements (event types
and fields, finding kinds with their severities, finding and status fields,
confidences, topics), and ``fencewatch spec N`` prints a section."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from streams.cli import main
from streams.cli.spec import section
from streams.core.records import SEVERITY_RANK, Confidence, EventType, Kind
from streams.core.status import WorkflowStatus
from streams.kafka.topics import (
    DEFAULT_EVENTS_TOPIC,
    DEFAULT_FINDINGS_TOPIC,
    DEFAULT_STATUS_TOPIC,
    dlq_topic_for,
)

ROOT = Path(__file__).resolve().parents[2]
SPEC = (ROOT / "docs" / "spec.md").read_text(encoding="utf-8")
SCHEMAS = ROOT / "schemas"

#: "SPEC §5", "SPEC §2, §7", "SPEC §2 and §4", "SPEC §4/§6", "SPEC \u00a76" (in JSON).
_REFERENCE = re.compile(r"SPEC\s*(?:§|\\u00a7)(\d+)((?:\s*(?:,|and|/|or)\s*(?:§|\\u00a7)?\d+)*)")


def _sections() -> set[int]:
    return {int(n) for n in re.findall(r"^## (\d+)\. ", SPEC, re.M)}


def _references() -> list[tuple[str, int]]:
    """(file:line, section) of every SPEC §N in streams/, fencewatch/, schemas/, docs/, README."""
    files = [
        *ROOT.joinpath("streams").rglob("*.py"),
        *ROOT.joinpath("fencewatch").rglob("*.py"),
        *SCHEMAS.glob("*.json"),
        *ROOT.joinpath("docs").glob("*.md"),
        ROOT / "README.md",
    ]
    found = []
    for path in files:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for m in _REFERENCE.finditer(line):
                where = f"{path.relative_to(ROOT)}:{number}"
                found.append((where, int(m.group(1))))
                found += [(where, int(n)) for n in re.findall(r"\d+", m.group(2))]
    return found


def _table(number: int, first_header: str) -> list[list[str]]:
    """Rows (cells, backticks stripped) of the table in section ``number`` whose
    header starts with ``first_header``."""
    text = section(SPEC, number)
    assert text is not None, number
    rows: list[list[str]] = []
    inside = False
    for line in text.splitlines():
        if line.startswith(f"| {first_header} |"):
            inside = True
            continue
        if inside:
            if not line.startswith("|"):
                break
            if set(line) <= set("|- "):
                continue
            rows.append([c.strip().replace("`", "") for c in line.strip("|").split(" | ")])
    assert rows, (number, first_header)
    return rows


def test_every_spec_reference_names_a_section_of_docs_spec_md() -> None:
    """Each SPEC §N in the code, schemas and docs is a section heading of docs/spec.md."""
    refs = _references()
    assert len(refs) > 100, len(refs)  # the scan sees them (about 140 today)
    sections = _sections()
    assert sections >= set(range(1, 9)), sections  # the shared SPEC.md's eight
    dangling = [f"{where}: §{n}" for where, n in refs if n not in sections]
    assert not dangling, dangling


def test_the_specs_own_cross_references_resolve() -> None:
    """A bare (§N) inside docs/spec.md names one of its sections too."""
    numbers = {int(n) for n in re.findall(r"§(\d+)", SPEC)}
    assert numbers and numbers <= _sections(), numbers - _sections()


def test_no_document_points_to_a_spec_file_that_is_not_there() -> None:
    """No file names SPEC.md as where the contract is, other than as docs/spec.md's source."""
    for path in [*ROOT.joinpath("docs").glob("*.md"), ROOT / "README.md"]:
        text = path.read_text(encoding="utf-8")
        for m in re.finditer(r"SPEC\.md", text):
            context = text[max(0, m.start() - 200) : m.end() + 40]
            assert "docs/spec.md" in context or path.name == "spec.md", (path.name, context)


def test_the_event_table_is_the_event_schema_and_the_core_types() -> None:
    """§2 lists exactly the schema's fields, its required ones as required, and the seven types."""
    schema = json.loads((SCHEMAS / "event.schema.json").read_text())
    rows = _table(2, "field")
    assert {r[0] for r in rows} == set(schema["properties"])
    assert {r[0] for r in rows if r[2] == "yes"} == set(schema["required"])
    type_row = next(r for r in rows if r[0] == "type")
    assert re.findall(r"[a-z]+_[a-z]+|progress", type_row[3]) == [t.value for t in EventType]


def test_the_kind_table_is_the_cores_kinds_and_severities() -> None:
    """§4 has one row per Kind, with the severity the core gives it."""
    rows = _table(4, "kind")
    assert [r[0] for r in rows] == [k.value for k in Kind]
    assert {r[0]: r[1] for r in rows} == {k.value: k.severity.value for k in Kind}
    identity = {r[0]: r[2] for r in rows}
    # One identity, one record: the two commit-repeat kinds share it.
    assert identity["duplicate_commit"] == identity["conflicting_commit"]
    order = re.search(r"Severities, lowest first: (.*?)\s\(", SPEC, re.S)
    assert order is not None
    named = re.findall(r"`(\w+)`", order.group(1))
    assert named == [s.value for s in sorted(SEVERITY_RANK, key=SEVERITY_RANK.__getitem__)]


def test_the_finding_table_is_the_finding_schema() -> None:
    """§4's finding record lists exactly the finding schema's fields, and its confidences."""
    schema = json.loads((SCHEMAS / "finding.schema.json").read_text())
    assert [r[0] for r in _table(4, "field")] == list(schema["properties"])
    assert {r[0] for r in _table(4, "confidence")} == {c.value for c in Confidence}


def test_the_status_table_is_the_status_record() -> None:
    """§8 lists exactly the fields of a status-topic record, in its order."""
    assert [r[0] for r in _table(8, "field")] == list(WorkflowStatus.__dataclass_fields__)


def test_the_topic_table_names_the_default_topics() -> None:
    """§9 lists the four topics the code defaults to, the status one compacted."""
    rows = {r[0]: r for r in _table(9, "topic")}
    dlq = dlq_topic_for(DEFAULT_EVENTS_TOPIC)
    assert set(rows) == {DEFAULT_EVENTS_TOPIC, DEFAULT_FINDINGS_TOPIC, dlq, DEFAULT_STATUS_TOPIC}
    assert rows[DEFAULT_STATUS_TOPIC][3] == "compact"
    assert all(rows[t][3].startswith("delete") for t in rows if t != DEFAULT_STATUS_TOPIC)


def test_fencewatch_spec_prints_a_section_and_refuses_one_that_is_not_there(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """spec §5 prints that section; spec 99 is one line, exit 2; spec alone prints the path."""
    assert main(["spec", "§5"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("## 5. The reference fixture\n") and "## 6." not in out
    assert main(["spec", "99"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == ["fencewatch spec: no section '99': the sections are §1 to §10"]
    assert main(["spec"]) == 0
    assert Path(capsys.readouterr().out.strip()).read_text(encoding="utf-8") == SPEC
