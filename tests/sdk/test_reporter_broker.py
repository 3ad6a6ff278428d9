"""The SDK and its broker, as careful as the CLI: settings checked when made,
a wrong broker is one error within the connect timeout, and a lost broker is
one log line when it goes and one when it is back, never one per librdkafka
retry; undelivered evidence is reported once, with its count."""

from __future__ import annotations

import logging
import socket
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from streams.errors import BrokerError, ConfigError
from streams.kafka.admin import TopicAdmin
from streams.kafka.connection import KafkaConnection
from streams.kafka.errors import BrokerUnreachable
from streams.kafka.topics import TopicSpec
from streams.sdk import OwnershipReporter, ReporterSettings
from streams.sdk.reporter import SDK_LOGGER


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again: nothing listens here


@pytest.fixture
def silent_broker() -> Iterator[str]:
    """An address that accepts TCP connections and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)  # the kernel completes handshakes; nobody reads
        yield f"127.0.0.1:{s.getsockname()[1]}"


def _client_lines(caplog: pytest.LogCaptureFixture, err: str) -> list[str]:
    """librdkafka's own lines, in the log or on stderr."""
    logged = [r.getMessage() for r in caplog.records if r.name.startswith("streams.kafka")]
    return logged + [line for line in err.splitlines() if "rdkafka" in line or "FAIL" in line]


@pytest.mark.parametrize(
    ("field", "changes"),
    [
        ("bootstrap_servers", {"bootstrap_servers": "nohostport"}),
        ("bootstrap_servers", {"bootstrap_servers": ""}),
        ("bootstrap_servers", {"bootstrap_servers": 9092}),
        ("worker_id", {"worker_id": ""}),
        ("worker_id", {"worker_id": "w" * 257}),
        ("topic", {"topic": "ownership events"}),
        ("run_id", {"run_id": ""}),
        ("linger_ms", {"linger_ms": -1}),
        ("linger_ms", {"linger_ms": 5.5}),
        ("delivery_timeout_ms", {"delivery_timeout_ms": 0}),
        ("queue_full_wait_s", {"queue_full_wait_s": -1}),
        ("connect_timeout_s", {"connect_timeout_s": 0}),
        ("extra", {"extra": "linger.ms=5"}),
        ("check_broker", {"check_broker": "yes"}),
    ],
)
def test_settings_are_validated_when_made(field: str, changes: dict[str, Any]) -> None:
    """A bad ReporterSettings field raises ConfigError (a ValueError) in one
    line naming that field, before any client exists."""
    values: dict[str, Any] = {"bootstrap_servers": "127.0.0.1:9092", "worker_id": "alpha"}
    values.update(changes)
    with pytest.raises(ConfigError) as info:
        ReporterSettings(**values)
    assert str(info.value).startswith(f"ReporterSettings.{field}: ")
    assert "\n" not in str(info.value)
    assert isinstance(info.value, ValueError)


