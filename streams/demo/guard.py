"""Run a command that dies with its parent: ``python -m streams.demo.guard
PARENT_PID SIGNAL -- COMMAND [ARG...]``.

The demos start a live processor and worker processes. Ctrl-C and errors are
handled by the demo, which stops its children; but if the demo itself is
killed with SIGKILL nothing would stop them, and a processor would go on
running forever. On Linux this trampoline asks the kernel to send SIGNAL to
the process when its parent dies (``PR_SET_PDEATHSIG``, kept across
``exec``), checks the parent is still there (closing the race with a parent
that died before the call), then execs the command in its place.
Elsewhere it only execs.
"""

from __future__ import annotations

import ctypes
import os
import sys

__all__ = ["guarded", "main"]

_PR_SET_PDEATHSIG = 1


def guarded(parent_pid: int, signal_number: int, argv: list[str]) -> list[str]:
    """The argv that runs ``argv`` under this guard."""
    return [
        sys.executable,
        "-m",
        "streams.demo.guard",
        str(parent_pid),
        str(signal_number),
        "--",
        *argv,
    ]


def main(args: list[str]) -> int:
    if len(args) < 4 or args[2] != "--":
        sys.stderr.write("usage: python -m streams.demo.guard PARENT_PID SIGNAL -- COMMAND...\n")
        return 2
    parent, signal_number, command = int(args[0]), int(args[1]), args[3:]
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal_number, 0, 0, 0) != 0:
            sys.stderr.write(f"guard: prctl failed: {os.strerror(ctypes.get_errno())}\n")
            return 2
    if os.getppid() != parent:
        return 1  # the parent is already gone: do not start an orphan
    os.execvp(command[0], command)
    return 2  # not reached: execvp replaces this process or raises


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
