"""The wheel carries the JSON Schemas, so an installed fencewatch validates against the contract."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_installed_wheel_loads_schemas_without_a_checkout(tmp_path: Path) -> None:
    """A wheel built from the tree ships streams/_schemas and load_schema reads them from there."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path / "dist"), str(ROOT)],
        check=True, capture_output=True,
    )
    (wheel,) = (tmp_path / "dist").glob("fencewatch-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for name in ("event", "finding", "audit-report"):
        assert f"streams/_schemas/{name}.schema.json" in names
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target),
         str(wheel)],
        check=True, capture_output=True,
    )
    code = (
        "import streams.schemas as s; d = s.schema_dir(); "
        "assert '_schemas' in str(d), d; "
        "assert s.load_schema('finding')['title'].startswith('fencewatch finding'); "
        "print(s.__file__)"
    )
    out = subprocess.run([sys.executable, "-S", "-c", f"import sys; sys.path.insert(0, "
                          f"{str(target)!r}); sys.path.extend({sys.path[1:]!r}); {code}"],
                         cwd=tmp_path, capture_output=True, text=True, check=True)
    assert out.stdout.strip().startswith(str(target))
