"""``fencewatch topics create``: idempotent creation of fencewatch's topics."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from streams.cli.kafka_args import add_connection_args, connection_from_args, report_kafka_failure
from streams.errors import BrokerError

__all__ = ["register"]


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("topics", help="manage fencewatch's Kafka topics")
    sub = parser.add_subparsers(dest="topics_command", metavar="ACTION")
    sub.required = True
    create = sub.add_parser(
        "create",
        help="create the events, findings, DLQ and status topics (existing ones are left as is)",
        description=(
            "Create the events, findings, dead-letter and status topics, as `fencewatch run` "
            "does. A topic that already exists counts as success and is not changed. "
            "See docs/kafka-local.md."
        ),
    )
    # Imported lazily: `fencewatch --help` must not need the Kafka client.
    from streams.kafka import topics

    add_connection_args(create)
    create.add_argument(
        "--partitions",
        type=int,
        default=None,
        metavar="N",
        help=f"for missing topics (default: the events topic's, else {topics.DEFAULT_PARTITIONS})",
    )
    create.add_argument(
        "--replication-factor",
        "--replication",
        dest="replication_factor",
        type=int,
        default=-1,
        metavar="N",
        help=(
            "replicas per partition (default: the broker's default.replication.factor); "
            "3 or more also sets min.insync.replicas=2 (docs/operate.md)"
        ),
    )
    create.add_argument("--events-topic", default=topics.DEFAULT_EVENTS_TOPIC, metavar="NAME")
    create.add_argument("--findings-topic", default=topics.DEFAULT_FINDINGS_TOPIC, metavar="NAME")
    create.add_argument(
        "--dlq-topic", default=None, metavar="NAME", help="default: <events topic>.dlq"
    )
    create.add_argument("--status-topic", default=topics.DEFAULT_STATUS_TOPIC, metavar="NAME")
    create.add_argument(
        "--events-retention-ms", type=int, default=topics.DEFAULT_EVENTS_RETENTION_MS, metavar="MS"
    )
    create.add_argument(
        "--findings-retention-ms",
        type=int,
        default=topics.DEFAULT_FINDINGS_RETENTION_MS,
        metavar="MS",
    )
    create.add_argument(
        "--dlq-retention-ms", type=int, default=topics.DEFAULT_DLQ_RETENTION_MS, metavar="MS"
    )
    create.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="for each admin request once connected (default 30)",
    )
    create.set_defaults(handler=_create)


def _create(args: argparse.Namespace) -> int:
    from streams.kafka.admin import TopicAdmin, ensure_topics
    from streams.kafka.topics import (
        DEFAULT_PARTITIONS,
        Retention,
        TopicNames,
        ownership_topic_specs,
    )

    names = TopicNames(args.events_topic, args.findings_topic, args.dlq_topic, args.status_topic)
    retention = Retention(
        args.events_retention_ms, args.findings_retention_ms, args.dlq_retention_ms
    )
    try:
        # Checked before connecting: a usage error never waits for a broker.
        ownership_topic_specs(
            names,
            partitions=args.partitions or DEFAULT_PARTITIONS,
            replication_factor=args.replication_factor,
            retention=retention,
        )
        if args.partitions is not None and args.partitions < 1:
            raise ValueError(f"partitions must be >= 1, got {args.partitions}")
        if args.timeout <= 0:
            raise ValueError("timeout must be positive")
        conn = connection_from_args(args)
    except ValueError as exc:
        print(f"fencewatch topics create: {exc}", file=sys.stderr)
        return 2
    try:
        admin = TopicAdmin(conn, timeout_s=args.timeout)
        admin.probe()
        results = ensure_topics(
            conn,
            names,
            partitions=args.partitions,
            replication_factor=args.replication_factor,
            retention=retention,
            timeout_s=args.timeout,
            admin=admin,
        )
    except BrokerError as exc:
        return report_kafka_failure("topics create", exc)
    for r in results:
        state = "created" if r.created else "exists"
        print(f"{state:8} {r.name} partitions={r.partitions}")
        if args.partitions is not None and r.partitions_differ:
            print(
                f"warning: {r.name} has {r.partitions} partitions, "
                f"{r.requested_partitions} requested; left unchanged "
                "(adding partitions remaps keys and breaks per-key order)",
                file=sys.stderr,
            )
    return 0
