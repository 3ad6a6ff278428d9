"""``fencewatch publish FILE...|-``: JSON Lines events into the events topic.

Each line is validated as the audit validates it (:func:`parse_event`, SPEC
§2 and §7); a valid event is produced as its exact bytes, keyed by its
``workflow_key`` (so a key's events stay in one partition, in file order),
through the idempotent producer (``acks=all``: a retry never duplicates a
record). An invalid line is reported (``FILE:LINE: field: reason``) and never
sent; its valid neighbours still are. Blank lines are skipped.

Publishing the same file again changes no finding: an event with a ``seq``
is recognised as redelivered by its seq, and one with neither ``seq`` nor
``event_id`` is given ``event_id`` ``publish:<digest of the line and its line
number>``, which the detector drops when it sees it again (SPEC §2). Two
identical lines of one file keep distinct ids, so they count twice, as in
``fencewatch audit FILE``. ``--no-event-ids`` sends every line unchanged.

Exit status: 0 every event sent; 1 some lines were invalid (every valid one
was sent); 2 usage error, unreadable file, missing topic, broker failure or
events not acknowledged; 130 Ctrl-C (what was queued is still flushed and
counted).
"""

from __future__ import annotations

import argparse
import io
import os
import stat
import sys
from collections.abc import Iterator
from typing import IO, Any

from streams.audit.files import HEAD_BYTES, not_json_lines_hint
from streams.cli.kafka_args import (
    add_connection_args,
    add_kafka_config_arg,
    connection_from_args,
    kafka_config,
)
from streams.core.validate import DEFAULT_MAX_EVENT_BYTES
from streams.errors import FencewatchError
from streams.kafka.topics import DEFAULT_EVENTS_TOPIC
from streams.report.terminal import term_safe

__all__ = ["register"]

_BOM = b"\xef\xbb\xbf"
#: Invalid lines printed one by one; past this only their count is given.
MAX_REPORTED = 20
_UPDATE_EVERY = 256
INVALID = 1
FAILURE = 2


def register(sub: Any) -> None:
    p = sub.add_parser(
        "publish",
        help="publish JSON Lines events (files or -) to the events topic",
        description=(
            "Validate each line as the audit does and publish the valid events to the events "
            "topic, keyed by workflow_key; invalid lines are reported and not sent. "
            "Exit 0 all sent, 1 some lines invalid, 2 failure."
        ),
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="JSON Lines files, or - for stdin")
    p.add_argument("--topic", default=None, help=f"events topic (default {DEFAULT_EVENTS_TOPIC})")
    p.add_argument(
        "--max-event-bytes",
        type=int,
        default=DEFAULT_MAX_EVENT_BYTES,
        metavar="N",
        help=f"longest event line accepted (default {DEFAULT_MAX_EVENT_BYTES})",
    )
    p.add_argument(
        "--no-event-ids",
        dest="event_ids",
        action="store_false",
        help="send lines unchanged: no event_id for events without seq and event_id "
        "(then publishing a file twice duplicates those events)",
    )
    add_connection_args(p)
    add_kafka_config_arg(p)
    p.set_defaults(handler=_main)


def _err(msg: str) -> None:
    # Invalid lines are named with their reason, which may quote the line's
    # data: control characters are escaped (one line, no terminal codes).
    print(f"fencewatch publish: {term_safe(msg)}", file=sys.stderr)


def _lines(fh: IO[bytes], limit: int) -> Iterator[tuple[int, bytes | None]]:
    """``(line number, line)`` of a binary stream; a line longer than
    ``limit`` comes as ``None`` (and is never held whole in memory)."""
    number = 0
    while True:
        line = fh.readline(limit + 2)
        if not line:
            return
        number += 1
        if len(line) == limit + 2 and not line.endswith(b"\n"):
            while line and not line.endswith(b"\n"):  # skip the rest of the long line
                line = fh.readline(1 << 16)
            yield number, None
            continue
        yield number, line


