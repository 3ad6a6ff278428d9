"""The demos' verdicts and finding parsing, on findings from the core detector
(no broker)."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.core.findings import Finding
from streams.core.replay import Replay
from streams.demo.expected import check_reference, check_split_brain
from streams.demo.worker import Step

REFERENCE = Path(__file__).resolve().parents[2] / "examples" / "reference.jsonl"


def replay(lines: list[bytes]) -> list[Finding]:
    r = Replay()
    for n, line in enumerate(lines, 1):
        r.feed(line, offset=n, source="t")
    return r.latest_findings()


def story(*, a_commits: bool) -> list[Finding]:
    """worker-a (epoch 1) displaced by worker-b (epoch 2), then late progress
    and a late effect that the sink rejected or (unfenced) committed."""
    key, fx = "release/d", "publish"

    def ev(t: str, epoch: int, seq: int, effect: bool = False) -> bytes:
        w = "worker-a" if epoch == 1 else "worker-b"
        extra = f',"effect_key":"{fx}"' if effect else ""
        return (
            f'{{"type":"{t}","workflow_key":"{key}","epoch":{epoch},"worker_id":"{w}",'
            f'"seq":{seq}{extra}}}'
        ).encode()

    late = "effect_committed" if a_commits else "effect_rejected"
    return replay(
        [
            ev("lease_acquired", 1, 1),
            ev("progress", 1, 2),
            ev("lease_acquired", 2, 3),
            ev("effect_attempted", 2, 4, True),
            ev("effect_committed", 2, 5, True),
            ev("progress", 1, 6),
            ev("effect_attempted", 1, 7, True),
            ev(late, 1, 8, True),
        ]
    )


def test_finding_records_parse_back_to_the_same_findings() -> None:
    """Finding.from_dict inverts Finding.to_dict for every reference finding."""
    findings = replay([line for line in REFERENCE.read_bytes().splitlines() if line.strip()])
    assert len(findings) == 4
    assert [Finding.from_dict(f.to_dict()) for f in findings] == findings


def test_reference_check_accepts_spec_findings_and_names_what_differs() -> None:
    """The reference verdict passes SPEC §5's four and names a missing one."""
    findings = replay([line for line in REFERENCE.read_bytes().splitlines() if line.strip()])
    assert check_reference(findings) == []
    fewer = [f for f in findings if f.kind.value != "stale_commit"]
    assert check_reference(fewer) == ["missing export-ledger stale_commit at seq 8"]


def test_split_brain_checks_tell_fenced_from_unfenced_outcomes() -> None:
    """A rejected late effect passes the fenced verdict only; a committed one
    passes the unfenced verdict only."""
    rejected, committed = story(a_commits=False), story(a_commits=True)
    args = {"workflow_key": "release/d", "stale_epoch": 1}
    assert check_split_brain(rejected, unfenced=False, **args) == []
    assert check_split_brain(committed, unfenced=True, **args) == []
    assert check_split_brain(committed, unfenced=False, **args) != []
    assert check_split_brain(rejected, unfenced=True, **args) != []
    assert check_split_brain(rejected, unfenced=False, workflow_key="x", stale_epoch=1) != []


def test_worker_steps_survive_the_json_line_between_processes() -> None:
    """A step written by a worker reads back equal; other output is refused."""
    step = Step(
        "worker-a",
        "effect",
        {"effect_key": "e", "status": "rejected", "reason": "stale_epoch", "current_epoch": 2},
    )
    assert Step.from_json(step.to_json()) == step
    assert step.describe() == "effect 'e': rejected (stale_epoch, current epoch 2)"
    for junk in (b"hello", b"[1]", b'{"worker": "x"}'):
        with pytest.raises(ValueError):
            Step.from_json(junk)


def test_a_custom_fixture_is_judged_by_its_own_file_audit(tmp_path: Path) -> None:
    """`demo live --fixture FILE` expects the file audit's findings and dead letters."""
    from streams.demo.live import check_against_audit, file_audit

    path = tmp_path / "custom.jsonl"
    path.write_bytes(
        b'{"type":"lease_acquired","workflow_key":"c/1","epoch":1,"worker_id":"a"}\n'
        b'{"type":"lease_acquired","workflow_key":"c/1","epoch":2,"worker_id":"b"}\n'
        b'{"type":"progress","workflow_key":"c/1","epoch":1,"worker_id":"a"}\n'
        b"not json\n"
    )
    audit = file_audit(path)
    found = audit.latest_findings()
    assert [f.kind.value for f in found] == ["stale_activity"]
    assert check_against_audit(found, audit, dead_letters=1) == []
    assert check_against_audit([], audit, dead_letters=1)[0].startswith(
        "missing c/1 stale_activity"
    )
    assert "the file audit found 1 invalid line" in check_against_audit(found, audit, 0)[0]
    other = replay(REFERENCE.read_bytes().splitlines())
    assert any(
        p.startswith("unexpected export-ledger") for p in check_against_audit(other, audit, 1)
    )
