"""Open a fences database from a URL: the one place that knows both adapters.

Kept apart from :mod:`streams.fences.db` (the port the adapters implement) so
the adapters import the port and nothing imports back: no import circle.

A URL whose scheme no store supports is refused, never read as a SQLite path:
``postgresql+asyncpg://db/prod`` opened as a local file would hand out epochs
of its own on each host, and fencing would be off without a word.
"""

from __future__ import annotations

import re
from pathlib import Path

from streams.errors import StoreURLError
from streams.extras import needs_extra
from streams.fences.db import Clock, Database

__all__ = ["ACCEPTED_FORMS", "mask_url", "open_database"]

#: What :func:`open_database` accepts, for the error line (and docs/fences.md).
ACCEPTED_FORMS = (
    "sqlite:///relative/path.db, sqlite:////absolute/path.db, a bare file path, "
    "postgresql://user@host/db (also postgres:// and postgresql+psycopg://)"
)
# RFC 3986 scheme; one letter is a Windows drive (C:\...), not a scheme.
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]+):")
_POSTGRES_SCHEMES = frozenset({"postgresql", "postgres", "postgresql+psycopg"})
# libpq's key=value form ("host=db dbname=prod"): a DSN, not a file name.
_CONNINFO = re.compile(r"\s*(?:host|hostaddr|dbname|user|port|service)\s*=", re.I)
# Up to the last '@' of the authority: a password may hold an unescaped '@'.
_USERINFO_PASSWORD = re.compile(r"(//[^/@:]*:)[^/]*@")
_PARAM_PASSWORD = re.compile(r"(password\s*=\s*)('[^']*'|[^&\s]*)", re.I)


def mask_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (userinfo, ``?password=``,
    libpq ``password=``): safe for an error line or a log."""
    return _PARAM_PASSWORD.sub(r"\1***", _USERINFO_PASSWORD.sub(r"\1***@", url))


def _refuse(url: str, why: str) -> StoreURLError:
    return StoreURLError(mask_url(url), f"{why}; accepted: {ACCEPTED_FORMS}")


def open_database(
    url: str, *, clock: Clock | None = None, timeout_s: float | None = None
) -> Database:
    """``sqlite:///path/to/file.db`` (or a bare path) or ``postgresql://...``.

    The scheme is matched case-insensitively (``PostgreSQL://`` is
    PostgreSQL); any other scheme is refused with :class:`StoreURLError`
    (a ``ConfigError``), as is a SQLite file whose directory does not exist
    (it is not created: a mistyped path must not become a fresh, empty store).
    ``clock`` replaces SQLite's own clock (tests freeze it); PostgreSQL always
    uses the server's ``clock_timestamp()``. ``timeout_s`` bounds every call
    (SQLite: the busy timeout, default 30 s; PostgreSQL: connect and statement
    timeouts, default 10 s); past it the call raises ``StoreUnavailable``.
    Without psycopg installed a PostgreSQL URL raises ``MissingExtra`` naming
    ``pip install 'fencewatch[postgres]'``.
    """
    if not isinstance(url, str):
        raise TypeError(f"url must be a str, got {type(url).__name__}")
    if not url.strip():
        raise _refuse(url, "the URL is empty")
    match = _SCHEME.match(url)
    given = match.group(1) if match else None
    scheme = given.lower() if given else None
    if scheme in _POSTGRES_SCHEMES:
        rest = url[len(scheme) + 1 :]
        if not rest.startswith("//"):
            raise _refuse(url, f"a {scheme} URL starts with {scheme}://")
        if clock is not None:
            raise ValueError("clock: PostgreSQL uses the server's clock; it cannot be injected")
        # Imported here: psycopg is the optional `postgres` extra.
        with needs_extra("postgres"):
            from streams.fences.postgres_db import PostgresDatabase
        # libpq knows only the lowercase postgresql:// and postgres:// forms.
        dsn = "postgresql:" + rest
        return (
            PostgresDatabase(dsn)
            if timeout_s is None
            else PostgresDatabase(dsn, timeout_s=timeout_s)
        )
    if scheme == "sqlite":
        rest = url[len("sqlite:") :]
        if not rest.startswith("///"):
            raise _refuse(
                url,
                "a sqlite URL has three slashes before a relative path"
                " and four before an absolute one",
            )
        path = rest[3:]
    elif scheme is not None and scheme.startswith("postgres"):
        raise _refuse(
            url,
            f"no store supports the scheme {given!r} "
            "(the PostgreSQL store connects through psycopg: write postgresql://...)",
        )
    elif scheme is not None:
        raise _refuse(url, f"no store supports the scheme {given!r}")
    elif _CONNINFO.match(url):
        raise _refuse(url, "a libpq key=value DSN is not a URL")
    else:
        path = url
    if not path:
        raise _refuse(url, "no SQLite file path")
    if path != ":memory:":
        parent = Path(path).parent
        if not parent.is_dir():
            what = (
                f"{parent} is not a directory"
                if parent.exists()
                else (f"directory {parent} does not exist")
            )
            raise StoreURLError(
                mask_url(url),
                f"{what} (fencewatch does not create it: "
                f"a mistyped path must not become a new, empty store)",
            )
    from streams.fences.sqlite_db import SqliteDatabase

    if timeout_s is None:
        return SqliteDatabase(path, clock=clock)
    return SqliteDatabase(path, clock=clock, busy_timeout_s=timeout_s)
