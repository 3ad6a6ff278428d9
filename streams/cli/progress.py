"""Progress on stderr for long commands, and Ctrl-C that stops an audit cleanly.

The display is shown only when stderr is a terminal (``rich``, imported only
then); piped or redirected, nothing extra is written. The CLI owns all of it:
the readers only call :meth:`AuditProgress.advance` and friends.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, TextIO, TypeVar

__all__ = ["AuditProgress", "Interrupt", "audit_progress", "demo_status"]

_T = TypeVar("_T")


class Interrupt:
    """SIGINT while reading input: stop at the next record boundary.

    The handler only sets a flag, so an event is never half-applied to the
    detector; it raises KeyboardInterrupt only while the reader is blocked
    waiting for input (:meth:`call`), so that a slow pipe or an idle topic
    does not keep the user waiting for the next record. Installed only in the
    main thread (where Python delivers signals), restored on exit."""

    def __init__(self) -> None:
        self.requested = False
        self._waiting = False
        self._previous: Any = None
        self._installed = False

    def __enter__(self) -> Interrupt:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
            self._installed = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)
            self._installed = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True
        if self._waiting:
            raise KeyboardInterrupt

    def call(self, fn: Callable[..., _T], *args: Any) -> _T | None:
        """``fn(*args)`` (a blocking read), or None once interrupted."""
        if self.requested:
            return None
        self._waiting = True
        try:
            return fn(*args)
        except KeyboardInterrupt:
            self.requested = True
            return None
        finally:
            self._waiting = False


class AuditProgress:
    """The audit's display: a no-op unless built by :func:`audit_progress`
    for a terminal."""

    def file(self, name: str, total_bytes: int | None) -> None:
        """A new input file starts (total None: a pipe, size unknown)."""

    def bytes_read(self, n: int, events: int) -> None:
        """``n`` more bytes of the current file read; ``events`` so far."""

    def topic(self, name: str, total_records: int, partitions: int) -> None:
        """A topic replay starts: records to read (from the end offsets)."""

    def records(self, done: int, partitions_done: int) -> None:
        """Records read so far and partitions finished."""

    def close(self) -> None:
        """Stop the display (before the report is written)."""


class _RichAudit(AuditProgress):
    def __init__(self, stream: TextIO) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )

        self._console = Console(file=stream, stderr=stream is sys.stderr)
        # Compact: an 80-column terminal shows every column.
        self._cols = {
            "file": (
                TextColumn("[bold]{task.description}"),
                BarColumn(bar_width=10),
                DownloadColumn(),
                TransferSpeedColumn(),
                TextColumn("{task.fields[events]:,} events"),
                TextColumn("ETA"),
                TimeRemainingColumn(),
            ),
            "topic": (
                TextColumn("[bold]{task.description}"),
                BarColumn(bar_width=10),
                TextColumn("{task.completed:,.0f}/{task.total:,.0f}"),
                _rate_column(),
                TextColumn("partitions {task.fields[parts]}"),
                TextColumn("ETA"),
                TimeRemainingColumn(),
            ),
        }
        self._progress_cls = Progress
        self._progress: Any = None
        self._task: Any = None
        self._partitions = 0

    def _start(self, kind: str) -> None:
        if self._progress is None:
            self._progress = self._progress_cls(
                *self._cols[kind], console=self._console, transient=True
            )
            self._progress.start()

    def file(self, name: str, total_bytes: int | None) -> None:
        self._start("file")
        if self._task is not None:
            self._progress.update(self._task, visible=False)
        self._task = self._progress.add_task(_short(name), total=total_bytes, events=0)

    def bytes_read(self, n: int, events: int) -> None:
        self._progress.update(self._task, advance=n, events=events)

    def topic(self, name: str, total_records: int, partitions: int) -> None:
        self._start("topic")
        self._partitions = partitions
        self._task = self._progress.add_task(
            _short(name), total=total_records, parts=f"0/{partitions}"
        )

    def records(self, done: int, partitions_done: int) -> None:
        self._progress.update(
            self._task, completed=done, parts=f"{partitions_done}/{self._partitions}"
        )

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


def _short(name: str, width: int = 20) -> str:
    """A file or topic name cut from the left to fit (the end says most)."""
    from rich.markup import escape

    return escape(name if len(name) <= width else "…" + name[-(width - 1) :])


def _rate_column() -> Any:
    from rich.progress import ProgressColumn
    from rich.text import Text

    class RateColumn(ProgressColumn):
        """Records per second (rich's speed column counts bytes)."""

        def render(self, task: Any) -> Text:
            speed = task.finished_speed or task.speed
            return Text("" if speed is None else f"{speed:,.0f}/s")

    return RateColumn()


def audit_progress(stream: TextIO) -> AuditProgress:
    """A display on ``stream`` when it is a terminal, else one that does nothing."""
    isatty = getattr(stream, "isatty", None)
    if isatty is None or not isatty():
        return AuditProgress()
    return _RichAudit(stream)


@contextmanager
def demo_status(stream: TextIO, out: Callable[[str], None]) -> Iterator[Callable[[str], None]]:
    """For the demos: a spinner with the current step and the time it has
    taken, on ``stream`` when it is a terminal. Yields the ``out`` to use: it
    prints each story line above the spinner (through the display, so that
    the two never overwrite each other) and makes it the spinner's text."""
    isatty = getattr(stream, "isatty", None)
    if isatty is None or not isatty():
        yield out
        return
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    console = Console(file=stream, stderr=stream is sys.stderr, highlight=False)
    shares_screen = sys.stdout.isatty()
    progress = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        # rich would route every print() to its console (stderr) while the
        # spinner runs: right when stdout is the same screen, wrong when it
        # is a file or a pipe (`demo live > out.txt` left the file empty).
        redirect_stdout=shares_screen,
    )
    task = progress.add_task("starting", total=None)

    def say(line: str) -> None:
        if shares_screen:
            progress.console.print(line, markup=False, soft_wrap=True)
        else:
            out(line)
        step = line.strip()
        if step:
            # The story's lines start with the time since the demo began.
            progress.update(task, description=step.split("  ", 1)[-1][:100])

    with progress:
        yield say
