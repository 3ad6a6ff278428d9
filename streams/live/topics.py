"""The live processor's topics: created when missing by the one
:func:`streams.kafka.admin.ensure_topics` (the same definition as
``fencewatch topics create``), and the input's partition count (the state
table must be partitioned exactly like it)."""

from __future__ import annotations

from streams.errors import BrokerError
from streams.kafka.admin import TopicAdmin, TopicResult
from streams.kafka.admin import ensure_topics as _ensure
from streams.live.settings import LiveSettings

__all__ = ["ensure_topics"]


def ensure_topics(
    settings: LiveSettings, admin: TopicAdmin | None = None
) -> tuple[int, tuple[TopicResult, ...]]:
    """Create the missing topics of ``settings`` (through ``admin`` when
    given) and return the events topic's partition count and what was found
    or created per topic; an existing events topic whose count differs from an
    explicit ``settings.partitions`` is an error (the table would not match)."""
    results = _ensure(
        settings.connection,
        settings.topic_names,
        partitions=settings.partitions,
        replication_factor=settings.replication,
        admin=admin,
    )
    events = next(r for r in results if r.name == settings.events_topic)
    if settings.partitions is not None and events.partitions != settings.partitions:
        raise BrokerError(
            f"topic {settings.events_topic} has {events.partitions} partitions, "
            f"settings say {settings.partitions}",
            code="PARTITIONS_MISMATCH",
        )
    return events.partitions, tuple(results)
