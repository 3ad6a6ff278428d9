"""Settings of the live processor: one frozen record, read from CLI flags and
``FENCEWATCH_*`` environment variables (flags win).

The Kafka connection (bootstrap servers, security, connect timeout) is one
:class:`~streams.kafka.connection.KafkaConnection`, read from the same
variables as every other command; its ``repr`` redacts the credentials.
Settings are checked once, when made (:meth:`LiveSettings.validate` runs in
``__post_init__``).
"""

from __future__ import annotations

import dataclasses
import errno
import importlib.util
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streams.errors import ConfigError
from streams.kafka.connection import (
    ENV_PREFIX,
    FIELDS,
    KafkaConnection,
    connection_from_env,
)
from streams.kafka.topics import (
    DEFAULT_EVENTS_TOPIC,
    DEFAULT_FINDINGS_TOPIC,
    DEFAULT_STATUS_TOPIC,
    TopicNames,
    dlq_topic_for,
)

__all__ = [
    "DEFAULT_DATA_DIR",
    "DEFAULT_ENGINE",
    "ENGINES",
    "ENV_PREFIX",
    "LiveSettings",
    "check_metrics_address",
    "prepare_local_state",
    "require_store_extra",
    "settings_from_env",
]

#: Local state of an installed tool: under the directory it is started from
#: (one per worker on a host: give each its own --data-dir).
DEFAULT_DATA_DIR = ".fencewatch/live"
_STORES = ("memory", "rocksdb")
#: ``faust``: faust-streaming (one transactional producer per input
#: partition); ``rdkafka``: confluent-kafka, one transactional producer per
#: worker (docs/live.md, "Engines").
ENGINES = ("faust", "rdkafka")
#: The engine ``fencewatch run`` starts unless told otherwise: rdkafka since it
#: met issue 24's targets (docs/live.md, "Which to pick"); faust until then.
DEFAULT_ENGINE = "rdkafka"
_LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