class _Publisher:
    """Validates lines, queues the valid ones, counts what the broker acknowledged."""

    def __init__(
        self, producer: Any, topic: str, max_bytes: int, *, event_ids: bool = True
    ) -> None:
        self.producer = producer
        self.event_ids = event_ids
        self.topic = topic
        self.max_bytes = max_bytes
        self.queued = 0
        self.sent = 0
        self.invalid = 0
        self.failed = 0
        self.first_failure: str | None = None

    def _delivered(self, err: Any) -> None:
        # Called from producer.poll/flush, on this thread.
        if err is None:
            self.sent += 1
            return
        self.failed += 1
        if self.first_failure is None:
            self.first_failure = str(err)

    def invalid_line(self, where: str, reason: str) -> None:
        self.invalid += 1
        if self.invalid <= MAX_REPORTED:
            _err(f"{where}: {reason} (not sent)")

    def feed(self, name: str, fh: IO[bytes], progress: Any) -> None:
        from streams.core.validate import InvalidEvent, parse_event

        unreported = 0  # bytes read since the display was last updated
        for number, line in _lines(fh, self.max_bytes):
            unreported += 0 if line is None else len(line)
            if number % _UPDATE_EVERY == 0:  # per line it would cost more than the send
                progress.bytes_read(unreported, self.queued)
                unreported = 0
            if line is None:
                limit = self.max_bytes
                self.invalid_line(f"{name}:{number}", f"(record): line over {limit} bytes")
                continue
            # A byte order mark at the start of a line (of the file, or of a
            # file concatenated into it) is not sent: the audit ignores it
            # too (streams.core.replay.Replay.feed_stream), the processor would not.
            data = line.removeprefix(_BOM).strip()
            if not data:
                continue
            try:
                event = parse_event(data, max_bytes=self.max_bytes)
            except InvalidEvent as exc:
                self.invalid_line(f"{name}:{number}", str(exc))
                continue
            if self.event_ids and event.seq is None and event.event_id is None:
                data = with_event_id(data, number)
            self._produce(data, event.workflow_key.encode())
        progress.bytes_read(unreported, self.queued)

    def _produce(self, value: bytes, key: bytes) -> None:
        while True:
            try:
                self.producer.produce(self.topic, value, key=key, on_delivery=self._delivered)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                self.producer.poll(0.1)
        self.queued += 1
        self.producer.poll(0)


def with_event_id(line: bytes, number: int) -> bytes:
    """``line`` (a valid event without seq and event_id) with a deterministic
    ``event_id`` from its bytes and line number: the same line of the same file
    gets the same id on every run, two equal lines of one file two ids."""
    import hashlib

    import orjson

    digest = hashlib.sha256(line + b"\0" + str(number).encode()).hexdigest()[:32]
    doc = orjson.loads(line)
    doc["event_id"] = f"publish:{digest}"
    return orjson.dumps(doc)


def _head(name: str) -> bytes:
    """The first bytes of a file, or of stdin when it is a pipe or a file
    (peeked, so they are still read; a terminal is not waited on)."""
    if name != "-":
        with open(name, "rb") as fh:
            return fh.read(HEAD_BYTES)
    stdin = sys.stdin.buffer
    if sys.stdin.isatty() or not hasattr(stdin, "peek"):
        return b""
    return bytes(stdin.peek(HEAD_BYTES)[:HEAD_BYTES])


def _open(name: str) -> IO[bytes]:
    if name == "-":
        return sys.stdin.buffer
    return open(name, "rb")


