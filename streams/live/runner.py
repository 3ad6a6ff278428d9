"""Start the live processor: topics, app, faust worker. Used by
``fencewatch run`` and by :mod:`streams.live.worker_app`."""

from __future__ import annotations

import gc
import logging
from typing import Any

from streams.errors import FencewatchError
from streams.live.app import TABLE_NAME, build_app
from streams.live.faust_seam import crash_reason, quiet_framework_logs, quiet_worker
from streams.live.partitions import PartitionsChanged, check_state_layout
from streams.live.settings import LiveSettings, prepare_local_state
from streams.live.topics import ensure_topics

__all__ = ["GC_THRESHOLDS", "WorkerCrashed", "changelog_topic", "prepare_app", "run_worker"]

#: The worker's ``gc.set_threshold`` (Python's default is 700, 10, 10).
GC_THRESHOLDS: tuple[int, int, int] = (20_000, 10, 10)


class WorkerCrashed(FencewatchError):
    """The worker stopped on an error (e.g. the state store's disk is full);
    the message is one line naming the cause, the log has the details."""


log = logging.getLogger(__name__)


def changelog_topic(settings: LiveSettings) -> str:
    """The faust engine's state changelog topic (faust's naming)."""
    return f"{settings.app_id}-{TABLE_NAME}-changelog"


def prepare_app(settings: LiveSettings) -> Any:
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
    return build_app(settings, partitions=partitions)


def run_worker(settings: LiveSettings) -> int:
    """Run a worker for ``settings`` until SIGTERM/SIGINT (graceful:
    commits the open transactions) and return the exit status; the engine
    is ``settings.engine`` (faust here, rdkafka in :mod:`streams.live.rdkafka_run`)."""
    if settings.engine == "rdkafka":
        from streams.live.rdkafka_run import run_rdkafka

        return run_rdkafka(settings)
    import faust

    app = prepare_app(settings)
    # Everything allocated so far (modules, faust's and aiokafka's objects)
    # lives as long as the process: out of the collector's way, a full
    # collection scans only what the processing allocates (shorter gen-2
    # pauses, which show in the latency tail: docs/live.md).
    gc.freeze()
    # A batch keeps a few thousand objects alive while it runs (records,
    # events, findings, output records): with the default 700-allocation
    # young generation they survive collections, get promoted, and every
    # promotion brings the next full collection (which scans every cached
    # key state) closer. A young generation larger than a batch's working
    # set lets them die young; cycles are still collected (docs/live.md).
    gc.set_threshold(*GC_THRESHOLDS)
    worker = faust.Worker(app, loglevel=settings.log_level.upper(), quiet=True)
    quiet_worker(worker)
    quiet_framework_logs(settings.log_level)
    code: int = 0
    try:
        worker.execute_from_commandline()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    reason = crash_reason(app)
    if reason is not None:
        # faust logs the crash as pages of tracebacks; the caller gets one line.
        first = (str(reason).strip().splitlines() or [type(reason).__name__])[0]
        raise WorkerCrashed(f"the worker stopped: {first[:500]}")
    return code
