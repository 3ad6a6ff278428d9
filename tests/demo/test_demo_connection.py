"""`fencewatch demo` takes the connection flags of every Kafka command and hands the
connection to its children through FENCEWATCH_* (issue 19 item 1): it read
KAFKA_BOOTSTRAP on its own and ignored the security settings."""

from __future__ import annotations

import shutil

import pytest

from streams.cli import main
from streams.demo.session import DemoSession, DemoSettings
from streams.kafka.connection import KafkaConnection


def _clear_connection_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("KAFKA_BOOTSTRAP", "FENCEWATCH_BOOTSTRAP_SERVERS", "FENCEWATCH_SASL_PASSWORD"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("demo", ["live", "split-brain"])
def test_demo_security_flags_are_checked_like_every_command(
    demo: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--security-protocol SASL_SSL without a password: exit 2, the connection's one line."""
    _clear_connection_env(monkeypatch)
    status = main(
        ["demo", demo, "--bootstrap-servers", "127.0.0.1:1", "--security-protocol", "SASL_SSL",
         "--sasl-mechanism", "PLAIN", "--sasl-username", "u"]
    )  # fmt: skip
    assert status == 2
    assert capsys.readouterr().err == (
        "fencewatch demo: SASL needs a username and a password (FENCEWATCH_SASL_PASSWORD)\n"
    )


def test_demo_does_not_read_the_test_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """KAFKA_BOOTSTRAP alone names no broker for the demo (it is the test harness's)."""
    _clear_connection_env(monkeypatch)
    monkeypatch.setenv("KAFKA_BOOTSTRAP", "127.0.0.1:1")
    assert main(["demo", "live"]) == 2
    assert "bootstrap servers are required" in capsys.readouterr().err


def test_children_get_the_demo_connection_through_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The processor and workers inherit the demo's connection as FENCEWATCH_* (the password
    included, never on a command line); a connection variable the demo did not use is dropped."""
    monkeypatch.setenv("FENCEWATCH_SSL_CAFILE", "/stale/ca.pem")
    conn = KafkaConnection(
        "b1:9093", security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-512",
        sasl_username="svc", sasl_password="pw-secret", connect_timeout=4.5,
    )  # fmt: skip
    session = DemoSession(DemoSettings(conn), "test", lambda _line: None)
    try:
        env = session.child_env()
    finally:
        shutil.rmtree(session.tmp, ignore_errors=True)
    assert env["FENCEWATCH_BOOTSTRAP_SERVERS"] == "b1:9093"
    assert env["FENCEWATCH_SASL_PASSWORD"] == "pw-secret"
    assert "FENCEWATCH_SSL_CAFILE" not in env
    assert KafkaConnection.from_env(env) == conn
