"""SPEC §4: every finding kind, its severity and the fields of its record.

Written from SPEC.md alone. Interpretations of places where the SPEC is not
explicit are stated in the docstrings (marked "Reading:").
"""

from __future__ import annotations

from streams.core import ACTIONS, Finding, Kind, finding_id
from tests.core.conftest import RunResult, acq, att, com, prog, rej, run


def _assert_common(f: Finding) -> None:
    """Fields every finding must carry, whatever its kind."""
    assert f.severity == f.kind.severity
    assert f.action and f.action == ACTIONS[f.kind]
    assert f.revision >= 1
    assert f.evidence, "a finding names its source events"
    positions = [e.position for e in f.evidence]
    assert positions == sorted(positions), "evidence is in position order"
    raising = f.event_seq if f.event_seq is not None else f.event_offset
    assert any(e.position == raising and e.type == f.event_type for e in f.evidence), (
        "the raising event is part of the evidence"
    )
    if f.kind not in (Kind.DUPLICATE_COMMIT, Kind.CONFLICTING_COMMIT):
        assert f.epochs is None, "epochs is only for duplicate/conflicting commits"


def _only_kinds(result: RunResult, *kinds: str) -> None:
    assert result.kinds() == sorted(kinds), [f.to_dict() for f in result.findings()]


def test_stale_activity_record() -> None:
    """A progress of epoch 17 after epoch 18's acquisition is one diagnostic stale_activity
    naming alpha@17 as stale, beta@18 (seq 2, explicit) as current, the progress as raiser."""
    result = run([acq(17, "alpha", 1), acq(18, "beta", 2), prog(17, "alpha", 3)])
    _only_kinds(result, "stale_activity")
    f = result.only("stale_activity")
    _assert_common(f)
    assert f.severity.value == "diagnostic"
    assert f.finding_id == finding_id(Kind.STALE_ACTIVITY, "wf", 17, None)
    assert f.revision == 1
    assert (f.workflow_key, f.stale_epoch, f.stale_worker) == ("wf", 17, "alpha")
    assert (f.current_epoch, f.current_worker) == (18, "beta")
    assert (f.transition_seq, f.transition_implied) == (2, False)
    assert (f.event_type, f.event_seq, f.event_offset) == ("progress", 3, 3)
    assert f.effect_key is None
    assert f.ordering == "authoritative"


def test_stale_activity_has_no_effect_fields() -> None:
    """Reading: effect_key, sink_outcome and same_owner "apply" only to effect/commit
    kinds, so a stale_activity carries them as null."""
    f = run([acq(17, "alpha", 1), acq(18, "beta", 2), prog(17, "alpha", 3)]).only("stale_activity")
    assert (f.effect_key, f.sink_outcome, f.same_owner, f.epochs) == (None, None, None, None)


def test_stale_attempt_without_answer_is_warning_with_unknown_outcome() -> None:
    """A stale effect_attempted with no sink answer yet is a warning stale_attempt whose
    sink_outcome is unknown, identified by (key, stale epoch, effect key)."""
    result = run([acq(17, "alpha", 1), acq(18, "beta", 2), att(17, "alpha", 3, "X", sink="bucket")])
    _only_kinds(result, "stale_attempt")
    f = result.only("stale_attempt")
    _assert_common(f)
    assert f.severity.value == "warning"
    assert f.finding_id == finding_id(Kind.STALE_ATTEMPT, "wf", 17, "X")
    assert (f.stale_epoch, f.stale_worker, f.current_epoch, f.current_worker) == (
        17,
        "alpha",
        18,
        "beta",
    )
    assert (f.event_type, f.event_seq, f.effect_key, f.sink) == (
        "effect_attempted",
        3,
        "X",
        "bucket",
    )
    assert f.sink_outcome == "unknown"


