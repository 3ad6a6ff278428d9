"""``fencewatch migrate --partitions N``: re-lay the live processor's state
after the events topic grew (docs/operate.md, streams/live/migrate.py)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from streams.cli.kafka_args import add_connection_args, connection_overrides, report_kafka_failure

__all__ = ["register"]


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "migrate",
        help="move the live processor's state to the events topic's new partition count",
        description=(
            "After the events topic grew, the processor refuses to run (its state is "
            "partitioned for the old count). With every worker stopped, this processes the "
            "events they had not committed, re-keys the state changelog to N partitions "
            "(each key where its events now go) and moves the group's offsets; then start "
            "the workers again. Topic and app flags as for `fencewatch run` (and the same "
            "FENCEWATCH_* variables)."
        ),
    )
    add_connection_args(p, log_level=False)
    a = p.add_argument
    a("--partitions", type=int, required=True, help="the events topic's new partition count")
    a(
        "--partitioner",
        choices=("murmur2", "consistent"),
        default="murmur2",
        help=(
            "how the events' producers place keys: murmur2 (Java, aiokafka, librdkafka "
            "murmur2_random; default) or consistent (librdkafka's default CRC32)"
        ),
    )
    a("--backup-dir", default=".", help="where the state backup file goes (default .)")
    a("--events-topic")
    a("--findings-topic")
    a("--dlq-topic")
    a("--status-topic")
    a("--no-status", dest="status", action="store_const", const=False, default=None)
    a("--app-id", help="the processor's app id (default fencewatch-live)")
    a("--timeout", type=float, default=120.0, help="seconds per step (default 120)")
    p.set_defaults(handler=_migrate)


def _migrate(args: argparse.Namespace) -> int:
    from streams.errors import ConfigError, FencewatchError
    from streams.live.migrate import migrate_state
    from streams.live.runner import changelog_topic
    from streams.live.settings import settings_from_env

    names = ("events_topic", "findings_topic", "dlq_topic", "status_topic", "status", "app_id")
    overrides = {name: getattr(args, name, None) for name in names}
    overrides.update(connection_overrides(args))
    try:
        settings = settings_from_env(os.environ, overrides)
        if args.partitions < 1:
            raise ConfigError(f"--partitions must be >= 1, got {args.partitions}")
        if args.timeout <= 0:
            raise ConfigError("--timeout must be positive")
    except ConfigError as exc:
        print(f"fencewatch migrate: {exc}", file=sys.stderr)
        return 2

    def say(line: str) -> None:
        print(f"fencewatch migrate: {line}", file=sys.stderr)

    try:
        report = migrate_state(
            settings,
            partitions=args.partitions,
            partitioner=args.partitioner,
            changelog=changelog_topic(settings),
            backup_dir=Path(args.backup_dir),
            timeout_s=args.timeout,
            log=say,
        )
    except FencewatchError as exc:
        return report_kafka_failure("migrate", exc)
    if report.backup is not None:
        print(
            f"migrated {report.changelog}: {report.was} -> {report.now} partitions, "
            f"{report.keys} keys, {report.tail_events} uncommitted events processed "
            f"({report.findings} findings); start the workers again"
        )
    return 0
