"""How to reach the Kafka cluster: one settings record for every client.

:class:`KafkaConnection` holds the bootstrap servers, the security settings
and the connect timeout, read from CLI flags and ``FENCEWATCH_*`` environment
variables (flags win), and produces both the librdkafka configuration
(confluent-kafka: topic admin, readers, producers) and the faust/aiokafka
broker configuration (the live processor).

Environment variables (the names predate this module and are kept):

=================================  =========================================
``FENCEWATCH_BOOTSTRAP_SERVERS``   ``HOST:PORT[,HOST:PORT]``
``FENCEWATCH_SECURITY_PROTOCOL``   PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL
``FENCEWATCH_SASL_MECHANISM``      PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
``FENCEWATCH_SASL_USERNAME``
``FENCEWATCH_SASL_PASSWORD``       environment only (a flag shows in ``ps``)
``FENCEWATCH_SSL_CAFILE``          PEM file of the CA(s) to trust
``FENCEWATCH_SSL_CERTFILE``        client certificate (PEM)
``FENCEWATCH_SSL_KEYFILE``         client key (PEM)
``FENCEWATCH_SSL_KEY_PASSWORD``    environment only
``FENCEWATCH_KAFKA_CONNECT_TIMEOUT``  seconds to reach a broker (default 10)
=================================  =========================================

Made once per process, at its edge: a command from its flags and the
environment (:meth:`KafkaConnection.from_env`, through
``streams.cli.kafka_args.connection_from_args``), a library user from code.
It is validated once, when made (a bad setting is a
:class:`~streams.errors.ConfigError` naming it), and then passed as it is,
always as a parameter or field named ``connection``.

Secrets (the two passwords, and any ``--kafka-config`` value whose name
mentions a password or secret) never appear in ``repr``/``str`` and so in
no log line or error message built from this object.
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from streams.core.errors import ConfigError

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "ENV_PREFIX",
    "ENV_VARIABLES",
    "FIELDS",
    "LIBRDKAFKA_LOGGER",
    "KafkaConnection",
    "check_reachable",
    "connection_from_env",
    "require_connection",
    "split_servers",
]

ENV_PREFIX = "FENCEWATCH_"
#: Seconds to reach a broker before the command gives up (issue 9: <= 10 s).
DEFAULT_CONNECT_TIMEOUT = 10.0
_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_SECRET_WORDS = ("password", "secret", "token")
_REDACTED = "'***'"
#: librdkafka's own log lines (every failed connect is one) go to this
#: Python logger, where the CLI decides what is shown (streams.kafka.logs).
LIBRDKAFKA_LOGGER = logging.getLogger("streams.kafka.librdkafka")
# confluent-kafka's own (Python) settings, spelled with underscores: not
# librdkafka properties, so librdkafka(**settings) leaves their names alone.
_PYTHON_KEYS = frozenset(
    {"error_cb", "throttle_cb", "stats_cb", "oauth_cb", "on_commit", "on_delivery", "logger"}
)


def _is_secret(name: str) -> bool:
    return any(word in name.lower() for word in _SECRET_WORDS)


def split_servers(bootstrap: str) -> list[tuple[str, int]]:
    """``HOST:PORT[,HOST:PORT]`` as (host, port) pairs; ValueError names a bad one."""
    out: list[tuple[str, int]] = []
    for item in bootstrap.split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        host = host.strip("[]")  # [::1]:9092
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"bootstrap server {item!r} is not HOST:PORT")
        out.append((host, int(port)))
    if not out:
        raise ValueError("bootstrap servers are required")
    return out


@dataclass(frozen=True, slots=True)
class KafkaConnection:
    """Where the brokers are and how to authenticate to them; checked when
    made (:class:`~streams.errors.ConfigError` naming the first bad setting)."""

    bootstrap_servers: str
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_key_password: str | None = field(default=None, repr=False)
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    #: Further librdkafka settings (``audit --kafka-config KEY=VALUE``); they
    #: apply to the confluent-kafka clients only.
    extra: Mapping[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:
        parts = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "extra":
                shown = repr({k: ("***" if _is_secret(k) else v) for k, v in sorted(value.items())})
            elif _is_secret(f.name) and value is not None:
                shown = _REDACTED
            else:
                shown = repr(value)
            parts.append(f"{f.name}={shown}")
        return f"KafkaConnection({', '.join(parts)})"

    __str__ = __repr__

    def __post_init__(self) -> None:
        self.validate()

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str] | None = None,
        overrides: Mapping[str, Any] | None = None,
        *,
        extra: Mapping[str, str] | None = None,
    ) -> KafkaConnection:
        """The connection described by the ``FENCEWATCH_*`` variables of
        ``env`` (default: ``os.environ``), then ``overrides`` (CLI flags by
        field name; ``None`` means "not given")."""
        return connection_from_env(os.environ if env is None else env, overrides, extra=extra)

    @property
    def servers(self) -> list[tuple[str, int]]:
        return split_servers(self.bootstrap_servers)

    def validate(self) -> KafkaConnection:
        """Raise :class:`~streams.errors.ConfigError` naming the first bad
        setting (done when the connection is made; nobody needs to again)."""
        try:
            self.servers  # noqa: B018  (parses, raising on a bad address)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if self.security_protocol not in _PROTOCOLS:
            raise ConfigError(f"security protocol must be one of {', '.join(_PROTOCOLS)}")
        if self.security_protocol.startswith("SASL"):
            if self.sasl_mechanism not in _MECHANISMS:
                raise ConfigError(f"sasl mechanism must be one of {', '.join(_MECHANISMS)}")
            if not self.sasl_username or self.sasl_password is None:
                raise ConfigError("SASL needs a username and a password (FENCEWATCH_SASL_PASSWORD)")
        if not 0 < self.connect_timeout <= 300:
            raise ConfigError("connect timeout must be within (0, 300] seconds")
        return self

    def replace(self, **changes: Any) -> KafkaConnection:
        return dataclasses.replace(self, **changes)

    def to_env(self) -> dict[str, str]:
        """The ``FENCEWATCH_*`` variables that describe this connection (for
        a child process: the passwords go by environment, never by argv;
        ``extra`` has no variable and is left out)."""
        env: dict[str, str] = {}
        for name, suffix in _ENV:
            value = getattr(self, name)
            if value is not None:
                env[ENV_PREFIX + suffix] = f"{value:g}" if isinstance(value, float) else str(value)
        return env

    # -- client configurations -------------------------------------------------

    def librdkafka(self, **settings: Any) -> dict[str, Any]:
        """The confluent-kafka configuration: these servers and security, the
        bounded connect time, librdkafka's log routed to Python logging, then
        ``extra`` and ``settings`` (dots written as underscores are fine:
        ``librdkafka(group_id="g")`` sets ``group.id``)."""
        from streams.kafka.errors import watch_credentials

        timeout_ms = int(self.connect_timeout * 1000)
        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            "security.protocol": self.security_protocol,
            "logger": LIBRDKAFKA_LOGGER,
            # A broker that never answers fails the connection attempt in this
            # time instead of librdkafka's 30 s default.
            "socket.connection.setup.timeout.ms": max(1000, timeout_ms),
            # Refused credentials are reported only here (streams.kafka.errors).
            "error_cb": watch_credentials(self.bootstrap_servers),
        }
        optional = {
            "sasl.mechanism": self.sasl_mechanism,
            "sasl.username": self.sasl_username,
            "sasl.password": self.sasl_password,
            "ssl.ca.location": self.ssl_cafile,
            "ssl.certificate.location": self.ssl_certfile,
            "ssl.key.location": self.ssl_keyfile,
            "ssl.key.password": self.ssl_key_password,
        }
        conf.update({k: v for k, v in optional.items() if v is not None})
        if LIBRDKAFKA_LOGGER.isEnabledFor(logging.DEBUG):
            # --log-level debug: the client's connection story, not only its failures.
            conf["debug"] = "broker,metadata"
        conf.update(self.extra)
        conf.update(
            {k if k in _PYTHON_KEYS else k.replace("_", "."): v for k, v in settings.items()}
        )
        return conf

    def aiokafka_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for an aiokafka client (``AIOKafkaProducer(**kw)``)."""
        kw: dict[str, Any] = {
            "bootstrap_servers": [f"{h}:{p}" for h, p in self.servers],
            "security_protocol": self.security_protocol,
            "request_timeout_ms": max(1000, int(self.connect_timeout * 1000)),
        }
        if self.security_protocol.endswith("SSL"):
            kw["ssl_context"] = self._ssl_context()
        if self.security_protocol.startswith("SASL"):
            kw["sasl_mechanism"] = self.sasl_mechanism
            kw["sasl_plain_username"] = self.sasl_username
            kw["sasl_plain_password"] = self.sasl_password
        return kw

    def faust_broker(self) -> dict[str, Any]:
        """``broker`` and (when not PLAINTEXT) ``broker_credentials`` for ``faust.App``."""
        conf: dict[str, Any] = {
            "broker": ";".join(f"kafka://{h}:{p}" for h, p in self.servers),
        }
        if self.security_protocol == "PLAINTEXT":
            return conf
        import faust

        ssl_context = self._ssl_context() if self.security_protocol.endswith("SSL") else None
        if self.security_protocol.startswith("SASL"):
            conf["broker_credentials"] = faust.SASLCredentials(
                username=self.sasl_username,
                password=self.sasl_password,
                mechanism=self.sasl_mechanism,
                ssl_context=ssl_context,
            )
        else:
            conf["broker_credentials"] = faust.SSLCredentials(ssl_context)
        return conf

    def _ssl_context(self) -> Any:
        from aiokafka.helpers import create_ssl_context

        try:
            return create_ssl_context(
                cafile=self.ssl_cafile,
                certfile=self.ssl_certfile,
                keyfile=self.ssl_keyfile,
                password=self.ssl_key_password,
            )
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
            files = ", ".join(
                f for f in (self.ssl_cafile, self.ssl_certfile, self.ssl_keyfile) if f
            )
            # Never the exception's own text alone: it could quote a password.
            reason = (
                exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
            )
            raise ConfigError(f"cannot load the TLS files ({files}): {reason}") from None


