"""bench/live_scaleout.py releases the events only once the group has settled."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _bench() -> ModuleType:
    sys.path.insert(0, str(BENCH))  # the script imports its siblings
    try:
        spec = importlib.util.spec_from_file_location(
            "bench_live_scaleout", BENCH / "live_scaleout.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH))


class _Health:
    def __init__(self, doc: dict[str, Any] | None) -> None:
        self.doc = doc

    def health(self) -> dict[str, Any] | None:
        return self.doc


def _ready(*partitions: int, recovering: bool = False) -> _Health:
    return _Health({"ok": True, "recovering": recovering, "partitions": list(partitions)})


def test_settled_only_when_the_workers_hold_each_partition_once() -> None:
    """Two ready workers sharing the four partitions have settled; a worker
    still showing its old assignment, one restoring, one not answering or
    one without partitions have not."""
    settled = _bench().settled
    assert settled([_ready(0, 1), _ready(2, 3)], 4)
    assert settled([_ready(0, 1, 2, 3)], 4)
    assert not settled([_ready(0, 1, 2, 3), _ready(2, 3)], 4)  # the first not yet revoked
    assert not settled([_ready(0, 1), _ready(2, 3, recovering=True)], 4)
    assert not settled([_ready(0, 1), _Health(None)], 4)
    assert not settled([_ready(0, 1, 2, 3), _ready()], 4)
    assert not settled([_ready(0, 1), _ready(2)], 4)
