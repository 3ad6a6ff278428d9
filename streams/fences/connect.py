"""Open a fences database from a URL: the one place that knows both adapters.

Kept apart from :mod:`streams.fences.db` (the port the adapters implement) so
the adapters import the port and nothing imports back: no import circle.
"""

from __future__ import annotations

from streams.extras import needs_extra
from streams.fences.db import Clock, Database

__all__ = ["open_database"]


def open_database(
    url: str, *, clock: Clock | None = None, timeout_s: float | None = None
) -> Database:
    """``sqlite:///path/to/file.db`` (or a bare path) or ``postgresql://...``.

    ``clock`` replaces SQLite's own clock (tests freeze it); PostgreSQL always
    uses the server's ``clock_timestamp()``. ``timeout_s`` bounds every call
    (SQLite: the busy timeout, default 30 s; PostgreSQL: connect and statement
    timeouts, default 10 s); past it the call raises ``StoreUnavailable``.
    """
    if url.startswith(("postgresql://", "postgres://")):
        if clock is not None:
            raise ValueError("PostgreSQL uses the server's clock; a clock cannot be injected")
        # Imported here: psycopg is the optional `postgres` extra (named when missing).
        with needs_extra("postgres"):
            from streams.fences.postgres_db import PostgresDatabase

        return (
            PostgresDatabase(url)
            if timeout_s is None
            else PostgresDatabase(url, timeout_s=timeout_s)
        )
    from streams.fences.sqlite_db import SqliteDatabase

    path = url.removeprefix("sqlite:///") if url.startswith("sqlite:///") else url
    if timeout_s is None:
        return SqliteDatabase(path, clock=clock)
    return SqliteDatabase(path, clock=clock, busy_timeout_s=timeout_s)