# (field, environment suffix)
_ENV: tuple[tuple[str, str], ...] = (
    ("bootstrap_servers", "BOOTSTRAP_SERVERS"),
    ("security_protocol", "SECURITY_PROTOCOL"),
    ("sasl_mechanism", "SASL_MECHANISM"),
    ("sasl_username", "SASL_USERNAME"),
    ("sasl_password", "SASL_PASSWORD"),
    ("ssl_cafile", "SSL_CAFILE"),
    ("ssl_certfile", "SSL_CERTFILE"),
    ("ssl_keyfile", "SSL_KEYFILE"),
    ("ssl_key_password", "SSL_KEY_PASSWORD"),
    ("connect_timeout", "KAFKA_CONNECT_TIMEOUT"),
)
#: The connection's fields, for callers that route flags here.
FIELDS = tuple(name for name, _ in _ENV)
#: The environment variables a connection is read from (:meth:`KafkaConnection.from_env`).
ENV_VARIABLES = frozenset(ENV_PREFIX + suffix for _, suffix in _ENV)


def connection_from_env(
    env: Mapping[str, str],
    overrides: Mapping[str, Any] | None = None,
    *,
    extra: Mapping[str, str] | None = None,
) -> KafkaConnection:
    """A connection from ``FENCEWATCH_*`` variables in ``env``, then
    ``overrides`` (CLI flags by field name; ``None`` means "not given"):
    :meth:`KafkaConnection.from_env` with an explicit environment."""
    values: dict[str, Any] = {}
    for name, suffix in _ENV:
        raw = env.get(ENV_PREFIX + suffix)
        if raw:
            values[name] = raw
    for name, value in (overrides or {}).items():
        if value is not None:
            values[name] = value
    if not values.get("bootstrap_servers"):
        raise ConfigError(
            f"bootstrap servers are required (--bootstrap-servers or {ENV_PREFIX}BOOTSTRAP_SERVERS)"
        )
    if "connect_timeout" in values:
        try:
            values["connect_timeout"] = float(values["connect_timeout"])
        except ValueError:
            raise ConfigError(
                f"{ENV_PREFIX}KAFKA_CONNECT_TIMEOUT: not a number: {values['connect_timeout']!r}"
            ) from None
    if "security_protocol" in values:
        values["security_protocol"] = str(values["security_protocol"]).upper()
    return KafkaConnection(**values, extra=dict(extra or {}))


