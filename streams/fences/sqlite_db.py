"""SQLite adapter of the fences' database port (stdlib ``sqlite3``).

WAL so readers never block the writer; every transaction is ``BEGIN
IMMEDIATE`` so the compare and the write of a fence share one write lock,
across threads and processes; a busy timeout turns lock contention into
waiting rather than an error. The store clock is SQLite's ``julianday('now')``
(the same host clock for every process on the machine, never a value the
worker supplies) unless a clock is injected, which tests use to freeze time.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any, Literal

from streams.errors import StoreError, StoreUnavailable
from streams.fences.db import Clock, PerThread

__all__ = ["SqliteDatabase"]

_NOW_EXPR = "((julianday('now') - 2440587.5) * 86400.0)"
_NOW_SQL = "SELECT " + _NOW_EXPR


def _translate(exc: sqlite3.Error, path: str | None = None) -> StoreError:
    # Opening names the file: "unable to open database file" alone does not
    # say which one.
    text = f"{path}: {exc}" if path else str(exc)
    if isinstance(exc, sqlite3.OperationalError) and ("locked" in text or "busy" in text):
        # The write lock stayed taken past the busy timeout: too slow.
        return StoreUnavailable(f"sqlite unavailable: {text}")
    return StoreError(f"sqlite: {text}")


class _SqliteTx:
    dialect: Literal["sqlite"] = "sqlite"
    for_update = ""
    for_share = ""

    def __init__(self, conn: sqlite3.Connection, clock: Clock | None) -> None:
        self._conn = conn
        self._clock = clock

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return list(self._conn.execute(sql, tuple(params)).fetchall())

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        return int(self._conn.execute(sql, tuple(params)).rowcount)

    def now(self) -> float:
        if self._clock is not None:
            return float(self._clock())
        return float(self._conn.execute(_NOW_SQL).fetchone()[0])

    def now_sql(self) -> tuple[str, tuple[Any, ...]]:
        # One write lock for the whole database (BEGIN IMMEDIATE) is already
        # held, so an injected clock read here is as late as the database's.
        if self._clock is not None:
            return "?", (float(self._clock()),)
        return _NOW_EXPR, ()


class SqliteDatabase:
    """One SQLite file; one connection per thread (sqlite3 connections must
    not be shared between threads mid-transaction)."""

    dialect: Literal["sqlite"] = "sqlite"

    def __init__(
        self, path: str, *, clock: Clock | None = None, busy_timeout_s: float = 30.0
    ) -> None:
        if not path:
            raise ValueError("SQLite path must not be empty")
        self.path = path
        self._clock = clock
        self._busy_timeout_s = busy_timeout_s
        # A connection closed by close() is never handed out again.
        self._conns: PerThread[sqlite3.Connection] = PerThread(self._open, lambda c: False)

    def _open(self) -> sqlite3.Connection:
        # The directory is never created here: open_database() refuses a
        # missing one (a mistyped path must not become a new, empty store).
        try:
            # isolation_level=None: we issue BEGIN IMMEDIATE/COMMIT ourselves.
            conn = sqlite3.connect(
                self.path,
                timeout=self._busy_timeout_s,
                isolation_level=None,
                check_same_thread=False,
            )
            conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_s * 1000)}")
            conn.execute("PRAGMA journal_mode = WAL")
            # NORMAL is durable across process crashes in WAL mode; only a
            # power loss can drop the last commits.
            conn.execute("PRAGMA synchronous = NORMAL")
        except sqlite3.Error as exc:
            raise _translate(exc, self.path) from exc
        return conn

    @contextmanager
    def transaction(self) -> Iterator[_SqliteTx]:
        conn = self._conns.get()
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise _translate(exc) from exc
        try:
            yield _SqliteTx(conn, self._clock)
        except BaseException as exc:
            # The connection may already have rolled back (e.g. after a fatal error).
            with suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise _translate(exc) from exc
            raise
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            with suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise _translate(exc) from exc

    def close(self) -> None:
        self._conns.close_all(sqlite3.Connection.close)
