"""The RocksDB store's disk fills up: a clear error, and after space is freed a
restarted worker recovers with nothing corrupted, lost or duplicated."""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.live.conftest import ENGINES

pytestmark = [pytest.mark.kafka, pytest.mark.faults]

Live = Callable[..., Any]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs (needs root, as CI runs); unmounted afterwards."""
    where = tmp_path / "small-disk"
    where.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(
            f"cannot mount a small tmpfs for the full-disk test (needs root and "
            f"CAP_SYS_ADMIN): {done.stderr.strip()}",
            pytrace=False,
        )
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("engine", ENGINES)
def test_rocksdb_on_a_full_disk(live: Live, small_disk: Path, engine: str) -> None:
    """With its data dir on a 4 MiB filesystem that fills up, the RocksDB worker stops
    with one clear line naming the disk error (no traceback pages); after the disk is
    grown and the worker restarted on the same data dir, the result equals the audit with
    each finding revision once."""
    h = live(partitions=3, engine=engine)
    # The rdkafka engine's RocksDB has no write-ahead log (the changelog is
    # its truth): the disk fills only once its 8 MiB memtables flush.
    events = h.scenario_events(n_keys=4_000 if engine == "faust" else 20_000, epochs=3, seed=5)
    extra = {"FENCEWATCH_DATA_DIR": str(small_disk)}
    w = h.start("w1", store="rocksdb://", extra=extra)
    w.wait_ready()
    h.produce(events)
    deadline = time.monotonic() + 180
    while w.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
    assert w.proc.poll() not in (None, 0), "the worker kept running (or exited 0) on a full disk"
    last = [line for line in w.tail(4000).splitlines() if line.strip()][-1]
    assert last.startswith("fencewatch run: the worker stopped: "), last
    assert "No space left on device" in last, last

    # Space again; a worker restarted on the same data directory recovers.
    subprocess.run(["mount", "-o", "remount,size=256m", str(small_disk)], check=True)
    w2 = h.start("w2", store="rocksdb://", extra=extra)
    w2.wait_ready(timeout=120)
    h.wait_all_committed(timeout=300)
    latest, seen = h.live_findings()
    assert [x for x, n in Counter(seen).items() if n > 1] == []
    assert latest == h.audit()
    assert len(latest) > 500
    print(f"full disk: {last}")
