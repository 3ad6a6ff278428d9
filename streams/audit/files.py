"""The file audit (SPEC §6, ``fencewatch audit FILE...``) as library calls:
feed JSON Lines files to a :class:`~streams.core.replay.Replay` in order
(:func:`run_files`), say what an input that holds no valid event looks like
(:func:`no_event_message`), and keep the collector off while replaying
(:func:`batch_gc`). The CLI parses the flags, renders and prints.
"""

from __future__ import annotations

import gc
import io
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO

from streams.audit.ports import FileProgress, Interruptible
from streams.core.replay import Invalid, Replay
from streams.errors import Interrupted, StrictStop

__all__ = [
    "HEAD_BYTES",
    "Input",
    "Interrupted",
    "StrictStop",
    "batch_gc",
    "format_hint",
    "invalid_where",
    "no_event_message",
    "not_json_lines_hint",
    "run_files",
]


def run_files(
    replay: Replay,
    streams_: list[tuple[str, IO[bytes]]],
    *,
    strict: bool,
    progress: FileProgress | None = None,
    interrupt: Interruptible | None = None,
) -> list[Input]:
    """Feed each file's lines in order; line numbers count on across files.
    Returns the inputs read (their first bytes say what a file that held no
    event was)."""
    inputs: list[Input] = []
    offset = 0
    for name, fh in streams_:
        src = Input(name, fh, replay, progress, interrupt)
        inputs.append(src)
        if progress is not None:
            progress.file(name, src.size)
        before = replay.invalid_count
        offset = replay.feed_stream(src.read, source=name, offset=offset, stop_on_invalid=strict)
        if strict and replay.invalid_count != before:
            raise StrictStop(inputs)
        if interrupt is not None and interrupt.requested:
            break
    return inputs


class Input:
    """One input file as :meth:`Replay.feed_stream` reads it: counts the bytes
    for the progress display, keeps the first bytes (gzip magic? a JSON
    array?), and ends the stream early when Ctrl-C was pressed."""

    __slots__ = ("_interrupt", "_progress", "_read", "_replay", "head", "name", "size")

    def __init__(
        self,
        name: str,
        fh: IO[bytes],
        replay: Replay,
        progress: FileProgress | None,
        interrupt: Interruptible | None,
    ) -> None:
        self.name = name
        # read1: return what is there (a pipe need not fill a whole chunk).
        self._read = getattr(fh, "read1", fh.read)
        self._replay = replay
        self._progress = progress
        self._interrupt = interrupt
        self.head = b""
        self.size = _regular_size(fh)

    def read(self, n: int) -> bytes:
        if self._interrupt is None:
            data = self._read(n)
        else:
            got = self._interrupt.call(self._read, n)
            if got is None:
                # Ctrl-C: stop here, between lines. Raised rather than
                # returning end of input, which would feed the partial line
                # read so far as a (spurious, invalid) record.
                raise Interrupted
            data = got
        if data:
            if len(self.head) < HEAD_BYTES:
                self.head += data[: HEAD_BYTES - len(self.head)]
            if self._progress is not None:
                r = self._replay
                self._progress.bytes_read(len(data), r.records - r.invalid_count)
        return data


#: The first bytes of an input kept to tell gzip or a JSON array (publish reads as many).
HEAD_BYTES = 64
_GZIP_MAGIC = b"\x1f\x8b"


def _regular_size(fh: IO[bytes]) -> int | None:
    """The size of a regular file (for "bytes of total"); None for a pipe."""
    try:
        st = os.fstat(fh.fileno())
    except (OSError, ValueError, io.UnsupportedOperation):
        return None
    return st.st_size if stat.S_ISREG(st.st_mode) else None


def format_hint(inputs: list[Input]) -> str | None:
    """What an input that is not JSON Lines looks like, from its first bytes:
    gzip, or one JSON array; None when neither."""
    for src in inputs:
        hint = not_json_lines_hint(src.head, src.name, "audit")
        if hint is not None:
            return hint
    return None


def not_json_lines_hint(head: bytes, name: str, command: str) -> str | None:
    """What input whose first bytes are ``head`` looks like when it is not
    JSON Lines — gzip, or one JSON array — and the pipe that feeds it to
    ``fencewatch COMMAND -``; None when neither. One wording for every command
    that reads event files (audit, publish)."""
    # Piped input has no file name to put in the command: pipe it on.
    piped = name in ("stdin", "<stdin>", "-")
    if head.startswith(_GZIP_MAGIC):
        source = "... | zcat" if piped else f"zcat {name}"
        return f"is it gzip-compressed? try: {source} | fencewatch {command} -"
    if head.removeprefix(b"\xef\xbb\xbf").lstrip().startswith(b"["):
        source = "... | jq -c '.[]'" if piped else f"jq -c '.[]' {name}"
        return (
            f"it looks like one JSON array; {command} reads JSON Lines, one event object per "
            f"line: {source} | fencewatch {command} -"
        )
    return None


def no_event_message(replay: Replay, what: str, inputs: list[Input]) -> str | None:
    """SPEC §6: input that holds records and not one valid event is unreadable
    (a gzip file, one JSON array, the wrong file). The one line saying so,
    with a guess at why; None when there is an event, or no record at all
    (an empty input is an empty report)."""
    if replay.records == 0 or replay.records > replay.invalid_count:
        return None
    n = replay.records
    base = f"{what}: no valid event in {n:,} record{'s' if n != 1 else ''}"
    hint = format_hint(inputs)
    if hint is not None:
        return f"{base} ({hint})"
    if replay.invalid and all("over the limit" in i.reason for i in replay.invalid):
        return f"{base} (every record is over --max-event-bytes {replay.max_event_bytes})"
    if replay.invalid:
        inv = replay.invalid[0]
        field = inv.field + ": " if inv.field else ""
        return f"{base} (first, {invalid_where(inv)}: {field}{inv.reason})"
    return base


def invalid_where(inv: Invalid) -> str:
    return f"{inv.source}:{inv.line}" if inv.line is not None else f"{inv.source}@{inv.offset}"


@contextmanager
def batch_gc() -> Iterator[None]:
    """Keep the cyclic garbage collector off during a replay.

    The detector's objects form no reference cycles (each is freed by
    reference counting the moment it is dropped), so all the collector would
    do is rescan the evidence retained for every workflow, again and again
    (a large share of the audit: docs/performance.md). It is switched back
    on, as it was, afterwards.

    What the replay allocated and kept is frozen first (``gc.freeze``): it is
    all in the youngest generation, and the first allocation after the
    collector is back on would otherwise scan every retained event once, then
    again as it is promoted (12% of an audit of 100,000 events, measured with
    py-spy). Frozen objects are still freed by reference counting when the
    replay is dropped; only a reference cycle made during the replay would
    wait for ``gc.unfreeze`` (the detector makes none)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.freeze()
            gc.enable()