def _main(args: argparse.Namespace) -> int:
    from streams.cli.progress import AuditProgress, audit_progress
    from streams.kafka.admin import TopicAdmin
    from streams.kafka.clients import Producer

    topic = args.topic or DEFAULT_EVENTS_TOPIC
    if args.max_event_bytes < 1:
        _err("--max-event-bytes must be at least 1")
        return FAILURE
    if args.files.count("-") > 1:
        _err("- (stdin) may be given once")
        return FAILURE
    if "-" in args.files and sys.stdin is None:  # `<&-`: Python's stdin is None
        _err("cannot read stdin: it is closed (no descriptor 0)")
        return FAILURE
    for name in args.files:  # every file readable, and JSON Lines, before anything is sent
        try:
            head = _head(name)
        except OSError as exc:
            _err(f"{name}: {exc.strerror or exc}")
            return FAILURE
        hint = not_json_lines_hint(head, "stdin" if name == "-" else name, "publish")
        if hint is not None:
            # A gzip file or a JSON array would be every line invalid, each
            # named with a parse error that does not say why (audit's hint).
            _err(f"{'stdin' if name == '-' else name}: not JSON Lines ({hint})")
            return FAILURE
    try:
        conn = connection_from_args(args, extra=kafka_config(args.kafka_config))
        # Reachable within --connect-timeout, and the topic exists: a typo in
        # --topic must not create a topic through the broker's auto-creation.
        admin = TopicAdmin(conn)
        admin.probe()
        if admin.missing([topic]):
            _err(
                f"topic {topic} does not exist on {conn.bootstrap_servers}: "
                "create it with fencewatch topics create (or give --topic)"
            )
            return FAILURE
        producer = Producer(conn, {"linger.ms": 20})
    except (ValueError, FencewatchError) as exc:
        _err(str(exc))
        return FAILURE
    typed = "-" in args.files and sys.stdin.isatty()
    if typed:
        _err("reading events from stdin (end with Ctrl-D)")
    pub = _Publisher(producer, topic, args.max_event_bytes, event_ids=args.event_ids)
    # A display redrawn on the line being typed would garble it (as in audit).
    progress = AuditProgress() if typed else audit_progress(sys.stderr)
    interrupted = False
    try:
        for name in args.files:
            fh = _open(name)
            try:
                progress.file("stdin" if name == "-" else name, _size(fh))
                pub.feed("stdin" if name == "-" else name, fh, progress)
            finally:
                if fh is not sys.stdin.buffer:
                    fh.close()
    except KeyboardInterrupt:
        interrupted = True
    except OSError as exc:
        progress.close()
        _err(f"reading input: {exc.strerror or exc}")
        unacked = producer.flush(conn.connect_timeout)
        _summary(pub, topic, unacked)
        return FAILURE
    finally:
        progress.close()
    if interrupted:
        _err("interrupted: the rest of the input was not read")
    try:
        # What was queued still goes (a broker that stopped answering is
        # given up after this, and the count says what was lost).
        unacked = producer.flush(conn.connect_timeout + 30)
    except FencewatchError as exc:
        _err(str(exc))
        return FAILURE
    _summary(pub, topic, unacked)
    if interrupted:
        return 130
    if pub.failed or unacked:
        return FAILURE
    return INVALID if pub.invalid else 0


def _size(fh: IO[bytes]) -> int | None:
    """A regular file's size (the progress bar's total); None for a pipe."""
    try:
        st = os.fstat(fh.fileno())
    except (OSError, ValueError, io.UnsupportedOperation):
        return None
    return st.st_size if stat.S_ISREG(st.st_mode) else None


def _summary(pub: _Publisher, topic: str, unacked: int) -> None:
    if pub.invalid > MAX_REPORTED:
        _err(f"... and {pub.invalid - MAX_REPORTED} more invalid line(s)")
    line = f"published {pub.sent:,} event(s) to {topic}"
    if pub.invalid:
        line += f"; {pub.invalid:,} invalid line(s) not sent"
    print(line)
    lost = pub.failed + unacked
    if lost:
        first = f" (first: {pub.first_failure})" if pub.first_failure else ""
        _err(f"{lost} event(s) not acknowledged by the broker{first}")
