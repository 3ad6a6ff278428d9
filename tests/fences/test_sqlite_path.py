"""A SQLite path that cannot be opened names the file (a missing directory:
tests/fences/test_store_urls.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.errors import StoreError, StoreURLError
from streams.fences import SqlLeaseStore, open_database


def test_unopenable_sqlite_path_names_the_file(tmp_path: Path) -> None:
    """A database path that cannot be opened (here: it is a directory) raises
    StoreError naming the path."""
    target = tmp_path / "a-directory.db"
    target.mkdir()
    db = open_database(f"sqlite:///{target}")
    with pytest.raises(StoreError, match=str(target)):
        SqlLeaseStore(db)
    db.close()


def test_sqlite_path_under_a_file_is_one_url_error(tmp_path: Path) -> None:
    """A database path whose parent is a regular file is refused by
    open_database naming that parent, not an OSError traceback later."""
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    with pytest.raises(StoreURLError, match=f"{blocker} is not a directory"):
        open_database(f"sqlite:///{blocker}/agent.db")
