"""bench/live_peer.py: the peer's venv cached and built only once; the recorded run's size."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _bench() -> ModuleType:
    sys.path.insert(0, str(BENCH))  # the script imports its siblings
    try:
        spec = importlib.util.spec_from_file_location("bench_live_peer", BENCH / "live_peer.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH))


def test_a_complete_peer_venv_is_reused_and_an_unfinished_one_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A venv marked complete is used as it is; one left without the mark (a
    build that died) is wiped and built again, and a failed build says why in
    one line and leaves no mark."""
    live_peer = _bench()
    venv = tmp_path / f"quixstreams-{live_peer.PEER_VERSION}"
    (venv / "bin").mkdir(parents=True)
    (venv / ".complete").touch()
    calls: list[list[str]] = []

    def failing(cmd: list[str], **_kw: object) -> subprocess.CompletedProcess[str]:
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 1, "", "ERROR: no matching distribution\n")

    monkeypatch.setattr(live_peer.subprocess, "run", failing)
    assert live_peer.peer_python(tmp_path) == venv / "bin" / "python"
    assert calls == []

    (venv / ".complete").unlink()
    (venv / "leftover").touch()
    with pytest.raises(live_peer.PeerError) as err:
        live_peer.peer_python(tmp_path)
    assert str(err.value) == (
        "building the peer's venv failed (venv): ERROR: no matching distribution"
    )
    assert not (venv / "leftover").exists() and not (venv / ".complete").exists()
    assert calls[0][1:3] == ["-m", "venv"]


def test_the_recorded_run_measures_a_million_events_of_25000_live_keys() -> None:
    """make bench's live_peer arguments give >= 1,000,000 events, 25,000 keys live at once."""
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location("bench_run_all", BENCH / "run_all.py")
        assert spec is not None and spec.loader is not None
        run_all = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(run_all)
    finally:
        sys.path.remove(str(BENCH))
    args = dict(run_all.discover())["live_peer"]
    opts = dict(zip(args[::2], args[1::2], strict=True))
    keys, epochs = int(opts.get("--keys", 25_000)), int(opts.get("--epochs", 2))
    assert int(opts.get("--block", keys)) == 25_000
    assert keys * epochs * 4 >= 1_000_000
