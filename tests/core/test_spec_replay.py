"""The replay driver (audit path) against SPEC §2, §6 and §7: validation at the edge,
invalid records reported and skipped, latest findings sorted by workflow key, then
position, then kind."""

from __future__ import annotations

from typing import Any

import orjson

from streams.core import Event, event_to_dict
from streams.core.replay import Replay
from tests.core.conftest import acq, com, make_detector, prog, run


def _get(entry: Any, name: str) -> Any:
    return entry[name] if isinstance(entry, dict) else getattr(entry, name)


def _feed(r: Replay, events: list[Event], source: str = "t.jsonl") -> None:
    for n, e in enumerate(events, start=1):
        r.feed(orjson.dumps(event_to_dict(e)), key=None, offset=n, source=source)


def test_latest_findings_sorted_by_key_then_position() -> None:
    """latest_findings() lists workflow keys in order and, within a key, findings by the
    raising event's position, whatever the arrival order."""
    events = [
        acq(17, "a", 1, key="zeta"),
        acq(18, "b", 2, key="zeta"),
        com(17, "a", 9, "X", key="zeta"),
        prog(17, "a", 4, key="zeta"),
        acq(5, "g", 1, key="alpha"),
        acq(6, "e", 2, key="alpha"),
        prog(5, "g", 3, key="alpha"),
    ]
    r = Replay(make_detector())
    _feed(r, events)
    got = [(f.workflow_key, f.event_seq, f.kind.value) for f in r.latest_findings()]
    assert got == [
        ("alpha", 3, "stale_activity"),
        ("zeta", 4, "stale_activity"),
        ("zeta", 9, "stale_commit"),
    ]


def test_replay_matches_the_bare_detector() -> None:
    """Replay's latest findings equal the detector's latest revision per id."""
    events = [acq(17, "a", 1), acq(18, "b", 2), prog(17, "a", 3), com(17, "a", 4, "X")]
    r = Replay(make_detector())
    _feed(r, events)
    mine = {f.finding_id: f.to_dict() for f in run(events).findings()}
    assert {f.finding_id: f.to_dict() for f in r.latest_findings()} == mine


def test_replay_key_mismatch_is_invalid_and_skipped() -> None:
    """A record whose Kafka key differs from workflow_key is recorded invalid (naming the
    field, with source and offset) and not classified."""
    r = Replay(make_detector())
    r.feed(orjson.dumps(event_to_dict(acq(17, "a", 1))), key=b"wf", offset=10, source="t/0")
    r.feed(orjson.dumps(event_to_dict(acq(18, "b", 2))), key=b"other", offset=11, source="t/0")
    r.feed(orjson.dumps(event_to_dict(prog(17, "a", 3))), key=b"wf", offset=12, source="t/0")
    assert r.latest_findings() == []
    assert len(r.invalid) == 1
    entry = r.invalid[0]
    assert (_get(entry, "source"), _get(entry, "offset")) == ("t/0", 11)
    assert _get(entry, "field") in ("workflow_key", "key")
    assert _get(entry, "reason")


def test_replay_never_raises_on_garbage() -> None:
    """Arbitrary bad records (non-UTF-8, huge, wrong shapes, pathologically nested) are
    recorded as invalid, never raised."""
    r = Replay(make_detector())
    deep = b'{"type":"progress","workflow_key":"k","epoch":1,"worker_id":"w","x":'
    deep += b"[" * 5_000 + b"]" * 5_000 + b"}"
    garbage = [
        b"\xff\xfe\x00",
        b"[]",
        b"{}",
        b"null",
        b'{"type":"progress"}',
        b"x" * 70_000,
        deep,
    ]
    for n, raw in enumerate(garbage, start=1):
        assert r.feed(raw, key=None, offset=n, source="g") == []
    assert [_get(i, "offset") for i in r.invalid] == list(range(1, len(garbage) + 1))
    assert all(_get(i, "reason") for i in r.invalid)


def test_replay_no_seq_positions_are_offsets() -> None:
    """Without seq, the offset given to feed() is the position (line numbers in a file)."""
    r = Replay(make_detector())
    for offset, e in [(3, acq(17, "a")), (7, acq(18, "b")), (12, prog(17, "a"))]:
        r.feed(orjson.dumps(event_to_dict(e)), key=None, offset=offset, source="f")
    (f,) = r.latest_findings()
    assert (f.kind.value, f.event_seq, f.event_offset, f.ordering) == (
        "stale_activity",
        None,
        12,
        "arrival",
    )
