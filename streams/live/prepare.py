"""What a start of the live processor prepares, once, before an engine runs:
the store's extra, the deployment's topics (created when missing by the one
:func:`streams.kafka.admin.ensure_topics`, the same definition as
``fencewatch topics create``; the input's partition count is the state
table's), the local state directory.
``fencewatch run`` calls :func:`prepare` after probing the broker and hands
the result to the engine (:func:`streams.live.runner.run_worker`)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from streams.errors import BrokerError
from streams.kafka.admin import TopicAdmin, TopicResult
from streams.kafka.admin import ensure_topics as _ensure
from streams.live.group_engine import check_group_engine
from streams.live.settings import LiveSettings, prepare_local_state, require_store_extra

__all__ = ["ADMIN_TIMEOUT_S", "Prepared", "ensure_topics", "prepare"]

#: Seconds each topic operation of a start may take (creation on a busy cluster).
ADMIN_TIMEOUT_S = 30.0

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Prepared:
    """What :func:`prepare` made ready, handed to the engine that starts."""

    #: The local state directory (absolute; created with its parents).
    data_dir: Path
    #: The events topic's partition count (the state table's).
    partitions: int
    #: The deployment's topics, each created here or found.
    topics: tuple[TopicResult, ...]
    #: The admin client the preparation used (the engine reuses it).
    admin: TopicAdmin


def prepare(
    settings: LiveSettings,
    admin: TopicAdmin | None = None,
    *,
    on_topic: Callable[[TopicResult], object] | None = None,
) -> Prepared:
    """Everything a start needs, each done once: the store's extra, the
    topics (created when missing), a consumer group free of the other
    engine's workers (:mod:`streams.live.group_engine`), the local state directory. ``admin``:
    the caller's (``fencewatch run`` probed the broker with it);
    ``on_topic`` is told each topic found or created, as soon as they are
    (so a later failure does not hide what this start added)."""
    require_store_extra(settings)
    admin = admin or TopicAdmin(settings.connection, timeout_s=ADMIN_TIMEOUT_S)
    partitions, topics = ensure_topics(settings, admin)
    _warn_single_replica(settings, admin)
    if on_topic is not None:
        for result in topics:
            on_topic(result)
    check_group_engine(settings, admin)
    data_dir = prepare_local_state(settings)
    return Prepared(data_dir, partitions, topics, admin)


def _warn_single_replica(settings: LiveSettings, admin: TopicAdmin) -> None:
    """One line when the state changelog (and the topics this start creates)
    get a single replica on a cluster of several brokers.

    Why: while that replica's broker is down (a rolling restart), the
    transaction coordinator drops the commit or abort markers for its
    partitions ("Couldn't find leader endpoint ... likely deleted ... can be
    skipped" in the broker's log), so a transaction that ends meanwhile
    stays open on them for good: the rdkafka engine's restore waits on it,
    a reader up to the last stable offset misses its state (docs/live.md,
    "What that open transaction was"; found by the rolling-restart cluster
    test)."""
    if settings.replication > 1:
        return
    try:
        brokers = admin.brokers()
    except BrokerError:
        return  # the warning is advice; the start goes on without it
    if brokers > 1:
        log.warning(
            "replication 1 on a cluster of %d brokers: a broker restart takes state "
            "changelog partitions offline and Kafka drops the transaction markers sent "
            "meanwhile, leaving transactions open on them for good; use --replication 3 "
            "(docs/operate.md)",
            brokers,
        )


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
