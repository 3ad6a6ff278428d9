"""The worker's garbage-collector settings, the same for both engines."""

from __future__ import annotations

import gc

__all__ = ["GC_THRESHOLDS", "tune_collector"]

#: The worker's ``gc.set_threshold`` (Python's default is 700, 10, 10).
GC_THRESHOLDS: tuple[int, int, int] = (20_000, 10, 10)


def tune_collector() -> None:
    """Freeze what start-up allocated and widen the young generation.

    Everything allocated so far (modules, the clients' objects) lives as long
    as the process: out of the collector's way, a full collection scans only
    what the processing allocates (shorter gen-2 pauses, which show in the
    latency tail: docs/live.md). A batch keeps a few thousand objects alive
    while it runs: with the default 700-allocation young generation they
    survive collections, get promoted, and every promotion brings the next
    full collection closer. A young generation larger than a batch's working
    set lets them die young (``bench/live_batch_cpu.py`` measures both)."""
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
