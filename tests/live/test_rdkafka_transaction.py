"""The rdkafka engine's transaction unit alone (streams/live/rdkafka/transaction.py), on a
broker, without the engine's loop or a group member: a transaction's records and offsets
commit together, an aborted one publishes nothing, and a fenced producer is replaced."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from streams.live.changelog import changelog_topic
from streams.live.metrics import LiveMetrics
from streams.live.processor import OutRecord
from streams.live.rdkafka.transaction import TransactionUnit
from streams.live.settings import settings_from_env
from tests.live.conftest import LiveHarness

Live = Callable[..., LiveHarness]


@pytest.fixture
def unit(live: Live, tmp_path: Path) -> Iterator[tuple[LiveHarness, TransactionUnit, list[Any]]]:
    """A transaction unit on a fresh harness's topics. Its failures are handled as the
    engine's ``_failed`` does (``give_up``) and collected: (during, what, code, stale)."""
    from confluent_kafka import Consumer

    h = live(partitions=1, engine="rdkafka")
    settings = settings_from_env({**h.env(), "FENCEWATCH_DATA_DIR": str(tmp_path / "data")})
    client = settings.connection.librdkafka()
    consumer = Consumer({**client, "group.id": settings.app_id, "enable.auto.commit": False})
    failures: list[Any] = []

    def on_failure(exc: BaseException, during: str, *, events: int | None = None) -> None:
        failures.append((during, *txn.give_up(exc, during)))

    txn = TransactionUnit(
        settings,
        client,
        consumer,
        LiveMetrics(),
        txn_id=f"{settings.app_id}-unit",
        changelog=changelog_topic(settings.app_id),
        on_failure=on_failure,
    )
    try:
        yield h, txn, failures
    finally:
        consumer.close()


def _findings(h: LiveHarness) -> list[bytes | None]:
    """The findings topic's committed values, once the commit's markers are written (the
    last stable offset moves after commit_transaction returns), within 30 s."""
    deadline = time.monotonic() + 30
    while True:
        values = [r.value for r in h.read(h.findings)]
        if values or time.monotonic() > deadline:
            return values
        time.sleep(0.2)


def _process(txn: TransactionUnit, h: LiveHarness, offset: int, value: bytes) -> None:
    """What the loop does with one processed event: its finding into the open transaction,
    its offset to commit."""
    if not txn.begun:
        txn.producer.begin_transaction()
        txn.begun = True
    txn.produce(OutRecord(h.findings, b"k", value))
    txn.txn_offsets[0] = offset + 1
    txn.txn_events += 1
    txn.txn_open = True


def test_a_transaction_commits_its_records_and_its_offsets_together(
    unit: tuple[LiveHarness, TransactionUnit, list[Any]],
) -> None:
    """start_commit then a blocking settle: the finding is visible to read_committed readers
    and the group's committed offset is the one after the event."""
    h, txn, failures = unit
    _process(txn, h, 6, b"one")
    txn.start_commit()
    assert txn.pending is not None and not txn.txn_open  # the loop may go on meanwhile
    assert txn.settle(block=True) is True
    assert failures == []
    assert _findings(h) == [b"one"]
    assert h.committed() == {0: 7}
    assert txn.last_end == "committed"


def test_an_aborted_transaction_publishes_nothing(
    unit: tuple[LiveHarness, TransactionUnit, list[Any]],
) -> None:
    """abort then clear_txn: the finding is never visible, no offset is committed, and the
    next transaction commits on the same producer."""
    h, txn, failures = unit
    _process(txn, h, 0, b"aborted")
    txn.abort()
    txn.clear_txn()
    assert txn.last_end == "aborted" and not txn.begun
    _process(txn, h, 1, b"kept")
    assert txn.commit() is True
    assert failures == []
    assert _findings(h) == [b"kept"]
    assert h.committed() == {0: 2}


def test_a_producer_fenced_by_its_successor_is_replaced(
    unit: tuple[LiveHarness, TransactionUnit, list[Any]],
) -> None:
    """A second producer with the same transactional id fences the unit's: the commit fails,
    give_up replaces the producer and calls the generation over, the transaction is
    forgotten, and the new producer commits the next one."""
    from confluent_kafka import Producer

    h, txn, failures = unit
    _process(txn, h, 0, b"fenced")
    successor = Producer({"bootstrap.servers": h.bootstrap, "transactional.id": txn.txn_id})
    successor.init_transactions(30)
    old = txn.producer
    txn.start_commit()
    assert txn.settle(block=True) is False
    [(during, what, _code, stale)] = failures
    assert (during, stale) == ("committing", True)
    assert what.startswith("producer fenced by a newer owner")
    assert txn.producer is not old and not txn.txn_open and txn.txn_events == 0
    _process(txn, h, 1, b"after")
    assert txn.commit() is True
    assert _findings(h) == [b"after"]
    assert h.committed() == {0: 2}


def test_the_commits_changelog_and_status_records_as_produced(live: Live, tmp_path: Path) -> None:
    """The transaction's kept changelog records go to their source partition, the first of
    each partition alone with the source position header (the transaction's offset), the
    rest without headers; its deferred status record to the producer's partitioner."""
    from confluent_kafka import Consumer

    from streams.kafka.admin import TopicAdmin
    from streams.live.changelog import SOURCE_POSITION_HEADER, load_changelog
    from streams.live.rdkafka.run import _ensure_changelog

    h = live(partitions=2, engine="rdkafka")
    settings = settings_from_env({**h.env(), "FENCEWATCH_DATA_DIR": str(tmp_path / "data")})
    _ensure_changelog(settings, 2, TopicAdmin(settings.connection))
    client = settings.connection.librdkafka()
    consumer = Consumer({**client, "group.id": settings.app_id, "enable.auto.commit": False})
    failures: list[Any] = []
    changelog = changelog_topic(settings.app_id)
    txn = TransactionUnit(
        settings,
        client,
        consumer,
        LiveMetrics(),
        txn_id=f"{settings.app_id}-unit",
        changelog=changelog,
        on_failure=lambda exc, during, events=None: failures.append((during, exc)),
    )
    try:
        txn.producer.begin_transaction()
        txn.begun = True
        states = {(f"k{i}".encode(), i % 2): f"state-{i}".encode() for i in range(6)}
        txn.changes.update(states)
        txn.deferred[b"k0"] = OutRecord(h.status, b"k0", b"status-0")
        txn.txn_offsets.update({0: 11, 1: 22})
        txn.txn_events, txn.txn_open = 6, True
        txn.start_commit()
        assert txn.settle(block=True) is True
    finally:
        consumer.close()
    assert failures == []
    # The last stable offset moves once the commit's markers are written.
    deadline = time.monotonic() + 30
    while len(records := h.read_with_headers(changelog)) < 6 and time.monotonic() < deadline:
        time.sleep(0.2)
    loaded: dict[tuple[int, bytes], bytes | None] = {}
    result = load_changelog(
        client,
        changelog,
        {0: None, 1: None},
        lambda p, k, v: loaded.__setitem__((p, k), v),
        positions=True,
    )
    assert loaded == {(p, k): v for (k, p), v in states.items()}
    assert result.positions == {0: 11, 1: 22}
    tagged = [hdrs for _k, _v, hdrs in records if hdrs]
    assert sorted(t[SOURCE_POSITION_HEADER] for t in tagged) == ["11", "22"]
    assert [(r.key, r.value) for r in h.read(h.status)] == [(b"k0", b"status-0")]
