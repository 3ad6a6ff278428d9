"""SPEC §5: the reference fixture gives exactly the four expected findings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from streams.core import Event, parse_event
from tests.core.conftest import make_detector, run

FIXTURE = Path(__file__).resolve().parents[2] / "examples" / "reference.jsonl"


def _fixture_events() -> list[tuple[Event, int]]:
    lines = FIXTURE.read_bytes().splitlines()
    return [(parse_event(line), n) for n, line in enumerate(lines, start=1) if line.strip()]


def _get(entry: Any, name: str) -> Any:
    """An ``invalid`` entry's field: /tmp/common.md documents dicts, the code may use records."""
    return entry[name] if isinstance(entry, dict) else getattr(entry, name)


def test_fixture_has_sixteen_events_in_three_workflows() -> None:
    """The fixture is sixteen valid events over export-ledger, report-index, checkout-sync."""
    events = [e for e, _ in _fixture_events()]
    assert len(events) == 16
    assert {e.workflow_key for e in events} == {
        "export-ledger",
        "report-index",
        "checkout-sync",
    }
    assert all(e.seq is not None for e in events)


def test_fixture_gives_exactly_the_four_spec_findings() -> None:
    """Detector on the fixture: stale_activity@6, stale_attempt@7, stale_commit@8,
    conflicting_commit@9, all export-ledger, nothing else."""
    result = run(_fixture_events())
    got = sorted(
        (f.workflow_key, f.event_seq, f.kind.value, f.severity.value) for f in result.findings()
    )
    assert got == [
        ("export-ledger", 6, "stale_activity", "diagnostic"),
        ("export-ledger", 7, "stale_attempt", "warning"),
        ("export-ledger", 8, "stale_commit", "incident"),
        ("export-ledger", 9, "conflicting_commit", "critical"),
    ]


def test_fixture_finding_details() -> None:
    """The fixture's findings name alpha@17 as stale, beta@18 (seq 4, explicit) as current,
    the release-index effect, and epochs [17, 18] on the conflicting commit."""
    result = run(_fixture_events())
    effect = "release index for 2026-07-26"
    for f in result.findings():
        assert f.current_epoch == 18
        assert f.current_worker == "beta"
        assert f.transition_seq == 4
        assert f.transition_implied is False
        assert f.stale_epoch == 17
        assert f.stale_worker == "alpha"
        assert f.ordering == "authoritative"
    activity = result.only("stale_activity")
    assert activity.event_type == "progress"
    assert activity.event_offset == 12  # line 12 of the file
    assert activity.effect_key is None
    attempt = result.only("stale_attempt")
    assert (attempt.event_type, attempt.effect_key) == ("effect_attempted", effect)
    # seq 8 is a stale commit of the same effect by the same epoch.
    assert attempt.sink_outcome == "committed"
    assert attempt.sink == "release-bucket"
    commit = result.only("stale_commit")
    assert (commit.event_type, commit.effect_key, commit.event_offset) == (
        "effect_committed",
        effect,
        14,
    )
    conflict = result.only("conflicting_commit")
    assert conflict.epochs == (17, 18)
    assert conflict.effect_key == effect
    assert (conflict.event_type, conflict.event_seq, conflict.event_offset) == (
        "effect_committed",
        9,
        15,
    )
    for f in (attempt, commit, conflict):
        assert f.epochs is None or f.kind.value == "conflicting_commit"


def test_fixture_report_index_handover_is_healthy() -> None:
    """report-index and checkout-sync alone give no finding: a handover is not an error."""
    events = [(e, o) for e, o in _fixture_events() if e.workflow_key != "export-ledger"]
    assert run(events).findings() == []


def test_fixture_through_replay_matches_detector() -> None:
    """Replay.feed over the fixture lines gives the same four findings, sorted by
    workflow, then position, then kind (SPEC §6)."""
    from streams.core.replay import Replay

    r = Replay(make_detector())
    for n, line in enumerate(FIXTURE.read_bytes().splitlines(), start=1):
        if line.strip():
            r.feed(line, key=None, offset=n, source=str(FIXTURE))
    latest = r.latest_findings()
    assert [(f.event_seq, f.kind.value) for f in latest] == [
        (6, "stale_activity"),
        (7, "stale_attempt"),
        (8, "stale_commit"),
        (9, "conflicting_commit"),
    ]
    assert r.invalid == []


def test_replay_reports_invalid_lines_and_still_classifies_valid_ones() -> None:
    """Invalid lines among the fixture are listed with their line and reason, and the
    valid lines still give exactly the four findings (SPEC §7)."""
    from streams.core.replay import Replay

    lines = FIXTURE.read_bytes().splitlines()
    bad = [
        b'{"type": "progress", "workflow_key": "export-ledger"',  # malformed JSON
        b'{"type": "teleport", "workflow_key": "x", "epoch": 1, "worker_id": "w"}',
        b'{"type": "progress", "workflow_key": "x", "epoch": true, "worker_id": "w"}',
    ]
    mixed = [*lines[:3], bad[0], *lines[3:9], bad[1], *lines[9:], bad[2]]
    r = Replay(make_detector())
    for n, line in enumerate(mixed, start=1):
        r.feed(line, key=None, offset=n, source="mixed.jsonl")
    assert [(f.event_seq, f.kind.value) for f in r.latest_findings()] == [
        (6, "stale_activity"),
        (7, "stale_attempt"),
        (8, "stale_commit"),
        (9, "conflicting_commit"),
    ]
    assert [(_get(i, "source"), _get(i, "offset")) for i in r.invalid] == [
        ("mixed.jsonl", 4),
        ("mixed.jsonl", 11),
        ("mixed.jsonl", 19),
    ]
    assert [_get(i, "field") for i in r.invalid][1:] == ["type", "epoch"]
    assert all(_get(i, "reason") for i in r.invalid)
