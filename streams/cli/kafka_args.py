"""The Kafka connection flags every Kafka command shares, and how a command
reports a Kafka failure (one line, exit 2).

Each flag has a ``FENCEWATCH_*`` environment variable (flags win); the
passwords come from the environment only (a flag would show in ``ps``).
See :mod:`streams.kafka.connection`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from typing import Any

__all__ = [
    "KAFKA_FAILURE",
    "add_connection_args",
    "add_kafka_config_arg",
    "connection_from_args",
    "connection_overrides",
    "kafka_config",
    "report_kafka_failure",
]

#: Exit status of a command that could not use Kafka (unreachable broker,
#: refused credentials, missing topic): like unreadable input, status 2.
KAFKA_FAILURE = 2


def add_connection_args(
    parser: argparse.ArgumentParser | Any, *, log_level: bool = True, required: bool = False
) -> None:
    """``--bootstrap-servers``, the security flags, ``--connect-timeout`` and
    (unless the command has its own) ``--log-level``."""
    a = parser.add_argument
    a(
        "--bootstrap-servers",
        metavar="HOST:PORT[,...]",
        required=required,
        help="Kafka brokers (FENCEWATCH_BOOTSTRAP_SERVERS)",
    )
    a(
        "--security-protocol",
        metavar="P",
        help="PLAINTEXT|SSL|SASL_PLAINTEXT|SASL_SSL (FENCEWATCH_SECURITY_PROTOCOL)",
    )
    a("--sasl-mechanism", metavar="M", help="PLAIN|SCRAM-SHA-256|SCRAM-SHA-512")
    a(
        "--sasl-username",
        metavar="NAME",
        help="the password comes from FENCEWATCH_SASL_PASSWORD only",
    )
    a("--ssl-cafile", metavar="PEM")
    a("--ssl-certfile", metavar="PEM")
    a("--ssl-keyfile", metavar="PEM", help="its password: FENCEWATCH_SSL_KEY_PASSWORD only")
    a(
        "--connect-timeout",
        type=float,
        metavar="SECONDS",
        help="give up reaching a broker after this long (default 10; "
        "FENCEWATCH_KAFKA_CONNECT_TIMEOUT)",
    )
    if log_level:
        a(
            "--log-level",
            default="warning",
            choices=("debug", "info", "warning", "error"),
            help="debug shows the Kafka client's own log (default: quiet)",
        )


def add_kafka_config_arg(parser: argparse.ArgumentParser | Any) -> None:
    """``--kafka-config KEY=VALUE`` (repeatable): a raw client setting."""
    parser.add_argument(
        "--kafka-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra client setting (e.g. security.protocol=SASL_SSL); repeatable",
    )


def kafka_config(items: list[str]) -> dict[str, str]:
    """``--kafka-config`` items as a dict; ValueError naming a malformed one."""
    config: dict[str, str] = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise ValueError(f"--kafka-config wants KEY=VALUE, got {item!r}")
        config[k] = v
    return config


def connection_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The connection flags given on the command line, by connection field."""
    from streams.kafka.connection import FIELDS

    return {name: getattr(args, name, None) for name in FIELDS}


def connection_from_args(
    args: argparse.Namespace,
    env: Mapping[str, str] | None = None,
    *,
    extra: Mapping[str, str] | None = None,
) -> Any:
    """A validated :class:`~streams.kafka.connection.KafkaConnection`; raises
    its ``ConfigError`` (a ValueError) naming a missing or bad setting.
    Also quiets the client's log unless ``--log-level debug``."""
    from streams.kafka.connection import connection_from_env
    from streams.kafka.logs import configure_client_logs

    configure_client_logs(getattr(args, "log_level", None) or "warning")
    return connection_from_env(
        os.environ if env is None else env, connection_overrides(args), extra=extra
    )


def report_kafka_failure(command: str, exc: Exception) -> int:
    """Print the one line for a Kafka failure and return the exit status."""
    from streams.report.terminal import term_safe

    print(f"fencewatch {command}: {term_safe(str(exc))}", file=sys.stderr)
    return KAFKA_FAILURE
