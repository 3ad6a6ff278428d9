"""examples/fence_boundaries.py, which docs/fences.md quotes, tells the stories
it claims (the outbox one against the real broker)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fence_boundaries.py"


def _run(story: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), story],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_four_database_stories_end_as_documented() -> None:
    """cas refuses the late write; the idempotency key stops only the repeated
    key; staged promotion shows only the current owner's rows; reconcile ends
    in a conflicting_commit for a person to verify."""
    out = _run("all", {"FENCEWATCH_BOOTSTRAP_SERVERS": ""})
    assert "alpha (epoch 1) late write: rejected (stale_epoch, current 2)" in out
    assert "rows: [(2, b'from beta')]" in out
    assert "charges invoice-42 late: duplicate" in out
    assert "charges invoice-43 late: committed" in out
    assert "alpha (epoch 1) promotes late: rejected (stale_epoch)" in out
    assert "visible: [(2, 'beta p1'), (2, 'beta p2'), (2, 'beta p3')]" in out
    assert "displaced, never visible: [(1, 'p1'), (1, 'p2')]" in out
    assert "conflicting_commit" in out and "emails sent: 2" in out
    assert "== outbox" not in out


def test_the_outbox_story_against_the_broker(kafka_bootstrap: str) -> None:
    """The outbox story: the displaced owner cannot stage, the current one's
    effect goes through Kafka and is applied by the consuming fence."""
    out = _run("outbox", {"FENCEWATCH_BOOTSTRAP_SERVERS": kafka_bootstrap})
    assert "alpha (epoch 1) stages late: rejected" in out
    assert "beta publishes 1 effect(s)" in out
    assert "the consumer applies it: committed" in out
