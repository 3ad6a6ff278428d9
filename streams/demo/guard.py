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

import os
import sys

from streams.lifeline import die_with_parent

__all__ = ["guarded", "main"]


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
    try:
        alive = die_with_parent(parent, signal_number)
    except OSError as exc:
        sys.stderr.write(f"guard: {exc.strerror}\n")
        return 2
    if not alive:
        return 1  # the parent is already gone: do not start an orphan
    os.execvp(command[0], command)
    return 2  # not reached: execvp replaces this process or raises


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
