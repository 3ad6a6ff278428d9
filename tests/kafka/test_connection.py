"""One connection-settings type and one error translation for every Kafka client."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from streams.errors import BrokerError, ConfigError
from streams.kafka.connection import (
    KafkaConnection,
    connection_from_env,
    require_connection,
    split_servers,
)
from streams.kafka.errors import (
    AuthenticationFailed,
    AuthorizationFailed,
    BrokerUnreachable,
    ProducerFenced,
    TopicMissing,
    from_kafka_error,
    is_fenced,
    kafka_errors,
    topic_unavailable,
    translate,
)
from streams.kafka.logs import configure_client_logs

SASL_ENV = {
    "FENCEWATCH_BOOTSTRAP_SERVERS": "b1:9093,b2:9093",
    "FENCEWATCH_SECURITY_PROTOCOL": "sasl_ssl",
    "FENCEWATCH_SASL_MECHANISM": "SCRAM-SHA-512",
    "FENCEWATCH_SASL_USERNAME": "svc",
    "FENCEWATCH_SASL_PASSWORD": "hunter2-secret",
    "FENCEWATCH_SSL_KEY_PASSWORD": "keypass-secret",
    "FENCEWATCH_SSL_CAFILE": "/etc/ca.pem",
    "FENCEWATCH_KAFKA_CONNECT_TIMEOUT": "4.5",
}


def test_environment_and_flags_build_both_client_configurations() -> None:
    """FENCEWATCH_* variables (flags win) give the librdkafka dict and the aiokafka kwargs."""
    conn = connection_from_env(SASL_ENV, {"sasl_username": "flag-user", "ssl_cafile": None})
    rd = conn.librdkafka(group_id="g")
    assert rd["bootstrap.servers"] == "b1:9093,b2:9093"
    assert rd["security.protocol"] == "SASL_SSL" and rd["sasl.mechanism"] == "SCRAM-SHA-512"
    assert rd["sasl.username"] == "flag-user" and rd["sasl.password"] == "hunter2-secret"
    assert rd["ssl.ca.location"] == "/etc/ca.pem" and rd["ssl.key.password"] == "keypass-secret"
    assert rd["group.id"] == "g" and rd["socket.connection.setup.timeout.ms"] == 4500
    ak = conn.replace(ssl_cafile=None).aiokafka_kwargs()
    assert ak.pop("ssl_context") is not None
    assert ak == {
        "bootstrap_servers": ["b1:9093", "b2:9093"],
        "security_protocol": "SASL_SSL",
        "request_timeout_ms": 4500,
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "flag-user",
        "sasl_plain_password": "hunter2-secret",
    }


def test_secrets_never_appear_in_repr_or_str() -> None:
    """Passwords (and secret-looking --kafka-config values) are redacted in repr and str."""
    conn = connection_from_env(SASL_ENV, extra={"sasl.oauthbearer.client.secret": "s3cr3t"})
    for text in (repr(conn), str(conn), f"{conn}", repr(conn.replace(connect_timeout=1.0))):
        assert "hunter2" not in text and "keypass" not in text and "s3cr3t" not in text
        assert "svc" in text and "b1:9093" in text


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ({}, "bootstrap servers are required"),
        ({"FENCEWATCH_BOOTSTRAP_SERVERS": "nohost"}, "not HOST:PORT"),
        (
            {"FENCEWATCH_BOOTSTRAP_SERVERS": "h:1", "FENCEWATCH_SECURITY_PROTOCOL": "tls"},
            "protocol",
        ),
        (
            {"FENCEWATCH_BOOTSTRAP_SERVERS": "h:1", "FENCEWATCH_KAFKA_CONNECT_TIMEOUT": "x"},
            "number",
        ),
        (
            {"FENCEWATCH_BOOTSTRAP_SERVERS": "h:1", "FENCEWATCH_KAFKA_CONNECT_TIMEOUT": "0"},
            "timeout",
        ),
        (
            {"FENCEWATCH_BOOTSTRAP_SERVERS": "h:1", "FENCEWATCH_SECURITY_PROTOCOL": "SASL_SSL"},
            "sasl mechanism",
        ),
    ],
)
def test_bad_connection_settings_name_the_setting(env: dict[str, str], fragment: str) -> None:
    """A missing or bad connection setting raises ConfigError naming it."""
    with pytest.raises(ConfigError, match=fragment):
        connection_from_env(env)


def test_an_unreadable_tls_file_is_a_settings_error() -> None:
    """A CA file that does not exist is named in a ConfigError, not a FileNotFoundError."""
    conn = connection_from_env(SASL_ENV)
    with pytest.raises(ConfigError, match=r"/etc/ca\.pem"):
        conn.aiokafka_kwargs()


def test_split_servers_accepts_ipv6_and_lists() -> None:
    """Bootstrap lists parse into (host, port) pairs, IPv6 brackets included."""
    assert split_servers("a:1, [::1]:9092") == [("a", 1), ("::1", 9092)]


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (KafkaError._TRANSPORT, BrokerUnreachable),
        (KafkaError._ALL_BROKERS_DOWN, BrokerUnreachable),
        (KafkaError._TIMED_OUT, BrokerUnreachable),
        (KafkaError.SASL_AUTHENTICATION_FAILED, AuthenticationFailed),
        (KafkaError.TOPIC_AUTHORIZATION_FAILED, AuthorizationFailed),
        (KafkaError.GROUP_AUTHORIZATION_FAILED, AuthorizationFailed),
        (KafkaError.UNKNOWN_TOPIC_OR_PART, TopicMissing),
        (KafkaError._FENCED, ProducerFenced),
        (KafkaError.PRODUCER_FENCED, ProducerFenced),
        (KafkaError.INVALID_PRODUCER_EPOCH, ProducerFenced),
        (KafkaError.MSG_SIZE_TOO_LARGE, BrokerError),
    ],
)
def test_client_errors_map_to_typed_broker_errors(code: int, kind: type[BrokerError]) -> None:
    """Each confluent-kafka error code becomes its BrokerError subclass, keeping the code name."""
    err = KafkaError(code)
    translated = translate(KafkaException(err), "doing x")
    assert type(translated) is kind
    assert translated.code == err.name() and str(translated).startswith("doing x: ")
    assert type(from_kafka_error(err, "y")) is kind
    assert is_fenced(KafkaException(err)) == (kind is ProducerFenced)


@pytest.mark.parametrize(
    ("raised", "kind", "code"),
    [
        (KafkaException(KafkaError(KafkaError._FENCED)), ProducerFenced, "_FENCED"),
        (KafkaException(KafkaError(KafkaError._TRANSPORT)), BrokerUnreachable, "_TRANSPORT"),
        (
            KafkaException(KafkaError(KafkaError._ALL_BROKERS_DOWN)),
            BrokerUnreachable,
            "_ALL_BROKERS_DOWN",
        ),
        (TimeoutError(), BrokerUnreachable, "_TIMED_OUT"),
    ],
)
def test_kafka_errors_translates_client_exceptions_naming_the_action(
    raised: BaseException, kind: type[BrokerError], code: str
) -> None:
    """A client exception leaving `with kafka_errors(action)` is its typed BrokerError: one
    line that starts with the action, the client's exception not chained."""
    with pytest.raises(kind) as caught, kafka_errors("creating topic t"):
        raise raised
    assert caught.value.code == code
    assert str(caught.value).startswith("creating topic t: ")
    assert "\n" not in str(caught.value)
    assert caught.value.__suppress_context__


