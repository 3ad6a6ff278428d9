"""SPEC §3 (order) and §4 (classification rules), one test per rule.

Written from SPEC.md alone. Interpretations are stated in the docstrings
(marked "Reading:").
"""

from __future__ import annotations

from streams.core import Event
from tests.core.conftest import (
    acq,
    att,
    com,
    comparable,
    ev,
    prog,
    rej,
    rel,
    run,
    ver,
)

# --- §3 order -----------------------------------------------------------------


def test_late_buffered_evidence_after_clean_handover_gives_nothing() -> None:
    """Epoch 5's events with seq below epoch 6's acquisition, arriving after it, are
    classified by position: a clean handover, no finding, nothing emitted at all."""
    e1, p2, c3 = acq(5, "g", 1), prog(5, "g", 2), com(5, "g", 3, "X")
    a4, p5 = acq(6, "e", 4), prog(6, "e", 5)
    result = run([e1, a4, p5, p2, c3])
    assert result.findings() == []
    assert all(out == [] for out in result.per_call)


def test_late_acquisition_makes_earlier_arrived_events_stale_by_its_position() -> None:
    """An acquisition of 18 at seq 3 arriving last makes epoch 17's events positioned after
    seq 3 stale (and only those): the finding is emitted on the late acquisition's
    arrival, its raising event is the stale progress at seq 5 with that event's offset."""
    events: list[tuple[Event, int]] = [
        (acq(17, "alpha", 1), 100),
        (prog(17, "alpha", 2), 101),
        (prog(17, "alpha", 5), 102),
        (att(17, "alpha", 6, "X"), 103),
        (acq(18, "beta", 3), 104),
    ]
    result = run(events)
    assert all(out == [] for out in result.per_call[:-1])
    assert result.kinds() == ["stale_activity", "stale_attempt"]
    activity = result.only("stale_activity")
    assert (activity.event_seq, activity.event_offset) == (5, 102)
    assert all(e.position != 2 for e in activity.evidence if e.type == "progress")
    assert (activity.current_epoch, activity.transition_seq, activity.transition_implied) == (
        18,
        3,
        False,
    )
    attempt = result.only("stale_attempt")
    assert (attempt.event_seq, attempt.event_offset) == (6, 103)


_TS_LATE = "2026-07-26T09:00:00Z"
_TS_EARLY = "2026-07-26T01:00:00Z"


def _with_ts(events: list[Event], stamps: list[str]) -> list[Event]:
    return [
        ev(
            e.type.value,
            e.epoch,
            e.worker_id,
            e.seq,
            e.effect_key,
            key=e.workflow_key,
            ts=t,
        )
        for e, t in zip(events, stamps, strict=True)
    ]


def test_worker_clocks_never_order_with_seq() -> None:
    """Timestamps claiming epoch 17's progress came after 18's acquisition change nothing
    when seq says it came before (and vice versa): results equal the ts-free run."""
    quiet = [acq(17, "a", 1), prog(17, "a", 2), acq(18, "b", 3)]
    assert run(_with_ts(quiet, [_TS_EARLY, _TS_LATE, _TS_EARLY])).findings() == []
    stale = [acq(17, "a", 1), acq(18, "b", 2), prog(17, "a", 3)]
    stamped = run(_with_ts(stale, [_TS_EARLY, _TS_LATE, _TS_EARLY]))
    assert stamped.kinds() == ["stale_activity"]
    assert comparable(stamped.latest) == comparable(run(stale).latest)


def test_worker_clocks_never_order_without_seq() -> None:
    """Without seq, arrival decides: timestamps contradicting arrival change nothing."""
    quiet = [acq(17, "a"), prog(17, "a"), acq(18, "b")]
    assert run(_with_ts(quiet, [_TS_EARLY, _TS_LATE, _TS_EARLY])).findings() == []
    stale = [acq(17, "a"), acq(18, "b"), prog(17, "a")]
    stamped = run(_with_ts(stale, [_TS_LATE, _TS_LATE, _TS_EARLY]))
    assert stamped.kinds() == ["stale_activity"]
    assert comparable(stamped.latest) == comparable(run(stale).latest)


