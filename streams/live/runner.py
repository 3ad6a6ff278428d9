"""Start the live processor: topics, app, faust worker. Used by
``fencewatch run`` and by :mod:`streams.live.faust.worker_app`."""

from __future__ import annotations

import logging
from typing import Any

from streams.errors import WorkerCrashed
from streams.live.collector import GC_THRESHOLDS
from streams.live.faust.app import TABLE_NAME, build_app
from streams.live.faust.run import run_faust
from streams.live.metrics import LiveMetrics
from streams.live.partitions import PartitionsChanged, check_state_layout
from streams.live.prepare import Prepared, prepare
from streams.live.settings import LiveSettings

__all__ = ["GC_THRESHOLDS", "WorkerCrashed", "changelog_topic", "prepare_app", "run_worker"]


log = logging.getLogger(__name__)


def changelog_topic(settings: LiveSettings) -> str:
    """The faust engine's state changelog topic (faust's naming)."""
    return f"{settings.app_id}-{TABLE_NAME}-changelog"


def prepare_app(
    settings: LiveSettings,
    prepared: Prepared | None = None,
    *,
    metrics: LiveMetrics | None = None,
) -> Any:
    """Build the faust app for ``settings``, once ``prepared`` (done here
    when not given); a changelog partitioned for another count than the input
    refuses the start."""
    prepared = prepared or prepare(settings)
    # A changelog partitioned for another count: the events topic grew while
    # the workers were stopped (streams/live/partitions.py).
    change = check_state_layout(prepared.admin, settings.events_topic, changelog_topic(settings))
    if change is not None:
        raise PartitionsChanged(change)
    log.info("starting %r with %d partitions", settings, prepared.partitions)
    return build_app(settings, partitions=prepared.partitions, metrics=metrics)


def run_worker(settings: LiveSettings, prepared: Prepared | None = None) -> int:
    """Run a worker for ``settings`` until SIGTERM/SIGINT (graceful:
    commits the open transactions, bounded) and return the exit status; the
    engine is ``settings.engine`` (faust in :mod:`streams.live.faust.run`,
    rdkafka in :mod:`streams.live.rdkafka.run`). ``prepared``: what
    :func:`prepare` made (done here when not given)."""
    prepared = prepared or prepare(settings)
    if settings.engine == "rdkafka":
        from streams.live.rdkafka.run import run_rdkafka

        return run_rdkafka(settings, prepared)

    # A fenced app is replaced by a fresh one built on the same preparation
    # (a changed partition count is still refused by prepare_app's check).
    def build(metrics: LiveMetrics) -> Any:
        return prepare_app(settings, prepared, metrics=metrics)

    return run_faust(settings, build)
