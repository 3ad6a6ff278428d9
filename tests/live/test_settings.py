"""Live settings: environment, flags, validation and redaction."""

from __future__ import annotations

import pytest

from streams.errors import ConfigError
from streams.live.settings import settings_from_env


def test_defaults_follow_the_spec_topic_names() -> None:
    """Only bootstrap servers are required; topics default to the SPEC names."""
    s = settings_from_env({"FENCEWATCH_BOOTSTRAP_SERVERS": "h:1"})
    assert (s.events_topic, s.findings_topic, s.dlq) == (
        "ownership.events",
        "ownership.findings",
        "ownership.events.dlq",
    )
    assert s.exactly_once and s.store == "memory://" and s.metrics_port == 0


def test_flags_override_environment() -> None:
    """A CLI value wins over its FENCEWATCH_* variable; None means not given."""
    env = {"FENCEWATCH_BOOTSTRAP_SERVERS": "h:1", "FENCEWATCH_EVENTS_TOPIC": "a"}
    s = settings_from_env(env, {"events_topic": "b", "findings_topic": None})
    assert s.events_topic == "b" and s.dlq == "b.dlq" and s.findings_topic == "ownership.findings"


def test_missing_bootstrap_is_an_error() -> None:
    """Without bootstrap servers the settings are refused with the flag's name."""
    with pytest.raises(ConfigError, match="bootstrap"):
        settings_from_env({})


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("FENCEWATCH_STORE", "redis://"),
        ("FENCEWATCH_COMMIT_INTERVAL", "0"),
        ("FENCEWATCH_PARTITIONS", "zero"),
        ("FENCEWATCH_SECURITY_PROTOCOL", "SASL_SSL"),
        ("FENCEWATCH_EXACTLY_ONCE", "maybe"),
        ("FENCEWATCH_METRICS_PORT", "70000"),
    ],
)
def test_bad_values_are_refused(name: str, value: str) -> None:
    """An out-of-range or unparsable setting raises ConfigError."""
    with pytest.raises(ConfigError):
        settings_from_env({"FENCEWATCH_BOOTSTRAP_SERVERS": "h:1", name: value})


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0.5", "transaction timeout must be within 1..900 seconds"),
        ("901", "transaction timeout must be within 1..900 seconds"),
        ("ten", "FENCEWATCH_TRANSACTION_TIMEOUT"),
    ],
)
def test_a_bad_transaction_timeout_is_refused_by_name(value: str, message: str) -> None:
    """The transaction timeout is checked when the settings are made, the error naming it."""
    env = {"FENCEWATCH_BOOTSTRAP_SERVERS": "h:1", "FENCEWATCH_TRANSACTION_TIMEOUT": value}
    with pytest.raises(ConfigError, match=message):
        settings_from_env(env)


def test_the_transaction_timeout_must_outlast_the_commit_interval() -> None:
    """On the rdkafka engine a commit interval as long as the transaction
    timeout is refused (the broker would abort every transaction); the faust
    engine, whose producers keep their own timeout, takes it."""
    env = {"FENCEWATCH_BOOTSTRAP_SERVERS": "h:1"}
    longer = {"transaction_timeout": 5.0, "commit_interval": 5.0}
    with pytest.raises(ConfigError, match="longer than the commit interval"):
        settings_from_env(env, {**longer, "engine": "rdkafka"})
    assert settings_from_env(env, {**longer, "engine": "faust"}).commit_interval == 5.0


def test_the_transaction_timeout_is_read_from_flag_and_environment() -> None:
    """--transaction-timeout wins over FENCEWATCH_TRANSACTION_TIMEOUT; default 10 s."""
    env = {"FENCEWATCH_BOOTSTRAP_SERVERS": "h:1", "FENCEWATCH_TRANSACTION_TIMEOUT": "30"}
    assert settings_from_env({"FENCEWATCH_BOOTSTRAP_SERVERS": "h:1"}).transaction_timeout == 10.0
    assert settings_from_env(env).transaction_timeout == 30.0
    assert settings_from_env(env, {"transaction_timeout": 60.0}).transaction_timeout == 60.0


def test_credentials_never_appear_in_repr() -> None:
    """The SASL password and SSL key password are redacted in repr/str."""
    env = {
        "FENCEWATCH_BOOTSTRAP_SERVERS": "h:1",
        "FENCEWATCH_SECURITY_PROTOCOL": "sasl_ssl",
        "FENCEWATCH_SASL_MECHANISM": "SCRAM-SHA-512",
        "FENCEWATCH_SASL_USERNAME": "svc",
        "FENCEWATCH_SASL_PASSWORD": "hunter2-secret",
        "FENCEWATCH_SSL_KEY_PASSWORD": "keypass-secret",
    }
    s = settings_from_env(env)
    conn = s.connection
    assert conn.security_protocol == "SASL_SSL" and conn.sasl_password == "hunter2-secret"
    for text in (repr(s), str(s), repr(s.connection), f"{s}"):
        assert "hunter2" not in text and "keypass" not in text
        assert "svc" in text


