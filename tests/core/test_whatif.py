"""SPEC §6 --what-if-fenced: the same evidence, the same detector, stale commits at the fenced
sinks fed as rejections; the findings that would change, next to the real ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.cli import main
from streams.core.whatif import WhatIf, what_if_fenced
from tests.core.conftest import acq, att, com, prog, replay_events, replay_fixture
from tests.core.test_audit_cli import _report_validator
from tests.strategies import SINKS, arrival_orders, multi_workflow_events, with_sinks

FIXTURE = Path(__file__).resolve().parents[2] / "examples" / "reference.jsonl"


def _changes(w: WhatIf) -> list[tuple[str, str | None, str | None]]:
    return [
        (
            c.change,
            None if c.real is None else c.real.kind.value,
            None if c.what_if is None else c.what_if.kind.value,
        )
        for c in w.changes
    ]


def test_fencing_the_release_bucket_turns_the_fixture_into_a_near_miss() -> None:
    """On the SPEC §5 fixture, fencing release-bucket turns the stale commit into a rejected
    near miss (the stale attempt's sink outcome committed -> rejected), and the stale commit
    and the conflicting commit disappear; the stale activity stays; the real replay is intact."""
    replay = replay_fixture()
    real_before = replay.latest_findings()
    w = what_if_fenced(replay, ["release-bucket"])
    assert w.converted == 1 and w.unseen_sinks == ()
    assert _changes(w) == [
        ("changed", "stale_attempt", "stale_attempt"),
        ("removed", "stale_commit", None),
        ("removed", "conflicting_commit", None),
    ]
    attempt = w.changes[0]
    assert attempt.real is not None and attempt.what_if is not None
    assert (attempt.real.sink_outcome, attempt.what_if.sink_outcome) == ("committed", "rejected")
    assert sorted(f.kind.value for f in w.findings()) == ["stale_activity", "stale_attempt"]
    assert replay.latest_findings() == real_before
    verdicts = {d.sink: d.verdict.value for d in w.destinations()}
    assert verdicts["release-bucket"] == "enforces_fence"
    assert w.replay.detector.config == replay.detector.config


def test_a_conflicting_commit_becomes_a_duplicate_when_the_stale_one_is_refused() -> None:
    """Epoch 1 commits stale at the fenced sink, epoch 2 commits twice: the conflicting commit
    becomes a same-owner duplicate (critical -> warning) under the same finding id."""
    events = [
        acq(1, "a", 1),
        acq(2, "b", 2),
        com(1, "a", 3, "X", sink="bucket"),
        com(2, "b", 4, "X", sink="bucket"),
        com(2, "b", 5, "X", sink="bucket"),
    ]
    w = what_if_fenced(replay_events(events), ["bucket"])
    assert ("changed", "conflicting_commit", "duplicate_commit") in _changes(w)
    change = next(c for c in w.changes if c.change == "changed")
    assert change.what_if is not None and change.what_if.same_owner is True
    assert change.to_dict()["real"]["severity"] == "critical"
    assert change.to_dict()["what_if"]["severity"] == "warning"


def test_a_stale_commit_without_an_attempt_becomes_an_added_near_miss() -> None:
    """A stale commit with no attempt before it: the stale_commit is removed and a stale_attempt
    with sink outcome rejected is added."""
    w = what_if_fenced(
        replay_events([acq(1, "a", 1), acq(2, "b", 2), com(1, "a", 3, sink="s")]), ["s"]
    )
    assert _changes(w) == [
        ("added", None, "stale_attempt"),
        ("removed", "stale_commit", None),
    ]
    added = w.changes[0].what_if
    assert added is not None and added.sink_outcome == "rejected"


def test_only_stale_commits_at_the_fenced_sinks_are_converted() -> None:
    """A current commit at the fenced sink and a stale commit at another sink stay commits."""
    events = [
        acq(1, "a", 1),
        com(1, "a", 2, "early", sink="s"),
        acq(2, "b", 3),
        com(1, "a", 4, "X", sink="other"),
        com(2, "b", 5, "Y", sink="s"),
    ]
    w = what_if_fenced(replay_events(events), ["s"])
    assert w.converted == 0 and w.changes == ()


def test_a_commit_made_stale_by_a_late_acquisition_is_converted() -> None:
    """Staleness is decided on the whole evidence: a commit that arrived before the acquisition
    positioned ahead of it is still refused in the what-if replay."""
    events = [acq(1, "a", 1), att(1, "a", 3, sink="s"), com(1, "a", 4, sink="s"), acq(2, "b", 2)]
    w = what_if_fenced(replay_events(events), ["s"])
    assert w.converted == 1
    assert ("removed", "stale_commit", None) in _changes(w)


def test_arrival_ordered_evidence_is_replayed_in_its_arrival_order() -> None:
    """Without seq the what-if replay places events as they arrived: an unfenced sink gives
    the same findings, and fencing one converts the stale commit."""
    events = [acq(1, "a"), acq(2, "b"), prog(1, "a"), com(1, "a", sink="s")]
    replay = replay_events(events)
    same = what_if_fenced(replay, ["nowhere"])
    assert same.changes == () and same.unseen_sinks == ("nowhere",)
    fenced = what_if_fenced(replay, ["s", "s"])
    assert fenced.fenced_sinks == ("s",) and fenced.converted == 1


def test_unnamed_fences_effect_events_without_a_sink() -> None:
    """--what-if-fenced '(unnamed)' applies to the effect events that name no sink."""
    w = what_if_fenced(
        replay_events([acq(1, "a", 1), acq(2, "b", 2), com(1, "a", 3)]), ["(unnamed)"]
    )
    assert w.converted == 1


def test_cli_json_reports_what_if_next_to_the_real_findings(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """audit --format json --what-if-fenced keeps the four real findings and exit 1, adds a
    what_if object (valid against the schema) with the changes."""
    code = main(["audit", "--format", "json", "--what-if-fenced", "release-bucket", str(FIXTURE)])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1
    assert len(doc["findings"]) == 4
    _report_validator().validate(doc)
    w = doc["what_if"]
    assert w["fenced_sinks"] == ["release-bucket"] and w["stale_commits_fenced"] == 1
    assert [(c["change"], (c["real"] or {}).get("kind")) for c in w["changed"]] == [
        ("changed", "stale_attempt"),
        ("removed", "stale_commit"),
        ("removed", "conflicting_commit"),
    ]
    assert w["summary"]["worst_severity"] == "warning"


def test_cli_text_reports_what_if_after_the_real_findings(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The text report lists the real findings, then a what-if section naming each change."""
    code = main(["audit", "--what-if-fenced", "release-bucket", str(FIXTURE)])
    out = capsys.readouterr().out
    assert code == 1
    real = out.index("CRITICAL   conflicting_commit")
    section = out.index("what if release-bucket had enforced the fence (1 stale commit refused")
    assert real < section
    assert "sink outcome committed -> rejected, a rejected near miss" in out[section:]
    assert "critical conflicting_commit would not be raised" in out[section:]


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_fencing_every_sink_leaves_no_stale_or_conflicting_commit(data: st.DataObject) -> None:
    """Generated workflows (any arrival order, with sinks): fencing every sink named, and
    "(unnamed)", leaves no stale_commit and no conflicting_commit, converts exactly the stale
    commits, and never touches the real findings."""
    events = data.draw(arrival_orders(data.draw(with_sinks(data.draw(multi_workflow_events())))))
    replay = replay_events(events)
    real = {fid: f.to_dict() for fid, f in replay.latest.items()}
    w = what_if_fenced(replay, [*(s for s in SINKS if s is not None), "(unnamed)"])
    kinds = {f.kind.value for f in w.findings()}
    assert not kinds & {"stale_commit", "conflicting_commit"}
    assert (w.converted > 0) == any(d.stale_committed for d in replay.destinations())
    assert {fid: f.to_dict() for fid, f in replay.latest.items()} == real


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_what_if_changes_do_not_depend_on_arrival_order(data: st.DataObject) -> None:
    """For seq-carrying workflows, any two arrival orders give the same what-if changes
    (finding ids, change, and the before/after summaries)."""
    events = data.draw(with_sinks(data.draw(multi_workflow_events())))
    first = what_if_fenced(replay_events(data.draw(arrival_orders(events))), ["release-bucket"])
    second = what_if_fenced(replay_events(data.draw(arrival_orders(events))), ["release-bucket"])
    assert [c.to_dict() for c in first.changes] == [c.to_dict() for c in second.changes]
    assert first.converted == second.converted
