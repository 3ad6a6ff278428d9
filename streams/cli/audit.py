"""``fencewatch audit``: replay JSON Lines files or a topic through the detector
and report (SPEC §6).

Exit status: 0 when no finding reaches ``--fail-on``, 1 when one does, 2 for a
usage error or unreadable input (and, with ``--strict``, invalid input).
"""

from __future__ import annotations

import argparse
import gc
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime
from typing import IO, Any

from streams._native import native_summary
from streams.core.detector import DEFAULT_MAX_EVENTS_PER_KEY, Detector, DetectorConfig
from streams.core.records import SEVERITY_RANK, Severity
from streams.core.replay import Replay
from streams.core.validate import DEFAULT_MAX_EVENT_BYTES
from streams.errors import FencewatchError
from streams.report import FORMATS, render_html, render_json, render_jsonl, render_text

__all__ = ["batch_gc", "register", "run_files"]

_FAIL_ON = [s.value for s in Severity] + ["never"]


class _StrictStop(Exception):
    """First invalid record under --strict."""


class _Unreadable(Exception):
    """An input path that cannot be opened."""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "audit",
        help="replay JSON Lines files or a topic through the detector and report findings",
        description="Replay ownership evidence and report stale-owner findings (SPEC §6).",
    )
    p.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="JSON Lines files, read in order as one stream ('-' is stdin; default: stdin)",
    )
    p.add_argument("--format", choices=FORMATS, default="text")
    p.add_argument(
        "--fail-on",
        choices=_FAIL_ON,
        default="warning",
        help="exit 1 when a finding reaches this severity (default: warning)",
    )
    p.add_argument(
        "--strict", action="store_true", help="stop at the first invalid record and exit 2"
    )
    p.add_argument("-o", "--output", metavar="FILE", help="write the report here, not stdout")
    p.add_argument("--max-event-bytes", type=int, default=DEFAULT_MAX_EVENT_BYTES)
    p.add_argument(
        "--max-events-per-key",
        type=int,
        default=DEFAULT_MAX_EVENTS_PER_KEY,
        help="evidence retained per workflow key for late re-classification",
    )
    p.add_argument("--colour", "--color", choices=("auto", "always", "never"), default="auto")
    t = p.add_argument_group("topic replay")
    t.add_argument("--topic", help="replay this Kafka topic instead of files")
    t.add_argument("--bootstrap-servers", metavar="HOST:PORT")
    t.add_argument("--from-offset", type=int, help="first offset in every partition")
    t.add_argument("--to-offset", type=int, help="stop before this offset in every partition")
    t.add_argument("--since", help="first record at or after this time (ISO 8601 or epoch ms)")
    t.add_argument("--until", help="stop at records at or after this time")
    t.add_argument(
        "--kafka-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra client setting (e.g. security.protocol=SASL_SSL); repeatable",
    )
    p.set_defaults(handler=_main)


def _err(msg: str) -> None:
    print(f"fencewatch audit: {msg}", file=sys.stderr)


def run_files(replay: Replay, streams_: list[tuple[str, IO[bytes]]], *, strict: bool) -> None:
    """Feed each file's lines in order; line numbers count on across files."""
    offset = 0
    for name, fh in streams_:
        before = replay.invalid_count
        # read1: return what is there (a pipe need not fill a whole chunk).
        read = getattr(fh, "read1", fh.read)
        offset = replay.feed_stream(read, source=name, offset=offset, stop_on_invalid=strict)
        if strict and replay.invalid_count != before:
            raise _StrictStop


