"""``fencewatch audit``: replay JSON Lines files or a topic through the detector
and report (SPEC §6).

Exit status: 0 when no finding reaches ``--fail-on``, 1 when one does, 2 for a
usage error or unreadable input (and, with ``--strict``, invalid input), 130
when interrupted (Ctrl-C: the report of what was read, marked partial).

A topic audit whose broker goes away mid-read waits for it (up to
``--connect-timeout`` since the last record: a restart is ridden out); if it
stays away, the report of what was read is written, marked partial with the
next offset of each partition (``--from-offset P:N,...`` resumes there), one
line says the broker is unreachable, and the exit is 2. Partitions whose
early records were deleted (log start above the start offset) are named in
every format, with the count, and the findings on their keys say that
earlier evidence may be missing.

Unreadable input includes input that holds records but not one valid event
(a gzip file, one JSON array, every line over ``--max-event-bytes``): one line
says so, with a guess at the format from the first bytes. An empty input (no
record at all) is an empty report, exit 0. With no PATH, stdin is read; when
stdin is a terminal one line on stderr says so (rather than a silent wait).
On a terminal, stderr shows progress (``streams.cli.progress``), except
while the events come from a terminal (typed: no display over the typing).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from contextlib import ExitStack
from datetime import datetime
from typing import IO, TYPE_CHECKING, Any

from streams import __version__
from streams._native import native_summary
from streams.audit.files import (
    Input,
    Interrupted,
    StrictStop,
    batch_gc,
    format_hint,
    invalid_where,
    no_event_message,
    run_files,
)
from streams.cli.kafka_args import (
    add_connection_args,
    add_kafka_config_arg,
    connection_from_args,
    kafka_config,
)
from streams.cli.progress import AuditProgress, Interrupt, audit_progress
from streams.core.detector import DEFAULT_MAX_EVENTS_PER_KEY, Detector, DetectorConfig
from streams.core.records import SEVERITY_RANK, Severity
from streams.core.replay import Replay
from streams.core.validate import DEFAULT_MAX_EVENT_BYTES
from streams.core.whatif import what_if_fenced
from streams.errors import FencewatchError
from streams.report import FORMATS, render_html, render_json, render_jsonl, render_text
from streams.report.coverage import INTERRUPTED, Coverage
from streams.report.terminal import term_safe

if TYPE_CHECKING:
    from streams.audit.topic import TopicAudit

__all__ = ["fails_on", "register", "text_colour", "write_report"]

_FAIL_ON = [s.value for s in Severity] + ["never"]
#: Most worker processes --jobs starts (each holds a Kafka client and its
#: partitions' evidence; past the cores they only take turns).
MAX_JOBS = 64


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
    p.add_argument(
        "--max-event-bytes",
        type=_positive_int,
        default=DEFAULT_MAX_EVENT_BYTES,
        help=f"longest event line accepted (default {DEFAULT_MAX_EVENT_BYTES})",
    )
    p.add_argument(
        "--max-events-per-key",
        type=int,
        default=DEFAULT_MAX_EVENTS_PER_KEY,
        help="evidence retained per workflow key for late re-classification",
    )
    p.add_argument("--colour", "--color", choices=("auto", "always", "never"), default="auto")
    p.add_argument(
        "--what-if-fenced",
        action="append",
        default=[],
        metavar="SINK",
        help="also show the findings that would change had SINK refused the stale commits it"
        " accepted (SPEC §6; text, json and html formats); repeatable",
    )
    p.add_argument(
        "--otlp",
        action="append",
        default=[],
        metavar="FILE",
        help="read OTLP/JSON trace exports (the collector file exporter's JSON lines) instead:"
        " spans carrying fencewatch.* attributes are the evidence; repeatable",
    )
    t = p.add_argument_group("topic replay")
    t.add_argument("--topic", help="replay this Kafka topic instead of files")
    add_connection_args(t)
    t.add_argument(
        "--from-offset",
        type=_from_offset,
        metavar="N|P:N,...",
        help="first offset in every partition, or per partition (P:N,...: as a partial"
        " report says, to resume it; partitions not named start at the beginning)",
    )
    t.add_argument("--to-offset", type=int, help="stop before this offset in every partition")
    t.add_argument("--since", help="first record at or after this time (ISO 8601 or epoch ms)")
    t.add_argument("--until", help="stop at records at or after this time")
    t.add_argument(
        "--partitions",
        type=_partitions,
        metavar="P,P-Q,...",
        help="audit these partitions alone (a shard: merge the JSON reports of shards with"
        " fencewatch report merge)",
    )
    t.add_argument(
        "--jobs",
        type=_jobs,
        default=1,
        metavar="N",
        help="read the partitions in N worker processes (at most one per partition, and"
        f" {MAX_JOBS}) and merge their results into the one report (default 1)",
    )
    add_kafka_config_arg(t)
    p.set_defaults(handler=_main)


def _positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (a usage error, exit 2, otherwise)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _jobs(text: str) -> int:
    """argparse type of --jobs: 1 to :data:`MAX_JOBS` worker processes."""
    value = _positive_int(text)
    if value > MAX_JOBS:
        raise argparse.ArgumentTypeError(f"at most {MAX_JOBS} worker processes, got {value}")
    return value


def _partitions(text: str) -> tuple[int, ...]:
    """argparse type of --partitions: ``0,3-5``."""
    from streams.audit.shard import parse_partitions  # Kafka only when asked

    try:
        return parse_partitions(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--partitions: ")) from None


def _from_offset(text: str) -> int | dict[int, int]:
    """argparse type of --from-offset: ``N`` (every partition) or
    ``P:N,P:N`` (per partition: a partial report's resume point)."""
    if ":" not in text:
        try:
            return int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"not an offset (N, or PARTITION:OFFSET,...): {text!r}"
            ) from None
    out: dict[int, int] = {}
    for part in text.split(","):
        p, sep, o = part.strip().partition(":")
        try:
            partition, offset = int(p), int(o)
        except ValueError:
            partition = offset = -1
        if not sep or partition < 0 or offset < 0:
            raise argparse.ArgumentTypeError(
                f"not PARTITION:OFFSET (two integers >= 0): {part.strip()!r} in {text!r}"
            )
        if partition in out:
            raise argparse.ArgumentTypeError(f"partition {partition} given twice in {text!r}")
        out[partition] = offset
    return out