def test_kafka_errors_passes_our_errors_and_others_unchanged() -> None:
    """A BrokerError (already typed) and an exception that is not a client's pass as they are."""
    ours = TopicMissing("topic t does not exist", code="UNKNOWN_TOPIC_OR_PART")
    with pytest.raises(TopicMissing) as caught, kafka_errors("x"):
        raise ours
    assert caught.value is ours
    with pytest.raises(KeyError), kafka_errors("x"):
        raise KeyError("k")


def test_a_connection_is_checked_when_made() -> None:
    """KafkaConnection(...) with a bad setting raises ConfigError at construction, naming it;
    nothing needs to validate it again."""
    with pytest.raises(ConfigError, match="is not HOST:PORT"):
        KafkaConnection("nohostport")
    with pytest.raises(ConfigError, match="security protocol"):
        KafkaConnection("h:1", security_protocol="TLS")
    with pytest.raises(ConfigError, match="SASL needs a username"):
        KafkaConnection("h:1", security_protocol="SASL_SSL", sasl_mechanism="PLAIN")


def test_from_env_reads_the_environment_and_to_env_writes_it_back() -> None:
    """KafkaConnection.from_env reads FENCEWATCH_* (flags win); to_env gives a child process
    the same connection, passwords included."""
    conn = KafkaConnection.from_env(SASL_ENV, {"sasl_username": "flag-user"})
    assert conn.sasl_username == "flag-user" and conn.security_protocol == "SASL_SSL"
    assert KafkaConnection.from_env(conn.to_env()) == conn
    assert conn.to_env()["FENCEWATCH_SASL_PASSWORD"] == "hunter2-secret"


