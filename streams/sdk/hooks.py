"""Observers of what the SDK reports.

An integration that wants to see every event the reporter publishes (the
OpenTelemetry one puts the ownership identity on the current span) registers
an observer here; the SDK itself imports no integration. Observers run on the
publishing thread right after the event was handed to the producer, so they
must be quick and must not raise (an exception propagates to the caller of
the reporter).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from streams.core.records import Event

__all__ = ["EventObserver", "add_observer", "observers", "remove_observer"]

EventObserver = Callable[[Event], None]

_lock = threading.Lock()
# A tuple swapped under the lock: the reporter reads it without locking.
_observers: tuple[EventObserver, ...] = ()


def add_observer(observer: EventObserver) -> None:
    """Call ``observer(event)`` for every event any reporter publishes (once,
    however often it is added)."""
    global _observers
    with _lock:
        if observer not in _observers:
            _observers = (*_observers, observer)


def remove_observer(observer: EventObserver) -> None:
    """Stop calling ``observer`` (a no-op if it was not registered)."""
    global _observers
    with _lock:
        _observers = tuple(o for o in _observers if o is not observer)


def observers() -> tuple[EventObserver, ...]:
    """The registered observers, in registration order."""
    return _observers