def fails_on(worst: Severity | None, fail_on: str) -> bool:
    """``--fail-on``: the worst finding is at least that severity (never with ``never``)."""
    return (
        fail_on != "never"
        and worst is not None
        and SEVERITY_RANK[worst] >= SEVERITY_RANK[Severity(fail_on)]
    )


def text_colour(args: argparse.Namespace) -> bool:
    """Colours in the text report: --colour always, or auto on a terminal."""
    out_is_tty = args.output is None and sys.stdout.isatty()
    return bool(args.colour == "always" or (args.colour == "auto" and out_is_tty))


def write_report(text: str, output: str | None, err: Callable[[str], None]) -> bool:
    """The report to ``output`` (stdout when None); False, said through
    ``err``, when the file cannot be written."""
    if not output:
        sys.stdout.write(text)
        return True
    try:
        with open(output, "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        err(f"cannot write {output}: {exc.strerror or exc}")
        return False
    return True


def _err(msg: str) -> None:
    # Messages quote file names, invalid records' reasons and broker errors:
    # any control character in them is escaped (one line, no terminal codes).
    print(f"fencewatch audit: {term_safe(msg)}", file=sys.stderr)


def _time_ms(text: str) -> int:
    if text.isdigit():
        return int(text)
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"not an ISO 8601 time or epoch milliseconds: {text!r}") from None
    return int(dt.timestamp() * 1000)


