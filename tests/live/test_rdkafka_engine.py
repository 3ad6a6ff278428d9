"""The rdkafka engine's loop against librdkafka's batch consume around a
rebalance, and its transactional calls against a client that does not
return (an in-process engine on the real local broker)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from streams.core.pending import PendingStatus
from streams.kafka.admin import TopicAdmin
from streams.live.prepare import ensure_topics
from streams.live.rdkafka.commit import failure_action
from streams.live.rdkafka.count_watch import CountWatch
from streams.live.rdkafka.engine import ENCODE_AT_ONCE_BELOW, RdkafkaEngine
from streams.live.rdkafka.run import _ensure_changelog
from streams.live.settings import settings_from_env
from tests.live.conftest import LiveHarness
from tests.live.test_live_kafka import assert_exactly_once_and_audit, assert_status_equals_audit

pytestmark = pytest.mark.kafka

Live = Callable[..., Any]


class _FetchedAfterTheRebalance:
    """The engine's consumer, except that a ``consume()`` call during which
    the assignment changed also returns the records fetched for the new
    assignment before the call ends. librdkafka does exactly that when the
    fetch response arrives within the call's timeout: its batch consume
    keeps serving the queue after the rebalance callback returns
    (``rd_kafka_q_serve_rkmessages``), and it has moved its position past
    those records. Here the fetch is waited for, so it happens every time."""

    def __init__(self, engine: RdkafkaEngine) -> None:
        self.engine = engine
        self.real = engine.consumer

    def consume(self, num_messages: int, timeout: float) -> list[Any]:
        epoch = self.engine._epoch
        msgs: list[Any] = list(self.real.consume(num_messages, timeout))
        if self.engine._epoch != epoch:
            deadline = time.monotonic() + 10.0
            while not msgs and time.monotonic() < deadline:
                msgs = list(self.real.consume(num_messages, 0.5))
        return msgs

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


@contextmanager
def _running(engine: RdkafkaEngine) -> Iterator[None]:
    failure: list[BaseException] = []

    def loop() -> None:
        try:
            engine.run()
        except BaseException as exc:  # re-raised below
            failure.append(exc)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        engine.stop()
        thread.join(30)
    assert not thread.is_alive()
    assert not failure, failure


def _engine(h: LiveHarness, tmp: Path) -> RdkafkaEngine:
    settings = settings_from_env({**h.env(), "FENCEWATCH_DATA_DIR": str(tmp / "data")})
    admin = TopicAdmin(settings.connection)
    partitions, _ = ensure_topics(settings, admin)
    _ensure_changelog(settings, partitions, admin)
    return RdkafkaEngine(settings, partitions=partitions)


class _RefusedOnceArmed:
    """The engine's consumer, except that once armed, its next consume()
    returns what librdkafka returns when the group's members offer another
    protocol: a message carrying only the JoinGroup error."""

    def __init__(self, engine: RdkafkaEngine) -> None:
        self.real = engine.consumer
        self.armed = threading.Event()

    def consume(self, num_messages: int, timeout: float) -> list[Any]:
        if self.armed.is_set():
            from confluent_kafka import KafkaError

            error = KafkaError(KafkaError.INCONSISTENT_GROUP_PROTOCOL)
            return [type("Refused", (), {"error": lambda self: error})()]
        return list(self.real.consume(num_messages, timeout))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def test_a_join_refused_for_another_protocol_stops_the_engine_in_one_line(
    live: Live, tmp_path: Path
) -> None:
    """The other engine's workers joining after the start's check: the
    JoinGroup refusal, which librdkafka would retry every 2 s for good,
    ends the loop with the one-line ConfigError that says what to do; what
    it had not committed is processed by the next worker, exactly once."""
    from streams.errors import ConfigError

    h = live(partitions=2, engine="rdkafka")
    events = h.scenario_events(n_keys=60, epochs=3, seed=41)
    h.produce(events[: len(events) // 2])
    engine = _engine(h, tmp_path / "first")
    refusing = _RefusedOnceArmed(engine)
    engine.consumer = refusing
    failure: list[BaseException] = []

    def loop() -> None:
        try:
            engine.run()
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while engine.processed == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert engine.processed > 0
    refusing.armed.set()
    thread.join(30)
    assert not thread.is_alive()
    assert len(failure) == 1 and isinstance(failure[0], ConfigError), failure
    assert "\n" not in str(failure[0])
    assert f"consumer group {h.app_id} has members of another group protocol (the faust" in str(
        failure[0]
    )
    assert "start this one with --engine faust" in str(failure[0])
    refusing.real.close()
    h.produce(events[len(events) // 2 :])
    with _running(_engine(h, tmp_path / "second")):
        h.wait_all_committed(timeout=60)
    assert len(assert_exactly_once_and_audit(h)) > 20


def test_records_fetched_after_the_assignment_in_the_same_consume_call_are_processed(
    live: Live, tmp_path: Path
) -> None:
    """Records that one consume() call returns after serving the assignment
    (fetched from the committed offsets) are processed, not dropped: every
    event is processed once and the findings equal the audit."""
    h = live(partitions=2, engine="rdkafka")
    events = h.scenario_events(n_keys=60, epochs=3, seed=5)
    h.produce(events)
    engine = _engine(h, tmp_path)
    engine.consumer = _FetchedAfterTheRebalance(engine)
    with _running(engine):
        h.wait_all_committed(timeout=60)
    assert engine.processed == len(events)
    assert len(assert_exactly_once_and_audit(h)) > 20


def test_a_send_offsets_call_that_never_returns_is_bounded_and_the_worker_carries_on(
    live: Live, tmp_path: Path
) -> None:
    """A transactional producer whose send_offsets_to_transaction never returns
    (librdkafka ignores its timeout when the group coordinator went away at
    the wrong moment): the engine gives the call up, replaces the producer,
    rewinds, and commits everything; findings exactly once, equal to the audit."""
    h = live(partitions=2, engine="rdkafka")
    events = h.scenario_events(n_keys=60, epochs=3, seed=6)
    h.produce(events)
    engine = _engine(h, tmp_path)
    hung = threading.Event()
    release = threading.Event()
    real = engine.txn.producer

    class _Hangs:
        """The first producer, its send_offsets_to_transaction stuck."""

        def send_offsets_to_transaction(self, *_args: Any) -> None:
            hung.set()
            release.wait(120)

        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

    engine.txn.producer = _Hangs()
    try:
        with _running(engine):
            assert hung.wait(60)
            h.wait_all_committed(timeout=90)
    finally:
        release.set()
    assert engine.txn.producer is not real
    assert len(assert_exactly_once_and_audit(h)) > 20


def test_a_producer_fenced_by_its_successor_is_replaced_and_its_generation_over(
    kafka_bootstrap: str, unique_topic: Callable[..., str]
) -> None:
    """A transactional producer whose id a successor initialised cannot
    commit: librdkafka calls the error fatal, and the engine's action is a
    new producer and the generation taken as over (poll to rejoin)."""
    from confluent_kafka import KafkaException, Producer

    topic = unique_topic()
    conf = {"bootstrap.servers": kafka_bootstrap, "transactional.id": f"{topic}-txn"}
    old = Producer(conf)
    old.init_transactions(30)
    old.begin_transaction()
    old.produce(topic, b"v", b"k")
    assert old.flush(30) == 0
    successor = Producer(conf)
    successor.init_transactions(30)  # fences the old one, aborts its transaction
    with pytest.raises(KafkaException) as failed:
        old.commit_transaction(30)
    err = failed.value.args[0]
    assert err.fatal()
    action = failure_action(err.name(), fatal=err.fatal())
    assert (action.what, action.new_producer, action.generation_over) == (
        "producer fenced",
        True,
        True,
    )


@pytest.mark.parametrize(
    ("code", "fatal", "expected"),
    [
        ("OUT_OF_ORDER_SEQUENCE_NUMBER", True, ("producer failed", True, False)),
        ("_INCONSISTENT", True, ("producer failed", True, False)),
        ("UNKNOWN_PRODUCER_ID", True, ("producer failed", True, False)),
        ("_INCONSISTENT", False, ("transaction failed", False, False)),
        ("ILLEGAL_GENERATION", False, ("stale generation", False, True)),
        ("_TIMED_OUT", False, ("transaction failed", False, False)),
    ],
)
def test_which_failures_need_a_new_producer_and_which_end_the_generation(
    code: str, fatal: bool, expected: tuple[str, bool, bool]
) -> None:
    """A fatal sequence error of the producer's own replaces the producer but
    rewinds at once (no other worker took over); a stale generation aborts
    and rejoins; anything else non-fatal aborts and rewinds."""
    action = failure_action(code, fatal=fatal)
    assert (action.what, action.new_producer, action.generation_over) == expected


@pytest.mark.parametrize(
    ("code", "fatal", "expected"),
    [
        ("_TIMED_OUT", False, ("commit timed out", True, False)),
        ("REQUEST_TIMED_OUT", False, ("commit timed out", True, False)),
        ("_TRANSPORT", False, ("commit failed", True, False)),
        ("ILLEGAL_GENERATION", False, ("stale generation", False, True)),
        ("_FENCED", True, ("producer fenced", True, True)),
    ],
)
def test_a_commit_that_fails_replaces_the_producer_before_anything_else(
    code: str, fatal: bool, expected: tuple[str, bool, bool]
) -> None:
    """A commit that timed out or failed is never followed by abort_transaction
    on the same producer (librdkafka 5423): a new producer aborts it."""
    action = failure_action(code, fatal=fatal, committing=True)
    assert (action.what, action.new_producer, action.generation_over) == expected


def _watcher(monkeypatch: pytest.MonkeyPatch, reads: list[Any]) -> CountWatch:
    """A partition-count watch of topic ``ev`` (2 partitions in the state's layout), whose
    TopicAdmin answers ``reads`` in turn (a count, or an exception to raise); the watch is
    stopped once they are used up."""
    import streams.kafka.admin
    from streams.kafka.connection import KafkaConnection
    from streams.live.partitions import PartitionGuard

    watch = CountWatch(KafkaConnection("127.0.0.1:1"), "ev", PartitionGuard("ev", 2))

    class _Admin:
        def __init__(self, _connection: Any) -> None:
            pass

        def partitions(self, names: list[str]) -> dict[str, int]:
            read = reads.pop(0)
            if not reads:
                watch.stop()
            if isinstance(read, BaseException):
                raise read
            return {"ev": read}

    monkeypatch.setattr(streams.kafka.admin, "TopicAdmin", _Admin)
    monkeypatch.setattr("streams.live.rdkafka.count_watch.COUNT_CHECK_S", 0.0)
    return watch


def test_the_partition_count_watcher_hands_a_grown_count_to_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The watcher re-reads the count until it differs from the state's layout
    (a broker that does not answer meanwhile is no change) and leaves the
    change for the loop to raise."""
    from streams.errors import BrokerError
    from streams.live.partitions import PartitionChange

    watch = _watcher(monkeypatch, [2, BrokerError("no answer", code="TIMEOUT"), 3, 2])
    watch.watch()
    assert watch.change == PartitionChange("ev", 2, 3)
    assert watch.failure is None


def test_a_count_read_failing_otherwise_is_handed_to_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A read failing with anything but a broker error ends the watcher and is
    left for the loop to raise (not a stray traceback from a dying thread)."""
    boom = RuntimeError("boom")
    watch = _watcher(monkeypatch, [2, boom, 2])
    watch.watch()
    assert watch.failure is boom
    assert watch.change is None


class _SlowOffsets:
    """The engine's producer, its ``send_offsets_to_transaction`` held for
    ``delay`` s: a commit stays pending long enough for batches to come in
    meanwhile."""

    def __init__(self, real: Any, delay: float) -> None:
        self.real, self.delay = real, delay

    def send_offsets_to_transaction(self, *args: Any, **kwargs: Any) -> None:
        time.sleep(self.delay)
        self.real.send_offsets_to_transaction(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


class _ShapedBatches:
    """The engine's consumer, its batches shaped: one record first (the
    first transaction commits at once, and its commit stays pending: see
    :class:`_SlowOffsets`), a few small batches while it is pending (their
    status records held with their findings), then one batch of ``big``
    records (its status records kept for the commit), then small batches
    (produced at once, replacing what the big batch kept for those keys)."""

    def __init__(self, engine: RdkafkaEngine, big: int) -> None:
        self.engine, self.real, self.big = engine, engine.consumer, big
        self.phase = 0
        self.buffer: list[Any] = []
        self.held_status = 0
        self.deferred_most = 0
        self.while_pending = 0
        self.big_keys: set[bytes] = set()
        self.small_keys: set[bytes] = set()

    def _fill(self, n: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while len(self.buffer) < n and time.monotonic() < deadline:
            self.buffer.extend(m for m in self.real.consume(n, 0.2) if m.error() is None)

    def _take(self, n: int) -> list[Any]:
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    def consume(self, num_messages: int, timeout: float) -> list[Any]:
        e = self.engine
        self.held_status = max(
            self.held_status, sum(isinstance(r, PendingStatus) for r in e.txn.held)
        )
        self.deferred_most = max(self.deferred_most, len(e.txn.deferred))
        if self.phase == 0:
            self._fill(1, timeout)
            self.phase = 1 if self.buffer else 0
            return self._take(1)
        pending = e.txn.pending
        if self.phase == 1 and pending is not None and self.while_pending < 4:
            self.while_pending += 1
            self._fill(5, 0.05)
            return self._take(5)  # processed while the first commit is pending
        if pending is not None:
            pending.done.wait(20)  # settled at the loop's next turn
        if self.phase == 1:
            self._fill(self.big, 20)
            self.phase = 2
            out = self._take(self.big)
            self.big_keys.update(m.key() for m in out)
            return out
        self._fill(5, min(timeout, 0.05))
        out = self._take(5)
        self.small_keys.update(m.key() for m in out)
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def test_status_records_of_small_batches_produced_at_once_held_and_kept_end_with_the_latest(
    live: Live, tmp_path: Path
) -> None:
    """Status and changelog records take all three ways within the run (held
    or kept while a commit is pending, kept for the commit from a big batch,
    produced at once from small batches, keys of the big batch among them):
    the status topic's last record of every key equals the audit, the
    changelog equals the worker's table, and the findings are exact."""
    h = live(partitions=2, engine="rdkafka")
    events = h.scenario_events(n_keys=150, epochs=4, seed=9)
    big = ENCODE_AT_ONCE_BELOW + 100
    assert len(events) > big + 300
    h.produce(events)
    settings = settings_from_env(
        {
            **h.env(),
            "FENCEWATCH_DATA_DIR": str(tmp_path / "data"),
            "FENCEWATCH_COMMIT_INTERVAL": "60",
            # Outlasts the interval (settings refuse a shorter one).
            "FENCEWATCH_TRANSACTION_TIMEOUT": "120",
        }
    )
    admin = TopicAdmin(settings.connection)
    partitions, _ = ensure_topics(settings, admin)
    _ensure_changelog(settings, partitions, admin)
    engine = RdkafkaEngine(settings, partitions=partitions)
    engine.txn.producer = _SlowOffsets(engine.txn.producer, 1.0)
    shaped = _ShapedBatches(engine, big)
    engine.consumer = shaped
    with _running(engine):
        deadline = time.monotonic() + 60
        while engine.processed < len(events) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert engine.processed == len(events)
        # Everything after the first record is one transaction (the
        # interval is a minute): the big batch's status records were kept,
        # and the small batches after it replaced those of their keys.
        assert engine.txn.txn_events == len(events) - 1
        assert engine.txn._txn_status > 0
        assert len(engine.txn.deferred) < shaped.deferred_most
        # Committed by the loop (made due now), not by the stop: the stop's
        # commit is bounded (2 x 3 s + 1 s) and, with the offsets call slowed
        # by a second on a loaded CI host, it once gave up and aborted this
        # whole run's transaction (as designed), leaving nothing to compare.
        engine.txn.last_start = time.monotonic() - 120
        deadline = time.monotonic() + 60
        while (
            engine.txn.txn_open or engine.txn.pending is not None
        ) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not engine.txn.txn_open and engine.txn.pending is None
        table = dict(engine.values)  # the table is closed with the engine
    assert shaped.held_status > 0
    assert len(shaped.big_keys & shaped.small_keys) > 50
    assert len(assert_exactly_once_and_audit(h)) > 20
    assert_status_equals_audit(h)
    # The changelog took the same three ways (kept for the commit while one
    # was pending and from the big batch, then produced at once): the newest
    # record of each key went last, and the commit's offsets are named.
    state, positions = _changelog(h, engine)
    assert state == table
    assert positions == h.committed()


