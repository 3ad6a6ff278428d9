"""Fixtures for the fences: a real PostgreSQL server and per-test table sets.

PostgreSQL comes from ``FENCEWATCH_PG_DSN`` when set (``make test`` exports
it), else ``scripts/postgres-local`` is started for this session in a
temporary directory and stopped at the end. If neither works the fixture
fails the test: PostgreSQL tests are never skipped.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from streams.fences.connect import open_database
from streams.fences.db import Clock, Database

REPO_ROOT = Path(__file__).resolve().parents[2]
PG_LOCAL = REPO_ROOT / "scripts" / "postgres-local"


def _answers(dsn: str) -> str | None:
    import psycopg

    try:
        with psycopg.connect(dsn, connect_timeout=10) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return str(exc)
    return None


@pytest.fixture(scope="session")
def pg_dsn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """DSN of a real PostgreSQL server for the whole session."""
    given = os.environ.get("FENCEWATCH_PG_DSN", "").strip()
    if given:
        error = _answers(given)
        if error is not None:
            pytest.fail(f"FENCEWATCH_PG_DSN={given} does not answer: {error}", pytrace=False)
        yield given
        return
    env = dict(os.environ)
    env["FENCEWATCH_PG_DIR"] = str(tmp_path_factory.mktemp("postgres"))
    started = subprocess.run(
        [str(PG_LOCAL), "start"], env=env, capture_output=True, text=True, timeout=600, check=False
    )
    if started.returncode != 0:
        pytest.fail(
            f"no PostgreSQL: FENCEWATCH_PG_DSN unset and scripts/postgres-local start failed "
            f"({started.returncode}):\n{started.stderr[-4000:]}",
            pytrace=False,
        )
    try:
        dsn = started.stdout.strip().splitlines()[-1]
        error = _answers(dsn)
        if error is not None:
            pytest.fail(f"scripts/postgres-local started but {dsn} fails: {error}", pytrace=False)
        yield dsn
    finally:
        subprocess.run(
            [str(PG_LOCAL), "stop"], env=env, capture_output=True, timeout=120, check=False
        )


@dataclass
class Backend:
    """One database backend for a test: ``connect()`` opens a new handle on the
    same database (another "process" view); ``prefix`` is this test's tables."""

    name: str
    url: str
    prefix: str
    opened: list[Database]

    def connect(self, clock: Clock | None = None) -> Database:
        db = open_database(self.url, clock=clock)
        self.opened.append(db)
        return db


def _drop_tables(dsn: str, prefix: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename LIKE %s",
            (prefix + "%",),
        ).fetchall()
        for (name,) in rows:
            conn.execute(f'DROP TABLE IF EXISTS "{name}" CASCADE')


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """The shared behavioural suite runs once per backend."""
    prefix = f"t{uuid.uuid4().hex[:10]}_"
    if request.param == "sqlite":
        b = Backend("sqlite", f"sqlite:///{tmp_path / 'fences.db'}", prefix, [])
    else:
        dsn = request.getfixturevalue("pg_dsn")
        b = Backend("postgres", dsn, prefix, [])
    yield b
    for db in b.opened:
        db.close()
    if b.name == "postgres":
        _drop_tables(b.url, prefix)


class FrozenClock:
    """A settable store clock (``clock.t`` Unix seconds) injected at the SQLite adapter."""

    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def frozen_clock() -> FrozenClock:
    """A fresh frozen store clock."""
    return FrozenClock()


def read_topic(bootstrap: str, topic: str, *, isolation: str = "read_committed") -> list[Any]:
    """Every message of a one-partition topic, read to its end (the last
    stable offset under read_committed), in offset order."""
    from confluent_kafka import Consumer, KafkaError

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"fences-test-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
        }
    )
    out: list[Any] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    return out
                raise AssertionError(f"consumer error: {msg.error()}")
            out.append(msg)
        raise AssertionError(f"did not reach the end of {topic} within 60s")
    finally:
        consumer.close()