@contextmanager
def batch_gc() -> Iterator[None]:
    """Keep the cyclic garbage collector off during a replay.

    The detector's objects form no reference cycles (each is freed by
    reference counting the moment it is dropped), so all the collector would
    do is rescan the evidence retained for every workflow, again and again:
    measured on the 100,000-event benchmark with the compiled detector, over
    20% of the audit. It is switched back on, as it was, afterwards."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _time_ms(text: str) -> int:
    if text.isdigit():
        return int(text)
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"not an ISO 8601 time or epoch milliseconds: {text!r}") from None
    return int(dt.timestamp() * 1000)


def _bound(offset: int | None, time_text: str | None, default: Any) -> Any:
    from streams.live.replay_reader import Offset, Timestamp

    if offset is not None and time_text is not None:
        raise ValueError("give an offset or a time for each end of the replay, not both")
    if offset is not None:
        return Offset(offset)
    if time_text is not None:
        return Timestamp(_time_ms(time_text))
    return default


def _run_topic(replay: Replay, args: argparse.Namespace) -> None:
    from streams.live.replay_reader import BEGINNING, END, iter_topic  # Kafka only when asked

    config: dict[str, str] = {}
    for item in args.kafka_config:
        k, sep, v = item.partition("=")
        if not sep:
            raise ValueError(f"--kafka-config wants KEY=VALUE, got {item!r}")
        config[k] = v
    start = _bound(args.from_offset, args.since, BEGINNING)
    end = _bound(args.to_offset, args.until, END)
    source = args.topic
    for rec in iter_topic(args.bootstrap_servers, args.topic, start=start, end=end, config=config):
        before = replay.invalid_count
        replay.feed(
            rec.value or b"", key=rec.key, offset=rec.offset, source=f"{source}/{rec.partition}"
        )
        if args.strict and replay.invalid_count != before:
            raise _StrictStop


def _replay_inputs(replay: Replay, args: argparse.Namespace) -> None:
    if args.topic:
        _run_topic(replay, args)
        return
    with ExitStack() as stack:
        opened: list[tuple[str, IO[bytes]]] = []
        for path in args.paths or ["-"]:
            if path == "-":
                opened.append(("<stdin>", sys.stdin.buffer))
                continue
            try:
                opened.append((path, stack.enter_context(open(path, "rb"))))
            except OSError as exc:
                raise _Unreadable(f"cannot read {path}: {exc.strerror or exc}") from None
        run_files(replay, opened, strict=args.strict)


def _main(args: argparse.Namespace) -> int:
    # The collector stays off for the report too: rendering allocates, and a
    # collection then would rescan all the retained evidence (measured: more
    # than the rendering itself).
    with batch_gc():
        return _audit(args)


def _audit(args: argparse.Namespace) -> int:
    if args.topic and args.paths:
        _err("give either PATHs or --topic, not both")
        return 2
    if args.topic and not args.bootstrap_servers:
        _err("--topic needs --bootstrap-servers HOST:PORT")
        return 2
    if not args.topic and any(
        v is not None for v in (args.from_offset, args.to_offset, args.since, args.until)
    ):
        _err("--from-offset/--to-offset/--since/--until apply to --topic only")
        return 2
    try:
        detector = Detector(DetectorConfig(max_events_per_key=args.max_events_per_key))
    except ValueError as exc:
        _err(str(exc))
        return 2
    if native_summary() == "stale":
        _err(
            "warning: the compiled detector is older than its source and is the one in "
            "use; run `make native` (or scripts/build-native) to rebuild it"
        )
    replay = Replay(detector, max_event_bytes=args.max_event_bytes)
    strict_stop = False
    try:
        _replay_inputs(replay, args)
    except _StrictStop:
        strict_stop = True
    except _Unreadable as exc:
        _err(str(exc))
        return 2
    except OSError as exc:
        _err(f"read error: {exc}")
        return 2
    except ValueError as exc:
        _err(str(exc))
        return 2
    except FencewatchError as exc:  # e.g. BrokerError from the topic reader
        _err(str(exc))
        return 2

    if args.format == "json":
        text = render_json(replay)
    elif args.format == "jsonl":
        text = render_jsonl(replay)
    elif args.format == "html":
        text = render_html(replay)
    else:
        out_is_tty = args.output is None and sys.stdout.isatty()
        colour = args.colour == "always" or (args.colour == "auto" and out_is_tty)
        text = render_text(replay, colour=colour, fail_on=args.fail_on)
    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8") as fh:
                fh.write(text)
        except OSError as exc:
            _err(f"cannot write {args.output}: {exc.strerror or exc}")
            return 2
    else:
        sys.stdout.write(text)
    if strict_stop:
        inv = replay.invalid[-1]
        where = f"{inv.source}:{inv.line}" if inv.line is not None else f"{inv.source}@{inv.offset}"
        _err(
            f"--strict: invalid record at {where}: "
            f"{inv.field + ': ' if inv.field else ''}{inv.reason}"
        )
        return 2
    worst = replay.worst_severity()
    if (
        args.fail_on != "never"
        and worst is not None
        and SEVERITY_RANK[worst] >= SEVERITY_RANK[Severity(args.fail_on)]
    ):
        return 1
    return 0