# -- the changelog's source positions and the restore ------------------------------


def _changelog(h: LiveHarness, engine: RdkafkaEngine) -> tuple[dict[bytes, bytes], dict[int, int]]:
    """The changelog read back (the latest value of each key) and its highest
    source position header per partition, once its last transaction's
    markers are written (they reach the changelog a moment after the group's
    committed offsets are readable: CI read one partition empty before them)."""
    from streams.live.changelog import load_state

    h.wait_outputs_stable(time.monotonic() + 30, also=[engine.changelog])
    state, result = load_state(
        {"bootstrap.servers": h.bootstrap},
        engine.changelog,
        dict.fromkeys(range(h.partitions)),
        positions=True,
    )
    return state, result.positions


def test_small_batches_changelog_equals_the_table_and_names_the_committed_offsets(
    live: Live, tmp_path: Path
) -> None:
    """Small batches write their changelog records into the open transaction
    at once: read back, the changelog equals the worker's table, and each
    partition's highest source position header is the group's committed offset."""
    h = live(partitions=2, engine="rdkafka")
    events = h.scenario_events(n_keys=60, epochs=3, seed=11)
    assert len(events) < ENCODE_AT_ONCE_BELOW  # every batch is a small one
    h.produce(events)
    engine = _engine(h, tmp_path)
    with _running(engine):
        h.wait_all_committed(timeout=60)
        table = dict(engine.values)  # the table is closed with the engine
    state, positions = _changelog(h, engine)
    assert len(table) == 60
    assert state == table
    assert positions == h.committed()


