"""``fencewatch demo``: the demos a person runs against a real broker
(docs/demo.md).

- ``demo live``: the SPEC §5 fixture through the live processor;
- ``demo split-brain [--unfenced]``: two worker processes, one paused past
  its lease, fenced (or not) at the destination;
- ``demo worker``: one agent worker (what split-brain starts twice).

On a terminal, stderr shows a spinner with the current step and its time.

Exit status: 0 when the outcome is the expected one, 1 when it is not or the
demo could not finish (timeout, processor down), 2 for usage errors; the
worker exits 0 (effect in place), 3 (refused as stale) or 2 (failed).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from streams.cli.kafka_args import add_connection_args, connection_from_args
from streams.cli.progress import demo_status
from streams.report.terminal import term_safe

__all__ = ["register"]


def _out(line: str) -> None:
    # The story lines quote keys, workers and effects (a demo worker's come
    # from its flags): control characters escaped, as in every text output.
    print(term_safe(line), flush=True)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="run the live or split-brain demo against a Kafka broker",
        description="Demos against a real broker (docs/demo.md).",
    )
    sub = parser.add_subparsers(dest="demo_command", metavar="DEMO")
    sub.required = True

    def common(p: argparse.ArgumentParser) -> None:
        # The connection flags of every Kafka command (and their FENCEWATCH_*
        # variables), passed on to the demo's child processes.
        add_connection_args(p, log_level=False)
        p.add_argument(
            "--timeout",
            type=float,
            default=60.0,
            metavar="SECONDS",
            help="bound of each wait: processor start, all events processed (default 60)",
        )
        p.add_argument(
            "--keep-topics",
            action="store_true",
            help="leave the run's topics on the broker (for fencewatch audit --topic)",
        )

    live = sub.add_parser(
        "live",
        help="the SPEC §5 fixture through the broker and the live processor",
        description=(
            "Start the live processor on run-unique topics, publish the reference fixture, "
            "read the findings back (read_committed) and check they are SPEC §5's four."
        ),
    )
    common(live)
    live.add_argument(
        "--fixture",
        type=Path,
        default=None,
        help=(
            "JSON Lines events (default: the packaged SPEC §5 fixture, see `demo fixture`);"
            " another file is expected to give what `fencewatch audit FILE` gives"
        ),
    )
    live.set_defaults(handler=_live)

    fixture = sub.add_parser(
        "fixture",
        help="print the SPEC §5 reference fixture (e.g. `fencewatch demo fixture > ref.jsonl`)",
        description=(
            "Write the reference fixture that ships with fencewatch to stdout, to audit it "
            "(`fencewatch demo fixture | fencewatch audit -`) or edit a copy; --path prints "
            "where it is installed instead."
        ),
    )
    fixture.add_argument("--path", action="store_true", help="print the file's path only")
    fixture.set_defaults(handler=_fixture)
    files = sub.add_parser(
        "files",
        help='print the directory holding examples/ and deploy/ (e.g. cp -r "$(fencewatch '
        'demo files)/examples" .)',
        description="Where the example workers (examples/) and the Prometheus and Grafana "
        "files (deploy/) are: inside the installed package, or the checkout.",
    )
    files.set_defaults(handler=_files)

    split = sub.add_parser(
        "split-brain",
        help="two workers, one paused past its lease; fenced or unfenced destination",
        description=(
            "Two real worker processes and the live processor: worker-a is paused with "
            "SIGSTOP past its lease, worker-b takes over and commits, worker-a resumes and "
            "tries the same effect. Fenced: rejected near miss. --unfenced: stale and "
            "conflicting commits."
        ),
    )
    common(split)
    split.add_argument("--unfenced", action="store_true", help="use the naive destination")
    split.add_argument("--ttl", type=float, default=2.0, help="lease TTL, s (default 2)")
    split.add_argument(
        "--tool-seconds",
        type=float,
        default=1.0,
        help="worker-a's tool call, during which it is paused (default 1)",
    )
    split.set_defaults(handler=_split_brain)

    worker = sub.add_parser(
        "worker",
        help="one agent worker: lease, checkpoints, optional tool call, one effect",
        description=(
            "Acquire a lease, checkpoint, optionally run a long tool call, apply one effect "
            "through the fenced (or --unfenced) sink, release. Exit 0: effect in place; "
            "3: refused as stale; 2: failed."
        ),
    )
    _worker_args(worker)
    worker.add_argument("--json", action="store_true", help="one JSON object per step")
    worker.set_defaults(handler=_worker)


def _worker_args(p: argparse.ArgumentParser) -> None:
    from streams.kafka.topics import DEFAULT_EVENTS_TOPIC

    add_connection_args(p, log_level=False)
    a = p.add_argument
    a("--topic", default=DEFAULT_EVENTS_TOPIC)
    a(
        "--db",
        default=None,
        help=f"SQLite file or postgresql:// DSN (default {_DEFAULT_WORKER_DB}, its directory made)",
    )
    a("--key", default="tenant/export/2026-07-26")
    a("--worker", required=True)
    a("--effect", default="release-index")
    a("--steps", type=int, default=3)
    a("--step-seconds", type=float, default=0.5)
    a("--tool-seconds", type=float, default=0.0, help="a long tool call after the checkpoints")
    a("--ttl", type=float, default=5.0)
    a("--wait-seconds", type=float, default=60.0, help="give up acquiring after")
    a("--unfenced", action="store_true", help="use the naive sink (demo baseline)")


def _settings(args: argparse.Namespace) -> Any:
    from streams.demo.session import DemoSettings

    return DemoSettings(
        connection_from_args(args), timeout=args.timeout, keep_topics=args.keep_topics
    )


def _demo(run: Any, args: argparse.Namespace) -> int:
    from streams.cli.kafka_args import report_kafka_failure
    from streams.errors import AuthenticationFailed, BrokerUnreachable, FencewatchError
    from streams.kafka.admin import TopicAdmin

    try:
        settings = _settings(args)
        # Before any child starts: an unreachable broker, or one that accepts
        # TCP and never answers, is one line within the connect timeout, not
        # a processor's log tail after two timeouts.
        TopicAdmin(settings.connection).probe()
        ok = run(settings)
    except ValueError as exc:
        print(f"fencewatch demo: {term_safe(str(exc))}", file=sys.stderr)
        return 2
    except (BrokerUnreachable, AuthenticationFailed) as exc:
        return report_kafka_failure("demo", exc)
    except FencewatchError as exc:
        print(f"fencewatch demo: FAILED: {term_safe(str(exc))}", file=sys.stderr)
        return 1
    return 0 if ok else 1


def _files(args: argparse.Namespace) -> int:
    from streams.fixtures import project_files

    try:
        print(project_files())
    except FileNotFoundError as exc:
        print(f"fencewatch demo files: {exc}", file=sys.stderr)
        return 2
    return 0


def _fixture(args: argparse.Namespace) -> int:
    from streams.fixtures import reference_fixture

    try:
        path = reference_fixture()
        if args.path:
            print(path)
        else:
            sys.stdout.buffer.write(path.read_bytes())
            sys.stdout.flush()
    except OSError as exc:
        print(f"fencewatch demo fixture: {exc.strerror or exc}", file=sys.stderr)
        return 2
    return 0


def _live(args: argparse.Namespace) -> int:
    from streams.demo.live import run_live

    def run(settings: Any) -> bool:
        with demo_status(sys.stderr, _out) as out:
            return run_live(settings, out, fixture=args.fixture)

    return _demo(run, args)


def _split_brain(args: argparse.Namespace) -> int:
    from streams.demo.split_brain import SplitBrainPlan, run_split_brain

    def run(settings: Any) -> bool:
        plan = SplitBrainPlan(unfenced=args.unfenced, ttl=args.ttl, tool_seconds=args.tool_seconds)
        with demo_status(sys.stderr, _out) as out:
            return run_split_brain(settings, plan, out)

    return _demo(run, args)


# The demo worker's own default store. The store never makes a directory for a
# path it is given (a typo must not become a new, unfenced database), so the
# command makes this one, which is its own choice, not the user's.
_DEFAULT_WORKER_DB = ".run/agent.db"


def _worker_plan(args: argparse.Namespace) -> Any:
    """The WorkerPlan for parsed ``demo worker`` arguments."""
    from streams.demo.worker import WorkerPlan

    db = args.db
    if db is None:
        db = _DEFAULT_WORKER_DB
        Path(db).parent.mkdir(parents=True, exist_ok=True)
    return WorkerPlan(
        connection=connection_from_args(args),
        db_url=db,
        workflow_key=args.key,
        worker_id=args.worker,
        effect_key=args.effect,
        topic=args.topic,
        steps=args.steps,
        step_seconds=args.step_seconds,
        tool_seconds=args.tool_seconds,
        ttl=args.ttl,
        wait_seconds=args.wait_seconds,
        unfenced=args.unfenced,
    )


def _worker(args: argparse.Namespace) -> int:
    from streams.demo.worker import EXIT_FAILED, Step, run_worker
    from streams.errors import FencewatchError

    def emit(step: Step) -> None:
        if args.json:
            sys.stdout.buffer.write(step.to_json() + b"\n")
            sys.stdout.flush()
        else:
            _out(f"[{step.worker}] {step.describe()}")

    try:
        return run_worker(_worker_plan(args), emit)
    except ValueError as exc:
        print(term_safe(f"[{args.worker}] invalid: {exc}"), file=sys.stderr)
        return EXIT_FAILED
    except FencewatchError as exc:
        print(term_safe(f"[{args.worker}] error: {exc}"), file=sys.stderr)
        return EXIT_FAILED
