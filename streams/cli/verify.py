"""``fencewatch verify``: a person records that an effect's intended outcome
holds (SPEC §8).

Publishes an ``outcome_verified`` event for the workflow's current epoch
(read from the status topic, or ``--epoch N``) with ``worker_id``
``person:NAME`` and ``attrs.verified_by``. Under SPEC §4 it clears a finding
only together with the fence (the stale worker refused by a destination).

The event is built, checked and published by :mod:`streams.findings.verify`
(the console's verification uses the same functions). An effect key of which
the events topic holds no evidence for the workflow (a typo) is refused
unless ``--force``. Exit status: 0 published; 2 usage error, unknown
workflow, unknown effect, or broker failure.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from streams.cli.kafka_args import (
    add_connection_args,
    add_kafka_config_arg,
    connection_from_args,
    kafka_config,
)
from streams.errors import FencewatchError
from streams.kafka.topics import DEFAULT_EVENTS_TOPIC, DEFAULT_STATUS_TOPIC
from streams.report.terminal import term_safe

__all__ = ["register"]


def register(sub: Any) -> None:
    p = sub.add_parser(
        "verify",
        help="record a person's verification of an effect's outcome (outcome_verified)",
        description="Publish outcome_verified for a workflow's current epoch (SPEC §8).",
    )
    add_connection_args(p)
    p.add_argument("--workflow", required=True, metavar="KEY")
    p.add_argument("--effect", required=True, metavar="EFFECT_KEY")
    p.add_argument("--by", required=True, metavar="NAME", help="who verified it")
    p.add_argument("--epoch", type=int, help="the current epoch (default: from the status topic)")
    p.add_argument("--events-topic", default=None, help=f"default {DEFAULT_EVENTS_TOPIC}")
    p.add_argument("--status-topic", default=None, help=f"default {DEFAULT_STATUS_TOPIC}")
    p.add_argument("--note", help="free text kept in attrs.note")
    p.add_argument(
        "--force",
        action="store_true",
        help="publish even if the events topic holds no evidence of --effect for --workflow",
    )
    add_kafka_config_arg(p)
    p.set_defaults(handler=_main)


def _err(msg: str) -> None:
    print(f"fencewatch verify: {term_safe(msg)}", file=sys.stderr)


def _main(args: argparse.Namespace) -> int:
    from streams.core.validate import InvalidEvent
    from streams.findings.verify import (
        NoCurrentEpoch,
        UnknownEffect,
        build_verification,
        check_effect,
        current_epoch,
        publish_verification,
    )
    from streams.kafka.admin import TopicAdmin

    try:
        conn = connection_from_args(args, extra=kafka_config(args.kafka_config))
        # The broker answers within --connect-timeout, or this is the one line
        # (with --epoch nothing else would ask it before the producer's wait).
        TopicAdmin(conn).probe()
        epoch = (
            args.epoch
            if args.epoch is not None
            else current_epoch(conn, args.workflow, args.status_topic)
        )
        if not args.force:
            check_effect(conn, args.workflow, args.effect, args.events_topic)
        event = build_verification(args.workflow, args.effect, args.by, epoch, note=args.note)
        publish_verification(conn, event, args.events_topic)
    except InvalidEvent as exc:
        _err(f"the event would be invalid: {exc}")
        return 2
    # The library names no flag; the command says which of its flags helps.
    except UnknownEffect as exc:
        _err(f"{exc}; check --workflow and --effect, or give --force to record it anyway")
        return 2
    except NoCurrentEpoch as exc:
        _err(f"{exc}: give --epoch N")
        return 2
    except (ValueError, FencewatchError) as exc:
        _err(str(exc))
        return 2
    print(
        term_safe(
            f"published outcome_verified for {args.workflow!r} effect {args.effect!r} at epoch "
            f"{epoch} by {event.worker_id} (event_id {event.event_id})"
        )
    )
    return 0
