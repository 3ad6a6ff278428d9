"""open_database() accepts only URLs a store supports: any other scheme, a
malformed sqlite URL or a missing directory is one line naming the URL (its
password masked) and the accepted forms, and never a local SQLite file (which
would hand out epochs of its own and switch fencing off)."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest

from streams.core.errors import ConfigError
from streams.errors import StoreURLError
from streams.extras import MissingExtra
from streams.fences import SqlLeaseStore, open_database
from tests.fences.conftest import _drop_tables


@pytest.mark.parametrize(
    "url",
    [
        "postgresql+asyncpg://u@db.example/prod",
        "mysql://x",
        "sqlite://relative.db",
        "sqlite:relative.db",
        "redis://localhost:6379/0",
        "postgresql:/u@db.example/prod",
        "host=db.example dbname=prod",
        "",
    ],
)
def test_unsupported_url_is_one_config_error_and_creates_nothing(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A URL no store supports raises StoreURLError (a ConfigError) in one line
    naming the URL and the accepted forms; no file or directory appears."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StoreURLError) as info:
        open_database(url)
    message = str(info.value)
    assert isinstance(info.value, ConfigError)
    assert "\n" not in message
    assert repr(url) in message
    assert "accepted: sqlite:///" in message and "postgresql://" in message
    assert list(tmp_path.iterdir()) == []


def test_the_password_in_a_refused_url_is_masked() -> None:
    """The error line and the error's url field never show the password."""
    with pytest.raises(StoreURLError) as info:
        open_database("mysql://admin:s3cret@db.example/prod?password=s3cret")
    assert "s3cret" not in str(info.value)
    assert info.value.url == "mysql://admin:***@db.example/prod?password=***"
    with pytest.raises(StoreURLError) as info:
        open_database("postgresql+asyncpg://admin:p@ss:w0rd@db.example:5432/prod")
    assert "ss:w0rd" not in str(info.value)
    assert info.value.url == "postgresql+asyncpg://admin:***@db.example:5432/prod"


def test_a_sqlite_file_in_a_missing_directory_is_refused_not_created(tmp_path: Path) -> None:
    """sqlite:////nonexistent/dir/x.db names the missing directory, which is not created."""
    missing = tmp_path / "nonexistent" / "dir"
    with pytest.raises(StoreURLError, match=f"directory {missing} does not exist"):
        open_database(f"sqlite:///{missing / 'x.db'}")
    assert not (tmp_path / "nonexistent").exists()


def test_a_relative_sqlite_path_in_a_missing_directory_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sqlite:///.run/agent.db from a directory without .run/ is refused and
    .run/ is not made."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StoreURLError, match=r"directory \.run does not exist"):
        open_database("sqlite:///.run/agent.db")
    assert not (tmp_path / ".run").exists()


@pytest.mark.parametrize("scheme", ["sqlite", "SQLite", "SQLITE"])
def test_sqlite_scheme_is_case_insensitive(
    scheme: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite:///fences.db is the SQLite file fences.db (RFC 3986: schemes are
    case-insensitive), and the store works on it."""
    monkeypatch.chdir(tmp_path)
    db = open_database(f"{scheme}:///fences.db")
    try:
        assert SqlLeaseStore(db).acquire("k", "alpha", ttl=30).epoch == 1
    finally:
        db.close()
    assert (tmp_path / "fences.db").is_file()


@pytest.mark.postgres
@pytest.mark.parametrize("scheme", ["PostgreSQL", "POSTGRES", "postgresql+psycopg"])
def test_postgres_scheme_variants_reach_postgres_not_a_file(
    scheme: str, pg_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL://, POSTGRES:// and postgresql+psycopg:// open the PostgreSQL
    server (the lease is in its tables) and create no local file."""
    monkeypatch.chdir(tmp_path)
    assert pg_dsn.startswith(("postgresql://", "postgres://"))
    url = scheme + pg_dsn[pg_dsn.index(":") :]
    prefix = f"t{uuid.uuid4().hex[:10]}_"
    db = open_database(url)
    try:
        assert db.dialect == "postgres"
        lease = SqlLeaseStore(db, prefix=prefix).acquire("k", "alpha", ttl=30)
        assert SqlLeaseStore(db, prefix=prefix).current_epoch("k") == lease.epoch == 1
    finally:
        db.close()
        _drop_tables(pg_dsn, prefix)
    assert list(tmp_path.iterdir()) == []


def test_postgres_without_psycopg_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without psycopg installed a PostgreSQL URL raises MissingExtra naming
    pip install 'fencewatch[postgres]', not a ModuleNotFoundError traceback."""
    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg now fails
    monkeypatch.delitem(sys.modules, "streams.fences.postgres_db", raising=False)
    with pytest.raises(MissingExtra, match=r"pip install 'fencewatch\[postgres\]'"):
        open_database("postgresql://u@db.example/prod")
