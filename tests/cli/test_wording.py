"""Usage errors and advice in one line, in the user's words (issue 23, item 9):
flag names rather than internal ones, nothing read before a usage error."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.cli import main
from streams.demo.split_brain import SplitBrainPlan
from streams.demo.worker import WorkerPlan
from streams.kafka.connection import KafkaConnection

FIXTURE = Path(__file__).resolve().parents[2] / "examples" / "reference.jsonl"


def test_an_invalid_choice_is_one_line_without_the_usage(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`findings --kind` with a typo: exit 2 and one line naming the flag (was a 20-line
    usage dump first)."""
    assert main(["findings", "--kind", "stale_comit"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "usage:" not in err
    assert err.startswith("fencewatch findings: argument --kind: invalid choice: 'stale_comit'")
    assert err.endswith("(see fencewatch findings --help)\n")


def test_audit_checks_the_output_path_before_reading(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`-o /nonexistent/x.html` fails before any input is opened (the input here does not
    exist either: the error is about the output)."""
    missing_input = str(tmp_path / "events.jsonl")
    assert main(["audit", "-o", "/nonexistent/x.html", missing_input]) == 2
    assert capsys.readouterr().err == (
        "fencewatch audit: cannot write /nonexistent/x.html: no directory /nonexistent\n"
    )
    assert main(["audit", "-o", str(tmp_path), missing_input]) == 2
    assert "it is a directory" in capsys.readouterr().err


def test_an_empty_offset_or_time_range_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    """--from-offset 9 --to-offset 3 (and --since after --until) are usage errors, checked
    before the broker is asked (was an empty report, exit 0)."""
    topic = ["audit", "--topic", "ownership.events", "--bootstrap-servers", "127.0.0.1:1"]
    assert main([*topic, "--from-offset", "9", "--to-offset", "3"]) == 2
    assert capsys.readouterr().err == (
        "fencewatch audit: --to-offset 3 must be greater than --from-offset 9: nothing to replay\n"
    )
    assert main([*topic, "--since", "2026-07-27T00:00Z", "--until", "2026-07-26T00:00Z"]) == 2
    assert "--until 2026-07-26T00:00Z must be after --since" in capsys.readouterr().err


def test_messages_name_flags_not_internal_names(capsys: pytest.CaptureFixture[str]) -> None:
    """--max-events-per-key (audit, run) and the demo's --ttl/--tool-seconds/--wait-seconds
    are named as the user typed them."""
    assert main(["audit", "--max-events-per-key", "3", str(FIXTURE)]) == 2
    assert capsys.readouterr().err == (
        "fencewatch audit: --max-events-per-key must be at least 8\n"
    )
    assert main(["run", "--bootstrap-servers", "127.0.0.1:1", "--max-events-per-key", "3"]) == 2
    assert "fencewatch run: --max-events-per-key" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"^--ttl and --tool-seconds must be positive$"):
        SplitBrainPlan(ttl=0)
    with pytest.raises(ValueError, match=r"^--wait-seconds must be positive$"):
        WorkerPlan(KafkaConnection("b:1"), "sqlite:///x.db", "k", "w", "e", wait_seconds=0)


def test_audit_and_demo_use_the_same_severity_word(capsys: pytest.CaptureFixture[str]) -> None:
    """The audit's text says DIAGNOSTIC, as the demo does (was DIAG)."""
    assert main(["audit", str(FIXTURE)]) == 1
    out = capsys.readouterr().out
    assert "  DIAGNOSTIC stale_activity" in out and "DIAG " not in out