@dataclass(frozen=True, slots=True)
class LiveSettings:
    """Everything the live processor needs; build the app from this only.
    Checked when made: a bad setting is a :class:`ConfigError` naming it."""

    connection: KafkaConnection
    events_topic: str = DEFAULT_EVENTS_TOPIC
    findings_topic: str = DEFAULT_FINDINGS_TOPIC
    #: ``None``: ``<events_topic>.dlq`` (SPEC §7).
    dlq_topic: str | None = None
    #: The compacted per-workflow status topic (SPEC §8).
    status_topic: str = DEFAULT_STATUS_TOPIC
    #: Write the status topic (off: findings and dead letters only).
    status: bool = True
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
    #: bounds alerting latency (the measured p99 at 0.1 s is in
    #: docs/live.md); lower means more transactions on the brokers (each
    #: commit is a few round trips per partition), with no throughput cost
    #: measured between 0.05 and 0.2 s.
    commit_interval: float = 0.1
    #: ``memory://`` (default) or ``rocksdb://`` (rocksdict).
    store: str = "memory://"
    data_dir: str = DEFAULT_DATA_DIR
    session_timeout: float = 10.0
    heartbeat_interval: float = 3.0
    #: Seconds the broker keeps a worker's transaction open before aborting
    #: it (``transaction.timeout.ms``; rdkafka engine). read_committed readers
    #: see nothing past an open transaction on its partitions, so this bounds
    #: how long a frozen worker's outputs hold them back when no other worker
    #: takes its partitions; one that does fences it at once
    #: (streams/live/rdkafka/takeover.py). Kafka Streams uses 10 s under exactly-once v2.
    transaction_timeout: float = 10.0
    max_events_per_key: int = 1024
    max_event_bytes: int = 64 * 1024
    #: Decoded key states kept between events (least recently used out; full, a
    #: key decoded from the table enters one time in 16; the table holds the truth).
    #: ~4.5 KiB each; fewer than the keys live at once costs a decode per event
    #: of an uncached key (docs/live.md, the settings table).
    state_cache_keys: int = 10_000
    log_level: str = "info"
    #: Port of the /metrics and /health endpoint; 0 disables it.
    metrics_port: int = 0
    #: Address the endpoint binds (0.0.0.0 in a container, to be scraped).
    metrics_host: str = "127.0.0.1"
    #: Which engine runs the processor (:data:`ENGINES`).
    engine: str = DEFAULT_ENGINE
    #: Seconds holding partitions with lag and no commit before /health says
    #: ``stalled``; ``fencewatch run``'s supervisor restarts the engine after
    #: 3 x this (streams/live/supervisor.py).
    stall_timeout: float = 60.0
    #: Run the engine in a child process that ``fencewatch run`` restarts on
    #: a crash or a stall (off: the engine runs in the process itself, for an
    #: orchestrator that restarts it).
    supervise: bool = True

    def __post_init__(self) -> None:
        self.validate()

    @property
    def bootstrap_servers(self) -> str:
        return self.connection.bootstrap_servers

    @property
    def stall_after(self) -> float:
        """Seconds without a commit (partitions with lag) before /health says
        stalled: ``stall_timeout``, and never under 3 commit intervals."""
        return max(self.stall_timeout, 3 * self.commit_interval)

    @property
    def dlq(self) -> str:
        return self.dlq_topic or dlq_topic_for(self.events_topic)

    @property
    def topic_names(self) -> TopicNames:
        return TopicNames(self.events_topic, self.findings_topic, self.dlq, self.status_topic)

    @property
    def store_kind(self) -> str:
        return self.store.split("://", 1)[0]

    def __repr__(self) -> str:
        parts = [f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self)]
        return f"LiveSettings({', '.join(parts)})"

    def validate(self) -> LiveSettings:
        """Raise :class:`ConfigError` naming the first bad setting (the
        connection checked itself when it was made)."""
        for name in ("events_topic", "findings_topic", "status_topic", "app_id"):
            if not getattr(self, name):
                raise ConfigError(f"{name} must not be empty")
        if len(set(self.topic_names.all())) != 4:
            raise ConfigError("events, findings, dead-letter and status topics must differ")
        if self.partitions is not None and self.partitions < 1:
            raise ConfigError("partitions must be >= 1")
        if self.replication < 1:
            raise ConfigError("replication must be >= 1")
        if not 0.01 <= self.commit_interval <= 60:
            raise ConfigError("commit interval must be within 0.01..60 seconds")
        if self.store_kind not in _STORES or "://" not in self.store:
            raise ConfigError(
                "store must be memory:// or rocksdb:// (--store or FENCEWATCH_STORE), "
                f"got {_shown(self.store)!r}"
            )
        if not 1 <= self.transaction_timeout <= 900:
            # 900 s: the broker's default transaction.max.timeout.ms.
            raise ConfigError("transaction timeout must be within 1..900 seconds")
        if self.engine == "rdkafka" and self.transaction_timeout <= self.commit_interval:
            # The broker would abort every transaction before its commit.
            raise ConfigError(
                "transaction timeout must be longer than the commit interval "
                "(the broker aborts a transaction open longer)"
            )
        if not 1 <= self.heartbeat_interval < self.session_timeout:
            raise ConfigError("heartbeat interval must be >= 1 s and below the session timeout")
        if self.max_events_per_key < 8:  # the detector's minimum (streams.core.detector)
            raise ConfigError(
                "--max-events-per-key (FENCEWATCH_MAX_EVENTS_PER_KEY) must be at least 8, "
                f"got {self.max_events_per_key}"
            )
        if self.max_event_bytes < 1:
            raise ConfigError("limits must be positive")
        if self.state_cache_keys < 0:
            raise ConfigError(
                "--state-cache-keys (FENCEWATCH_STATE_CACHE_KEYS) must be 0 or more, "
                f"got {self.state_cache_keys}"
            )
        if self.log_level.lower() not in _LOG_LEVELS:
            raise ConfigError(f"log level must be one of {', '.join(_LOG_LEVELS)}")
        if not 0 <= self.metrics_port <= 65535:
            raise ConfigError("metrics port must be within 0..65535")
        if not self.metrics_host.strip():
            raise ConfigError("metrics host must not be empty")
        if self.engine not in ENGINES:
            raise ConfigError(
                f"engine must be one of {', '.join(ENGINES)} (--engine or FENCEWATCH_ENGINE), "
                f"got {self.engine!r}"
            )
        if not 5 <= self.stall_timeout <= 3600:
            raise ConfigError(
                "stall timeout must be within 5..3600 seconds "
                f"(--stall-timeout or FENCEWATCH_STALL_TIMEOUT), got {self.stall_timeout:g}"
            )
        return self

    def replace(self, **changes: Any) -> LiveSettings:
        return dataclasses.replace(self, **changes)


def _shown(url: str) -> str:
    """``url`` as an error may echo it: a ``user:password@`` part masked (a
    store URL copied from elsewhere may carry one)."""
    scheme, sep, rest = url.partition("://")
    if sep and "@" in rest.split("/", 1)[0]:
        return f"{scheme}://***@{rest.split('@', 1)[1]}"
    return url


# (setting name, environment suffix, parser)
def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"not a boolean: {text!r}")


