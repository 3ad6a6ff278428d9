"""A child process that dies with its parent: the kernel sends it a signal
when the parent dies (Linux ``PR_SET_PDEATHSIG``, kept across ``exec``).

Why: a process started by fencewatch (a demo's processor, ``fencewatch
run``'s engine, a coordinator request) must not outlive the process that
started it when that one is killed with -9 and no cleanup code runs.
"""

from __future__ import annotations

import ctypes
import os
import sys

__all__ = ["die_with_parent"]

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int, signal_number: int) -> bool:
    """Ask for ``signal_number`` when the parent dies; False if the parent
    ``parent_pid`` is already gone (the caller should exit: it is an orphan).
    Raises OSError if the kernel refuses. Elsewhere than Linux only checks."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal_number, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), f"prctl: {os.strerror(ctypes.get_errno())}")
    # After the call: a parent that died before it was not seen by the kernel.
    return os.getppid() == parent_pid
