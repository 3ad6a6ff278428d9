"""``fencewatch status``: per-workflow health from the status topic (SPEC §8).

A bounded read (log start to the end offsets captured at start, no consumer
group), one line per workflow, worst first. Exit status: 0; 2 for a usage
error, an unreachable broker or a topic that is not a status topic.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson

from streams.cli.kafka_args import (
    add_connection_args,
    add_kafka_config_arg,
    connection_from_args,
    kafka_config,
)
from streams.errors import BrokerError, FencewatchError
from streams.kafka.topics import DEFAULT_STATUS_TOPIC
from streams.report.terminal import term_safe

__all__ = ["register", "render_status_line"]


def register(sub: Any) -> None:
    p = sub.add_parser(
        "status",
        help="per-workflow health from the status topic, worst first",
        description="Where every workflow stands now (SPEC §8), read from the status topic.",
    )
    add_connection_args(p)
    p.add_argument("--topic", default=None, help=f"status topic (default {DEFAULT_STATUS_TOPIC})")
    p.add_argument("--open", action="store_true", help="only workflows with open findings")
    p.add_argument("--workflow", action="append", default=[], metavar="KEY", help="repeatable")
    p.add_argument("--prefix", metavar="P", help="workflow keys starting with P")
    p.add_argument("--format", choices=("text", "json", "jsonl"), default="text")
    add_kafka_config_arg(p)
    p.set_defaults(handler=_main)


def _err(msg: str) -> None:
    print(f"fencewatch status: {term_safe(msg)}", file=sys.stderr)


def render_status_line(d: dict[str, Any]) -> str:
    """``SEVERITY key  epoch N (worker)  open a, cleared b  stale epochs ...``
    (control characters in the record's strings escaped: :func:`term_safe`)."""
    worst = str(d.get("worst_open") or "ok")  # str: a record's value may be anything
    epoch = d.get("current_epoch")
    owner = "no owner" if epoch is None else f"epoch {epoch} ({d.get('current_worker')})"
    if d.get("released"):
        owner += " released"
    opened = d.get("open") or []
    kinds = ",".join(sorted({str(o.get("kind")) for o in opened}))
    stale = d.get("stale_epochs") or []
    stale_txt = (
        "" if not stale else "  stale " + ",".join(f"{s['epoch']}x{s['events']}" for s in stale)
    )
    return term_safe(
        f"{worst:<10} {d['workflow_key']}  {owner}  open {len(opened)}"
        f"{' (' + kinds + ')' if kinds else ''}  cleared {len(d.get('cleared') or [])}{stale_txt}"
    )


def _main(args: argparse.Namespace) -> int:
    from streams.findings.status_topic import (
        DEFAULT_STATUS_TOPIC,
        read_status,
        select_status,
        worst_first,
    )

    topic = args.topic or DEFAULT_STATUS_TOPIC
    try:
        conn = connection_from_args(args, extra=kafka_config(args.kafka_config))
        docs = read_status(conn, topic)
    except BrokerError as exc:
        hint = (
            " (the live processor creates and writes the status topic)"
            if exc.code == "UNKNOWN_TOPIC_OR_PART"
            else ""
        )
        _err(f"{exc}{hint}")
        return 2
    except (ValueError, FencewatchError) as exc:
        _err(str(exc))
        return 2
    rows = worst_first(
        select_status(
            docs.values(),
            open_only=args.open,
            workflows=frozenset(args.workflow),
            prefix=args.prefix,
        )
    )
    if args.format == "jsonl":
        sys.stdout.write("".join(orjson.dumps(d).decode() + "\n" for d in rows))
    elif args.format == "json":
        doc = {"workflows": rows, "count": len(rows)}
        sys.stdout.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        for d in rows:
            print(render_status_line(d))
        n_open = sum(1 for d in rows if d.get("open"))
        print(f"{len(rows)} workflow(s), {n_open} with open findings ({topic})")
    if not rows and (args.workflow or args.prefix):
        _err(_no_match_hint(args, list(docs), topic))
    return 0


def _no_match_hint(args: argparse.Namespace, keys: list[str], topic: str) -> str:
    """Why a selection printed nothing: the keys it asked for, and some that are there."""
    wanted = [repr(k) for k in args.workflow]
    if args.prefix:
        wanted.append(f"prefix {args.prefix!r}")
    asked = ", ".join(wanted)
    if not keys:
        return f"no workflow matches {asked}: {topic} holds no workflow yet"
    sample = ", ".join(repr(k) for k in sorted(keys)[:3])
    return (
        f"no workflow matches {asked} ({len(keys)} on {topic}, e.g. {sample}); "
        "--workflow takes an exact key, --prefix a start"
    )
