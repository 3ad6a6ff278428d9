"""What a start of the live processor prepares, once, before an engine runs:
the store's extra, the deployment's topics, the local state directory.
``fencewatch run`` calls :func:`prepare` after probing the broker and hands
the result to the engine (:func:`streams.live.runner.run_worker`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from streams.kafka.admin import TopicAdmin, TopicResult
from streams.live.settings import LiveSettings, prepare_local_state, require_store_extra
from streams.live.topics import ensure_topics

__all__ = ["ADMIN_TIMEOUT_S", "Prepared", "prepare"]

#: Seconds each topic operation of a start may take (creation on a busy cluster).
ADMIN_TIMEOUT_S = 30.0


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
    topics (created when missing), the local state directory. ``admin``:
    the caller's (``fencewatch run`` probed the broker with it);
    ``on_topic`` is told each topic found or created, as soon as they are
    (so a later failure does not hide what this start added)."""
    require_store_extra(settings)
    admin = admin or TopicAdmin(settings.connection, timeout_s=ADMIN_TIMEOUT_S)
    partitions, topics = ensure_topics(settings, admin)
    if on_topic is not None:
        for result in topics:
            on_topic(result)
    data_dir = prepare_local_state(settings)
    return Prepared(data_dir, partitions, topics, admin)
