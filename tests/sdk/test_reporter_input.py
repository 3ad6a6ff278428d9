"""What the reporter takes, against a real broker: emit() takes the event
type as docs/sdk.md writes it (a string) or as an EventType, publish() takes
an Event or its JSON object as a dict, and any other input is a TypeError or
ValueError naming the argument, with nothing produced."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from streams.core.records import Event, EventType
from streams.core.validate import InvalidEvent, parse_event
from streams.kafka.connection import KafkaConnection
from streams.sdk import OwnershipReporter, ReporterSettings


def _read(bootstrap: str, topic: str) -> list[Event]:
    from streams.kafka.reader import iter_topic

    return [
        parse_event(v, key=k) for k, v, _p, _o in iter_topic(KafkaConnection(bootstrap), topic) if v
    ]


def test_emit_and_publish_take_what_the_docs_say_and_refuse_the_rest(
    kafka_bootstrap: str, unique_topic: Callable[..., str]
) -> None:
    """emit('progress', ...), emit(EventType...), publish(dict) and
    publish(Event) are produced; each bad call raises TypeError/ValueError
    naming its argument and produces nothing."""
    topic = unique_topic(partitions=1)
    key = "docs/sdk-input"
    bad_calls: list[tuple[type[Exception], str, Callable[[OwnershipReporter], Any]]] = [
        (ValueError, "etype", lambda r: r.emit("progres", key, 1)),
        (TypeError, "etype", lambda r: r.emit(3, key, 1)),
        (TypeError, "key", lambda r: r.emit("progress", 123, 1)),
        (TypeError, "epoch", lambda r: r.emit("progress", key, "1")),
        (TypeError, "epoch", lambda r: r.emit("progress", key, True)),
        (TypeError, "epoch", lambda r: r.progress(key, 1.0)),
        (TypeError, "effect_key", lambda r: r.emit("effect_attempted", key, 1, effect_key=5)),
        (TypeError, "attrs", lambda r: r.progress(key, 1, attrs=["step", 1])),
        (TypeError, "event", lambda r: r.publish("progress")),
        (TypeError, "event", lambda r: r.publish(None)),
        (ValueError, "epoch", lambda r: r.emit("progress", key, -1)),
        (
            ValueError,
            "effect_key",
            lambda r: r.publish(
                {"type": "effect_committed", "workflow_key": key, "epoch": 1, "worker_id": "a"}
            ),
        ),
        (ValueError, "type", lambda r: r.publish({"workflow_key": key, "epoch": 1})),
    ]
    with OwnershipReporter(ReporterSettings(kafka_bootstrap, "alpha", topic=topic)) as rep:
        for kind, argument, call in bad_calls:
            with pytest.raises(kind) as info:
                call(rep)
            message = str(info.value)
            assert message.startswith(argument) or f"{argument}:" in message, message
            if isinstance(info.value, InvalidEvent):
                assert info.value.field == argument
        rep.emit("progress", key, 1, attrs={"step": 1})
        rep.emit(EventType.EFFECT_ATTEMPTED, key, 1, effect_key="release-index")
        rep.publish({"type": "progress", "workflow_key": key, "epoch": 1, "worker_id": "beta"})
        rep.publish(Event(EventType.PROGRESS, key, 2, "alpha", seq=9))
    events = _read(kafka_bootstrap, topic)
    got = [(e.type.value, e.epoch, e.worker_id, e.effect_key) for e in events]
    assert got == [
        ("progress", 1, "alpha", None),
        ("effect_attempted", 1, "alpha", "release-index"),
        ("progress", 1, "beta", None),
        ("progress", 2, "alpha", None),
    ]


def test_reporter_takes_only_reporter_settings() -> None:
    """OwnershipReporter('127.0.0.1:9092') raises TypeError naming settings."""
    with pytest.raises(TypeError, match=r"^settings must be a ReporterSettings, got str"):
        OwnershipReporter("127.0.0.1:9092")  # type: ignore[arg-type]
