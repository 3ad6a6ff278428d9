"""bench/live_peer.py keeps the peer's venv in the cache and builds it only once."""

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