def _range_problem(args: argparse.Namespace) -> str | None:
    """An empty replay range asked for (was: an empty report, exit 0)."""
    lo, hi = args.from_offset, args.to_offset
    # A per-partition --from-offset (P:N,...) is checked partition by partition.
    starts = lo.values() if isinstance(lo, dict) else [lo] if lo is not None else []
    if hi is not None and starts and min(starts) >= hi:
        return f"--to-offset {hi} must be greater than --from-offset {lo}: nothing to replay"
    if args.since is not None and args.until is not None:
        try:
            empty = _time_ms(args.since) >= _time_ms(args.until)
        except ValueError as exc:
            return str(exc)
        if empty:
            return f"--until {args.until} must be after --since {args.since}: nothing to replay"
    return None


def _output_problem(path: str | None) -> str | None:
    """Why ``-o PATH`` could not be written, checked without creating it."""
    if not path:
        return None
    parent = os.path.dirname(path) or "."
    if os.path.isdir(path):
        return f"cannot write {path}: it is a directory"
    if not os.path.isdir(parent):
        return f"cannot write {path}: no directory {parent}"
    exists = os.path.exists(path)
    ok = os.access(path, os.W_OK) if exists else os.access(parent, os.W_OK | os.X_OK)
    return None if ok else f"cannot write {path}: permission denied"


def _bound(offset: int | dict[int, int] | None, time_text: str | None, default: Any) -> Any:
    from streams.kafka.reader import Offset, PartitionOffsets, Timestamp

    if offset is not None and time_text is not None:
        raise ValueError("give an offset or a time for each end of the replay, not both")
    if isinstance(offset, dict):
        return PartitionOffsets(offset)
    if offset is not None:
        return Offset(offset)
    if time_text is not None:
        return Timestamp(_time_ms(time_text))
    return default


def _topic_audit(replay: Replay, args: argparse.Namespace) -> TopicAudit:
    """The topic audit (:mod:`streams.audit.topic`) the flags ask for, not
    run yet: made first, so that what it reads is at hand even when reading
    raises (Ctrl-C off the main thread)."""
    from streams.audit.topic import TopicAudit  # Kafka only when asked
    from streams.kafka.reader import BEGINNING, END

    start = _bound(args.from_offset, args.since, BEGINNING)
    end = _bound(args.to_offset, args.until, END)
    conn = connection_from_args(args, extra=kafka_config(args.kafka_config))
    return TopicAudit(
        conn, args.topic, replay=replay, start=start, end=end, partitions=args.partitions
    )


def _run_jobs(
    replay: Replay, args: argparse.Namespace, progress: AuditProgress, interrupt: Interrupt
) -> TopicAudit:
    """The topic audit over ``--jobs`` worker processes
    (:mod:`streams.audit.shard`); its replay is the workers' merged."""
    from streams.audit.shard import run_jobs  # Kafka only when asked
    from streams.kafka.reader import BEGINNING, END

    audit = run_jobs(
        connection_from_args(args, extra=kafka_config(args.kafka_config)),
        args.topic,
        jobs=args.jobs,
        config=replay.detector.config,
        max_event_bytes=replay.max_event_bytes,
        start=_bound(args.from_offset, args.since, BEGINNING),
        end=_bound(args.to_offset, args.until, END),
        partitions=args.partitions,
        progress=progress,
        interrupt=interrupt,
        # The evidence itself: for the timelines and the what-if replay only.
        keep_states=args.format == "html" or bool(args.what_if_fenced),
    )
    unreadable = _not_an_events_topic(args, audit)
    if unreadable is not None:
        raise _Unreadable(unreadable)
    return audit


