"""The findings consumer API against a real broker."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest

from streams.cli import main
from streams.core.findings import Finding
from streams.core.records import Kind, Severity
from streams.core.replay import Replay
from streams.findings import (
    ONLY_NEW,
    Delivery,
    FindingFilter,
    FindingsConsumer,
    FindingsSettings,
    RevisionTracker,
)
from streams.kafka.connection import KafkaConnection
from tests.findings.conftest import fixture_findings, produce_findings, synthetic_findings


def test_tracker_delivers_each_revision_once_and_forgets_at_the_bound() -> None:
    """A revision not newer than the one delivered is refused; past the bound the oldest id goes."""
    t = RevisionTracker(max_tracked=2)
    assert t.offer("a", 1) == (True, None)
    assert t.offer("a", 1) == (False, 1)
    assert t.offer("a", 2) == (True, 1)
    assert t.offer("a", 1) == (False, 2)
    assert t.offer("b", 1) == (True, None)
    assert t.offer("c", 1) == (True, None)  # evicts "a", the least recently delivered
    assert (len(t), t.forgotten) == (2, 1)
    assert t.offer("a", 1) == (True, None)  # forgotten: a duplicate, never a loss


def test_tracker_forgets_the_least_recently_delivered_id_first() -> None:
    """A newer revision makes its id the most recent one: the bound then evicts the other."""
    t = RevisionTracker(max_tracked=2)
    assert t.offer("a", 1) == (True, None)
    assert t.offer("b", 1) == (True, None)
    assert t.offer("a", 2) == (True, 1)
    assert t.offer("c", 1) == (True, None)  # evicts "b", not "a"
    assert t.offer("a", 2) == (False, 2)  # still known
    assert t.offer("b", 1) == (True, None)  # forgotten; evicts "a" (a refusal is no delivery)
    assert (len(t), t.forgotten) == (2, 2) and t.previous("a") is None and t.previous("c") == 1


def test_bounded_read_gives_the_latest_revision_of_each_finding(
    kafka_bootstrap: str, findings_topic: Callable[..., str]
) -> None:
    """The fixture's five revisions read back as four findings, stale_attempt at revision 2."""
    topic = findings_topic()
    with FindingsConsumer(FindingsSettings(KafkaConnection(kafka_bootstrap), topic)) as c:
        latest = c.latest()
    by_kind = {f.kind: f for f in latest}
    assert len(latest) == 4
    assert set(by_kind) == {
        Kind.STALE_ACTIVITY, Kind.STALE_ATTEMPT, Kind.STALE_COMMIT, Kind.CONFLICTING_COMMIT,
    }  # fmt: skip
    assert by_kind[Kind.STALE_ATTEMPT].revision == 2
    assert c.stats.records == 5 and c.stats.delivered == 5


def test_filters_select_by_severity_kind_and_workflow(
    kafka_bootstrap: str, findings_topic: Callable[..., str]
) -> None:
    """--min-severity, --kind and --workflow/--prefix keep only the matching findings."""
    topic = findings_topic()

    def kinds(flt: FindingFilter) -> set[str]:
        with FindingsConsumer(
            FindingsSettings(KafkaConnection(kafka_bootstrap), topic, filter=flt)
        ) as c:
            return {f.kind.value for f in c.latest()}

    assert kinds(FindingFilter(min_severity=Severity.INCIDENT)) == {
        "stale_commit", "conflicting_commit",
    }  # fmt: skip
    assert kinds(FindingFilter(kinds=frozenset({Kind.STALE_ACTIVITY}))) == {"stale_activity"}
    assert kinds(FindingFilter(workflows=frozenset({"report-index"}))) == set()
    assert len(kinds(FindingFilter(prefix="export-"))) == 4


def test_position_is_committed_only_after_the_handler_returns(
    kafka_bootstrap: str, findings_topic: Callable[..., str]
) -> None:
    """A handler that fails on the 3rd delivery: a restart in the same group starts at the 3rd."""
    findings = synthetic_findings(6, revisions=1)
    topic = findings_topic(findings, partitions=1)
    settings = FindingsSettings(KafkaConnection(kafka_bootstrap), topic, group="g-commit")
    seen: list[str] = []

    def handler(d: Delivery) -> None:
        if len(seen) == 2:
            raise RuntimeError("handler down")
        seen.append(d.idempotency_key)

    with FindingsConsumer(settings) as c, pytest.raises(RuntimeError):
        c.run(handler)
    after: list[str] = []
    with FindingsConsumer(settings) as c:
        c.run(lambda d: after.append(d.idempotency_key))
    assert seen == ["f-00000/1", "f-00001/1"]
    assert after == [f"f-{i:05d}/1" for i in range(2, 6)]


