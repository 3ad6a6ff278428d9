"""SPEC §4 "Confidence": one test per rule, on the finding record and in every report."""

from __future__ import annotations

import orjson

from streams.core import Finding
from streams.report import render_json, render_jsonl, render_text
from tests.core.conftest import acq, att, com, prog, rej, replay_events, replay_fixture, run


def test_fixture_findings_are_all_high() -> None:
    """On the reference fixture (seq on everything, explicit acquisition) every finding is high."""
    replay = replay_fixture()
    confidences = {f.kind.value: f.confidence.value for f in replay.latest_findings()}
    assert confidences == {
        "stale_activity": "high",
        "stale_attempt": "high",
        "stale_commit": "high",
        "conflicting_commit": "high",
    }


def test_arrival_ordering_is_low() -> None:
    """Without seq (ordering arrival) a stale commit is low, even with an explicit acquisition."""
    result = run([acq(1, "a"), acq(2, "b"), com(1, "a")])
    commit = result.only("stale_commit")
    assert commit.ordering == "arrival"
    assert commit.confidence == "low"


def test_arrival_beats_implied_and_unknown() -> None:
    """Arrival order is low even when the transition is implied and the sink outcome unknown."""
    result = run([prog(2, "b"), att(1, "a")])
    attempt = result.only("stale_attempt")
    assert (attempt.transition_implied, attempt.sink_outcome) == (True, "unknown")
    assert attempt.confidence == "low"


def test_implied_transition_is_medium() -> None:
    """With seq, a stale commit whose transition is implied (no lease_acquired) is medium."""
    result = run([acq(1, "a", 1), prog(2, "b", 2), com(1, "a", 3)])
    commit = result.only("stale_commit")
    assert (commit.ordering, commit.transition_implied) == ("authoritative", True)
    assert commit.confidence == "medium"


def test_stale_attempt_without_receipt_is_medium() -> None:
    """With seq and an explicit transition, a stale attempt with sink_outcome unknown is medium."""
    attempt = run([acq(1, "a", 1), acq(2, "b", 2), att(1, "a", 3)]).only("stale_attempt")
    assert (attempt.transition_implied, attempt.sink_outcome) == (False, "unknown")
    assert attempt.confidence == "medium"


def test_stale_attempt_with_rejection_or_commit_is_high() -> None:
    """A stale attempt with a receipt (rejected or committed), explicit transition: high."""
    rejected = run([acq(1, "a", 1), acq(2, "b", 2), att(1, "a", 3), rej(1, "a", 4)])
    assert rejected.only("stale_attempt").sink_outcome == "rejected"
    assert rejected.only("stale_attempt").confidence == "high"
    committed = run([acq(1, "a", 1), acq(2, "b", 2), att(1, "a", 3), com(1, "a", 4)])
    assert committed.only("stale_attempt").confidence == "high"


def test_commit_and_epoch_kinds_are_high_on_authoritative_explicit_evidence() -> None:
    """duplicate_commit, epoch_reuse and epoch_regression with seq and explicit acquisitions
    are high."""
    events = [acq(1, "a", 1), com(1, "a", 2), com(1, "a", 3), acq(1, "z", 4), acq(3, "c", 5)]
    result = run([*events, acq(2, "b", 6)])
    assert result.kinds() == ["duplicate_commit", "epoch_regression", "epoch_reuse"]
    assert {f.confidence.value for f in result.findings()} == {"high"}
    assert result.only("duplicate_commit").transition_implied is False


def test_a_change_of_confidence_is_a_new_revision() -> None:
    """A late lease_acquired that makes an implied transition explicit raises the confidence
    from medium to high, emitted as revision 2 of the same finding."""
    result = run([acq(1, "a", 1), prog(2, "b", 3), com(1, "a", 4), acq(2, "b", 2)])
    revs = [f for f in result.emitted if f.kind.value == "stale_commit"]
    assert [(f.revision, f.confidence.value) for f in revs] == [(1, "medium"), (2, "high")]
    assert revs[0].finding_id == revs[1].finding_id


def test_receipt_arriving_later_raises_an_attempt_to_high() -> None:
    """A stale attempt at medium (no receipt) becomes high, a new revision, when the sink's
    rejection arrives."""
    result = run([acq(1, "a", 1), acq(2, "b", 2), att(1, "a", 3), rej(1, "a", 4)])
    revs = [f for f in result.emitted if f.kind.value == "stale_attempt"]
    assert [(f.revision, f.confidence.value) for f in revs] == [(1, "medium"), (2, "high")]


def test_from_dict_reads_and_derives_confidence() -> None:
    """A finding record round-trips its confidence; an older record without the field gets
    it from the same rule."""
    attempt = run([acq(1, "a", 1), acq(2, "b", 2), att(1, "a", 3)]).only("stale_attempt")
    doc = attempt.to_dict()
    assert Finding.from_dict(doc) == attempt
    del doc["confidence"]
    assert Finding.from_dict(doc).confidence == "medium"


def test_every_report_carries_confidence() -> None:
    """Text, JSON and JSON Lines reports all state each finding's confidence."""
    replay = replay_events([acq(1, "a", 1), prog(2, "b", 2), com(1, "a", 3)])
    assert "confidence: medium (the takeover by epoch 2 is implied" in render_text(replay)
    doc = orjson.loads(render_json(replay))
    assert [f["confidence"] for f in doc["findings"]] == ["medium"]
    lines = render_jsonl(replay).splitlines()
    assert [orjson.loads(line)["confidence"] for line in lines] == ["medium"]
