"""Settings of the live processor: one frozen record, read from CLI flags and
``FENCEWATCH_*`` environment variables (flags win).

Credentials (SASL password, SSL key password) are kept out of ``repr`` and
logs: :meth:`LiveSettings.__repr__` redacts them, and nothing else in
``streams.live`` formats a settings object.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DEFAULT_EVENTS_TOPIC",
    "DEFAULT_FINDINGS_TOPIC",
    "ENV_PREFIX",
    "KafkaSecurity",
    "LiveSettings",
    "SettingsError",
    "settings_from_env",
]

ENV_PREFIX = "FENCEWATCH_"
DEFAULT_EVENTS_TOPIC = "ownership.events"
DEFAULT_FINDINGS_TOPIC = "ownership.findings"
_REDACTED = "'***'"
_STORES = ("memory", "rocksdb")
_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


class SettingsError(ValueError):
    """A setting is missing or out of range; the message names it."""


@dataclass(frozen=True, slots=True)
class KafkaSecurity:
    """Kafka client security, passed through to faust/aiokafka unchanged."""

    protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_key_password: str | None = field(default=None, repr=False)

    def __repr__(self) -> str:
        parts = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            shown = _REDACTED if f.name.endswith("password") and value else repr(value)
            parts.append(f"{f.name}={shown}")
        return f"KafkaSecurity({', '.join(parts)})"

    def validate(self) -> None:
        if self.protocol not in _PROTOCOLS:
            raise SettingsError(f"security protocol must be one of {', '.join(_PROTOCOLS)}")
        if self.protocol.startswith("SASL"):
            if self.sasl_mechanism not in _MECHANISMS:
                raise SettingsError(f"sasl mechanism must be one of {', '.join(_MECHANISMS)}")
            if not self.sasl_username or self.sasl_password is None:
                raise SettingsError("SASL needs a username and a password")


@dataclass(frozen=True, slots=True)
class LiveSettings:
    """Everything the live processor needs; build the app from this only."""

    bootstrap_servers: str
    events_topic: str = DEFAULT_EVENTS_TOPIC
    findings_topic: str = DEFAULT_FINDINGS_TOPIC
    #: ``None``: ``<events_topic>.dlq`` (SPEC §7).
    dlq_topic: str | None = None
    app_id: str = "fencewatch-live"
    #: Partitions of the state table's changelog; must equal the events
    #: topic's. ``None``: read the events topic's count from the broker.
    partitions: int | None = None
    #: Replication of topics this processor creates (changelog included);
    #: 1 suits a single local broker, production wants 3.
    replication: int = 1
    exactly_once: bool = True
    #: Seconds between transaction commits. A finding is visible to
    #: read_committed consumers only when its transaction commits, so this
    #: bounds alerting latency (0.1 s: p99 223-248 ms at 2,000 events/s,
    #: docs/live.md); lower means more transactions on the brokers (each
    #: commit is a few round trips per partition), with no throughput cost
    #: measured between 0.05 and 0.2 s.
    commit_interval: float = 0.1
    #: ``memory://`` (default) or ``rocksdb://`` (rocksdict).
    store: str = "memory://"
    data_dir: str = ".run/live"
    session_timeout: float = 10.0
    heartbeat_interval: float = 3.0
    max_events_per_key: int = 1024
    max_event_bytes: int = 64 * 1024
    #: Decoded key states kept between events (an LRU; the table holds the truth).
    state_cache_keys: int = 10_000
    log_level: str = "info"
    #: Port of the /metrics and /health endpoint; 0 disables it.
    metrics_port: int = 0
    metrics_host: str = "127.0.0.1"
    security: KafkaSecurity = field(default_factory=KafkaSecurity)

    @property
    def dlq(self) -> str:
        return self.dlq_topic or f"{self.events_topic}.dlq"

    @property
    def store_kind(self) -> str:
        return self.store.split("://", 1)[0]

    def __repr__(self) -> str:
        parts = [f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self)]
        return f"LiveSettings({', '.join(parts)})"

    def validate(self) -> LiveSettings:
        if not self.bootstrap_servers.strip():
            raise SettingsError("bootstrap servers are required")
        for name in ("events_topic", "findings_topic", "app_id"):
            if not getattr(self, name):
                raise SettingsError(f"{name} must not be empty")
        if len({self.events_topic, self.findings_topic, self.dlq}) != 3:
            raise SettingsError("events, findings and dead-letter topics must differ")
        if self.partitions is not None and self.partitions < 1:
            raise SettingsError("partitions must be >= 1")
        if self.replication < 1:
            raise SettingsError("replication must be >= 1")
        if not 0.01 <= self.commit_interval <= 60:
            raise SettingsError("commit interval must be within 0.01..60 seconds")
        if self.store_kind not in _STORES or "://" not in self.store:
            raise SettingsError("store must be memory:// or rocksdb://")
        if not 1 <= self.heartbeat_interval < self.session_timeout:
            raise SettingsError("heartbeat interval must be >= 1 s and below the session timeout")
        if self.max_events_per_key < 1 or self.max_event_bytes < 1 or self.state_cache_keys < 0:
            raise SettingsError("limits must be positive")
        if self.log_level.lower() not in _LOG_LEVELS:
            raise SettingsError(f"log level must be one of {', '.join(_LOG_LEVELS)}")
        if not 0 <= self.metrics_port <= 65535:
            raise SettingsError("metrics port must be within 0..65535")
        self.security.validate()
        return self

    def replace(self, **changes: Any) -> LiveSettings:
        return dataclasses.replace(self, **changes)


# (setting name, environment suffix, parser)
def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise SettingsError(f"not a boolean: {text!r}")


_ENV: tuple[tuple[str, str, Any], ...] = (
    ("bootstrap_servers", "BOOTSTRAP_SERVERS", str),
    ("events_topic", "EVENTS_TOPIC", str),
    ("findings_topic", "FINDINGS_TOPIC", str),
    ("dlq_topic", "DLQ_TOPIC", str),
    ("app_id", "APP_ID", str),
    ("partitions", "PARTITIONS", int),
    ("replication", "REPLICATION", int),
    ("exactly_once", "EXACTLY_ONCE", _bool),
    ("commit_interval", "COMMIT_INTERVAL", float),
    ("store", "STORE", str),
    ("data_dir", "DATA_DIR", str),
    ("session_timeout", "SESSION_TIMEOUT", float),
    ("heartbeat_interval", "HEARTBEAT_INTERVAL", float),
    ("max_events_per_key", "MAX_EVENTS_PER_KEY", int),
    ("max_event_bytes", "MAX_EVENT_BYTES", int),
    ("log_level", "LOG_LEVEL", str),
    ("metrics_port", "METRICS_PORT", int),
)
_ENV_SECURITY: tuple[tuple[str, str], ...] = (
    ("protocol", "SECURITY_PROTOCOL"),
    ("sasl_mechanism", "SASL_MECHANISM"),
    ("sasl_username", "SASL_USERNAME"),
    ("sasl_password", "SASL_PASSWORD"),
    ("ssl_cafile", "SSL_CAFILE"),
    ("ssl_certfile", "SSL_CERTFILE"),
    ("ssl_keyfile", "SSL_KEYFILE"),
    ("ssl_key_password", "SSL_KEY_PASSWORD"),
)


def settings_from_env(
    env: Mapping[str, str], overrides: Mapping[str, Any] | None = None
) -> LiveSettings:
    """Settings from ``FENCEWATCH_*`` variables in ``env``, then ``overrides``
    (CLI flags; ``None`` values mean "not given"). Raises :class:`SettingsError`."""
    values: dict[str, Any] = {}
    security: dict[str, Any] = {}
    for name, suffix, parse in _ENV:
        raw = env.get(ENV_PREFIX + suffix)
        if raw is not None and raw != "":
            try:
                values[name] = parse(raw)
            except ValueError as exc:
                raise SettingsError(f"{ENV_PREFIX}{suffix}: {exc}") from None
    for name, suffix in _ENV_SECURITY:
        raw = env.get(ENV_PREFIX + suffix)
        if raw:
            security[name] = raw
    for name, value in (overrides or {}).items():
        if value is None:
            continue
        if name.startswith("security_"):
            security[name.removeprefix("security_")] = value
        else:
            values[name] = value
    if "bootstrap_servers" not in values:
        raise SettingsError(
            f"bootstrap servers are required (--bootstrap-servers or {ENV_PREFIX}BOOTSTRAP_SERVERS)"
        )
    if "protocol" in security:
        security["protocol"] = str(security["protocol"]).upper()
    values["security"] = KafkaSecurity(**security)
    return LiveSettings(**values).validate()