def test_no_seq_position_is_arrival_offset() -> None:
    """Without seq the position is the arrival offset: the finding's ordering is arrival,
    event_seq is null, event_offset and the evidence positions are the offsets."""
    result = run([(acq(17, "a"), 100), (acq(18, "b"), 205), (prog(17, "a"), 310)])
    f = result.only("stale_activity")
    assert f.ordering == "arrival"
    assert (f.event_seq, f.event_offset) == (None, 310)
    assert 310 in [e.position for e in f.evidence]
    assert {e.position for e in f.evidence} <= {100, 205, 310}
    assert (f.current_epoch, f.current_worker) == (18, "b")
    # Reading: transition_seq is the acquisition's seq, which does not exist here; an
    # implementation may also report its position. Anything else is wrong.
    assert f.transition_seq in (None, 205)
    assert f.transition_implied is False


def test_no_seq_acquisition_arriving_later_does_not_make_earlier_events_stale() -> None:
    """Without seq an acquisition is placed after everything that arrived before it."""
    assert (
        run([acq(17, "a"), prog(17, "a"), com(17, "a", None, "X"), acq(18, "b")]).findings() == []
    )


def test_workflow_keys_are_independent() -> None:
    """An acquisition in one workflow key does not make another key's events stale."""
    result = run([acq(17, "a", 1, key="k1"), acq(18, "b", 2, key="k2"), prog(17, "a", 3, key="k1")])
    assert result.findings() == []


# --- §4 acquisition, implied acquisition, current epoch ------------------------


def test_chain_takeover_reports_newest_current_epoch() -> None:
    """17 -> 18 -> 19, then 17 resumes: its findings name 19 (the highest acquired) as
    current, with 19's acquisition as the transition; 18 resuming likewise."""
    result = run(
        [
            acq(17, "a", 1),
            acq(18, "b", 2),
            acq(19, "c", 3),
            prog(17, "a", 4),
            com(17, "a", 5, "X"),
            prog(18, "b", 6),
        ]
    )
    assert result.kinds() == ["stale_activity", "stale_activity", "stale_commit"]
    for f in result.findings():
        assert (f.current_epoch, f.current_worker, f.transition_seq) == (19, "c", 3)
    assert sorted(f.stale_epoch for f in result.of_kind("stale_activity")) == [17, 18]


def test_current_epoch_is_the_highest_not_the_latest_acquired() -> None:
    """When 19 is acquired before a (regressing) 18, a stale 17 event names 19 as current."""
    result = run([acq(17, "a", 1), acq(19, "c", 2), acq(18, "b", 3), prog(17, "a", 4)])
    assert result.kinds() == ["epoch_regression", "stale_activity"]
    activity = result.only("stale_activity")
    assert (activity.current_epoch, activity.transition_seq) == (19, 2)
    regression = result.only("epoch_regression")
    assert (regression.stale_epoch, regression.current_epoch) == (18, 19)


def test_implied_acquisition_is_reported_and_moves_earlier_with_late_evidence() -> None:
    """Epoch 18's earliest evidence being a progress makes the transition implied; a late
    lease_acquired of 18 positioned earlier moves the acquisition there (explicit) and
    re-emits the same finding with revision + 1."""
    result = run(
        [
            acq(17, "a", 10),
            prog(18, "b", 20),
            prog(17, "a", 30),
        ]
    )
    f1 = result.only("stale_activity")
    assert (f1.current_epoch, f1.current_worker) == (18, "b")
    assert (f1.transition_seq, f1.transition_implied) == (20, True)
    result2 = run(
        [
            acq(17, "a", 10),
            prog(18, "b", 20),
            prog(17, "a", 30),
            acq(18, "b", 15),
        ]
    )
    f2 = result2.only("stale_activity")
    assert f2.finding_id == f1.finding_id
    assert (f2.transition_seq, f2.transition_implied, f2.revision) == (15, False, 2)


