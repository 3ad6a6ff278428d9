"""Start the live processor: topics, app, faust worker. Used by
``fencewatch run`` and by :mod:`streams.live.worker_app`."""

from __future__ import annotations

import logging
from typing import Any

from streams.errors import WorkerCrashed
from streams.live.app import TABLE_NAME, build_app
from streams.live.faust_run import GC_THRESHOLDS, run_faust
from streams.live.metrics import LiveMetrics
from streams.live.partitions import PartitionsChanged, check_state_layout
from streams.live.settings import LiveSettings, prepare_local_state
from streams.live.topics import ensure_topics

__all__ = ["GC_THRESHOLDS", "WorkerCrashed", "changelog_topic", "prepare_app", "run_worker"]


log = logging.getLogger(__name__)


def changelog_topic(settings: LiveSettings) -> str:
    """The faust engine's state changelog topic (faust's naming)."""
    return f"{settings.app_id}-{TABLE_NAME}-changelog"


def prepare_app(settings: LiveSettings, *, metrics: LiveMetrics | None = None) -> Any:
    """Check the local state directory (created with its parents), create
    missing topics, read the input's partition count, build the app."""
    prepare_local_state(settings)
    partitions = ensure_topics(settings)
    # A changelog partitioned for another count: the events topic grew while
    # the workers were stopped (streams/live/partitions.py).
    from streams.kafka.admin import TopicAdmin

    change = check_state_layout(
        TopicAdmin(settings.kafka), settings.events_topic, changelog_topic(settings)
    )
    if change is not None:
        raise PartitionsChanged(change)
    log.info("starting %r with %d partitions", settings, partitions)
    return build_app(settings, partitions=partitions, metrics=metrics)


def run_worker(settings: LiveSettings) -> int:
    """Run a worker for ``settings`` until SIGTERM/SIGINT (graceful:
    commits the open transactions, bounded) and return the exit status; the
    engine is ``settings.engine`` (faust in :mod:`streams.live.faust_run`,
    rdkafka in :mod:`streams.live.rdkafka_run`)."""
    if settings.engine == "rdkafka":
        from streams.live.rdkafka_run import run_rdkafka

        return run_rdkafka(settings)
    return run_faust(settings, lambda metrics: prepare_app(settings, metrics=metrics))
