"""Ctrl-C that Python would otherwise drop.

Python turns SIGINT into a KeyboardInterrupt raised in whatever the main
thread runs at that moment. When that is a weakref callback or a
``__del__`` — importlib runs one at the end of every import
(``_get_module_lock``'s ``cb``) — the exception cannot propagate: Python
prints "Exception ignored in ..." and carries on, and the Ctrl-C is lost
(the split-brain demo, interrupted while it imported, ran to its end and
exited 0).

While :class:`DroppedInterrupts` is active, such a dropped KeyboardInterrupt
is not printed: a helper thread raises it again in the main thread a moment
later, where it lands in ordinary code (raising it from the hook itself
would be dropped too), and :attr:`DroppedInterrupts.seen` tells the CLI that
a stop was asked for even if the second delivery came too late.
"""

from __future__ import annotations

import _thread
import signal
import sys
import threading
import time
from typing import Any

__all__ = ["DroppedInterrupts"]

#: How long the helper thread waits before raising the interrupt again: the
#: callback (or the garbage collection that ran it) ends first, so the second
#: delivery lands in ordinary code, not in the next callback.
_REDELIVER_AFTER_S = 0.05


class DroppedInterrupts:
    """Context manager: re-deliver KeyboardInterrupts dropped as unraisable.

    Other unraisable exceptions go to the hook that was there before. The
    re-delivery calls the SIGINT handler in force at that moment (a command
    that installed its own handler gets its own behaviour); none is made
    after the context has exited."""

    def __init__(self) -> None:
        self.seen = False
        self._active = False
        self._lock = threading.Lock()
        self._previous: Any = None

    def __enter__(self) -> DroppedInterrupts:
        self._previous = sys.unraisablehook
        sys.unraisablehook = self._hook
        self._active = True
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._active = False
        sys.unraisablehook = self._previous

    def _hook(self, unraisable: Any) -> None:
        exc_type = unraisable.exc_type
        if exc_type is not None and issubclass(exc_type, KeyboardInterrupt):
            self.seen = True
            threading.Thread(
                target=self._redeliver, name="fencewatch-interrupt", daemon=True
            ).start()
            return
        self._previous(unraisable)

    def _redeliver(self) -> None:
        time.sleep(_REDELIVER_AFTER_S)
        with self._lock:
            if self._active:
                _thread.interrupt_main(signal.SIGINT)