def _not_an_events_topic(args: argparse.Namespace, audit: TopicAudit) -> str | None:
    """Records and no valid event, the first one a finding or a status
    record: someone pointed the audit at fencewatch's own output; say what
    the topic holds and which command reads it."""
    if audit.holds is None:
        return None
    holds, command = (
        ("findings", "findings")
        if audit.holds == "findings"
        else ("per-workflow status records (SPEC §8)", "status")
    )
    n = audit.records
    return (
        f"topic {args.topic} holds {holds}, not events ({n} record{'s' if n != 1 else ''}, "
        f"no valid event): read it with fencewatch {command} --bootstrap-servers "
        f"{audit.conn.bootstrap_servers} --topic {args.topic}"
    )


def _run_otlp(replay: Replay, args: argparse.Namespace) -> None:
    from streams.integrations.otlp import feed_otlp  # only when asked

    offset = 0
    for path in args.otlp:
        try:
            fh = open(path, "rb")  # noqa: SIM115 - closed below
        except OSError as exc:
            raise _Unreadable(f"cannot read {path}: {exc.strerror or exc}") from None
        with fh:
            before = replay.invalid_count
            offset = feed_otlp(replay, fh, source=path, offset=offset, stop_on_invalid=args.strict)
        if args.strict and replay.invalid_count != before:
            raise StrictStop


def _reads_terminal(args: argparse.Namespace) -> bool:
    """Whether the input is stdin and stdin is a terminal (a person typing)."""
    if args.topic or args.otlp or (args.paths and "-" not in args.paths):
        return False
    isatty = getattr(sys.stdin, "isatty", None)
    return bool(isatty is not None and isatty())


def _replay_inputs(
    replay: Replay,
    args: argparse.Namespace,
    progress: AuditProgress,
    interrupt: Interrupt,
    topic: TopicAudit | None,
) -> list[Input]:
    if topic is not None:
        topic.run(strict=args.strict, progress=progress, interrupt=interrupt)
        if topic.strict_stop:
            raise StrictStop
        unreadable = _not_an_events_topic(args, topic)
        if unreadable is not None:
            raise _Unreadable(unreadable)
        return []
    if args.otlp:
        _run_otlp(replay, args)
        return []
    paths = args.paths or ["-"]
    if not args.paths and _reads_terminal(args):
        # Not a hang: say what it is waiting for (SPEC §6: no PATH is stdin).
        _err("reading events from stdin (end with Ctrl-D; give PATH or '-' to skip this note)")
    with ExitStack() as stack:
        opened: list[tuple[str, IO[bytes]]] = []
        for path in paths:
            if path == "-":
                # `fencewatch audit - <&-`: Python sets sys.stdin to None when
                # descriptor 0 is closed.
                if sys.stdin is None:
                    raise _Unreadable("cannot read stdin: it is closed (no descriptor 0)")
                opened.append(("<stdin>", sys.stdin.buffer))
                continue
            try:
                opened.append((path, stack.enter_context(open(path, "rb"))))
            except OSError as exc:
                raise _Unreadable(f"cannot read {path}: {exc.strerror or exc}") from None
        return run_files(replay, opened, strict=args.strict, progress=progress, interrupt=interrupt)


def _main(args: argparse.Namespace) -> int:
    # The collector stays off for the report too: rendering allocates, and a
    # collection then would rescan all the retained evidence (docs/performance.md).
    with batch_gc():
        return _audit(args)


