"""The ``fencewatch`` command. The only place that prints or exits.

Each subcommand lives in its own module ``streams.cli.<name>`` exposing
``register(subparsers)``; its handler returns the exit status.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import NoReturn

from streams.cli.interrupts import DroppedInterrupts

__all__ = ["main"]

# Subcommand modules, imported lazily so that `fencewatch audit` on a file never
# pays for (or needs) the Kafka client libraries.
_COMMANDS: tuple[str, ...] = (
    "audit",
    "topics",
    "run",
    "migrate",
    "demo",
    "publish",
    "findings",
    "status",
    "verify",
    "serve",
    "local",
    "spec",
    "report",
    "source",
)


def _version() -> str:
    from streams import __version__
    from streams._native import native_summary

    return f"fencewatch {__version__} (detector: {native_summary()})"


class _Parser(argparse.ArgumentParser):
    """A usage error is one line naming the flag, not the whole usage (a
    typo in ``--kind`` used to print 20 lines before the error). Subcommand
    parsers inherit this class."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="fencewatch",
        description="Stale-owner (split-brain) detection and fencing for agents and workflows.",
        epilog="SPEC §N in help texts and messages is section N of fencewatch's specification "
        "(docs/spec.md): `fencewatch spec N` prints it.",
    )
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in _COMMANDS:
        module = importlib.import_module(f"streams.cli.{name}")
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # From the first import of a subcommand to the last line: a Ctrl-C that
    # Python drops (raised inside a weakref callback, as at the end of an
    # import) is raised again, and at worst still makes the exit 130.
    dropped = DroppedInterrupts()
    try:
        with dropped:
            status = _main(argv)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    if dropped.seen and status != 130:
        print("interrupted", file=sys.stderr)
        return 130
    return status


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors, 0 on --help
        return int(exc.code or 0)
    # The words as given: `fencewatch run` starts its engine with them again.
    args.argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return int(args.handler(args))
    except ModuleNotFoundError as exc:
        from streams.extras import extra_for

        extra = extra_for(exc)
        if extra is None:  # not an optional dependency: a bug, keep its traceback
            raise
        # `pip install fencewatch` has no Kafka client: say which extra, once.
        print(
            f"fencewatch {args.command}: needs the {extra} extra:"
            f" pip install 'fencewatch[{extra}]' (no module named {exc.name!r})",
            file=sys.stderr,
        )
        return 2
