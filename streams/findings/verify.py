"""A person's verification of an effect's outcome (SPEC §8), as one library
call shared by ``fencewatch verify`` and the console (``fencewatch serve``).

The event is ``outcome_verified`` for the workflow's current epoch, with
``worker_id`` ``person:NAME`` and ``attrs.verified_by`` (``attrs.note`` when
given). It carries no ``seq``: a person is not the coordination store's
sequencer, so it is placed by arrival, after every event of the key that
arrived before it (SPEC §3). It is validated as the processor would before
it is published, and published with the SDK's producer (same partitioner as
the SDK's workers: it lands in the partition of the key's other evidence).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import orjson

from streams.core.records import Event, EventType, event_to_dict
from streams.core.validate import to_event
from streams.errors import BrokerError, FencewatchError, NoCurrentEpoch, UnknownEffect
from streams.kafka.connection import KafkaConnection
from streams.kafka.topics import DEFAULT_EVENTS_TOPIC, DEFAULT_STATUS_TOPIC

__all__ = [
    "NoCurrentEpoch",
    "UnknownEffect",
    "build_verification",
    "check_effect",
    "current_epoch",
    "publish_verification",
]


def _known_effects(
    connection: KafkaConnection, topic: str, workflow: str, effect: str
) -> tuple[bool, set[str], int]:
    """Whether ``topic`` holds an event of ``workflow`` naming ``effect`` (and,
    if not, the effect keys it does hold, and how many events of it). Reads up
    to the end offsets captured at start and stops at the first match; records
    keyed by another workflow are skipped without being decoded."""
    from streams.kafka.reader import iter_topic

    wanted = workflow.encode()
    seen: set[str] = set()
    events = 0
    for key, value, _p, _o in iter_topic(connection, topic):
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


def check_effect(
    connection: KafkaConnection, workflow: str, effect: str, events_topic: str | None = None
) -> None:
    """:class:`UnknownEffect` unless the workflow has evidence of the effect: a
    mistyped effect key would otherwise be a permanent ``outcome_verified`` for
    an effect that never was."""
    topic = events_topic or DEFAULT_EVENTS_TOPIC
    found, others, events = _known_effects(connection, topic, workflow, effect)
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
    raise UnknownEffect(f"workflow {workflow!r} has no evidence of effect {effect!r} ({what})")


def current_epoch(
    connection: KafkaConnection, workflow: str, status_topic: str | None = None
) -> int:
    """The workflow's current epoch from the status topic (a bounded read)."""
    from streams.findings.status_topic import read_status

    topic = status_topic or DEFAULT_STATUS_TOPIC
    doc = read_status(connection, topic).get(workflow)
    if doc is None or doc.get("current_epoch") is None:
        raise NoCurrentEpoch(f"workflow {workflow!r} has no current epoch on {topic}")
    return int(doc["current_epoch"])


def build_verification(
    workflow: str, effect: str, by: str, epoch: int, *, note: str | None = None
) -> Event:
    """The ``outcome_verified`` event; :class:`~streams.core.validate.InvalidEvent`
    (naming the field) when the processor would reject it."""
    attrs: dict[str, Any] = {"verified_by": by}
    if note:
        attrs["note"] = note
    event = Event(
        EventType.OUTCOME_VERIFIED,
        workflow,
        epoch,
        f"person:{by}",
        effect_key=effect,
        event_id=uuid.uuid4().hex,
        ts=datetime.now(UTC).isoformat(timespec="milliseconds"),
        attrs=attrs,
    )
    to_event(event_to_dict(event))  # never publish what the processor would reject
    return event


def publish_verification(
    connection: KafkaConnection, event: Event, events_topic: str | None = None
) -> None:
    """Publish ``event`` (keyed by its workflow) and wait for the broker's
    acknowledgement; :class:`~streams.errors.FencewatchError` when it is not given."""
    from streams.kafka.clients import Producer

    topic = events_topic or DEFAULT_EVENTS_TOPIC
    producer = Producer(connection)
    failed: list[BrokerError] = []
    producer.produce(
        topic,
        orjson.dumps(event_to_dict(event)),
        key=event.workflow_key.encode(),
        on_delivery=lambda err: failed.append(err) if err is not None else None,
    )
    unacknowledged = producer.flush(connection.connect_timeout + 20)
    if failed:
        raise failed[0]
    if unacknowledged:
        raise FencewatchError(f"the event was not acknowledged by {connection.bootstrap_servers}")
