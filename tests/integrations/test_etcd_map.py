"""etcd election changes as transitions (streams.integrations.etcd_map, pure)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.integrations.etcd_map import (
    Change,
    Elections,
    KeyValue,
    Rejected,
    TooManyKeys,
    Transition,
    election_of,
)

P = b"/election/"


def put(key: str, create: int, value: bytes = b"w", mod: int | None = None) -> Change:
    return Change(True, KeyValue(key.encode(), create, mod if mod is not None else create, value))


def delete(key: str, rev: int) -> Change:
    return Change(False, KeyValue(key.encode(), 0, rev))


def test_the_election_is_the_key_up_to_its_last_slash() -> None:
    """A candidate key's election is its path without the last segment."""
    assert election_of(b"/election/export/694d") == b"/election/export"
    assert election_of(b"/election/") is None
    assert election_of(b"noslash") is None


def test_the_first_candidate_acquires_at_its_own_creation() -> None:
    """A key that leads at once: epoch and seq are its create revision."""
    e = Elections(P)
    assert e.apply(5, [put("/election/a/1", 5, b"alpha")]) == [
        Transition(True, "/election/a", 5, 5, "alpha", "/election/a/1")
    ]


def test_a_waiting_candidate_acquires_at_its_predecessors_deletion() -> None:
    """The successor's acquisition is positioned at the deletion that made it
    leader, not at its own (older) creation; no separate release is published."""
    e = Elections(P)
    e.apply(5, [put("/election/a/1", 5, b"alpha")])
    assert e.apply(7, [put("/election/a/2", 7, b"beta")]) == []
    assert e.apply(12, [delete("/election/a/1", 12)]) == [
        Transition(True, "/election/a", 7, 12, "beta", "/election/a/2", 5, "alpha")
    ]
    assert e.apply(20, [delete("/election/a/2", 20)]) == [
        Transition(False, "/election/a", 7, 20, "beta", "/election/a/2")
    ]


def test_a_waiting_candidate_leaving_changes_nothing() -> None:
    """Deleting a key that never led, or rewriting the leader's value, is no transition."""
    e = Elections(P)
    e.apply(5, [put("/election/a/1", 5)])
    e.apply(6, [put("/election/a/2", 6)])
    assert e.apply(8, [delete("/election/a/2", 8)]) == []
    assert e.apply(9, [put("/election/a/1", 5, b"w", mod=9)]) == []


def test_a_transaction_changing_two_elections_gives_one_transition_each() -> None:
    """One revision (a transaction) may touch several elections and keys."""
    e = Elections(P)
    out = e.apply(3, [put("/election/a/1", 3, b"x"), put("/election/b/1", 3, b"y")])
    assert [(t.workflow_key, t.epoch, t.seq) for t in out if isinstance(t, Transition)] == [
        ("/election/a", 3, 3),
        ("/election/b", 3, 3),
    ]


def test_bad_values_are_rejected_naming_the_field() -> None:
    """An oversized or non-UTF-8 value, or a bad election name, is a Rejected
    naming worker_id / workflow_key, never an exception."""
    e = Elections(P)
    (big,) = e.apply(2, [put("/election/a/1", 2, b"x" * 300)])
    assert isinstance(big, Rejected) and big.field == "worker_id"
    assert "worker_id" in big.describe() and "300 bytes" in big.describe()
    (binary,) = e.apply(3, [put("/election/b/1", 3, b"\xff\xfe")])
    assert isinstance(binary, Rejected) and binary.field == "worker_id"
    (name,) = e.apply(4, [put("/election/a\x01b/1", 4)])
    assert isinstance(name, Rejected) and name.field == "workflow_key"
    (empty,) = e.apply(5, [put("/election/c/1", 5, b"")])
    assert isinstance(empty, Rejected) and empty.field == "worker_id"


def test_the_key_bound_stops_the_source() -> None:
    """Past max_keys the state refuses to grow (a dropped key would misplace a leader)."""
    e = Elections(P, max_keys=2)
    e.apply(1, [put("/election/a/1", 1), put("/election/a/2", 1)])
    with pytest.raises(TooManyKeys):
        e.apply(2, [put("/election/a/3", 2)])


def test_a_snapshot_gives_an_acquisition_per_leader_at_its_revision() -> None:
    """After load(), each election's oldest key is acquired at the snapshot's revision."""
    e = Elections(P)
    e.load([KeyValue(b"/election/a/2", 9, 9, b"beta"), KeyValue(b"/election/a/1", 4, 4, b"al")])
    assert e.snapshot_transitions(30) == [
        Transition(True, "/election/a", 4, 30, "al", "/election/a/1")
    ]


# No deadline: the shared machine's load, not the code, sets an example's time.
@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 2), st.integers(0, 50)), max_size=60))
def test_transitions_follow_the_oldest_key_with_rising_epochs_and_unique_seqs(
    ops: list[tuple[bool, int, int]],
) -> None:
    """Any run of creations and deletions: each transition is at the revision
    that caused it and names the oldest live key (or the election emptied);
    epochs rise, seqs are unique per key."""
    e = Elections(P)
    live: dict[str, dict[str, int]] = {}
    seen: dict[str, list[Transition]] = {}
    for rev, (create, election_no, pick) in enumerate(ops, start=1):
        election = f"/election/e{election_no}"
        keys = live.setdefault(election, {})
        if create or not keys:
            key = f"{election}/{rev}"
            keys[key] = rev
            out = e.apply(rev, [put(key, rev, b"w")])
        else:
            key = sorted(keys)[pick % len(keys)]
            del keys[key]
            out = e.apply(rev, [delete(key, rev)])
        for t in out:
            assert isinstance(t, Transition) and t.seq == rev  # at the change that caused it
            seen.setdefault(t.workflow_key, []).append(t)
            oldest = min(keys.items(), key=lambda kv: kv[1]) if keys else None
            if t.acquired:
                assert oldest is not None and (t.etcd_key, t.epoch) == oldest
            else:
                assert oldest is None
    for ts in seen.values():
        seqs = [t.seq for t in ts]
        assert seqs == sorted(set(seqs))
        epochs = [t.epoch for t in ts if t.acquired]
        assert epochs == sorted(set(epochs))
