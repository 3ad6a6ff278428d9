"""A Ctrl-C that Python drops (raised inside a weakref callback, as at the end
of an import) still stops the command: exit 130 and one line, no
"Exception ignored" block and no traceback."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from tests.support.dropped_sigint import dropped_sigint_argv

REPO = Path(__file__).resolve().parents[2]


def _default_sigint() -> None:
    # As at a terminal: a suite run as a background job inherits SIGINT
    # ignored, and Python would then never raise KeyboardInterrupt at all.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.timeout(60)
def test_a_sigint_dropped_while_the_parser_imports_exits_130_with_one_line() -> None:
    """Dropped while `streams.cli.spec` is imported, `fencewatch spec 5` (which
    otherwise exits 0 at once) exits 130 with the one line 'interrupted'."""
    done = subprocess.run(
        dropped_sigint_argv("import:spec", "spec", "5"),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=50,
        preexec_fn=_default_sigint,
    )
    assert done.returncode == 130, done.stderr
    assert done.stderr.splitlines() == ["interrupted"]


@pytest.mark.timeout(60)
def test_the_drop_is_real_without_the_cli() -> None:
    """The child's drop point works as claimed: outside fencewatch's main the
    same callback's KeyboardInterrupt is printed as ignored and the run goes on."""
    child = dropped_sigint_argv("import:spec", "spec", "5")
    # The same child, but calling the drop and then carrying on by itself.
    script = child[2].split("\nwhere = ")[0] + "\ndrop_sigint()\nprint('carried on')\n"
    done = subprocess.run(
        [child[0], "-c", script],
        capture_output=True,
        text=True,
        timeout=50,
        preexec_fn=_default_sigint,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "carried on\n"
    assert "Exception ignored in" in done.stderr
    assert "KeyboardInterrupt" in done.stderr
