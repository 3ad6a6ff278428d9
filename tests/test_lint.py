"""The code passes its own linters, in the suite CI runs (``make lint`` alone
was never part of ``.ci/run``): ruff over streams, fencewatch, tests and bench, and mypy
with the project's configuration (strict on streams/), and ruff's formatter
over everything Python in the checkout."""

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


def test_ruff_finds_nothing_in_streams_fencewatch_tests_and_bench() -> None:
    """``ruff check streams fencewatch tests bench`` exits 0."""
    done = _run("ruff", "check", "streams", "fencewatch", "tests", "bench")
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_code_is_as_ruff_formats_it() -> None:
    """``ruff format --check`` over all the checkout's Python packages and scripts exits 0."""
    paths = ("streams", "fencewatch", "tests", "bench", "scripts", "examples")
    done = _run("ruff", "format", "--check", *paths)
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_finds_nothing_with_the_projects_configuration() -> None:
    """``mypy`` (files and strictness from pyproject.toml) exits 0."""
    done = _run("mypy")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Success" in done.stdout
