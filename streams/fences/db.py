"""The database port the fences are written against, and its factory.

The lease store, the fenced sink and the outbox run the same SQL on SQLite and
PostgreSQL; what differs (placeholders, row locks, the store's clock, error
translation) lives in the two adapters; :func:`streams.fences.connect.open_database`
picks one from a URL. A :class:`Tx` is one database
transaction holding the write boundary: on SQLite ``BEGIN IMMEDIATE`` (the
whole database), on PostgreSQL row locks taken with ``FOR UPDATE``/``FOR SHARE``.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Generic, Literal, Protocol, TypeVar

__all__ = ["Clock", "Database", "Dialect", "PerThread", "Tx", "check_prefix"]

Dialect = Literal["sqlite", "postgres"]
#: A store clock: seconds since the Unix epoch, as the store sees them.
Clock = Callable[[], float]

_PREFIX = re.compile(r"[a-z_][a-z0-9_]{0,30}")

C = TypeVar("C")


class PerThread(Generic[C]):
    """One connection per thread, opened on first use, all closed together:
    the connection cache both adapters share."""

    def __init__(self, open_conn: Callable[[], C], is_closed: Callable[[C], bool]) -> None:
        self._open = open_conn
        self._is_closed = is_closed
        self._local = threading.local()
        self._all: list[C] = []
        self._lock = threading.Lock()

    def get(self) -> C:
        conn: C | None = getattr(self._local, "conn", None)
        if conn is None or self._is_closed(conn):
            conn = self._open()
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    def close_all(self, close: Callable[[C], object]) -> None:
        with self._lock:
            conns, self._all = self._all, []
        for conn in conns:
            close(conn)
        self._local = threading.local()


class Tx(Protocol):
    """One open transaction. SQL uses ``?`` placeholders on both dialects."""

    @property
    def dialect(self) -> Dialect: ...

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run a statement and return its rows."""
        ...

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run a statement and return the number of rows it changed."""
        ...

    def now(self) -> float:
        """The store's clock (never the worker's): seconds since the Unix epoch."""
        ...

    def now_sql(self) -> tuple[str, tuple[Any, ...]]:
        """The store's clock as a SQL expression and its parameters, for a
        statement that must read the clock itself (evaluated by the database
        when the statement runs, after any row lock it waited for)."""
        ...

    @property
    def for_update(self) -> str:
        """Row-lock suffix for a SELECT that precedes a write ("" on SQLite,
        whose ``BEGIN IMMEDIATE`` already holds the write lock)."""
        ...

    @property
    def for_share(self) -> str:
        """Shared row-lock suffix for a SELECT whose answer must not change
        before commit."""
        ...


class Database(Protocol):
    """A connection factory handing out transactions; safe to share between
    threads (each thread gets its own connection)."""

    @property
    def dialect(self) -> Dialect: ...

    def transaction(self) -> AbstractContextManager[Tx]:
        """Open a write transaction; commit on normal exit, roll back on error.
        Database errors surface as :class:`streams.errors.StoreError`."""
        ...

    def close(self) -> None:
        """Close every connection this object opened."""
        ...


def check_prefix(prefix: str) -> str:
    """Table-name prefixes are spliced into SQL, so only a safe identifier passes."""
    if not _PREFIX.fullmatch(prefix):
        raise ValueError(f"table prefix must match {_PREFIX.pattern}, got {prefix!r}")
    return prefix