def test_late_acquisition_after_implied_point_keeps_it_implied() -> None:
    """A lease_acquired of 18 positioned after 18's earliest (non-acquisition) evidence
    does not move the acquisition: it stays implied at the earlier position."""
    result = run([acq(17, "a", 10), att(18, "b", 20, "X"), prog(17, "a", 30), acq(18, "b", 25)])
    f = result.only("stale_activity")
    assert (f.transition_seq, f.transition_implied) == (20, True)
    assert result.kinds() == ["stale_activity"]


def test_late_implied_evidence_makes_earlier_arrived_events_stale() -> None:
    """A late epoch-18 event positioned before epoch 17's progress (an implied acquisition)
    makes that progress stale: new evidence only moves acquisitions earlier."""
    result = run([acq(17, "a", 10), prog(17, "a", 15), prog(18, "b", 20), att(18, "b", 12, "X")])
    assert result.per_call[2] == []
    f = result.only("stale_activity")
    assert (f.event_seq, f.current_epoch, f.transition_seq, f.transition_implied) == (
        15,
        18,
        12,
        True,
    )


def test_an_epoch_cannot_act_before_it_exists() -> None:
    """An epoch's events positioned before its lease_acquired imply its acquisition there:
    a lower epoch's event between them is stale."""
    result = run([acq(17, "a", 1), prog(18, "b", 2), prog(17, "a", 3), acq(18, "b", 4)])
    f = result.only("stale_activity")
    assert (f.stale_epoch, f.event_seq, f.transition_seq, f.transition_implied) == (
        17,
        3,
        2,
        True,
    )


def test_implied_acquisition_never_raises_epoch_regression() -> None:
    """Epoch 7's first evidence (a progress) after 8's acquisition is stale_activity, not
    epoch_regression: only a lease_acquired event regresses."""
    result = run([acq(8, "B", 1), prog(7, "A", 2), com(7, "A", 3, "X")])
    assert result.kinds() == ["stale_activity", "stale_commit"]


def test_late_higher_acquisition_raises_epoch_regression() -> None:
    """A lease_acquired of 7 at seq 5 becomes a regression when 8's acquisition at seq 3
    arrives later; the raising event is the seq-5 acquisition with its own offset."""
    result = run([(acq(7, "A", 5), 40), (acq(8, "B", 3), 41)])
    assert result.per_call[0] == []
    f = result.only("epoch_regression")
    assert (f.stale_epoch, f.event_seq, f.event_offset, f.current_epoch) == (7, 5, 40, 8)


def test_reacquiring_a_lower_epoch_after_takeover_is_regression_not_stale() -> None:
    """alpha re-acquiring epoch 7 after 8 took over is epoch_regression; a lease_acquired
    is never stale and the same worker is no epoch_reuse."""
    result = run([acq(7, "A", 1), acq(8, "B", 2), acq(7, "A", 3)])
    assert result.kinds() == ["epoch_regression"]
    assert result.only("epoch_regression").event_seq == 3


def test_reuse_by_a_different_worker_after_takeover_is_both_reuse_and_regression() -> None:
    """Reading: a lease_acquired of 7 by a new worker after 8 took over breaks two rules at
    once (7 handed to a second worker; an acquisition after a higher one): both findings."""
    result = run([acq(7, "A", 1), acq(8, "B", 2), acq(7, "C", 3)])
    assert result.kinds() == ["epoch_regression", "epoch_reuse"]


# --- §4 types that are never findings by themselves ----------------------------


def test_lease_released_is_never_a_finding_by_itself() -> None:
    """The displaced owner releasing its lease after the takeover is no finding."""
    assert run([acq(17, "a", 1), acq(18, "b", 2), rel(17, "a", 3)]).findings() == []
    assert run([acq(17, "a"), acq(18, "b"), rel(17, "a")]).findings() == []


