"""``fencewatch run``: the live stream processor (docs/live.md)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from typing import Any

from streams.cli.kafka_args import add_connection_args, connection_from_args, report_kafka_failure
from streams.kafka.topics import DEFAULT_EVENTS_TOPIC, DEFAULT_FINDINGS_TOPIC, DEFAULT_STATUS_TOPIC
from streams.live.settings import DEFAULT_DATA_DIR

__all__ = ["register"]


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "run",
        help="run the live processor (--engine faust or rdkafka)",
        description=(
            "Consume ownership events, keep per-workflow detector state in a changelog-backed "
            "table, and publish findings (exactly-once). Every flag has a FENCEWATCH_* "
            "environment variable; flags win."
        ),
    )
    add_connection_args(p, log_level=False)
    a = p.add_argument
    a("--events-topic", help=f"input topic (default {DEFAULT_EVENTS_TOPIC})")
    a("--findings-topic", help=f"output topic (default {DEFAULT_FINDINGS_TOPIC})")
    a("--dlq-topic", help="dead-letter topic (default <events-topic>.dlq)")
    a(
        "--status-topic",
        help=f"compacted per-workflow status topic (default {DEFAULT_STATUS_TOPIC})",
    )
    a(
        "--no-status",
        dest="status",
        action="store_const",
        const=False,
        default=None,
        help="do not write the status topic (FENCEWATCH_STATUS=false)",
    )
    a("--app-id", help="consumer group and transactional id prefix (default fencewatch-live)")
    a("--partitions", type=int, help="expected partitions of the events topic")
    a(
        "--replication",
        type=int,
        help="replication of topics created here (default 1; 3 or more sets min.insync.replicas=2)",
    )
    a(
        "--at-least-once",
        dest="exactly_once",
        action="store_const",
        const=False,
        default=None,
        help="turn exactly-once off (findings may repeat; consumers must upsert)",
    )
    a("--commit-interval", type=float, help="seconds between commits (default 0.1)")
    a("--store", help="memory:// (default) or rocksdb:// (pip install 'fencewatch[rocksdb]')")
    a(
        "--data-dir",
        help=f"local state directory, created if missing (default ./{DEFAULT_DATA_DIR})",
    )
    a("--session-timeout", type=float, help="consumer session timeout, s (default 10)")
    a("--heartbeat-interval", type=float, help="consumer heartbeat, s (default 3)")
    a(
        "--transaction-timeout",
        type=float,
        help="s the broker keeps a frozen worker's transaction open (rdkafka engine; default 10)",
    )
    a("--max-events-per-key", type=int, help="detector evidence kept per workflow key")
    a(
        "--state-cache-keys",
        type=int,
        help="decoded key states kept in memory, ~4.5 KiB each (default 10000); "
        "set it above the keys live at once",
    )
    a("--log-level", help="debug, info (default), warning, error; debug shows client logs")
    a("--metrics-port", type=int, help="port of /metrics and /health; 0 disables (default)")
    a("--metrics-host", help="address /metrics binds (default 127.0.0.1; 0.0.0.0 in a container)")
    a(
        "--create-topics",
        action="store_true",
        default=None,
        help="create topics named by a flag that do not exist yet (default: only the default "
        "topics are created; FENCEWATCH_CREATE_TOPICS=true)",
    )
    a(
        "--engine",
        choices=("faust", "rdkafka"),
        help="rdkafka (default: one transactional producer per worker) or faust "
        "(faust-streaming); FENCEWATCH_ENGINE; docs/live.md, 'Which to pick'",
    )
    a(
        "--stall-timeout",
        type=float,
        help="s holding partitions with lag and no commit before /health says stalled; "
        "the engine is restarted after 3 x this (default 60)",
    )
    a(
        "--no-supervise",
        dest="supervise",
        action="store_const",
        const=False,
        default=None,
        help="run the engine in this process, not in a child restarted on a crash or a "
        "stall (for an orchestrator that restarts it; FENCEWATCH_SUPERVISE=false)",
    )
    p.set_defaults(handler=_run)


_SETTING_ARGS = (
    "events_topic",
    "findings_topic",
    "dlq_topic",
    "status_topic",
    "status",
    "app_id",
    "partitions",
    "replication",
    "exactly_once",
    "commit_interval",
    "store",
    "data_dir",
    "session_timeout",
    "heartbeat_interval",
    "transaction_timeout",
    "max_events_per_key",
    "state_cache_keys",
    "log_level",
    "metrics_port",
    "metrics_host",
    "engine",
    "stall_timeout",
    "supervise",
)


def _run(args: argparse.Namespace) -> int:
    """Validate, probe, prepare, start: each once (tests/kafka/test_run_steps.py)."""
    from streams.errors import ConfigError, FencewatchError
    from streams.kafka.admin import TopicAdmin
    from streams.kafka.logs import configure_client_logs
    from streams.live.prepare import ADMIN_TIMEOUT_S, prepare
    from streams.live.runner import run_worker
    from streams.live.settings import check_metrics_address, settings_from_env
    from streams.live.supervisor import CHILD_ENV, RestartPolicy, engine_restarts, supervise

    overrides = {name: getattr(args, name, None) for name in _SETTING_ARGS}
    try:
        # Validate: the connection from its flags and FENCEWATCH_* (checked
        # when made), the rest of the settings, what needs no broker.
        connection = connection_from_args(args)
        settings = settings_from_env(os.environ, overrides, connection=connection)
        check_metrics_address(settings)
    except ConfigError as exc:
        print(f"fencewatch run: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    configure_client_logs(settings.log_level)
    child = os.environ.get(CHILD_ENV)
    if settings.supervise and not child:
        # A missing extra is the supervisor's one line, not the engine's
        # (which would die at each restart with it).
        _require_modules(ENGINE_MODULES[settings.engine])
        # This process only watches; the engine runs in a child that is
        # restarted on a crash or a stall (streams/live/supervisor.py).
        return supervise(
            [sys.executable, "-m", "streams", *args.argv],
            engine=settings.engine,
            policy=RestartPolicy(restart_after=3 * settings.stall_after),
        )
    if child:
        _become_engine(int(child))
    try:
        # Probe: an unreachable broker, or one that accepts TCP and never
        # answers, is the one line this command prints. Before anything is
        # prepared, so a wrong address leaves nothing behind.
        admin = TopicAdmin(connection, timeout_s=ADMIN_TIMEOUT_S)
        _probe(admin, restarted=engine_restarts(os.environ) > 0)
        create = args.create_topics or _env_true("FENCEWATCH_CREATE_TOPICS")
        unasked = _unasked_topics(admin, settings, create=create)
        if unasked:
            print(
                f"fencewatch run: topic {', '.join(unasked)} does not exist on "
                f"{connection.bootstrap_servers}: check the name, or give --create-topics "
                "to create it",
                file=sys.stderr,
            )
            return 2
        # Prepare: the store's extra, the topics (one line per topic created),
        # the local state.
        prepared = prepare(settings, admin, on_topic=_say_created)
        print(f"fencewatch run: local state in {prepared.data_dir}", file=sys.stderr)
        # Start.
        return run_worker(settings, prepared)
    except FencewatchError as exc:
        return report_kafka_failure("run", exc)


#: What each engine imports from the kafka extra (checked before the engine's
#: process starts, without importing it into the supervisor).
ENGINE_MODULES = {
    "rdkafka": ("confluent_kafka", "prometheus_client"),
    "faust": ("faust", "aiokafka", "prometheus_client"),
}


def _require_modules(names: tuple[str, ...]) -> None:
    """Raise ModuleNotFoundError (which main() words as the extra to install)
    for the first of ``names`` that cannot be imported."""
    import importlib.util

    for name in names:
        loaded = sys.modules.get(name, False)
        if loaded is None:  # marked missing (`import` raises ModuleNotFoundError)
            found = False
        elif loaded is not False:
            found = True  # imported already (faust's module has no __spec__)
        else:
            try:
                found = importlib.util.find_spec(name) is not None
            except (ImportError, ValueError):
                found = False
        if not found:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


def _become_engine(supervisor: int) -> None:
    """This process is the supervised engine: it dies with its supervisor
    (no orphan worker after a kill -9 of it), and writes every thread's Python
    stack to the log on a native crash or when the supervisor asks (SIGUSR1,
    before it kills a stalled engine)."""
    import faulthandler
    import signal

    from streams.lifeline import die_with_parent

    if not die_with_parent(supervisor, signal.SIGKILL):
        raise SystemExit(1)  # the supervisor is already gone
    faulthandler.enable(all_threads=True)
    faulthandler.register(signal.SIGUSR1, all_threads=True)


def _probe(admin: Any, *, restarted: bool) -> None:
    """The broker answers, or the one-line failure. An engine the supervisor
    restarted waits for the brokers instead (they may be why it was restarted)."""
    from streams.errors import BrokerUnreachable

    told = False
    while True:
        try:
            admin.probe()
            return
        except BrokerUnreachable as exc:
            if not restarted:
                raise
            if not told:
                logging.getLogger("streams.live.supervisor").warning(
                    "restarted engine: waiting for the brokers (%s)", exc
                )
                told = True
            time.sleep(5.0)


def _say_created(result: Any) -> None:
    if result.created:
        print(
            f"fencewatch run: created topic {result.name} ({result.partitions} partitions)",
            file=sys.stderr,
        )


def _env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _unasked_topics(admin: Any, settings: Any, *, create: bool) -> list[str]:
    """The topics named (by a flag or variable) other than their default that
    do not exist: a typo there must not quietly create a topic (and its DLQ)
    that nothing else reads. Empty with ``--create-topics``."""
    from streams.kafka.topics import dlq_topic_for

    if create:
        return []
    defaults = {
        settings.events_topic: DEFAULT_EVENTS_TOPIC,
        settings.findings_topic: DEFAULT_FINDINGS_TOPIC,
        settings.status_topic: DEFAULT_STATUS_TOPIC,
        settings.dlq: dlq_topic_for(settings.events_topic),
    }
    return list(admin.missing([name for name, default in defaults.items() if name != default]))