def test_rejected_stale_attempt_is_a_near_miss_not_a_commit() -> None:
    """A stale attempt the sink then rejected is a stale_attempt with sink_outcome rejected
    (revision 2 of the same id), and there is no stale_commit or commit finding."""
    result = run(
        [
            acq(17, "alpha", 1),
            acq(18, "beta", 2),
            att(17, "alpha", 3, "X"),
            rej(17, "alpha", 4, "X"),
        ]
    )
    _only_kinds(result, "stale_attempt")
    f = result.only("stale_attempt")
    _assert_common(f)
    assert f.sink_outcome == "rejected"
    assert f.revision == 2
    assert f.event_seq == 3, "the raising event stays the first stale attempt"
    assert [x.sink_outcome for x in result.emitted] == ["unknown", "rejected"]


def test_stale_rejection_alone_raises_stale_attempt() -> None:
    """A stale effect_rejected with no attempt seen is itself a stale_attempt, outcome rejected."""
    result = run([acq(17, "alpha", 1), acq(18, "beta", 2), rej(17, "alpha", 3, "X")])
    _only_kinds(result, "stale_attempt")
    f = result.only("stale_attempt")
    _assert_common(f)
    assert (f.event_type, f.event_seq, f.sink_outcome) == ("effect_rejected", 3, "rejected")


def test_stale_attempt_outcome_committed_wins_over_rejected() -> None:
    """sink_outcome is committed when a stale commit of that effect by that epoch exists,
    even if a rejection was also seen."""
    result = run(
        [
            acq(17, "alpha", 1),
            acq(18, "beta", 2),
            att(17, "alpha", 3, "X"),
            rej(17, "alpha", 4, "X"),
            com(17, "alpha", 5, "X"),
        ]
    )
    _only_kinds(result, "stale_attempt", "stale_commit")
    assert result.only("stale_attempt").sink_outcome == "committed"


def test_stale_attempt_outcome_ignores_other_epochs_and_effects() -> None:
    """A commit of the same effect by the current epoch, or of another effect by the stale
    epoch, does not make the stale attempt's outcome committed (it stays unknown)."""
    result = run(
        [
            acq(17, "alpha", 1),
            acq(18, "beta", 2),
            att(17, "alpha", 3, "X"),
            com(18, "beta", 4, "X"),
            com(17, "alpha", 5, "Y"),
        ]
    )
    attempt = result.only("stale_attempt")
    assert attempt.effect_key == "X"
    assert attempt.sink_outcome == "unknown"
    # Only one commit of X (by the current owner): no duplicate or conflict.
    _only_kinds(result, "stale_attempt", "stale_commit")
    assert result.only("stale_commit").effect_key == "Y"


def test_stale_attempts_are_per_epoch_and_effect() -> None:
    """Two effects attempted by one stale epoch, and one effect by two stale epochs, give
    one stale_attempt per (stale epoch, effect key)."""
    result = run(
        [
            acq(16, "zeta", 1),
            acq(17, "alpha", 2),
            acq(18, "beta", 3),
            att(17, "alpha", 4, "X"),
            att(17, "alpha", 5, "Y"),
            att(16, "zeta", 6, "X"),
            att(17, "alpha", 7, "X"),
        ]
    )
    got = sorted((f.stale_epoch, f.effect_key) for f in result.of_kind("stale_attempt"))
    assert got == [(16, "X"), (17, "X"), (17, "Y")]
    assert result.kinds() == ["stale_attempt"] * 3
    x17 = next(f for f in result.findings() if (f.stale_epoch, f.effect_key) == (17, "X"))
    assert x17.event_seq == 4


def test_stale_commit_alone_is_an_incident_only() -> None:
    """A stale effect_committed gives an incident stale_commit and nothing else (no
    stale_activity, no stale_attempt: those are raised by progress and attempts)."""
    result = run([acq(17, "alpha", 1), acq(18, "beta", 2), com(17, "alpha", 3, "X", sink="db")])
    _only_kinds(result, "stale_commit")
    f = result.only("stale_commit")
    _assert_common(f)
    assert f.severity.value == "incident"
    assert f.finding_id == finding_id(Kind.STALE_COMMIT, "wf", 17, "X")
    assert (f.stale_epoch, f.stale_worker, f.current_epoch, f.current_worker) == (
        17,
        "alpha",
        18,
        "beta",
    )
    assert (f.transition_seq, f.transition_implied) == (2, False)
    assert (f.event_type, f.event_seq, f.effect_key, f.sink) == ("effect_committed", 3, "X", "db")
    # Reading: the sink answered "committed"; null is tolerated as "does not apply".
    assert f.sink_outcome in ("committed", None)