def test_a_refused_broker_is_one_error_at_construction(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    """A reporter pointed at a port nobody listens on raises BrokerUnreachable
    naming the address at once, and no librdkafka line is written."""
    caplog.set_level(logging.WARNING)
    address = f"127.0.0.1:{_closed_port()}"
    with pytest.raises(BrokerUnreachable) as info:
        OwnershipReporter(ReporterSettings(address, "alpha"))
    assert str(info.value) == f"cannot connect to broker {address}: connection refused"
    assert _client_lines(caplog, capfd.readouterr().err) == []


def test_a_silent_broker_is_one_error_within_the_connect_timeout(
    silent_broker: str, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    """A broker that accepts TCP but never answers fails the construction with
    one BrokerUnreachable line naming it, bounded by connect_timeout_s."""
    caplog.set_level(logging.WARNING)
    started = time.monotonic()
    with pytest.raises(BrokerUnreachable) as info:
        OwnershipReporter(ReporterSettings(silent_broker, "alpha", connect_timeout_s=1.0))
    assert time.monotonic() - started < 1.0 + 4.0  # the timeout, plus a loaded machine's slack
    assert str(info.value).startswith(f"no answer from broker {silent_broker} within 1 s")
    assert "\n" not in str(info.value)
    assert _client_lines(caplog, capfd.readouterr().err) == []


def test_the_otel_forwarder_checks_its_broker_too() -> None:
    """OwnershipSpanProcessor.to_kafka with a wrong broker raises BrokerUnreachable
    at once instead of forwarding spans into a producer that never connects."""
    from streams.integrations.otel import OwnershipSpanProcessor

    address = f"127.0.0.1:{_closed_port()}"
    with pytest.raises(BrokerUnreachable, match=f"cannot connect to broker {address}"):
        OwnershipSpanProcessor.to_kafka(address)


def test_undelivered_events_are_reported_once_with_their_count(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    """Five events that can never be delivered (no broker, check off): one
    'lost' line, no librdkafka line, one on_undelivered(5, ...) call, one
    BrokerError saying 5, and stats().undelivered == 5."""
    caplog.set_level(logging.WARNING)
    reported: list[int] = []
    rep = OwnershipReporter(
        ReporterSettings(
            f"127.0.0.1:{_closed_port()}",
            "alpha",
            delivery_timeout_ms=1500,
            linger_ms=0,
            check_broker=False,
        ),
        on_undelivered=lambda count, errors: reported.append(count),
    )
    for _ in range(5):
        rep.progress("docs/undelivered", 1)
    with pytest.raises(BrokerError, match=r"^5 event\(s\) were not delivered") as info:
        rep.flush(timeout=30)
    assert info.value.code == "_DELIVERY"
    assert reported == [5]
    stats = rep.stats()
    assert (stats.published, stats.delivered, stats.undelivered, stats.broker_up) == (
        5,
        0,
        5,
        False,
    )
    rep.close()  # nothing new: no second report
    assert reported == [5]
    sdk_lines = [r.getMessage() for r in caplog.records if r.name == SDK_LOGGER.name]
    assert len(sdk_lines) == 1 and "lost the broker" in sdk_lines[0]
    assert _client_lines(caplog, capfd.readouterr().err) == []


# Two broker starts on the shared machine (about a minute): with the other
# broker restart tests, in `make test-faults`.
@pytest.mark.faults
def test_a_broker_lost_and_back_is_two_lines_and_one_undelivered_report(
    restartable_kafka: Any,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """A reporter whose broker stops and starts again: exactly one 'lost' and
    one 'back' line (and on_broker calls), the events sent while it was away
    reported once with their count, none of librdkafka's retries in the log
    or on stderr, and delivery resumes."""
    caplog.set_level(logging.WARNING)
    bootstrap = restartable_kafka.bootstrap
    topic = f"sdk-lost-back-{uuid.uuid4().hex[:10]}"
    TopicAdmin(KafkaConnection(bootstrap), timeout_s=30).ensure([TopicSpec(topic, 1, -1, {})])
    links: list[bool] = []
    reported: list[int] = []
    rep = OwnershipReporter(
        ReporterSettings(bootstrap, "alpha", topic=topic, delivery_timeout_ms=3000, linger_ms=0),
        on_broker=lambda up, detail: links.append(up),
        on_undelivered=lambda count, errors: reported.append(count),
    )
    try:
        rep.progress("docs/lost-back", 1)
        rep.flush(timeout=30)
        restartable_kafka.stop()
        try:
            for _ in range(3):
                rep.progress("docs/lost-back", 1)
            with pytest.raises(BrokerError, match=r"^3 event\(s\) were not delivered"):
                rep.flush(timeout=30)
        finally:
            restartable_kafka.start()
        rep.progress("docs/lost-back", 1)
        rep.flush(timeout=60)
    finally:
        rep.close()
    assert links == [False, True]
    assert reported == [3]
    stats = rep.stats()
    assert (stats.published, stats.delivered, stats.undelivered, stats.broker_up) == (
        5,
        2,
        3,
        True,
    )
    sdk_lines = [r.getMessage() for r in caplog.records if r.name == SDK_LOGGER.name]
    assert len(sdk_lines) == 2, sdk_lines
    assert "lost the broker" in sdk_lines[0] and sdk_lines[1].endswith(f"{bootstrap} is back")
    assert _client_lines(caplog, capfd.readouterr().err) == []
