"""`fencewatch demo worker`'s own default store gets its directory; a path given does not."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from streams.cli.demo import _worker_plan


def _args(db: str | None) -> argparse.Namespace:
    return argparse.Namespace(
        bootstrap_servers="127.0.0.1:9092", db=db, key="k", worker="w", effect="e",
        topic="t", steps=1, step_seconds=0.0, tool_seconds=0.0, ttl=1.0, wait_seconds=1.0,
        unfenced=False,
    )  # fmt: skip


def test_the_default_worker_db_directory_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no --db, the worker's default .run/agent.db has its directory made."""
    monkeypatch.chdir(tmp_path)
    plan = _worker_plan(_args(None))
    assert plan.db_url == ".run/agent.db"
    assert (tmp_path / ".run").is_dir()


def test_a_given_db_path_makes_no_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A --db the user gave is passed on as is: the command makes no directory for it."""
    monkeypatch.chdir(tmp_path)
    plan = _worker_plan(_args("typo/agent.db"))
    assert plan.db_url == "typo/agent.db"
    assert not (tmp_path / "typo").exists()