def test_duplicate_commit_same_owner_is_a_client_retry() -> None:
    """One epoch committing an effect twice is a warning duplicate_commit, same_owner true,
    raised by the second commit, epochs [5], stale epoch = the committing epoch, and the
    current epoch is that epoch (the highest acquired before the raising event)."""
    result = run([acq(5, "gamma", 1), com(5, "gamma", 2, "X"), com(5, "gamma", 3, "X")])
    _only_kinds(result, "duplicate_commit")
    f = result.only("duplicate_commit")
    _assert_common(f)
    assert f.severity.value == "warning"
    assert f.finding_id == finding_id(Kind.DUPLICATE_COMMIT, "wf", None, "X")
    assert f.same_owner is True
    assert f.epochs == (5,)
    assert (f.stale_epoch, f.stale_worker) == (5, "gamma")
    assert (f.event_type, f.event_seq, f.effect_key) == ("effect_committed", 3, "X")
    assert (f.current_epoch, f.current_worker, f.transition_seq, f.transition_implied) == (
        5,
        "gamma",
        1,
        False,
    )


def test_duplicate_commit_across_clean_handover_is_not_same_owner() -> None:
    """Epoch 5 commits, epoch 6 takes over cleanly and commits the same effect again: a
    warning duplicate_commit with same_owner false, epochs [5, 6], raised by epoch 6's
    commit, current 6; no stale finding (no commit was stale)."""
    result = run(
        [
            acq(5, "gamma", 1),
            com(5, "gamma", 2, "X"),
            acq(6, "eps", 3),
            com(6, "eps", 4, "X"),
        ]
    )
    _only_kinds(result, "duplicate_commit")
    f = result.only("duplicate_commit")
    _assert_common(f)
    assert f.same_owner is False
    assert f.epochs == (5, 6)
    assert (f.stale_epoch, f.stale_worker) == (5, "gamma")
    assert (f.event_seq, f.current_epoch, f.current_worker, f.transition_seq) == (4, 6, "eps", 3)


def test_duplicate_commit_over_three_clean_owners() -> None:
    """Three clean owners committing one effect: duplicate_commit epochs [5, 6, 7], raised
    by the first commit whose epoch differs from the first commit's (epoch 6's)."""
    result = run(
        [
            acq(5, "g", 1),
            com(5, "g", 2, "X"),
            acq(6, "e", 3),
            com(6, "e", 4, "X"),
            acq(7, "z", 5),
            com(7, "z", 6, "X"),
        ]
    )
    _only_kinds(result, "duplicate_commit")
    f = result.only("duplicate_commit")
    assert (f.epochs, f.event_seq, f.same_owner) == ((5, 6, 7), 4, False)
    assert f.current_epoch == 6, "current is relative to the raising event, not the latest"


def test_conflicting_commit_record() -> None:
    """Commits of one effect by epochs 18 and (stale) 17: a critical conflicting_commit,
    epochs [17, 18], stale epoch 17 (lowest committing), raised by the first commit whose
    epoch differs from the first commit's, plus a stale_commit for epoch 17."""
    result = run(
        [
            acq(17, "alpha", 1),
            acq(18, "beta", 2),
            com(18, "beta", 3, "X"),
            com(17, "alpha", 4, "X"),
        ]
    )
    _only_kinds(result, "conflicting_commit", "stale_commit")
    f = result.only("conflicting_commit")
    _assert_common(f)
    assert f.severity.value == "critical"
    assert f.finding_id == finding_id(Kind.CONFLICTING_COMMIT, "wf", None, "X")
    assert f.finding_id == finding_id(Kind.DUPLICATE_COMMIT, "wf", None, "X")
    assert f.epochs == (17, 18)
    assert (f.stale_epoch, f.stale_worker) == (17, "alpha")
    # First commit (position 3) is epoch 18; the first differing one is epoch 17's at 4.
    assert (f.event_type, f.event_seq, f.effect_key) == ("effect_committed", 4, "X")
    assert (f.current_epoch, f.current_worker, f.transition_seq) == (18, "beta", 2)
    # Reading: same_owner applies to duplicate_commit; on a conflict it is false or null.
    assert f.same_owner in (False, None)


