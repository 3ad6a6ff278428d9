"""Helpers for the runtime integration tests: real worker processes (started
guarded, so they die with the test), their JSON-line steps, and the detector
run over the evidence topic."""

from __future__ import annotations

import json
import queue
import shutil
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streams.core.replay import Replay
from streams.demo.processes import Child, Children
from streams.kafka.connection import KafkaConnection
from tests.support.worker import free_port


@pytest.fixture
def children() -> Iterator[Children]:
    """Worker processes of one test; all stopped (SIGCONT, SIGTERM, SIGKILL) after it."""
    with Children() as group:
        yield group


def steps_until(
    group: Children, worker: str, step: str, timeout: float
) -> list[tuple[str, dict[str, Any]]]:
    """Read the children's JSON-line steps, in arrival order, until the child
    named ``worker`` prints ``{"step": step}``; returns them all as (child,
    step) pairs, that one last. Fails on timeout or when ``worker`` closes
    its output first."""
    seen: list[tuple[str, dict[str, Any]]] = []
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            pytest.fail(f"{worker} did not report {step!r} within {timeout} s", pytrace=False)
        try:
            _, name, raw = group.lines.get(timeout=min(left, 0.5))
        except queue.Empty:
            continue
        if raw is None:
            if name == worker:
                pytest.fail(f"{worker} exited before reporting {step!r}", pytrace=False)
            continue
        try:
            doc = json.loads(raw)
        except ValueError:
            continue  # a library's log line
        if not isinstance(doc, dict) or "step" not in doc:
            continue
        seen.append((name, doc))
        if name == worker and doc["step"] == step:
            return seen


def wait_step(group: Children, worker: str, step: str, timeout: float) -> dict[str, Any]:
    """The step ``worker`` prints next as ``{"step": step}`` (others' lines
    before it are dropped); fails as :func:`steps_until`."""
    return steps_until(group, worker, step, timeout)[-1][1]


def pause_between_transactions(child: Child, *databases: Path, tries: int = 100) -> None:
    """SIGSTOP ``child`` at a moment it holds no write lock on the SQLite files.

    The story is a worker stalled in its work; a worker frozen *inside* a
    SQLite write transaction (its lease keeper renews every third of the TTL)
    would instead block every other process on the file, which is SQLite's
    limit as a shared store, not the split brain under test. So: freeze, see
    that a write lock can be taken, else thaw and try again a moment later."""
    for _ in range(tries):
        child.pause()
        free = True
        for path in databases:
            conn = sqlite3.connect(path, timeout=0, isolation_level=None)
            try:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("ROLLBACK")
            except sqlite3.OperationalError:
                free = False
            finally:
                conn.close()
        if free:
            return
        child.resume()
        time.sleep(0.02)
    pytest.fail(f"{child.name} held a SQLite write lock at every try", pytrace=False)


def replay_topic(bootstrap: str, topic: str) -> Replay:
    """The detector over every record of the topic (as `fencewatch audit --topic`)."""
    from streams.kafka.reader import iter_topic

    replay = Replay()
    for key, value, partition, offset in iter_topic(KafkaConnection(bootstrap), topic):
        replay.feed(value or b"", key=key, offset=offset, source=f"{topic}/{partition}")
    return replay


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    """A private redis-server (Debian package redis-server) on a free port with
    its own directory, no persistence; stopped after the test."""
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.fail("redis-server is not installed (apt-get install redis-server)", pytrace=False)
    import redis

    port = free_port()
    work = tmp_path / "redis"
    work.mkdir()
    argv = [exe, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(work)]
    argv += ["--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning"]
    log = (work / "redis.log").open("wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    url = f"redis://127.0.0.1:{port}/0"
    try:
        client = redis.Redis.from_url(url)
        deadline = time.monotonic() + 15
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"redis-server did not start: {(work / 'redis.log').read_text()}")
                time.sleep(0.05)
        client.close()
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()
