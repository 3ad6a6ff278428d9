"""What the audits report to while they read (the CLI's terminal display)
and how a Ctrl-C reaches them: ports the CLI's objects fit
(:class:`streams.cli.progress.AuditProgress`, :class:`~streams.cli.progress.Interrupt`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

__all__ = ["FileProgress", "Interruptible", "TopicProgress"]

_T = TypeVar("_T")


class FileProgress(Protocol):
    """How far a file audit got."""

    def file(self, name: str, total_bytes: int | None) -> None: ...

    def bytes_read(self, n: int, events: int) -> None: ...


class TopicProgress(Protocol):
    """How far a topic audit got."""

    def topic(self, name: str, total_records: int, partitions: int) -> None: ...

    def records(self, done: int, partitions_done: int) -> None: ...


class Interruptible(Protocol):
    """A blocking step that a Ctrl-C can cut short (``call`` returns None then)."""

    requested: bool

    def call(self, fn: Callable[..., _T], *args: Any) -> _T | None: ...