def test_duplicate_escalates_to_conflicting_under_same_id() -> None:
    """A clean-handover duplicate later joined by a stale commit escalates to
    conflicting_commit under the SAME finding_id with revision + 1, raising event
    unchanged (the first commit whose epoch differs from the first commit's)."""
    result = run(
        [
            acq(17, "alpha", 1),
            com(17, "alpha", 2, "X"),
            acq(18, "beta", 3),
            com(18, "beta", 4, "X"),
            com(17, "alpha", 5, "X"),
        ]
    )
    family = [f for f in result.emitted if f.kind.value.endswith("_commit") and f.epochs]
    assert [(f.kind.value, f.revision) for f in family] == [
        ("duplicate_commit", 1),
        ("conflicting_commit", 2),
    ]
    assert family[0].finding_id == family[1].finding_id
    assert family[0].same_owner is False
    final = family[1]
    assert (final.severity.value, final.epochs, final.event_seq) == ("critical", (17, 18), 4)
    assert result.of_kind("duplicate_commit") == []
    assert result.only("stale_commit").event_seq == 5


def test_same_owner_retry_then_stale_repeat_then_new_owner_conflicts() -> None:
    """Retry by epoch 17 (duplicate, same_owner), a stale repeat by 17 (still one epoch:
    duplicate), then epoch 18 commits: conflicting, raised by 18's commit; revisions of
    the id only grow and severity never drops."""
    result = run(
        [
            acq(17, "alpha", 1),
            com(17, "alpha", 2, "X"),
            com(17, "alpha", 3, "X"),
            acq(18, "beta", 4),
            com(17, "alpha", 5, "X"),
            com(18, "beta", 6, "X"),
        ]
    )
    fid = finding_id(Kind.DUPLICATE_COMMIT, "wf", None, "X")
    history = [f for f in result.emitted if f.finding_id == fid]
    assert history[0].kind.value == "duplicate_commit"
    assert history[0].same_owner is True
    assert history[0].event_seq == 3
    before_18 = [f for f in history if f.epochs == (17,)]
    assert before_18 and all(f.kind.value == "duplicate_commit" for f in before_18)
    assert [f.revision for f in history] == list(range(1, len(history) + 1))
    final = result.latest[fid]
    assert (final.kind.value, final.epochs, final.event_seq) == ("conflicting_commit", (17, 18), 6)
    assert (final.stale_epoch, final.stale_worker) == (17, "alpha")
    assert result.only("stale_commit").event_seq == 5


def test_epoch_reuse_record() -> None:
    """Two lease_acquired for epoch 5 by different workers: critical epoch_reuse identified
    by (key, 5). Reading: raised by the later (second-positioned) acquisition."""
    result = run([acq(5, "A", 1), acq(5, "B", 2)])
    _only_kinds(result, "epoch_reuse")
    f = result.only("epoch_reuse")
    _assert_common(f)
    assert f.severity.value == "critical"
    assert f.finding_id == finding_id(Kind.EPOCH_REUSE, "wf", 5, None)
    assert f.stale_epoch == 5
    assert (f.event_type, f.event_seq) == ("lease_acquired", 2)
    assert f.stale_worker in ("A", "B")


def test_same_worker_acquiring_twice_is_not_reuse() -> None:
    """The same worker acquiring the same epoch twice (two seqs) is no finding."""
    assert run([acq(5, "A", 1), acq(5, "A", 2), prog(5, "A", 3)]).findings() == []


