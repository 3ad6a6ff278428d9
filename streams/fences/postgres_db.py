"""PostgreSQL adapter of the fences' database port (psycopg 3).

Each transaction runs at READ COMMITTED with explicit row locks: the fences
lock the one row they compare (``SELECT ... FOR UPDATE``) so the compare and
the write share the atomic boundary without serializing unrelated workflow
keys. The store clock is the server's ``clock_timestamp()``: every worker,
whatever its own clock says, is judged by the same clock.

Every call is bounded: ``connect_timeout`` for connecting, a server-side
``statement_timeout`` for each statement (lock waits included), and TCP
keepalives plus ``tcp_user_timeout`` so a connection to a vanished host fails
instead of hanging. A store that cannot be reached or answers too slowly
surfaces as :class:`~streams.errors.StoreUnavailable`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal

import psycopg
from psycopg import errors as pg_errors

from streams.errors import StoreError, StoreUnavailable
from streams.fences.db import PerThread

__all__ = ["PostgresDatabase"]

_NOW_EXPR = "extract(epoch FROM clock_timestamp())::float8"
_NOW_SQL = "SELECT " + _NOW_EXPR
#: Unreachable or too slow: the connection failed or broke, or a statement
#: (a lock wait included) ran past statement_timeout.
_UNAVAILABLE = (psycopg.OperationalError, pg_errors.QueryCanceled, pg_errors.LockNotAvailable)
_RETRIABLE = (pg_errors.SerializationFailure, pg_errors.DeadlockDetected)


def _translate(exc: psycopg.Error) -> StoreError:
    # One line: libpq messages can span several (hints, "is the server running").
    text = " ".join(str(exc).split())
    if isinstance(exc, _UNAVAILABLE):
        return StoreUnavailable(f"postgres unavailable: {text}")
    return StoreError(f"postgres: {text}", retriable=isinstance(exc, _RETRIABLE))


def _pg(sql: str) -> str:
    # Our SQL never contains a literal '?' or '%', so this is a plain swap.
    return sql.replace("?", "%s")


class _PostgresTx:
    dialect: Literal["postgres"] = "postgres"
    for_update = " FOR UPDATE"
    for_share = " FOR SHARE"

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        cur = self._conn.execute(_pg(sql), tuple(params))
        return list(cur.fetchall()) if cur.description is not None else []

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        cur = self._conn.execute(_pg(sql), tuple(params))
        return int(cur.rowcount)

    def now(self) -> float:
        row = self._conn.execute(_NOW_SQL).fetchone()
        assert row is not None
        return float(row[0])

    def now_sql(self) -> tuple[str, tuple[Any, ...]]:
        # clock_timestamp() is volatile: in an UPDATE's WHERE it is evaluated
        # for the row version the statement locked, after any lock wait.
        return _NOW_EXPR, ()


class PostgresDatabase:
    """A DSN; one connection per thread, opened on first use."""

    dialect: Literal["postgres"] = "postgres"

    def __init__(self, dsn: str, *, timeout_s: float = 10.0) -> None:
        if not 0 < timeout_s <= 3600:
            raise ValueError(f"timeout_s must be in (0, 3600], got {timeout_s!r}")
        self.dsn = dsn
        self.timeout_s = timeout_s
        # A broken connection (server restarted) is replaced on the next call.
        self._conns: PerThread[psycopg.Connection[Any]] = PerThread(
            self._open, lambda c: bool(c.closed or c.broken)
        )

    def _open(self) -> psycopg.Connection[Any]:
        ms = max(1, int(self.timeout_s * 1000))
        try:
            return psycopg.connect(
                self.dsn,
                autocommit=True,
                # libpq rounds connect_timeout to whole seconds, minimum 2.
                connect_timeout=max(2, math.ceil(self.timeout_s)),
                options=f"-c statement_timeout={ms}",
                keepalives=1,
                keepalives_idle=max(1, ms // 2000),
                keepalives_interval=1,
                keepalives_count=3,
                tcp_user_timeout=ms,
            )
        except psycopg.Error as exc:
            raise _translate(exc) from exc

    @contextmanager
    def transaction(self) -> Iterator[_PostgresTx]:
        conn = self._conns.get()
        try:
            with conn.transaction():
                yield _PostgresTx(conn)
        except psycopg.Error as exc:
            raise _translate(exc) from exc

    def close(self) -> None:
        self._conns.close_all(lambda c: c.close())