def test_follow_delivers_new_revisions_as_updates_and_never_twice(
    kafka_bootstrap: str, findings_topic: Callable[..., str]
) -> None:
    """Following from 'new': a redelivered revision is dropped, a newer one is marked an update."""
    topic = findings_topic([], partitions=1)
    one, two = synthetic_findings(1, revisions=2)
    settings = FindingsSettings(
        KafkaConnection(kafka_bootstrap), topic, start=ONLY_NEW, follow=True
    )
    got: list[Delivery] = []
    with FindingsConsumer(settings) as c:
        produce_findings(kafka_bootstrap, topic, [one, one, two, one, two])
        deadline = time.monotonic() + 20
        d: Delivery | None = None
        # Until all five were read and nothing more is handed out (records
        # are read in batches: the last delivery may follow the last read).
        while c.stats.records < 5 or d is not None:
            assert time.monotonic() < deadline, f"read {c.stats.records} of 5 records in 20 s"
            d = c.poll(0.2)
            if d is not None:
                got.append(d)
                c.ack(d)
    assert [(d.idempotency_key, d.update, d.previous_revision) for d in got] == [
        ("f-00000/1", False, None), ("f-00000/2", True, 1),
    ]  # fmt: skip
    assert c.stats.repeated == 3


def test_fixture_findings_have_five_revisions() -> None:
    """The helper's premise: the fixture emits five revisions, stale_attempt twice."""
    assert [f.revision for f in fixture_findings()] == [1, 1, 1, 2, 1]


def test_since_starts_at_the_first_record_at_or_after_the_time(
    kafka_bootstrap: str, findings_topic: Callable[..., str]
) -> None:
    """Since(ms) skips the records produced before that time (Kafka timestamps)."""
    from streams.findings import Since

    early, late = synthetic_findings(2, revisions=1)
    topic = findings_topic([early], partitions=1)
    time.sleep(0.05)
    cut = int(time.time() * 1000)
    time.sleep(0.05)
    produce_findings(kafka_bootstrap, topic, [late])
    with FindingsConsumer(
        FindingsSettings(KafkaConnection(kafka_bootstrap), topic, start=Since(cut))
    ) as c:
        assert [f.finding_id for f in c.latest()] == [late.finding_id]


def _escalation_findings() -> list[Finding]:
    """Every revision emitted for a duplicate commit (same owner) that a stale
    commit of the same effect turns into a conflicting commit (one id)."""
    events = [
        ("lease_acquired", 1, "a", None), ("effect_committed", 1, "a", "charge-1"),
        ("effect_committed", 1, "a", "charge-1"), ("lease_acquired", 2, "b", None),
        ("effect_committed", 2, "b", "charge-1"), ("effect_committed", 1, "a", "charge-1"),
    ]  # fmt: skip
    r = Replay()
    out: list[Finding] = []
    for seq, (kind, epoch, worker, effect) in enumerate(events, start=1):
        doc = {"type": kind, "workflow_key": "pay", "epoch": epoch, "worker_id": worker, "seq": seq}
        if effect is not None:
            doc |= {"effect_key": effect, "sink": "bank"}
        out.extend(r.feed(json.dumps(doc).encode(), offset=seq, source="t"))
    return out