def test_epoch_regression_record() -> None:
    """A lease_acquired of epoch 7 positioned after epoch 8's acquisition: critical
    epoch_regression (key, 7), current 8 with its explicit acquisition."""
    result = run([acq(8, "B", 1), acq(7, "A", 2)])
    _only_kinds(result, "epoch_regression")
    f = result.only("epoch_regression")
    _assert_common(f)
    assert f.severity.value == "critical"
    assert f.finding_id == finding_id(Kind.EPOCH_REGRESSION, "wf", 7, None)
    assert (f.stale_epoch, f.stale_worker) == (7, "A")
    assert (f.current_epoch, f.current_worker, f.transition_seq, f.transition_implied) == (
        8,
        "B",
        1,
        False,
    )
    assert (f.event_type, f.event_seq) == ("lease_acquired", 2)


def test_epoch_regression_after_implied_acquisition() -> None:
    """A lease_acquired of 7 after epoch 8 was acquired only implicitly (its progress) is an
    epoch_regression whose transition is implied."""
    result = run([prog(8, "B", 1), acq(7, "A", 2)])
    _only_kinds(result, "epoch_regression")
    f = result.only("epoch_regression")
    assert (f.current_epoch, f.transition_seq, f.transition_implied) == (8, 1, True)


def test_findings_of_different_workflows_have_different_ids() -> None:
    """The same identity in two workflow keys gives two findings with different ids."""
    events = [
        acq(17, "a", 1, key="k1"),
        acq(17, "a", 1, key="k2"),
        acq(18, "b", 2, key="k1"),
        acq(18, "b", 2, key="k2"),
        prog(17, "a", 3, key="k1"),
        prog(17, "a", 3, key="k2"),
    ]
    found = run(events).of_kind("stale_activity")
    assert sorted(f.workflow_key for f in found) == ["k1", "k2"]
    assert found[0].finding_id != found[1].finding_id


def test_conflict_names_lowest_committing_epoch_even_when_the_stale_commit_is_higher() -> None:
    """17 commits cleanly, 18 takes over and commits, 19 takes over, 18 commits again
    (stale): conflicting_commit with stale_epoch 17 (the lowest committing epoch, per the
    record table), epochs [17, 18], raised by 18's first commit."""
    result = run(
        [
            acq(17, "a", 1),
            com(17, "a", 2, "X"),
            acq(18, "b", 3),
            com(18, "b", 4, "X"),
            acq(19, "c", 5),
            com(18, "b", 6, "X"),
        ]
    )
    f = result.only("conflicting_commit")
    assert (f.stale_epoch, f.stale_worker, f.epochs, f.event_seq) == (17, "a", (17, 18), 4)
    assert (f.current_epoch, f.transition_seq) == (18, 3)
    assert result.only("stale_commit").stale_epoch == 18


def test_stale_attempt_outcome_needs_a_stale_commit() -> None:
    """A commit of the effect by the same epoch positioned before the takeover is not a
    stale commit: the later stale attempt's outcome stays unknown."""
    result = run([acq(17, "a", 1), com(17, "a", 2, "X"), acq(18, "b", 3), att(17, "a", 4, "X")])
    assert result.kinds() == ["stale_attempt"]
    assert result.only("stale_attempt").sink_outcome == "unknown"


def test_three_workers_on_one_epoch_is_one_reuse() -> None:
    """Three workers acquiring epoch 5 give a single epoch_reuse finding for (key, 5)."""
    result = run([acq(5, "A", 1), acq(5, "B", 2), acq(5, "C", 3)])
    assert result.kinds() == ["epoch_reuse"]
    assert result.only("epoch_reuse").event_seq == 2


def test_two_regressing_acquisitions_of_one_epoch_are_one_regression() -> None:
    """Two lease_acquired of epoch 7 after 8's acquisition give one epoch_regression,
    raised by the first (by position)."""
    result = run([acq(8, "B", 1), acq(7, "A", 3), acq(7, "A", 2)])
    assert result.kinds() == ["epoch_regression"]
    assert result.only("epoch_regression").event_seq == 2


def test_regressed_owner_activity_is_also_stale() -> None:
    """An owner that regressed to epoch 7 after 8 was acquired and then makes progress is
    both an epoch_regression and a stale_activity."""
    result = run([acq(8, "B", 1), acq(7, "A", 2), prog(7, "A", 3)])
    assert result.kinds() == ["epoch_regression", "stale_activity"]
    assert result.only("stale_activity").current_epoch == 8
