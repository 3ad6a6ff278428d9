"""``fencewatch serve``: the live operator console (docs/operate.md).

Follows the status and findings topics and serves the workflows worst
first, each workflow's findings and ownership timeline, JSON under
``/api/`` and the console's metrics at ``/metrics``. Verification is enabled
only with ``FENCEWATCH_SERVE_TOKEN`` (environment only: a flag would show in
``ps``). Runs until SIGINT or SIGTERM, then exits 0; 2 for a usage error, an
unreachable broker or a port it cannot bind. The server's limits and the
flags that change them: docs/operate.md, "The console's limits".
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import sys
import threading
from typing import Any

from streams.cli.kafka_args import (
    add_connection_args,
    add_kafka_config_arg,
    connection_from_args,
    kafka_config,
)
from streams.errors import FencewatchError
from streams.kafka.topics import DEFAULT_EVENTS_TOPIC, DEFAULT_FINDINGS_TOPIC, DEFAULT_STATUS_TOPIC

__all__ = ["register"]

TOKEN_ENV = "FENCEWATCH_SERVE_TOKEN"
_MIN_TOKEN = 16


def register(sub: Any) -> None:
    from streams.console.timeline import DEFAULT_REPLAY_EVENTS, DEFAULT_REPLAY_SCAN
    from streams.console.view import DEFAULT_MAX_WORKFLOWS

    p = sub.add_parser(
        "serve",
        help="the live operator console (workflows, findings, timelines) in a browser",
        description="Serve the live console over HTTP. Verification needs "
        f"{TOKEN_ENV} (at least {_MIN_TOKEN} characters); without it the console is read-only.",
    )
    add_connection_args(p)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8765, help="port (default 8765; 0: any free)")
    p.add_argument(
        "--allowed-hosts",
        action="append",
        default=[],
        metavar="NAME[,NAME...]",
        help="host names the console answers to besides IP addresses and localhost "
        "(the Host header; any other is refused: DNS rebinding); repeatable",
    )
    p.add_argument(
        "--behind-tls",
        action="store_true",
        help="the console is reached through a TLS proxy: the login cookie is Secure",
    )
    for name, env, default in (
        ("events", "FENCEWATCH_EVENTS_TOPIC", DEFAULT_EVENTS_TOPIC),
        ("findings", "FENCEWATCH_FINDINGS_TOPIC", DEFAULT_FINDINGS_TOPIC),
        ("status", "FENCEWATCH_STATUS_TOPIC", DEFAULT_STATUS_TOPIC),
    ):
        p.add_argument(f"--{name}-topic", default=None, help=f"default ${env} or {default}")
    p.add_argument(
        "--replay-events",
        type=int,
        default=DEFAULT_REPLAY_EVENTS,
        metavar="N",
        help="a workflow's timeline shows at most its last N events "
        f"(default {DEFAULT_REPLAY_EVENTS})",
    )
    p.add_argument(
        "--replay-scan",
        type=int,
        default=DEFAULT_REPLAY_SCAN,
        metavar="N",
        help="records of the key's partition a timeline reads at most, the last ones "
        f"(default {DEFAULT_REPLAY_SCAN})",
    )
    p.add_argument(
        "--replay-concurrency",
        type=int,
        default=2,
        metavar="N",
        help="timeline replays running at once; more get 503 with Retry-After (default 2)",
    )
    p.add_argument(
        "--app-id",
        default=None,
        help="the processor's app id, its consumer group, whose committed offsets say "
        "whether it makes progress (default $FENCEWATCH_APP_ID or fencewatch-live)",
    )
    p.add_argument(
        "--stall-after",
        type=float,
        default=None,
        metavar="S",
        help="seconds a partition with lag may go without a commit before the console says "
        "the processor is stalled (default: the worker's, from $FENCEWATCH_STALL_TIMEOUT "
        "and $FENCEWATCH_COMMIT_INTERVAL: 60)",
    )
    p.add_argument(
        "--max-workflows",
        type=int,
        default=DEFAULT_MAX_WORKFLOWS,
        metavar="N",
        help=f"workflows the view holds at most (default {DEFAULT_MAX_WORKFLOWS})",
    )
    add_kafka_config_arg(p)
    p.set_defaults(handler=_main)


def _err(msg: str) -> int:
    print(f"fencewatch serve: {msg}", file=sys.stderr)
    return 2


def _processor(args: argparse.Namespace, env: Any) -> tuple[str, float]:
    """The processor's group and stall threshold, from the flags or else the
    variables the worker reads, with the worker's defaults and rule
    (streams/live/settings.py: ``app_id``; ``stall_after`` is its
    ``stall_timeout``, never under 3 commit intervals). ValueError names a
    bad value."""
    import dataclasses

    from streams.live.settings import LiveSettings

    defaults: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(LiveSettings)}
    app_id = args.app_id or env.get("FENCEWATCH_APP_ID") or str(defaults["app_id"])
    stall_after = args.stall_after
    if stall_after is None:
        values: dict[str, float] = {}
        for name, var in (
            ("stall_timeout", "FENCEWATCH_STALL_TIMEOUT"),
            ("commit_interval", "FENCEWATCH_COMMIT_INTERVAL"),
        ):
            text = env.get(var)
            try:
                values[name] = float(text) if text else float(defaults[name])
            except ValueError:
                raise ValueError(f"{var} must be a number of seconds, got {text!r}") from None
        stall_after = max(values["stall_timeout"], 3 * values["commit_interval"])
    if not 0 < stall_after < math.inf:
        raise ValueError(
            f"--stall-after must be a number of seconds more than 0, got {stall_after:g}"
        )
    return app_id, stall_after


def _missing_named_topics(conn: Any, settings: Any) -> list[str]:
    """The topics named (by a flag or variable) other than their default that
    do not exist: the console would wait on a typo for good, where every other
    command exits 2 (as ``run``'s check, streams/cli/run.py). A default topic
    may still be missing: ``fencewatch run`` creates it, and the console shows
    it once it exists."""
    from streams.kafka.admin import TopicAdmin

    named = [
        name
        for name, default in (
            (settings.events_topic, DEFAULT_EVENTS_TOPIC),
            (settings.findings_topic, DEFAULT_FINDINGS_TOPIC),
            (settings.status_topic, DEFAULT_STATUS_TOPIC),
        )
        if name != default
    ]
    return list(TopicAdmin(conn).missing(named)) if named else []


def _main(args: argparse.Namespace) -> int:
    from streams.console.app import ConsoleApp, ConsoleSettings
    from streams.console.guard import host_name
    from streams.console.limits import ServerLimits
    from streams.kafka.connection import check_reachable

    if not 0 <= args.port <= 65535:
        return _err(f"--port must be 0..65535, got {args.port}")
    bounds = {
        "--replay-events": args.replay_events,
        "--replay-scan": args.replay_scan,
        "--max-workflows": args.max_workflows,
        "--replay-concurrency": args.replay_concurrency,
    }
    for flag, value in bounds.items():
        if value < 1:
            return _err(f"{flag} must be at least 1, got {value}")
    hosts = tuple(h.strip() for arg in args.allowed_hosts for h in arg.split(",") if h.strip())
    for h in hosts:
        if host_name(h) != h.lower():
            return _err(f"--allowed-hosts takes host names without a port, got {h!r}")
    limits = ServerLimits(
        replay_concurrency=args.replay_concurrency,
        behind_tls=args.behind_tls,
        allowed_hosts=hosts,
    )
    token = os.environ.get(TOKEN_ENV) or None
    if token is not None and len(token) < _MIN_TOKEN:
        return _err(f"{TOKEN_ENV} must be at least {_MIN_TOKEN} characters")
    env = os.environ
    try:
        app_id, stall_after = _processor(args, env)
    except ValueError as exc:
        return _err(str(exc))
    try:
        conn = connection_from_args(args, extra=kafka_config(args.kafka_config))
        check_reachable(conn)
        settings = ConsoleSettings(
            conn,
            host=args.host,
            port=args.port,
            token=token,
            events_topic=args.events_topic
            or env.get("FENCEWATCH_EVENTS_TOPIC")
            or DEFAULT_EVENTS_TOPIC,
            findings_topic=args.findings_topic
            or env.get("FENCEWATCH_FINDINGS_TOPIC")
            or DEFAULT_FINDINGS_TOPIC,
            status_topic=args.status_topic
            or env.get("FENCEWATCH_STATUS_TOPIC")
            or DEFAULT_STATUS_TOPIC,
            replay_events=args.replay_events,
            replay_scan=args.replay_scan,
            max_workflows=args.max_workflows,
            limits=limits,
            processor_group=app_id,
            stall_after=stall_after,
        )
        missing = _missing_named_topics(conn, settings)
        if missing:
            return _err(
                f"topic {', '.join(missing)} does not exist on {conn.bootstrap_servers}: "
                "check the name (fencewatch topics create makes fencewatch's topics)"
            )
        app = ConsoleApp(settings)
    except (ValueError, FencewatchError) as exc:
        return _err(str(exc))
    except OSError as exc:
        return _err(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}")
    _raise_fd_limit()
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    app.start()
    mode = "verification enabled" if token else f"read-only (no {TOKEN_ENV})"
    print(f"fencewatch serve: {app.url} ({mode})", file=sys.stderr, flush=True)
    try:
        done.wait()
    finally:
        app.stop()
    return 0


def _raise_fd_limit() -> None:
    """Every connection is a descriptor: take the hard limit the system
    allows rather than a shell's default soft one (often 1024)."""
    try:
        import resource
    except ImportError:  # not on this platform
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != soft:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