def test_outcome_verified_is_never_stale() -> None:
    """An outcome_verified by the displaced epoch is not stale: no finding."""
    assert run([acq(17, "a", 1), acq(18, "b", 2), ver(17, "a", 3, "X")]).findings() == []


def test_verified_outcome_does_not_remove_findings() -> None:
    """outcome_verified by the current epoch does not retract or downgrade a stale_commit:
    clearing is for the health view, the detector keeps the finding."""
    result = run([acq(17, "a", 1), acq(18, "b", 2), com(17, "a", 3, "X"), ver(18, "b", 4, "X")])
    assert result.kinds() == ["stale_commit"]
    assert result.only("stale_commit").severity.value == "incident"


# --- §4 one finding per identity ------------------------------------------------


def test_one_stale_activity_per_stale_epoch() -> None:
    """Many stale progress events of one epoch give one stale_activity, raised by the first;
    two stale epochs give two."""
    events = [acq(16, "z", 1), acq(17, "a", 2), acq(18, "b", 3)]
    events += [prog(17, "a", s) for s in range(4, 12)]
    events += [prog(16, "z", 12), prog(16, "z", 13)]
    result = run(events)
    found = result.of_kind("stale_activity")
    assert sorted((f.stale_epoch, f.event_seq) for f in found) == [(16, 12), (17, 4)]
    assert len({f.finding_id for f in result.emitted}) == 2


def test_stale_activity_event_is_first_by_position_not_arrival() -> None:
    """A stale progress positioned before the one that raised the finding, arriving later,
    becomes the raising event (same id, revision + 1)."""
    result = run([acq(17, "a", 1), acq(18, "b", 2), prog(17, "a", 9), prog(17, "a", 5)])
    f = result.only("stale_activity")
    assert (f.event_seq, f.event_offset, f.revision) == (5, 4, 2)


def test_evidence_includes_the_transition() -> None:
    """Reading: a stale finding's evidence (its source events) includes the acquisition it
    is stale against, as well as the stale event, in position order."""
    f = run([acq(17, "a", 1), acq(18, "b", 2), prog(17, "a", 3)]).only("stale_activity")
    got = [(e.position, e.epoch, e.worker_id, e.type, e.effect_key) for e in f.evidence]
    assert (2, 18, "b", "lease_acquired", None) in got
    assert (3, 17, "a", "progress", None) in got
    assert got == sorted(got)


# --- §4 exact redeliveries ------------------------------------------------------


def test_redelivered_commit_with_same_seq_is_dropped() -> None:
    """The same commit delivered twice (same seq, type, epoch, effect key) counts once:
    no duplicate_commit, and the copy emits nothing."""
    c = com(5, "g", 2, "X")
    result = run([acq(5, "g", 1), c, c])
    assert result.findings() == []
    assert result.per_call[2] == []


def test_redelivery_by_seq_ignores_a_different_event_id() -> None:
    """With seq, same seq+type+epoch+effect key is a redelivery even if event_id differs."""
    result = run(
        [acq(5, "g", 1), com(5, "g", 2, "X", event_id="one"), com(5, "g", 2, "X", event_id="two")]
    )
    assert result.findings() == []


def test_same_event_id_without_seq_is_dropped() -> None:
    """Without seq, a second commit with the same event_id is a redelivery: dropped."""
    result = run(
        [acq(5, "g"), com(5, "g", None, "X", event_id="c1"), com(5, "g", None, "X", event_id="c1")]
    )
    assert result.findings() == []


def test_without_seq_or_event_id_a_repeat_is_a_retry() -> None:
    """Without seq or event_id nothing identifies a redelivery: two commits are counted
    (duplicate_commit, same_owner true)."""
    result = run([acq(5, "g"), com(5, "g", None, "X"), com(5, "g", None, "X")])
    f = result.only("duplicate_commit")
    assert (f.same_owner, f.event_offset, f.event_seq) == (True, 3, None)


