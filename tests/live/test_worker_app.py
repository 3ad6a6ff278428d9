"""The faust app for faust's own command line (streams/live/faust/worker_app.py) under its
new name and its first one, ``faust -A streams.live.worker_app`` (docs/live.md), on a broker."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tests.live.conftest import LiveHarness

ROOT = Path(__file__).resolve().parents[2]

_PROBE = """
import streams.live.faust.worker_app as new
import streams.live.worker_app as old
assert old.app is new.app, (old.app, new.app)
print(type(new.app).__module__, new.app.conf.id)
"""


def test_the_old_worker_app_name_builds_the_same_app(
    live: Callable[..., LiveHarness], tmp_path: Path
) -> None:
    """Importing streams.live.worker_app gives the app of streams.live.faust.worker_app,
    built once from the FENCEWATCH_* settings."""
    h = live(partitions=1, engine="faust")
    env = {**os.environ, **h.env(), "FENCEWATCH_DATA_DIR": str(tmp_path / "data")}
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["faust.app.base", h.app_id]
