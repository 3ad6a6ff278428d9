"""``fencewatch run``: the live stream processor (docs/live.md)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

__all__ = ["register"]


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "run",
        help="run the live processor (faust worker)",
        description=(
            "Consume ownership events, keep per-workflow detector state in a changelog-backed "
            "table, and publish findings (exactly-once). Every flag has a FENCEWATCH_* "
            "environment variable; flags win."
        ),
    )
    a = p.add_argument
    a("--bootstrap-servers", help="HOST:PORT[,HOST:PORT] (FENCEWATCH_BOOTSTRAP_SERVERS)")
    a("--events-topic", help="input topic (default ownership.events)")
    a("--findings-topic", help="output topic (default ownership.findings)")
    a("--dlq-topic", help="dead-letter topic (default <events-topic>.dlq)")
    a("--app-id", help="consumer group and transactional id prefix (default fencewatch-live)")
    a("--partitions", type=int, help="expected partitions of the events topic")
    a("--replication", type=int, help="replication of topics created here (default 1)")
    a(
        "--at-least-once",
        dest="exactly_once",
        action="store_const",
        const=False,
        default=None,
        help="turn exactly-once off (findings may repeat; consumers must upsert)",
    )
    a("--commit-interval", type=float, help="seconds between commits (default 0.1)")
    a("--store", help="memory:// (default) or rocksdb://")
    a("--data-dir", help="local state directory (default .run/live)")
    a("--session-timeout", type=float, help="consumer session timeout, s (default 10)")
    a("--heartbeat-interval", type=float, help="consumer heartbeat, s (default 3)")
    a("--max-events-per-key", type=int, help="detector evidence kept per workflow key")
    a("--log-level", help="debug, info, warning, error")
    a("--metrics-port", type=int, help="port of /metrics and /health; 0 disables (default)")
    a("--security-protocol", dest="security_protocol", help="PLAINTEXT|SSL|SASL_PLAINTEXT|SASL_SSL")
    a("--sasl-mechanism", dest="security_sasl_mechanism", help="PLAIN|SCRAM-SHA-256|SCRAM-SHA-512")
    a("--sasl-username", dest="security_sasl_username")
    a("--ssl-cafile", dest="security_ssl_cafile")
    a("--ssl-certfile", dest="security_ssl_certfile")
    a("--ssl-keyfile", dest="security_ssl_keyfile")
    # Passwords only from the environment (FENCEWATCH_SASL_PASSWORD,
    # FENCEWATCH_SSL_KEY_PASSWORD): a flag would show in `ps`.
    p.set_defaults(handler=_run)


_SETTING_ARGS = (
    "bootstrap_servers",
    "events_topic",
    "findings_topic",
    "dlq_topic",
    "app_id",
    "partitions",
    "replication",
    "exactly_once",
    "commit_interval",
    "store",
    "data_dir",
    "session_timeout",
    "heartbeat_interval",
    "max_events_per_key",
    "log_level",
    "metrics_port",
    "security_protocol",
    "security_sasl_mechanism",
    "security_sasl_username",
    "security_ssl_cafile",
    "security_ssl_certfile",
    "security_ssl_keyfile",
)


def _run(args: argparse.Namespace) -> int:
    from streams.errors import FencewatchError
    from streams.live.runner import run_worker
    from streams.live.settings import SettingsError, settings_from_env

    overrides = {name: getattr(args, name, None) for name in _SETTING_ARGS}
    try:
        settings = settings_from_env(os.environ, overrides)
    except SettingsError as exc:
        print(f"fencewatch run: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        return run_worker(settings)
    except FencewatchError as exc:
        print(f"fencewatch run: {exc}", file=sys.stderr)
        return 1