def _commit_state(h: LiveHarness, changelog: str, key: bytes, value: bytes, offset: int) -> None:
    """What a previous owner's committed transaction leaves: ``key``'s state
    on changelog partition 0, its source position header ``offset``, and the
    group's offset of events partition 0 at ``offset``."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    from streams.live.changelog import source_position_header

    p = Producer({"bootstrap.servers": h.bootstrap, "transactional.id": f"{h.app_id}-previous"})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(changelog, value, key, partition=0, headers=source_position_header(offset))
    group = Consumer({"bootstrap.servers": h.bootstrap, "group.id": h.app_id})
    try:
        meta = group.consumer_group_metadata()
    finally:
        group.close()
    p.send_offsets_to_transaction([TopicPartition(h.events, 0, offset)], meta, 30)
    p.commit_transaction(30)


def _open_changelog_txn(
    h: LiveHarness, changelog: str, key: bytes, value: bytes, offset: int
) -> Any:
    """A producer with a transaction open on changelog partition 0 (one
    record of ``key``, source position header ``offset``), no offsets sent."""
    from confluent_kafka import Producer

    from streams.live.changelog import source_position_header

    p = Producer(
        {
            "bootstrap.servers": h.bootstrap,
            "transactional.id": f"{h.app_id}-open",
            "transaction.timeout.ms": 120_000,
        }
    )
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(changelog, value, key, partition=0, headers=source_position_header(offset))
    assert p.flush(30) == 0
    return p


def test_a_transaction_open_past_the_committed_offsets_is_not_waited_for(
    live: Live, tmp_path: Path
) -> None:
    """A departed owner's transaction open on the changelog, its offsets never
    sent: the restore reads up to the last stable offset without waiting for
    its abort (it is still open afterwards), and restores none of its records."""
    h = live(partitions=1, engine="rdkafka")
    engine = _engine(h, tmp_path)
    _commit_state(h, engine.changelog, b"k1", b"v1", 5)
    zombie = _open_changelog_txn(h, engine.changelog, b"k2", b"v2", 9)
    try:
        engine.restorer.restore([0], engine.restorer.committed([0]))
        assert dict(engine.values) == {b"k1": b"v1"}
        assert engine.restorer.open_changelog([0]), "the restore waited for the abort"
    finally:
        zombie.abort_transaction(30)
        engine.consumer.close()


@pytest.mark.parametrize("committed", [9, -1001], ids=["past-the-header", "none"])
def test_a_transaction_the_committed_offsets_may_count_is_waited_for(
    live: Live, tmp_path: Path, committed: int
) -> None:
    """A transaction open on the changelog while the committed offset is past
    every visible source position header (a committed transaction whose markers
    are still on their way looks so), or no offset is committed (the new
    partitions after ``fencewatch migrate``): the restore waits for it to end
    and restores its records once it commits."""
    from confluent_kafka import TopicPartition

    h = live(partitions=1, engine="rdkafka")
    engine = _engine(h, tmp_path)
    _commit_state(h, engine.changelog, b"k1", b"v1", 5)
    late = _open_changelog_txn(h, engine.changelog, b"k2", b"v2", 9)
    commit = threading.Timer(1.0, late.commit_transaction, args=(30,))
    commit.start()
    try:
        engine.restorer.restore([0], [TopicPartition(h.events, 0, committed)])
        assert dict(engine.values) == {b"k1": b"v1", b"k2": b"v2"}
    finally:
        commit.join(30)
        engine.consumer.close()
