"""``fencewatch report merge A.json B.json ...``: join the JSON reports of
shards of one topic audit (``fencewatch audit --topic T --partitions ...
--format json``) into the report a single audit of all their partitions
writes (:mod:`streams.report.merge`).

Exit status: as the audit's, 0 when no finding reaches ``--fail-on``, 1 when
one does; 2 for shards that do not merge (a partition in two shards,
different topics, detector settings, versions or bounds: one line says
which), an unreadable report, or ``--format html`` (its timelines need the
evidence, which JSON reports do not carry: audit with ``--jobs`` instead).

Each report is read whole (the merge holds every shard's findings, as the
single audit held them).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson

from streams.cli.audit import fails_on, text_colour, write_report
from streams.core.records import Severity
from streams.report.merge import MergeRefused, merge_reports

__all__ = ["register"]

_FAIL_ON = [s.value for s in Severity] + ["never"]


def register(sub: Any) -> None:
    p = sub.add_parser(
        "report",
        help="work with audit reports (merge the JSON reports of shards)",
        description="Work with audit reports.",
    )
    rsub = p.add_subparsers(dest="report_command", metavar="COMMAND")
    rsub.required = True
    m = rsub.add_parser(
        "merge",
        help="join the JSON reports of shards of one topic audit into one report",
        description="Join the JSON reports of shards of one topic audit (audit --topic T"
        " --partitions ... --format json) into the report one audit of all their partitions"
        " writes.",
    )
    m.add_argument("reports", nargs="+", metavar="REPORT", help="JSON reports of the shards")
    m.add_argument("--format", choices=("text", "json", "html"), default="text")
    m.add_argument("-o", "--output", metavar="FILE", help="write the report here, not stdout")
    m.add_argument(
        "--fail-on",
        choices=_FAIL_ON,
        default="warning",
        help="exit 1 when a finding reaches this severity (default: warning)",
    )
    m.add_argument("--colour", "--color", choices=("auto", "always", "never"), default="auto")
    m.set_defaults(handler=_merge)


def _err(msg: str) -> None:
    print(f"fencewatch report merge: {msg}", file=sys.stderr)


def _read(path: str) -> Any:
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise MergeRefused(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise MergeRefused(f"{path}: not a JSON report ({exc})") from None


def _merge(args: argparse.Namespace) -> int:
    from streams.audit.files import batch_gc
    from streams.report import render_json, render_text

    if args.format == "html":
        _err(
            "--format html draws each workflow's evidence, which JSON reports do not carry:"
            " merge to text or json, or audit with --jobs N for an HTML report"
        )
        return 2
    with batch_gc():  # as the audit: no collection rescanning the findings held
        try:
            merged = merge_reports([(path, _read(path)) for path in args.reports])
        except MergeRefused as exc:
            _err(str(exc))
            return 2
        report, coverage = merged.report, merged.coverage
        if args.format == "json":
            text = render_json(
                report, partial=merged.partial, coverage=coverage, source=merged.source
            )
        else:
            text = render_text(
                report,
                colour=text_colour(args),
                fail_on=args.fail_on,
                partial=merged.partial,
                coverage=coverage,
            )
    if not write_report(text, args.output, _err):
        return 2
    return 1 if fails_on(report.worst_severity(), args.fail_on) else 0
