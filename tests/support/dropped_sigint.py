"""Run ``fencewatch`` in a child process that receives a SIGINT Python drops.

A KeyboardInterrupt raised inside a weakref callback cannot propagate:
Python prints "Exception ignored in ..." and carries on. That is what
happened when a Ctrl-C landed at the end of an import (importlib's
module-lock callback) and the split-brain demo ran on to exit 0. The child
raises SIGINT inside such a callback at a chosen point, so the drop happens
every time, not once in a thousand runs:

- ``import:NAME``: just before ``streams.cli`` imports its subcommand module
  NAME (while the parser is built);
- ``open_database``: when the split-brain demo opens its lease store, right
  after it froze worker-a (where the flake's SIGINT landed).
"""

from __future__ import annotations

import sys

__all__ = ["dropped_sigint_argv"]

_CHILD = """
import importlib, signal, sys, weakref


def drop_sigint():
    class Held:
        pass

    held = Held()
    ref = weakref.ref(held, lambda _: signal.raise_signal(signal.SIGINT))
    del held  # the callback runs here: its KeyboardInterrupt is dropped
    assert ref() is None


where = sys.argv[1]
if where.startswith("import:"):
    module, real_import = "streams.cli." + where[len("import:"):], importlib.import_module

    def import_module(name, package=None):
        if name == module:
            drop_sigint()
        return real_import(name, package)

    importlib.import_module = import_module
elif where == "open_database":
    import streams.demo.split_brain as split_brain

    real_open = split_brain.open_database

    def open_database(*args, **kwargs):
        drop_sigint()
        return real_open(*args, **kwargs)

    split_brain.open_database = open_database
else:
    raise SystemExit(f"unknown drop point {where!r}")

from streams.cli import main

raise SystemExit(main(sys.argv[2:]))
"""


def dropped_sigint_argv(where: str, *fencewatch_args: str) -> list[str]:
    """The argv of ``fencewatch FENCEWATCH_ARGS...`` that drops a SIGINT at ``where``."""
    return [sys.executable, "-c", _CHILD, where, *fencewatch_args]
