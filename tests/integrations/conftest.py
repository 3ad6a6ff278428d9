"""Helpers for the runtime integration tests: real worker processes (started
guarded, so they die with the test), their JSON-line steps, and the detector
run over the evidence topic."""

from __future__ import annotations

import json
import queue
import time
from collections.abc import Iterator
from typing import Any

import pytest

from streams.core.replay import Replay
from streams.demo.processes import Children


@pytest.fixture
def children() -> Iterator[Children]:
    """Worker processes of one test; all stopped (SIGCONT, SIGTERM, SIGKILL) after it."""
    with Children() as group:
        yield group


def wait_step(group: Children, worker: str, step: str, timeout: float) -> dict[str, Any]:
    """Read worker lines until ``worker`` prints ``{"step": step}``; fail on
    timeout or when the worker closes its output first."""
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
        if isinstance(doc, dict) and doc.get("worker") == worker and doc.get("step") == step:
            return doc


def replay_topic(bootstrap: str, topic: str) -> Replay:
    """The detector over every record of the topic (as `fencewatch audit --topic`)."""
    from streams.kafka.reader import iter_topic

    replay = Replay()
    for key, value, partition, offset in iter_topic(bootstrap, topic):
        replay.feed(value or b"", key=key, offset=offset, source=f"{topic}/{partition}")
    return replay