def test_a_public_setting_refuses_a_bare_address_in_one_line() -> None:
    """A settings record given a string where a KafkaConnection belongs says so, naming it."""
    require_connection(KafkaConnection("h:1"), "X.connection")
    with pytest.raises(ConfigError, match=r"^X\.connection: must be a KafkaConnection"):
        require_connection("h:1", "X.connection")


def test_aiokafka_errors_map_to_typed_broker_errors() -> None:
    """aiokafka's connection, auth and fencing errors map like librdkafka's."""
    from aiokafka import errors as ae

    assert type(translate(ae.KafkaConnectionError("x"), "a")) is BrokerUnreachable
    assert type(translate(ae.SaslAuthenticationFailed(), "a")) is AuthenticationFailed
    assert type(translate(ae.TopicAuthorizationFailedError(), "a")) is AuthorizationFailed
    assert type(translate(ae.ProducerFenced(), "a")) is ProducerFenced
    assert type(translate(ValueError("other"), "a")) is BrokerError


def test_client_logs_are_quiet_unless_debug() -> None:
    """librdkafka's logger drops even error lines by default and passes them at debug."""
    import logging

    log = logging.getLogger("streams.kafka.librdkafka")
    try:
        configure_client_logs("warning")
        assert not log.isEnabledFor(logging.ERROR)
        configure_client_logs("debug")
        assert log.isEnabledFor(logging.DEBUG)
    finally:
        configure_client_logs("warning")


def test_a_topic_refused_by_an_acl_is_not_reported_missing() -> None:
    """topic_unavailable: no metadata or UNKNOWN_TOPIC_OR_PART is TopicMissing naming topic
    and broker; another metadata error of the topic (an ACL refusal) keeps its own type."""
    missing = topic_unavailable("t", "b:9092")
    assert isinstance(missing, TopicMissing)
    assert str(missing).startswith("topic t does not exist on b:9092")
    unknown = topic_unavailable("t", "b:9092", KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
    assert isinstance(unknown, TopicMissing)
    refused = topic_unavailable("t", "b:9092", KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    assert isinstance(refused, AuthorizationFailed) and refused.code == "TOPIC_AUTHORIZATION_FAILED"


def test_librdkafka_spells_properties_with_dots_but_leaves_python_callbacks_alone() -> None:
    """group_id becomes group.id; on_commit and error_cb (confluent-kafka's own
    settings, not librdkafka's) keep their names, so the client accepts them."""
    from streams.kafka.connection import KafkaConnection

    def callback(*_args: object) -> None:
        return None

    conf = KafkaConnection("127.0.0.1:9092").librdkafka(
        group_id="g", on_commit=callback, enable_auto_commit=False
    )
    assert conf["group.id"] == "g" and conf["enable.auto.commit"] is False
    assert conf["on_commit"] is callback and "on.commit" not in conf
    from confluent_kafka import Consumer

    Consumer(conf).close()  # accepted as a whole
