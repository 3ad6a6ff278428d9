"""The bounded stop both engines share (issue 24 item 3): how long a
graceful stop may take, and the way out when it takes longer or a second
signal comes (no Python shutdown: threads blocked in a client call, or a
framework waiting on a dead broker, would hold the process)."""

from __future__ import annotations

import contextlib
import logging
import os
import sys

__all__ = ["STOP_BOUND_S", "hard_exit"]

#: Seconds from the first SIGTERM/SIGINT to the process's end, whatever the
#: broker does (Kubernetes' default grace period is 30 s).
STOP_BOUND_S = 12.0


def _flush_logs() -> None:
    for handler in logging.getLogger().handlers:
        with contextlib.suppress(Exception):  # leaving anyway
            handler.flush()


def hard_exit(log: logging.Logger, code: int, line: str) -> None:
    """Log ``line`` (one line, the reason), flush, and end the process now
    with ``code``."""
    log.warning("%s", line)
    _flush_logs()
    sys.stderr.flush()
    os._exit(code)
