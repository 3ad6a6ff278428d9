"""streams.live.heap: the free heap pages a restore or a burst leaves go back to the OS."""

from __future__ import annotations

import subprocess
import sys

import pytest

from streams.live import heap

_CHILD = r"""
import gc
from streams.live.heap import release_free_heap

def rss() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096

# 1 KiB objects come from glibc's malloc (pymalloc takes only <= 512 B);
# keeping one in eight leaves the freed ones as holes glibc does not trim
# from the top of its heap by itself.
blocks = [bytes(1024) for _ in range(200_000)]
kept = blocks[::8]
del blocks
gc.collect()
before = rss()
assert release_free_heap() is True
print(before - rss(), len(kept))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim, Linux")
def test_releasing_the_free_heap_lowers_resident_memory() -> None:
    """After freeing 7/8 of 200,000 blocks of 1 KiB, release_free_heap gives
    back at least 40 MB of resident memory (in a child process: its heap alone)."""
    out = subprocess.run(
        [sys.executable, "-c", _CHILD], capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    released = int(out[0])
    assert released >= 40 * 2**20, f"released only {released / 2**20:.1f} MB"


def test_without_malloc_trim_it_reports_false(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the C library has no malloc_trim (musl, macOS) it returns False, no error."""
    monkeypatch.setattr(heap, "_malloc_trim", lambda: None)
    assert heap.release_free_heap() is False


def test_a_failing_trim_is_reported_as_false(monkeypatch: pytest.MonkeyPatch) -> None:
    """A trim call that raises never escapes: False."""

    def boom(_pad: int) -> int:
        raise OSError("no")

    monkeypatch.setattr(heap, "_malloc_trim", lambda: boom)
    assert heap.release_free_heap() is False


def test_idle_trim_is_due_once_per_quiet_spell_after_work() -> None:
    """Due once the count has not moved for quiet_s after it moved; not again until it moves."""
    trim = heap.IdleTrim(quiet_s=10.0)
    assert trim.due(0, 0.0) is False  # nothing processed yet
    assert trim.due(0, 100.0) is False  # idle from the start: nothing to give back
    assert trim.due(500, 101.0) is False  # work
    assert trim.due(500, 110.9) is False  # quiet for 9.9 s
    assert trim.due(500, 111.0) is True  # quiet for 10 s
    assert trim.due(500, 200.0) is False  # still quiet: once per spell
    assert trim.due(501, 201.0) is False
    assert trim.due(501, 211.0) is True


def test_idle_trim_never_fires_while_events_keep_coming() -> None:
    """A busy worker (the count moving at every call) is never walked."""
    trim = heap.IdleTrim(quiet_s=1.0)
    assert not any(trim.due(n, n * 5.0) for n in range(1, 100))
