"""``fencewatch verify``: a person records that an effect's intended outcome
holds (SPEC §8).

Publishes an ``outcome_verified`` event for the workflow's current epoch
(read from the status topic, or ``--epoch N``) with ``worker_id``
``person:NAME`` and ``attrs.verified_by``. Under SPEC §4 it clears a finding
only together with the fence (the stale worker refused by a destination).

The event carries no ``seq``: a person is not the coordination store's
sequencer, so it is placed by arrival, after every event of the key that
arrived before it (SPEC §3). An effect key of which the events topic holds
no evidence for the workflow (a typo) is refused unless ``--force``.
Exit status: 0 published; 2 usage error, unknown workflow, unknown effect,
or broker failure.
"""

from __future__ import annotations

import argparse
import sys
import uuid
from datetime import UTC, datetime
from typing import Any

import orjson

from streams.cli.kafka_args import (
    add_connection_args,
    add_kafka_config_arg,
    connection_from_args,
    kafka_config,
)
from streams.errors import BrokerError, FencewatchError
from streams.kafka.topics import DEFAULT_EVENTS_TOPIC, DEFAULT_STATUS_TOPIC

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
    print(f"fencewatch verify: {msg}", file=sys.stderr)


def _current_epoch(conn: Any, args: argparse.Namespace) -> int:
    from streams.findings.status import DEFAULT_STATUS_TOPIC, read_status

    topic = args.status_topic or DEFAULT_STATUS_TOPIC
    doc = read_status(conn, topic).get(args.workflow)
    if doc is None or doc.get("current_epoch") is None:
        raise ValueError(
            f"workflow {args.workflow!r} has no current epoch on {topic}: give --epoch N"
        )
    return int(doc["current_epoch"])


def _known_effects(
    conn: Any, topic: str, workflow: str, effect: str
) -> tuple[bool, set[str], int]:
    """Whether ``topic`` holds an event of ``workflow`` naming ``effect`` (and,
    if not, the effect keys it does hold, and how many events of it). Reads up to the end offsets
    captured at start and stops at the first match; records keyed by another
    workflow are skipped without being decoded."""
    from streams.kafka.reader import iter_topic

    wanted = workflow.encode()
    seen: set[str] = set()
    events = 0
    for key, value, _p, _o in iter_topic(conn, topic):
        if value is None or (key is not None and key != wanted):
            continue
        try:
            doc = orjson.loads(value)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(doc, dict) or doc.get("workflow_key") != workflow:
            continue
        events += 1
        found = doc.get("effect_key")
        if found == effect:
            return True, seen, events
        if isinstance(found, str) and len(seen) < 100:
            seen.add(found)
    return False, seen, events


def _check_effect(conn: Any, args: argparse.Namespace, topic: str) -> None:
    """ValueError unless the workflow has evidence of the effect (or --force):
    a mistyped --effect would otherwise be a permanent outcome_verified for an
    effect that never was."""
    if args.force:
        return
    found, others, events = _known_effects(conn, topic, args.workflow, args.effect)
    if found:
        return
    if others:
        listed = ", ".join(repr(e) for e in sorted(others)[:5])
        more = f" and {len(others) - 5} more" if len(others) > 5 else ""
        what = f"its effects on {topic}: {listed}{more}"
    elif events:
        what = f"its {events} event(s) on {topic} name no effect"
    else:
        what = f"{topic} holds no event of it"
    raise ValueError(
        f"workflow {args.workflow!r} has no evidence of effect {args.effect!r} ({what}); "
        "check --workflow and --effect, or give --force to record it anyway"
    )


def _main(args: argparse.Namespace) -> int:
    from streams.core.records import Event, EventType, event_to_dict
    from streams.core.validate import InvalidEvent, to_event
    from streams.kafka.admin import TopicAdmin
    from streams.kafka.clients import Producer
    from streams.kafka.topics import DEFAULT_EVENTS_TOPIC

    worker = f"person:{args.by}"
    topic = args.events_topic or DEFAULT_EVENTS_TOPIC
    try:
        conn = connection_from_args(args, extra=kafka_config(args.kafka_config))
        # The broker answers within --connect-timeout, or this is the one line
        # (with --epoch nothing else would ask it before the producer's wait).
        TopicAdmin(conn)
        epoch = args.epoch if args.epoch is not None else _current_epoch(conn, args)
        _check_effect(conn, args, topic)
        attrs: dict[str, Any] = {"verified_by": args.by}
        if args.note:
            attrs["note"] = args.note
        event = Event(
            EventType.OUTCOME_VERIFIED,
            args.workflow,
            epoch,
            worker,
            effect_key=args.effect,
            event_id=uuid.uuid4().hex,
            ts=datetime.now(UTC).isoformat(timespec="milliseconds"),
            attrs=attrs,
        )
        doc = event_to_dict(event)
        to_event(doc)  # never publish what the processor would reject
        # The SDK's producer (same partitioner as the SDK's workers: the
        # verification lands in the partition of the key's other evidence).
        producer = Producer(conn)
        failed: list[BrokerError] = []
        producer.produce(
            topic,
            orjson.dumps(doc),
            key=args.workflow.encode(),
            on_delivery=lambda err: failed.append(err) if err is not None else None,
        )
        unacknowledged = producer.flush(conn.connect_timeout + 20)
        if failed:
            raise failed[0]
        if unacknowledged:
            raise FencewatchError(f"the event was not acknowledged by {conn.bootstrap_servers}")
    except InvalidEvent as exc:
        _err(f"the event would be invalid: {exc}")
        return 2
    except (ValueError, FencewatchError) as exc:
        _err(str(exc))
        return 2
    print(
        f"published outcome_verified for {args.workflow!r} effect {args.effect!r} at epoch "
        f"{epoch} by {worker} (event_id {event.event_id})"
    )
    return 0