def test_a_kind_filter_applies_to_the_latest_revision_of_a_bounded_read(
    kafka_bootstrap: str, findings_topic: Callable[..., str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A duplicate_commit escalated to conflicting_commit is not under --kind duplicate_commit."""
    findings = _escalation_findings()
    latest = {f.finding_id: f for f in findings}  # revisions arrive in order
    escalated = [fid for fid, f in latest.items() if f.kind is Kind.CONFLICTING_COMMIT]
    # The premise: one id was a duplicate_commit at an earlier revision.
    assert any(f.kind is Kind.DUPLICATE_COMMIT and f.finding_id in escalated for f in findings)
    topic = findings_topic(findings, partitions=1)

    def read(kind: Kind) -> list[tuple[str, int]]:
        flt = FindingFilter(kinds=frozenset({kind}))
        with FindingsConsumer(
            FindingsSettings(KafkaConnection(kafka_bootstrap), topic, filter=flt)
        ) as c:
            return [(f.finding_id, f.revision) for f in c.latest()]

    def expected(kind: Kind) -> list[tuple[str, int]]:
        return [(fid, f.revision) for fid, f in latest.items() if f.kind is kind]

    for kind in (Kind.DUPLICATE_COMMIT, Kind.CONFLICTING_COMMIT, Kind.STALE_COMMIT):
        assert read(kind) == expected(kind), kind
    args = ["findings", "--bootstrap-servers", kafka_bootstrap, "--topic", topic]
    assert main([*args, "--kind", "duplicate_commit", "--format", "jsonl"]) == 0
    assert capsys.readouterr().out == ""


def test_follow_under_a_kind_filter_follows_a_shown_finding_through_its_escalation(
    kafka_bootstrap: str, findings_topic: Callable[..., str]
) -> None:
    """Following --kind duplicate_commit: the duplicate's revisions, then its escalation to
    conflicting_commit as an update; a finding never shown under the filter stays out."""
    topic = findings_topic([], partitions=1)
    findings = _escalation_findings()
    flt = FindingFilter(kinds=frozenset({Kind.DUPLICATE_COMMIT}))
    settings = FindingsSettings(
        KafkaConnection(kafka_bootstrap), topic, start=ONLY_NEW, follow=True, filter=flt
    )
    got: list[Delivery] = []
    with FindingsConsumer(settings) as c:
        produce_findings(kafka_bootstrap, topic, findings)
        deadline = time.monotonic() + 20
        d: Delivery | None = None
        while c.stats.records < len(findings) or d is not None:  # as above: all read and handed out
            assert time.monotonic() < deadline, f"read {c.stats.records} records in 20 s"
            d = c.poll(0.2)
            if d is not None:
                got.append(d)
                c.ack(d)
    assert [(d.finding.kind, d.finding.revision, d.previous_revision) for d in got] == [
        (Kind.DUPLICATE_COMMIT, 1, None),
        (Kind.DUPLICATE_COMMIT, 2, 1),
        (Kind.CONFLICTING_COMMIT, 3, 2),
    ]
    assert c.stats.filtered == 1  # the stale_commit, never shown under the filter


def test_a_bounded_read_ends_at_the_end_offsets_captured_at_start(
    kafka_bootstrap: str, findings_topic: Callable[..., str]
) -> None:
    """Findings produced after the read started, or left in an open transaction, are not read;
    an aborted transaction's never are; the read still ends."""
    from confluent_kafka import Producer

    before, after, aborted, pending = (
        synthetic_findings(20, revisions=1)[i * 5 : (i + 1) * 5] for i in range(4)
    )
    topic = findings_topic(before, partitions=2)

    def txn_producer(tid: str) -> Producer:
        p = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": tid})
        p.init_transactions(30)
        p.begin_transaction()
        for f in aborted if tid.endswith("a") else pending:
            p.produce(topic, f.to_json(), key=f.workflow_key.encode())
        p.flush(30)
        return p

    ab = txn_producer(f"{topic}-a")
    ab.abort_transaction(30)
    open_txn = txn_producer(f"{topic}-p")  # stays open while the read runs
    try:
        with FindingsConsumer(FindingsSettings(KafkaConnection(kafka_bootstrap), topic)) as c:
            produce_findings(kafka_bootstrap, topic, after)
            started = time.monotonic()
            got = {f.finding_id for f in c.latest()}
            assert time.monotonic() - started < 20
    finally:
        open_txn.abort_transaction(30)
    assert got == {f.finding_id for f in before}


class _AnsweredLate:
    """A reader port whose one asynchronous commit is answered (stored) only
    when the consumer waits for it: what a close right after a commit sees."""

    def __init__(self, *_: object, **__: object) -> None:
        f = synthetic_findings(1)[0]
        self._records = [_tail_record(f.to_json(), f.workflow_key.encode())]
        self._sent: list[tuple[dict[int, int], bool]] = []
        self._answers: list[tuple[int, int, str | None]] = []
        self.finished = False

    def poll(self, timeout: float) -> object:
        return self._records.pop() if self._records else None

    def consume(self, max_records: int, timeout: float) -> list[object]:
        out, self._records = self._records[:max_records], self._records[max_records:]
        return out

    def commit(self, positions: dict[int, int], *, asynchronous: bool) -> None:
        self._sent.append((dict(positions), asynchronous))

    def commit_results(self) -> list[tuple[int, int, str | None]]:
        done, self._answers = self._answers, []
        return done

    def settle_commits(self) -> None:
        self._answers = [(p, o, None) for sent, _ in self._sent for p, o in sent.items()]

    def close(self) -> None:
        pass


def _tail_record(value: str | bytes, key: bytes) -> object:
    from streams.kafka.reader import TopicRecord

    raw = value.encode() if isinstance(value, str) else value
    return TopicRecord(key=key, value=raw, partition=0, offset=7, timestamp_ms=-1)


def test_close_waits_for_the_answer_to_a_commit_in_flight_and_does_not_commit_again() -> None:
    """A position whose asynchronous commit was stored is not committed again at
    close (with the broker gone, that commit would fail and say a restart repeats)."""
    readers: list[_AnsweredLate] = []

    def factory(*a: object, **kw: object) -> _AnsweredLate:
        readers.append(_AnsweredLate(*a, **kw))
        return readers[-1]

    c = FindingsConsumer(
        FindingsSettings(
            KafkaConnection("127.0.0.1:9"), "t", group="g", follow=True, commit_interval_s=0.0
        ),
        tail=factory,  # type: ignore[arg-type]
    )
    d = c.poll(0.1)
    assert d is not None
    c.ack(d)
    c.maybe_commit(force=False)
    c.close()
    assert readers[0]._sent == [({0: 8}, True)]


class _ListTail:
    """A reader port over a list of records, read in batches; records every
    commit it is asked for."""

    def __init__(self, records: list[object]) -> None:
        self._records = list(records)
        self.sent: list[dict[int, int]] = []
        #: What the next commit_results() answers (asynchronous commits answered).
        self.results: list[tuple[int, int, str | None]] = []
        self.finished = False

    def poll(self, timeout: float) -> object:
        return self._records.pop(0) if self._records else None

    def consume(self, max_records: int, timeout: float) -> list[object]:
        out, self._records = self._records[:max_records], self._records[max_records:]
        return out

    def commit(self, positions: dict[int, int], *, asynchronous: bool) -> None:
        self.sent.append(dict(positions))

    def commit_results(self) -> list[tuple[int, int, str | None]]:
        done, self.results = self.results, []
        return done

    def settle_commits(self) -> None:
        pass

    def close(self) -> None:
        pass


def _consumer_over(records: list[object]) -> tuple[FindingsConsumer, _ListTail]:
    tails: list[_ListTail] = []

    def factory(*_: object, **__: object) -> _ListTail:
        tails.append(_ListTail(records))
        return tails[-1]

    c = FindingsConsumer(
        FindingsSettings(
            KafkaConnection("127.0.0.1:9"), "t", group="g", follow=True, commit_interval_s=0.0
        ),
        tail=factory,  # type: ignore[arg-type]
    )
    return c, tails[0]


def _at(offset: int, f: Finding | None) -> object:
    from streams.kafka.reader import TopicRecord

    value = b"not json" if f is None else f.to_json()
    return TopicRecord(key=b"k", value=value, partition=0, offset=offset, timestamp_ms=-1)


def test_a_batch_with_a_bad_record_in_the_middle_delivers_the_rest() -> None:
    """One read of three records, the middle one not a finding: the other two are
    delivered in order, the bad one counted, and once both are acknowledged the
    committed position is past all three."""
    a, b = synthetic_findings(2, revisions=1)
    c, tail = _consumer_over([_at(10, a), _at(11, None), _at(12, b)])
    batch = c.poll_batch(500, 0.1)
    got = [(d.offset, d.finding.finding_id) for d in batch]
    assert got == [(10, a.finding_id), (12, b.finding_id)]
    assert c.stats.not_findings == 1 and c.stats.records == 3
    assert c.in_flight == 2
    c.ack_all(batch)
    c.maybe_commit(force=True)
    assert tail.sent[-1] == {0: 13}
    c.close()


def test_a_position_is_not_committed_past_a_delivery_of_the_batch_not_acknowledged() -> None:
    """Of a batch of three, the first and last acknowledged: the position stops
    before the middle one, so a restart delivers it (and what follows) again."""
    fs = synthetic_findings(3, revisions=1)
    c, tail = _consumer_over([_at(20 + i, f) for i, f in enumerate(fs)])
    batch = c.poll_batch(500, 0.1)
    c.ack_all([batch[0], batch[2]])
    c.maybe_commit(force=True)
    assert tail.sent[-1] == {0: 21}
    c.ack(batch[1])
    c.maybe_commit(force=True)
    assert tail.sent[-1] == {0: 23}
    c.close()


def test_poll_hands_out_a_read_batch_one_at_a_time_and_keeps_the_rest_after_a_break() -> None:
    """Iteration reads a batch but hands it out one by one: leaving the loop after
    the first keeps the others, which the next poll_batch returns in order."""
    fs = synthetic_findings(4, revisions=1)
    c, _ = _consumer_over([_at(i, f) for i, f in enumerate(fs)])
    for d in c:
        assert d.offset == 0
        break
    assert c.in_flight == 1  # the first, handed out (acknowledged only when the next is asked for)
    assert [d.offset for d in c.poll_batch(2, 0.1)] == [1, 2]
    assert [d.offset for d in c.poll_batch(500, 0.1)] == [3]
    c.close()


def test_records_read_again_after_a_position_reset_are_not_handed_out_nor_committed() -> None:
    """The client reads offsets 20-22 again (a fetch position reset after a broker
    restart) while 20 is still in flight: the repeats are skipped, and the
    position stays before 20 until its delivery is acknowledged (the repeats'
    acknowledgements took it past 20, so a crash would have lost 20)."""
    fs = synthetic_findings(3, revisions=1)
    records = [_at(20 + i, f) for i, f in enumerate(fs)]
    c, tail = _consumer_over(records + records)
    first = c.poll_batch(3, 0.1)
    assert [d.offset for d in first] == [20, 21, 22]
    c.ack_all(first[1:])
    assert c.poll_batch(3, 0.1) == []  # the repeats: nothing handed out again
    assert c.stats.repeated == 3 and c.stats.records == 6
    c.maybe_commit(force=True)
    assert all(sent.get(0, 20) <= 20 for sent in tail.sent)
    c.ack(first[0])
    c.maybe_commit(force=True)
    assert tail.sent[-1] == {0: 23}
    c.close()


def test_an_older_commit_stored_after_a_newer_one_is_followed_by_the_newer_again() -> None:
    """The broker confirms position 23, then an older commit (21, retried by the
    client across a coordinator move) is confirmed too: it landed last, so the
    consumer commits 23 again (it took 23 for stored, and the group stayed at 21)."""
    fs = synthetic_findings(3, revisions=1)
    c, tail = _consumer_over([_at(20 + i, f) for i, f in enumerate(fs)])
    c.ack_all(c.poll_batch(500, 0.1))
    c.maybe_commit()
    assert tail.sent[-1] == {0: 23}
    tail.results = [(0, 23, None)]
    c.maybe_commit()
    assert len(tail.sent) == 1  # stored: nothing to commit again
    tail.results = [(0, 21, None)]
    c.maybe_commit()
    assert tail.sent[-1] == {0: 23} and len(tail.sent) == 2
    c.close()


def _general_path(raw: bytes) -> Finding:
    """What decode_finding answered before its fast path: orjson + from_dict."""
    return Finding.from_dict(json.loads(raw))


def test_encode_finding_is_to_json_byte_for_byte() -> None:
    """The follower's encoder writes what Finding.to_json writes: keys, order,
    escapes and non-ASCII text alike."""
    import msgspec

    from streams.findings.select import encode_finding

    odd = 'q"b\\s\n\t\x00\x1f\x7f é ☃ \u2028 😀 </x>'
    fs = [*fixture_findings(), msgspec.structs.replace(fixture_findings()[-1], workflow_key=odd)]
    for f in fs:
        assert encode_finding(f) == f.to_json()


def test_decode_finding_answers_as_orjson_and_from_dict_did() -> None:
    """The msgspec fast path gives the same Finding as the general path for
    records as written; a record without confidence, with a loose type, or with
    an unknown key in an evidence entry gets the general path's answer."""
    from streams.errors import NotAFinding
    from streams.findings.select import decode_finding

    for f in fixture_findings():
        got = decode_finding(f.to_json())
        assert got == f and type(got) is Finding
        assert all(type(e) is type(f.evidence[0]) for e in got.evidence)
    doc = fixture_findings()[-1].to_dict()
    legacy = {k: v for k, v in doc.items() if k != "confidence"}
    loose = {**doc, "revision": str(doc["revision"])}
    for variant in (legacy, loose):
        raw = json.dumps(variant).encode()
        assert decode_finding(raw) == _general_path(raw)
    extra = {**doc, "evidence": [{**doc["evidence"][0], "later": 1}]}
    with pytest.raises(NotAFinding, match="later"):
        decode_finding(json.dumps(extra).encode())


def test_decode_finding_body_shares_the_record_bytes_only_when_they_are_the_encoding() -> None:
    """A record as written is its own body; any other record's body is the re-encoding."""
    from streams.errors import NotAFinding
    from streams.findings.select import decode_finding_body, encode_finding

    for f in fixture_findings():
        raw = f.to_json()
        got, body = decode_finding_body(raw)
        assert got == f and body is raw
        assert decode_finding_body(raw, encode=False) == (f, None)
    doc = fixture_findings()[-1].to_dict()
    spaced = json.dumps(doc, indent=1).encode()
    unknown = json.dumps({**doc, "later": 1}).encode()
    loose = json.dumps({**doc, "revision": str(doc["revision"])}).encode()
    for raw in (spaced, unknown, loose):
        got, body = decode_finding_body(raw)
        assert body == encode_finding(got) and body != raw
    extra = {**doc, "evidence": [{**doc["evidence"][0], "later": 1}]}
    with pytest.raises(NotAFinding, match="later"):
        decode_finding_body(json.dumps(extra).encode())


def test_delivery_body_is_encoded_once_and_not_part_of_its_value() -> None:
    """Delivery.body is the finding's JSON, the same object on each use; equality ignores it."""
    from streams.findings.select import encode_finding

    f = fixture_findings()[0]
    d = Delivery(f, 0, 1, -1, None)
    assert d.body == encode_finding(f) and d.body is d.body
    assert d == Delivery(f, 0, 1, -1, None) and "_body" not in repr(d)


def test_the_consumers_delivery_maker_sets_every_field_as_the_constructor_does() -> None:
    """_new_delivery gives a Delivery equal to Delivery(...) in every field, its body given."""
    from dataclasses import astuple, fields

    from streams.findings.consumer import _new_delivery

    f = fixture_findings()[0]
    args = (f, 3, 17, 1234, 2)
    made, built = _new_delivery(*args, b"{}"), Delivery(*args)
    assert type(made) is Delivery and made == built
    assert astuple(made)[:-1] == astuple(built)[:-1]  # all but the body, given to one only
    assert [getattr(made, x.name) for x in fields(Delivery)] == [*args, b"{}"]
    assert made.body == b"{}"


def test_a_replaced_delivery_encodes_its_own_body() -> None:
    """dataclasses.replace with another finding never keeps the first one's body."""
    from dataclasses import replace

    from streams.findings.select import encode_finding

    first, other = fixture_findings()[0], fixture_findings()[-1]
    d = Delivery(first, 0, 1, -1, None)
    assert d.body == encode_finding(first)
    assert replace(d, finding=other).body == encode_finding(other) != d.body


def test_acknowledgements_out_of_order_move_the_position_only_past_a_whole_prefix() -> None:
    """Offsets acknowledged out of order (a webhook window's) commit up to the first gap only."""
    from streams.findings.consumer import _Positions

    pos = _Positions()
    for o in range(10, 16):
        assert pos.begin(0, o)
    pos.ack_many(0, [12, 14])
    assert 0 not in pos.next and pos.in_flight == 4
    pos.ack_many(0, [11, 10])
    assert pos.next[0] == 13
    pos.ack(0, 15)
    assert pos.next[0] == 13 and pos.in_flight == 1
    pos.ack_many(0, [13])
    assert pos.next[0] == 16 and pos.in_flight == 0