_ENV: tuple[tuple[str, str, Any], ...] = (
    ("events_topic", "EVENTS_TOPIC", str),
    ("findings_topic", "FINDINGS_TOPIC", str),
    ("dlq_topic", "DLQ_TOPIC", str),
    ("status_topic", "STATUS_TOPIC", str),
    ("status", "STATUS", _bool),
    ("app_id", "APP_ID", str),
    ("partitions", "PARTITIONS", int),
    ("replication", "REPLICATION", int),
    ("exactly_once", "EXACTLY_ONCE", _bool),
    ("commit_interval", "COMMIT_INTERVAL", float),
    ("store", "STORE", str),
    ("data_dir", "DATA_DIR", str),
    ("session_timeout", "SESSION_TIMEOUT", float),
    ("heartbeat_interval", "HEARTBEAT_INTERVAL", float),
    ("transaction_timeout", "TRANSACTION_TIMEOUT", float),
    ("max_events_per_key", "MAX_EVENTS_PER_KEY", int),
    ("max_event_bytes", "MAX_EVENT_BYTES", int),
    ("state_cache_keys", "STATE_CACHE_KEYS", int),
    ("log_level", "LOG_LEVEL", str),
    ("metrics_port", "METRICS_PORT", int),
    ("metrics_host", "METRICS_HOST", str),
    ("engine", "ENGINE", str),
    ("stall_timeout", "STALL_TIMEOUT", float),
    ("supervise", "SUPERVISE", _bool),
)


def settings_from_env(
    env: Mapping[str, str],
    overrides: Mapping[str, Any] | None = None,
    *,
    connection: KafkaConnection | None = None,
) -> LiveSettings:
    """Settings from ``FENCEWATCH_*`` variables in ``env``, then ``overrides``
    (CLI flags by setting name, the connection's by its field name; ``None``
    values mean "not given"). ``connection``: the one the caller already
    made (``fencewatch run`` makes it from its flags); else it is read from
    ``env`` and ``overrides``. Raises :class:`ConfigError`."""
    values: dict[str, Any] = {}
    for name, suffix, parse in _ENV:
        raw = env.get(ENV_PREFIX + suffix)
        if raw is not None and raw != "":
            try:
                values[name] = parse(raw)
            except ValueError as exc:
                raise ConfigError(f"{ENV_PREFIX}{suffix}: {exc}") from None
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    if connection is None:
        connection = connection_from_env(env, {k: v for k, v in given.items() if k in FIELDS})
    values.update({k: v for k, v in given.items() if k not in FIELDS})
    return LiveSettings(connection, **values)


def require_store_extra(settings: LiveSettings) -> None:
    """Raise :class:`ConfigError` with the pip line when the store's extra
    is not installed (rocksdb:// without rocksdict)."""
    if settings.store_kind == "rocksdb" and importlib.util.find_spec("rocksdict") is None:
        raise ConfigError(
            "--store rocksdb:// needs the rocksdb extra: pip install 'fencewatch[rocksdb]'"
        )


def prepare_local_state(settings: LiveSettings) -> Path:
    """Create the data directory with its parents; returns its absolute
    path. Raises :class:`ConfigError` naming a directory that cannot be made.
    (The store's extra is :func:`require_store_extra`, checked before.)"""
    path = Path(settings.data_dir).expanduser().absolute()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"cannot create the data directory {path}: {exc.strerror or exc}"
        ) from None
    return path


_BIND_ERRORS = {
    errno.EADDRINUSE: "address already in use (another process listens on it)",
    errno.EADDRNOTAVAIL: "not an address of this host",
    errno.EACCES: "permission denied",
}


def check_metrics_address(settings: LiveSettings) -> None:
    """Bind (and release) the /metrics address the worker will serve, so that
    a host that does not resolve, is not this machine's or a port in use is
    one :class:`ConfigError` naming the address before anything starts
    (the worker itself would crash with a traceback). Binds as the server
    does: every address the host resolves to, with SO_REUSEADDR."""
    if not settings.metrics_port:
        return
    host, port = settings.metrics_host, settings.metrics_port
    shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    where = f"cannot serve /metrics on {shown}"
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError):
        raise ConfigError(f"{where}: unknown host (--metrics-host)") from None
    for family, kind, proto, _name, address in infos:
        try:
            with socket.socket(family, kind, proto) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind(address)
        except OSError as exc:
            cause = _BIND_ERRORS.get(exc.errno or 0) or (exc.strerror or str(exc)).lower()
            raise ConfigError(f"{where}: {cause}") from None
