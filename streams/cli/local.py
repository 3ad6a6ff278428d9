"""``fencewatch local start|stop|status``: a single-node Apache Kafka broker
on 127.0.0.1 for trying fencewatch, from a plain ``pip install`` (README,
docs/sdk.md).

It runs the project's ``scripts/kafka-local`` (shipped inside the wheel) with
bash: the Kafka broker jars are downloaded once from Maven Central into
``~/.cache/fencewatch`` (``FENCEWATCH_CACHE``; a counter on a terminal),
checked against their SHA-256, and the broker's config, data and log live in
``~/.local/state/fencewatch/kafka`` (``FENCEWATCH_KAFKA_DIR``). Needs Java 17+
and curl. The broker runs detached until ``fencewatch local stop``.

- ``start [--port N]``: start it (or report the running one); the bootstrap
  address is the last line on stdout, so ``$(fencewatch local start)`` is it;
- ``status``: ``running pid=... bootstrap=...`` (exit 0), ``stopped`` (exit 3),
  or still starting / not answering (exit 1);
- ``stop``: SIGTERM, up to 30 s, then SIGKILL; no process left.

Exit status: the script's (0 done; 1 the broker could not be started or
stopped, its log's tail shown; 3 status: stopped); 2 when Java or bash is
missing, or for a usage error.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

__all__ = ["register"]


def register(sub: Any) -> None:
    p = sub.add_parser(
        "local",
        help="start, stop or check a single-node Kafka broker on 127.0.0.1 (needs Java 17+)",
        description=(
            "A local Apache Kafka broker for trying fencewatch: start prints its bootstrap "
            "address last. Jars are downloaded once into ~/.cache/fencewatch (FENCEWATCH_CACHE); "
            "state in ~/.local/state/fencewatch/kafka (FENCEWATCH_KAFKA_DIR)."
        ),
    )
    actions = p.add_subparsers(dest="local_command", metavar="ACTION")
    actions.required = True
    start = actions.add_parser(
        "start", help="start the broker (or report the running one); prints HOST:PORT last"
    )
    start.add_argument(
        "--port",
        type=int,
        default=None,
        help="client port (default: the one used last time, else a free one)",
    )
    start.set_defaults(handler=_start)
    status = actions.add_parser("status", help="exit 0 and the address when it answers, 3 if not")
    status.set_defaults(handler=_plain("status"))
    stop = actions.add_parser("stop", help="stop the broker (SIGTERM, then SIGKILL after 30 s)")
    stop.set_defaults(handler=_plain("stop"))


def _err(msg: str) -> int:
    print(f"fencewatch local: {msg}", file=sys.stderr)
    return 2


def _run(command: str, args: list[str]) -> int:
    from streams.kafka.local_broker import missing_requirement, run_broker_script

    missing = missing_requirement(java=command == "start")
    if missing is not None:
        return _err(missing)
    try:
        return run_broker_script(command, args, env=os.environ)
    except FileNotFoundError as exc:
        return _err(str(exc))


def _start(args: argparse.Namespace) -> int:
    if args.port is not None and not 1 <= args.port <= 65535:
        return _err(f"--port must be 1..65535, got {args.port}")
    return _run("start", [] if args.port is None else ["--port", str(args.port)])


def _plain(command: str) -> Any:
    def handler(args: argparse.Namespace) -> int:
        return _run(command, [])

    return handler
