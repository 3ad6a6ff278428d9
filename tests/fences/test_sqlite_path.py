"""A SQLite lease store path whose directory does not exist yet (the docs'
`sqlite:///.run/agent.db` in a fresh directory) works, and a path that cannot
be opened names the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.errors import StoreError
from streams.fences import SqlLeaseStore, open_database


def test_sqlite_url_in_a_missing_directory_creates_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """open_database('sqlite:///.run/agent.db') from a directory without .run/
    creates .run/ and the store acquires a lease (it failed with 'unable to open
    database file')."""
    monkeypatch.chdir(tmp_path)
    db = open_database("sqlite:///.run/agent.db")
    try:
        lease = SqlLeaseStore(db).acquire("tenant/export/2026-07-26", "alpha", ttl=30)
    finally:
        db.close()
    assert lease.epoch == 1
    assert (tmp_path / ".run" / "agent.db").is_file()


def test_unopenable_sqlite_path_names_the_file(tmp_path: Path) -> None:
    """A database path that cannot be opened (here: it is a directory) raises
    StoreError naming the path."""
    target = tmp_path / "a-directory.db"
    target.mkdir()
    db = open_database(f"sqlite:///{target}")
    with pytest.raises(StoreError, match=str(target)):
        SqlLeaseStore(db)
    db.close()


def test_sqlite_path_under_a_file_is_one_store_error(tmp_path: Path) -> None:
    """A database path whose parent is a regular file raises StoreError naming
    the path, not an OSError traceback."""
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    db = open_database(f"sqlite:///{blocker}/agent.db")
    with pytest.raises(StoreError, match="cannot create its directory"):
        SqlLeaseStore(db)
    db.close()
