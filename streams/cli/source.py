"""``fencewatch source etcd``: a coordination store's own transitions as evidence.

Watches an etcd election prefix and publishes ``lease_acquired`` /
``lease_released`` to the events topic, exactly once (one Kafka transaction
per batch, with the revision it was read up to on the state topic), resuming
after a restart (docs/integrations.md, "etcd"). Runs until stopped (SIGTERM:
exit 0; a transaction it interrupts is aborted, and the next run resumes before
it) or ``--max-batches``; etcd away for up to ``--etcd-retry`` seconds is
ridden out. Exit status: 0 stopped; 2 usage error, etcd or Kafka failure (one
line naming it: a restart resumes where the last committed batch ended).
"""

from __future__ import annotations

import argparse
import signal
import sys
from types import FrameType
from typing import Any

from streams.cli.kafka_args import (
    add_connection_args,
    add_kafka_config_arg,
    connection_from_args,
    kafka_config,
)
from streams.kafka.topics import DEFAULT_EVENTS_TOPIC, DEFAULT_SOURCES_TOPIC

__all__ = ["register"]


def register(sub: Any) -> None:
    p = sub.add_parser(
        "source",
        help="publish a coordination store's transitions as evidence (etcd elections)",
        description="Publish a coordination store's own ownership transitions as evidence.",
    )
    stores = p.add_subparsers(dest="store", metavar="STORE")
    stores.required = True
    e = stores.add_parser(
        "etcd",
        help="watch an etcd election prefix: lease_acquired / lease_released, exactly once",
        description=(
            "Watch an etcd election prefix and publish each leadership change: the leader "
            "key's create revision as the epoch, the revision it became leader at as seq, "
            "its value as the worker id (docs/integrations.md, 'etcd')."
        ),
    )
    e.add_argument(
        "--endpoints",
        required=True,
        metavar="URL[,URL...]",
        help="etcd client URLs, e.g. http://127.0.0.1:2379 (the first that answers is used)",
    )
    e.add_argument(
        "--prefix",
        required=True,
        help="the key prefix holding the elections, e.g. /election/ (each election's "
        "name, the key up to its last '/', is the workflow key)",
    )
    e.add_argument("--events-topic", default=DEFAULT_EVENTS_TOPIC, metavar="TOPIC")
    e.add_argument(
        "--state-topic",
        default=None,
        metavar="TOPIC",
        help="compacted topic holding the revision published up to "
        f"(default {DEFAULT_SOURCES_TOPIC}; created if missing)",
    )
    e.add_argument(
        "--source-id",
        default=None,
        help="names this source's state and transactional id "
        "(default etcd:<prefix>:<events topic>)",
    )
    e.add_argument(
        "--max-keys",
        type=int,
        default=100_000,
        help="candidate keys held in memory at most; past it the source stops (default 100000)",
    )
    e.add_argument(
        "--etcd-timeout", type=float, default=10.0, metavar="SECONDS", help="per etcd request"
    )
    e.add_argument(
        "--etcd-retry",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="how long etcd may be away before the source stops (default 60)",
    )
    e.add_argument(
        "--max-batches",
        type=int,
        default=None,
        metavar="N",
        help="stop after N transactions (default: run until stopped)",
    )
    add_connection_args(e)
    add_kafka_config_arg(e)
    e.set_defaults(handler=_main)


def _say(line: str) -> None:
    from streams.report.terminal import term_safe

    print(f"fencewatch source etcd: {term_safe(line)}", file=sys.stderr, flush=True)


class _Stop(Exception):
    """SIGTERM: leave the watch between batches."""


def _on_term(_sig: int, _frame: FrameType | None) -> None:
    raise _Stop


def _main(args: argparse.Namespace) -> int:
    from streams.errors import FencewatchError
    from streams.integrations.etcd import (
        DEFAULT_STATE_TOPIC,
        EtcdSource,
        SourceSettings,
        SourceStats,
    )
    from streams.integrations.etcd_map import TooManyKeys

    if args.max_batches is not None and args.max_batches < 1:
        _say("--max-batches must be at least 1")
        return 2
    source = None
    stats: SourceStats | None = None
    try:
        conn = connection_from_args(args, extra=kafka_config(args.kafka_config))
        settings = SourceSettings(
            endpoints=args.endpoints,
            prefix=args.prefix,
            connection=conn,
            events_topic=args.events_topic,
            state_topic=args.state_topic or DEFAULT_STATE_TOPIC,
            source_id=args.source_id,
            max_keys=args.max_keys,
            etcd_timeout_s=args.etcd_timeout,
            etcd_retry_s=args.etcd_retry,
        )
        source = EtcdSource(settings, _say)
        previous = signal.signal(signal.SIGTERM, _on_term)
        try:
            stats = source.run(args.max_batches)
        finally:
            signal.signal(signal.SIGTERM, previous)
    except _Stop:
        stats = source.stats if source is not None else None
    except (FencewatchError, ValueError, TooManyKeys) as exc:
        _say(str(exc))
        return 2
    finally:
        if source is not None:
            source.close()
    if stats is not None:
        _say(
            f"stopped at etcd revision {stats.revision}: {stats.published} events published,"
            f" {stats.skipped} skipped"
        )
    return 0