def _audit(args: argparse.Namespace) -> int:
    if sum(map(bool, (args.topic, args.paths, args.otlp))) > 1:
        _err("give one input: PATHs, --topic or --otlp")
        return 2
    if not args.topic and (
        any(v is not None for v in (args.from_offset, args.to_offset, args.since, args.until))
        or args.partitions is not None
        or args.jobs > 1
    ):
        _err("--from-offset/--to-offset/--since/--until/--partitions/--jobs apply to --topic only")
        return 2
    if args.jobs > 1 and args.strict:
        # --strict stops the read at one record; shards read side by side.
        _err("--strict stops at the first invalid record of one read: give --jobs 1 with it")
        return 2
    problem = _range_problem(args) or _output_problem(args.output)
    if problem:  # before reading anything: a long read must not end in a usage error
        _err(problem)
        return 2
    try:
        detector = Detector(DetectorConfig(max_events_per_key=args.max_events_per_key))
    except ValueError as exc:
        # The detector names its parameter; the user gave the flag.
        _err(str(exc).replace("max_events_per_key", "--max-events-per-key"))
        return 2
    if native_summary() == "stale":
        _err(
            "warning: the compiled detector is older than its source and is the one in "
            "use; run `make native` (or scripts/build-native) to rebuild it"
        )
    replay = Replay(detector, max_event_bytes=args.max_event_bytes)
    strict_stop = False
    inputs: list[Input] = []
    # Events typed at a terminal are not long work, and a display redrawn on
    # the line being typed garbles it: no display when stdin is a terminal.
    progress = AuditProgress() if _reads_terminal(args) else audit_progress(sys.stderr)
    interrupt = Interrupt()
    topic: TopicAudit | None = None
    try:
        if args.topic and args.jobs > 1:
            with interrupt:
                topic = _run_jobs(replay, args, progress, interrupt)
            replay = topic.replay
        else:
            if args.topic:
                topic = _topic_audit(replay, args)
            with interrupt:
                inputs = _replay_inputs(replay, args, progress, interrupt, topic)
    except (Interrupted, KeyboardInterrupt):  # KeyboardInterrupt: not the main thread
        interrupt.requested = True
    except StrictStop as stop:
        strict_stop = True
        inputs = stop.inputs
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
    finally:
        progress.close()
    lost = topic.lost if topic is not None else None
    partial = interrupt.requested or lost is not None
    if topic is not None:
        coverage = topic.coverage(interrupt.requested)
    else:
        coverage = Coverage(partial=INTERRUPTED) if interrupt.requested else None
    if not partial and not strict_stop:
        what = (
            f"topic {args.topic}"
            if args.topic
            else ", ".join(args.otlp or [i.name for i in inputs])
        )
        unreadable = no_event_message(replay, what, inputs)
        if unreadable is not None:
            _err(unreadable)
            return 2

    what_if = what_if_fenced(replay, args.what_if_fenced) if args.what_if_fenced else None
    if what_if is not None and args.format == "jsonl":
        _err("--what-if-fenced is reported by --format text, json and html, not jsonl")
    if args.format == "json":
        source = topic.source(__version__) if topic is not None else None
        text = render_json(
            replay, partial=partial, what_if=what_if, coverage=coverage, source=source
        )
    elif args.format == "jsonl":
        text = render_jsonl(replay)
    elif args.format == "html":
        text = render_html(replay, partial=partial, what_if=what_if, coverage=coverage)
    else:
        text = render_text(
            replay,
            colour=text_colour(args),
            fail_on=args.fail_on,
            partial=partial,
            what_if=what_if,
            coverage=coverage,
        )
    if not write_report(text, args.output, _err):
        return 2
    resume = coverage.resume_arg() if coverage is not None else None
    resume_text = f"; resume with --from-offset {resume}" if resume else ""
    n_read = f"{replay.records:,} record{'s' if replay.records != 1 else ''}"
    if lost is not None:
        _err(f"{lost}; after {n_read} the report is PARTIAL{resume_text}")
        return 2
    if partial:
        _err(
            f"interrupted after {n_read}: "
            f"the report is PARTIAL (its findings and counts cover only those){resume_text}"
        )
        return 130
    if strict_stop:
        inv = replay.invalid[-1]
        hint = format_hint(inputs) if replay.records == replay.invalid_count else None
        _err(
            f"--strict: invalid record at {invalid_where(inv)}: "
            f"{inv.field + ': ' if inv.field else ''}{inv.reason}" + (f" ({hint})" if hint else "")
        )
        return 2
    return 1 if fails_on(replay.worst_severity(), args.fail_on) else 0