def test_engine_defaults_to_rdkafka_and_is_read_from_the_environment() -> None:
    """FENCEWATCH_ENGINE picks the engine (rdkafka when unset); a flag wins."""
    base = {"FENCEWATCH_BOOTSTRAP_SERVERS": "h:1"}
    assert settings_from_env(base).engine == "rdkafka"
    assert settings_from_env({**base, "FENCEWATCH_ENGINE": "faust"}).engine == "faust"
    flagged = settings_from_env({**base, "FENCEWATCH_ENGINE": "faust"}, {"engine": "rdkafka"})
    assert flagged.engine == "rdkafka"


def test_an_unknown_engine_is_one_clear_error() -> None:
    """An unknown engine is refused naming the setting and the engines there are."""
    with pytest.raises(ConfigError, match="engine must be one of faust, rdkafka"):
        settings_from_env(
            {"FENCEWATCH_BOOTSTRAP_SERVERS": "h:1", "FENCEWATCH_ENGINE": "kafka-streams"}
        )


@pytest.mark.parametrize("store", ["memory://", "rocksdb://"])
def test_both_engines_take_both_stores(store: str) -> None:
    """rocksdb:// and memory:// are settings of the rdkafka engine as of the faust one."""
    for engine in ("faust", "rdkafka"):
        s = settings_from_env(
            {
                "FENCEWATCH_BOOTSTRAP_SERVERS": "h:1",
                "FENCEWATCH_ENGINE": engine,
                "FENCEWATCH_STORE": store,
            }
        )
        assert (s.engine, s.store) == (engine, store)


@pytest.mark.parametrize(
    ("env", "line"),
    [
        (
            {"FENCEWATCH_ENGINE": "flink"},
            "engine must be one of faust, rdkafka (--engine or FENCEWATCH_ENGINE), got 'flink'",
        ),
        (
            {"FENCEWATCH_STORE": "redis://"},
            "store must be memory:// or rocksdb:// (--store or FENCEWATCH_STORE), got 'redis://'",
        ),
        (
            {"FENCEWATCH_STORE": "redis://app:s3cret@cache:6379/0"},
            "store must be memory:// or rocksdb:// (--store or FENCEWATCH_STORE), "
            "got 'redis://***@cache:6379/0'",
        ),
    ],
    ids=["engine", "store", "store-with-password"],
)
def test_a_bad_engine_or_store_names_the_variable_and_echoes_the_value(
    env: dict[str, str], line: str
) -> None:
    """The error names the flag and variable and says what was given (a password masked)."""
    with pytest.raises(ConfigError) as caught:
        settings_from_env({"FENCEWATCH_BOOTSTRAP_SERVERS": "h:1", **env})
    assert str(caught.value) == line


def test_run_with_a_bad_store_flag_is_that_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """fencewatch run --store redis://: exit 2, one line echoing it, before any connection."""
    from streams.cli import main

    assert main(["run", "--bootstrap-servers", "127.0.0.1:1", "--store", "redis://"]) == 2
    assert capsys.readouterr().err == (
        "fencewatch run: store must be memory:// or rocksdb:// (--store or FENCEWATCH_STORE), "
        "got 'redis://'\n"
    )


def test_the_state_cache_is_read_from_flag_and_environment() -> None:
    """--state-cache-keys wins over FENCEWATCH_STATE_CACHE_KEYS; default 10,000."""
    env = {"FENCEWATCH_BOOTSTRAP_SERVERS": "h:1", "FENCEWATCH_STATE_CACHE_KEYS": "50000"}
    assert settings_from_env({"FENCEWATCH_BOOTSTRAP_SERVERS": "h:1"}).state_cache_keys == 10_000
    assert settings_from_env(env).state_cache_keys == 50_000
    assert settings_from_env(env, {"state_cache_keys": 0}).state_cache_keys == 0


@pytest.mark.parametrize(
    ("value", "message"),
    [("-1", "--state-cache-keys .* must be 0 or more, got -1"), ("many", "STATE_CACHE_KEYS")],
)
def test_a_bad_state_cache_is_refused_by_name(value: str, message: str) -> None:
    """A negative or unparsable cache size is one error naming the setting."""
    env = {"FENCEWATCH_BOOTSTRAP_SERVERS": "h:1", "FENCEWATCH_STATE_CACHE_KEYS": value}
    with pytest.raises(ConfigError, match=message):
        settings_from_env(env)


def test_both_engines_processor_gets_the_state_cache_size() -> None:
    """The processor both engines build (processor_for) holds the configured cache size."""
    from streams.live.processor import processor_for

    env = {"FENCEWATCH_BOOTSTRAP_SERVERS": "h:1", "FENCEWATCH_STATE_CACHE_KEYS": "123"}
    assert processor_for(settings_from_env(env)).cache_keys == 123


def test_every_setting_has_a_variable_and_a_flag() -> None:
    """Each LiveSettings field is read from a FENCEWATCH_* variable and a `run` flag
    (the event size limit is a variable only, as docs/live.md says): a field
    without them is a setting no one can set, as --state-cache-keys was."""
    import dataclasses

    from streams.cli.run import _SETTING_ARGS
    from streams.live.settings import _ENV, LiveSettings

    fields = {f.name for f in dataclasses.fields(LiveSettings)} - {"connection"}
    assert fields - {name for name, _var, _type in _ENV} == set()
    assert fields - set(_SETTING_ARGS) == {"max_event_bytes"}
