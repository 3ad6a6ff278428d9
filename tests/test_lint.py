"""The code passes its own linters, in the suite CI runs (``make lint`` alone
was never part of ``.ci/run``): ruff over streams, tests and bench, and mypy
with the project's configuration (strict on streams/)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=600,
        check=False,
    )


def test_ruff_finds_nothing_in_streams_tests_and_bench() -> None:
    """``ruff check streams tests bench`` exits 0."""
    done = _run("ruff", "check", "streams", "tests", "bench")
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_finds_nothing_with_the_projects_configuration() -> None:
    """``mypy`` (files and strictness from pyproject.toml) exits 0."""
    done = _run("mypy")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Success" in done.stdout
