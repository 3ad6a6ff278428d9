"""``fencewatch topics create``: idempotent creation of fencewatch's topics."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from streams.errors import BrokerError

__all__ = ["register"]


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("topics", help="manage fencewatch's Kafka topics")
    sub = parser.add_subparsers(dest="topics_command", metavar="ACTION")
    sub.required = True
    create = sub.add_parser(
        "create",
        help="create the events, findings and DLQ topics (existing topics are left as they are)",
        description=(
            "Create the events, findings and dead-letter topics. A topic that already "
            "exists counts as success and is not changed. See docs/kafka-local.md."
        ),
    )
    # Imported lazily: `fencewatch --help` must not need the Kafka client.
    from streams.kafka import admin

    create.add_argument("--bootstrap-servers", required=True, metavar="HOST:PORT[,...]")
    create.add_argument("--partitions", type=int, default=admin.DEFAULT_PARTITIONS, metavar="N")
    create.add_argument(
        "--replication-factor",
        type=int,
        default=-1,
        metavar="N",
        help="replicas per partition (default: the broker's default.replication.factor)",
    )
    create.add_argument("--events-topic", default="ownership.events", metavar="NAME")
    create.add_argument("--findings-topic", default="ownership.findings", metavar="NAME")
    create.add_argument(
        "--dlq-topic", default=None, metavar="NAME", help="default: <events topic>.dlq"
    )
    create.add_argument(
        "--events-retention-ms", type=int, default=admin.DEFAULT_EVENTS_RETENTION_MS, metavar="MS"
    )
    create.add_argument(
        "--findings-retention-ms",
        type=int,
        default=admin.DEFAULT_FINDINGS_RETENTION_MS,
        metavar="MS",
    )
    create.add_argument(
        "--dlq-retention-ms", type=int, default=admin.DEFAULT_DLQ_RETENTION_MS, metavar="MS"
    )
    create.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS")
    create.set_defaults(handler=_create)


def _create(args: argparse.Namespace) -> int:
    from streams.kafka.admin import TopicAdmin, TopicNames, ownership_topic_specs

    try:
        specs = ownership_topic_specs(
            TopicNames(events=args.events_topic, findings=args.findings_topic, dlq=args.dlq_topic),
            partitions=args.partitions,
            replication_factor=args.replication_factor,
            events_retention_ms=args.events_retention_ms,
            findings_retention_ms=args.findings_retention_ms,
            dlq_retention_ms=args.dlq_retention_ms,
        )
        admin = TopicAdmin(args.bootstrap_servers, timeout_s=args.timeout)
    except ValueError as exc:
        print(f"fencewatch topics create: {exc}", file=sys.stderr)
        return 2
    try:
        results = admin.ensure(specs)
    except BrokerError as exc:
        print(f"fencewatch topics create: {exc}", file=sys.stderr)
        return 1
    for r in results:
        state = "created" if r.created else "exists"
        print(f"{state:8} {r.name} partitions={r.partitions}")
        if r.partitions_differ:
            print(
                f"warning: {r.name} has {r.partitions} partitions, "
                f"{r.requested_partitions} requested; left unchanged "
                "(adding partitions remaps keys and breaks per-key order)",
                file=sys.stderr,
            )
    return 0
