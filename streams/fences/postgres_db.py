"""PostgreSQL adapter of the fences' database port (psycopg 3).

Each transaction runs at READ COMMITTED with explicit row locks: the fences
lock the one row they compare (``SELECT ... FOR UPDATE``) so the compare and
the write share the atomic boundary without serializing unrelated workflow
keys. The store clock is the server's ``clock_timestamp()``: every worker,
whatever its own clock says, is judged by the same clock.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal

import psycopg
from psycopg import errors as pg_errors

from streams.errors import StoreError
from streams.fences.db import PerThread

__all__ = ["PostgresDatabase"]

_NOW_SQL = "SELECT extract(epoch FROM clock_timestamp())::float8"
_RETRIABLE = (
    psycopg.OperationalError,
    pg_errors.SerializationFailure,
    pg_errors.DeadlockDetected,
    pg_errors.LockNotAvailable,
)


def _translate(exc: psycopg.Error) -> StoreError:
    return StoreError(f"postgres: {exc}".strip(), retriable=isinstance(exc, _RETRIABLE))


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


class PostgresDatabase:
    """A DSN; one connection per thread, opened on first use."""

    dialect: Literal["postgres"] = "postgres"

    def __init__(self, dsn: str, *, connect_timeout_s: int = 10) -> None:
        self.dsn = dsn
        self._connect_timeout_s = connect_timeout_s
        self._conns: PerThread[psycopg.Connection[Any]] = PerThread(
            self._open, lambda c: bool(c.closed)
        )

    def _open(self) -> psycopg.Connection[Any]:
        try:
            return psycopg.connect(
                self.dsn, autocommit=True, connect_timeout=self._connect_timeout_s
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
