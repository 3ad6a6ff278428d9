"""Start the live processor: topics, app, faust worker. Used by
``fencewatch run`` and by :mod:`streams.live.worker_app`."""

from __future__ import annotations

import gc
import logging
from typing import Any

from streams.errors import WorkerCrashed
from streams.live.app import TABLE_NAME, build_app
from streams.live.faust_seam import crash_reason, quiet_framework_logs, quiet_worker
from streams.live.partitions import PartitionsChanged, check_state_layout
from streams.live.prepare import Prepared, prepare
from streams.live.settings import LiveSettings

__all__ = ["GC_THRESHOLDS", "WorkerCrashed", "changelog_topic", "prepare_app", "run_worker"]

#: The worker's ``gc.set_threshold`` (Python's default is 700, 10, 10).
GC_THRESHOLDS: tuple[int, int, int] = (20_000, 10, 10)


log = logging.getLogger(__name__)


def changelog_topic(settings: LiveSettings) -> str:
    """The faust engine's state changelog topic (faust's naming)."""
    return f"{settings.app_id}-{TABLE_NAME}-changelog"


def prepare_app(settings: LiveSettings, prepared: Prepared | None = None) -> Any:
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
    return build_app(settings, partitions=prepared.partitions)


def run_worker(settings: LiveSettings, prepared: Prepared | None = None) -> int:
    """Run a worker for ``settings`` until SIGTERM/SIGINT (graceful:
    commits the open transactions) and return the exit status; the engine
    is ``settings.engine`` (faust here, rdkafka in :mod:`streams.live.rdkafka_run`).
    ``prepared``: what :func:`prepare` made (done here when not given)."""
    prepared = prepared or prepare(settings)
    if settings.engine == "rdkafka":
        from streams.live.rdkafka_run import run_rdkafka

        return run_rdkafka(settings, prepared)
    import faust

    app = prepare_app(settings, prepared)
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
