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
from streams.errors import BrokerError, FencewatchError
from streams.kafka.connection import KafkaConnection
from streams.kafka.topics import DEFAULT_EVENTS_TOPIC, DEFAULT_STATUS_TOPIC

__all__ = [
    "NoCurrentEpoch",
    "build_verification",
    "current_epoch",
    "publish_verification",
]


class NoCurrentEpoch(FencewatchError):
    """The status topic knows no current epoch for the workflow."""


def current_epoch(conn: KafkaConnection, workflow: str, status_topic: str | None = None) -> int:
    """The workflow's current epoch from the status topic (a bounded read)."""
    from streams.findings.status import read_status

    topic = status_topic or DEFAULT_STATUS_TOPIC
    doc = read_status(conn, topic).get(workflow)
    if doc is None or doc.get("current_epoch") is None:
        raise NoCurrentEpoch(
            f"workflow {workflow!r} has no current epoch on {topic}: give --epoch N"
        )
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
    conn: KafkaConnection, event: Event, events_topic: str | None = None
) -> None:
    """Publish ``event`` (keyed by its workflow) and wait for the broker's
    acknowledgement; :class:`~streams.errors.FencewatchError` when it is not given."""
    from streams.kafka.clients import Producer

    topic = events_topic or DEFAULT_EVENTS_TOPIC
    producer = Producer(conn)
    failed: list[BrokerError] = []
    producer.produce(
        topic,
        orjson.dumps(event_to_dict(event)),
        key=event.workflow_key.encode(),
        on_delivery=lambda err: failed.append(err) if err is not None else None,
    )
    unacknowledged = producer.flush(conn.connect_timeout + 20)
    if failed:
        raise failed[0]
    if unacknowledged:
        raise FencewatchError(f"the event was not acknowledged by {conn.bootstrap_servers}")
