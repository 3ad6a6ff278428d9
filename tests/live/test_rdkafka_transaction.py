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