def test_same_event_id_is_dropped_even_when_content_differs() -> None:
    """Reading: "same event_id" alone marks a redelivery, so a second event reusing an id
    is dropped even if its content differs (here a stale commit that would be an incident)."""
    result = run(
        [
            acq(17, "a", 1, event_id="e1"),
            acq(18, "b", 2, event_id="e2"),
            prog(18, "b", 3, event_id="e3"),
            com(17, "a", 4, "X", event_id="e3"),
        ]
    )
    assert result.findings() == []


def test_first_copy_of_a_redelivery_is_kept() -> None:
    """The first copy to arrive is kept: the finding keeps its worker and arrival offset."""
    result = run(
        [
            (acq(17, "a", 1), 1),
            (acq(18, "b", 2), 2),
            (prog(17, "a", 3, event_id="p"), 3),
            (prog(17, "a", 3, event_id="p"), 4),
        ]
    )
    f = result.only("stale_activity")
    assert (f.event_offset, f.revision) == (3, 1)
    assert result.per_call[3] == []


def test_redelivered_rejection_does_not_change_outcome() -> None:
    """A stale attempt's rejection redelivered after the fact changes nothing."""
    r = rej(17, "a", 4, "X")
    result = run([acq(17, "a", 1), acq(18, "b", 2), att(17, "a", 3, "X"), r, r])
    assert result.per_call[4] == []
    assert result.only("stale_attempt").sink_outcome == "rejected"


def test_same_event_id_in_another_workflow_is_not_a_redelivery() -> None:
    """Redeliveries are recognised within one workflow key: the same event_id (and seq)
    in another key is a different event and is classified."""
    result = run(
        [
            acq(17, "a", 1, key="k1", event_id="x1"),
            acq(18, "b", 2, key="k1", event_id="x2"),
            prog(17, "a", 3, key="k1", event_id="x3"),
            acq(17, "a", 1, key="k2", event_id="x1"),
            acq(18, "b", 2, key="k2", event_id="x2"),
            prog(17, "a", 3, key="k2", event_id="x3"),
        ]
    )
    assert sorted(f.workflow_key for f in result.of_kind("stale_activity")) == ["k1", "k2"]


def test_extreme_epochs_and_seqs() -> None:
    """Epochs and seqs up to 2^63 - 1 classify and survive the state round trip."""
    top = (1 << 63) - 1
    events = [acq(top - 1, "a", top - 3), acq(top, "b", top - 2), prog(top - 1, "a", top - 1)]
    plain = run(events)
    f = plain.only("stale_activity")
    assert (f.stale_epoch, f.current_epoch, f.event_seq, f.transition_seq) == (
        top - 1,
        top,
        top - 1,
        top - 2,
    )
    assert comparable(run(events, roundtrip="every").latest) == comparable(plain.latest)


def test_unicode_keys_classify_and_round_trip() -> None:
    """Non-ASCII workflow and effect keys (quotes, emoji, separators) classify normally and
    survive the state round trip; ids differ between near-identical effect keys."""
    key = 'tenant/ünïcode/"q"/\u2028/🚀'
    events = [
        acq(17, "\u03b1", 1, key=key),
        acq(18, "\u03b2", 2, key=key),
        com(17, "\u03b1", 3, "release \u00e9/1", key=key),
        com(17, "\u03b1", 4, "release e\u0301/1", key=key),
    ]
    plain = run(events)
    commits = plain.of_kind("stale_commit")
    assert sorted(f.effect_key or "" for f in commits) == sorted(
        ["release \u00e9/1", "release e\u0301/1"]
    )
    assert commits[0].finding_id != commits[1].finding_id
    assert all(f.workflow_key == key for f in commits)
    assert comparable(run(events, roundtrip="every").latest) == comparable(plain.latest)