def require_connection(value: object, where: str) -> None:
    """Raise :class:`~streams.errors.ConfigError` naming ``where`` unless
    ``value`` is a :class:`KafkaConnection` (a public settings record checks
    its field with this: a bare address is refused there, in one line, not
    deep inside a client)."""
    if not isinstance(value, KafkaConnection):
        raise ConfigError(
            f"{where}: must be a KafkaConnection (e.g. KafkaConnection({value!r}) or "
            f"KafkaConnection.from_env()), got {type(value).__name__}"
            if isinstance(value, str)
            else f"{where}: must be a KafkaConnection, got {type(value).__name__}"
        )


_ERRNO_TEXT = {
    errno.ECONNREFUSED: "connection refused",
    errno.EHOSTUNREACH: "host unreachable",
    errno.ENETUNREACH: "network unreachable",
    errno.ECONNRESET: "connection reset",
}


def _cause(exc: OSError) -> str:
    if isinstance(exc, socket.gaierror):
        return "unknown host"
    if isinstance(exc, TimeoutError):
        return "timed out"
    if exc.errno in _ERRNO_TEXT:
        return _ERRNO_TEXT[exc.errno]
    return (exc.strerror or str(exc)).lower()


def check_reachable(conn: KafkaConnection) -> None:
    """Open (and close) a TCP connection to the bootstrap servers, each within
    ``conn.connect_timeout`` in total; raise
    :class:`~streams.kafka.errors.BrokerUnreachable` naming the address and
    the cause when none accepts. Done before a client is created so a wrong
    address fails at once with its real cause, instead of after a client's
    retries with "timed out" (TLS and SASL are the client's to check)."""
    from streams.kafka.errors import BrokerUnreachable

    failures: list[str] = []
    servers = conn.servers
    per_server = conn.connect_timeout / len(servers)
    for host, port in servers:
        try:
            with socket.create_connection((host, port), timeout=per_server):
                return
        except OSError as exc:
            failures.append(f"{host}:{port}: {_cause(exc)}")
    raise BrokerUnreachable(
        f"cannot connect to broker {'; '.join(failures)}", code="_TRANSPORT", retriable=True
    )
