"""The public import name ``fencewatch`` (issue 14 item 7)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_import_fencewatch_resolves_every_public_name() -> None:
    """``import fencewatch`` works in a fresh interpreter and every name in __all__ resolves."""
    code = (
        "import fencewatch\n"
        "missing = [n for n in fencewatch.__all__ if not hasattr(fencewatch, n)]\n"
        "assert not missing, missing\n"
        "assert len(set(fencewatch.__all__)) == len(fencewatch.__all__)\n"
        "print(len(fencewatch.__all__))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd="/", capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) >= 30


def test_public_names_are_the_implementation_objects() -> None:
    """The SDK, fences, consumer and errors are re-exports, not copies."""
    import fencewatch
    from streams.errors import FencewatchError
    from streams.fences import FencedSink
    from streams.findings import FindingsConsumer
    from streams.sdk import OwnershipReporter

    assert fencewatch.OwnershipReporter is OwnershipReporter
    assert fencewatch.FencedSink is FencedSink
    assert fencewatch.FindingsConsumer is FindingsConsumer
    assert fencewatch.FencewatchError is FencewatchError
    assert issubclass(fencewatch.BrokerError, fencewatch.FencewatchError)


def test_wheel_config_ships_both_packages() -> None:
    """pyproject's wheel target lists ``fencewatch`` next to ``streams``."""
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert cfg["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"] == [
        "streams", "fencewatch",
    ]  # fmt: skip


@pytest.mark.slow
def test_built_wheel_contains_the_fencewatch_package(tmp_path: Path) -> None:
    """A wheel built from the tree has fencewatch/__init__.py and its py.typed marker."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path), str(ROOT)],
        check=True, capture_output=True,
    )  # fmt: skip
    (wheel,) = tmp_path.glob("fencewatch-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "fencewatch/__init__.py" in names
    assert "fencewatch/py.typed" in names
