"""What the wheel ships: the JSON Schemas (the contract, readable from an
installed fencewatch), and none of the test harness (tests/support/)."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Modules that were in the wheel and are test support now (issue 19): the
#: broker-free batch driver, the worker harness, a reader shim, the schema loader.
MOVED_TO_TESTS = (
    "streams/live/testing.py",
    "streams/live/worker_process.py",
    "streams/live/replay_reader.py",
    "streams/schemas.py",
)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from the tree (hatch, as pyproject.toml configures it)."""
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(dist),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    (built,) = dist.glob("fencewatch-*.whl")
    return built


@pytest.mark.slow
def test_installed_wheel_carries_the_schemas(wheel: Path, tmp_path: Path) -> None:
    """A wheel built from the tree ships streams/_schemas, read from the installed package."""
    names = zipfile.ZipFile(wheel).namelist()
    for name in ("event", "finding", "audit-report"):
        assert f"streams/_schemas/{name}.schema.json" in names
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "-q",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )
    code = (
        "import json; from importlib import resources; import streams; "
        "d = resources.files('streams') / '_schemas'; "
        "doc = json.loads((d / 'finding.schema.json').read_text()); "
        "assert doc['title'].startswith('fencewatch finding'), doc['title']; "
        "print(streams.__file__)"
    )
    out = subprocess.run(
        [
            sys.executable,
            "-S",
            "-c",
            f"import sys; sys.path.insert(0, "
            f"{str(target)!r}); sys.path.extend({sys.path[1:]!r}); {code}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip().startswith(str(target))


@pytest.mark.slow
def test_the_wheel_ships_no_test_harness(wheel: Path) -> None:
    """None of the modules moved to tests/support/ is in the wheel, nor any tests/ file."""
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "streams/live/processor.py" in names  # the listing is the real one
    assert [m for m in MOVED_TO_TESTS if m in names] == []
    assert [n for n in names if n.startswith("tests/") or "/tests/support/" in n] == []
    # They are where the tests import them from now.
    for module in ("driver", "worker", "schemas"):
        assert (ROOT / "tests" / "support" / f"{module}.py").is_file()


def _runnable_examples() -> list[Path]:
    """The examples meant to be run as commands (they have a __main__ block)."""
    return [
        p
        for p in sorted((ROOT / "examples").glob("*.py"))
        if 'if __name__ == "__main__":' in p.read_text()
    ]


def test_the_runnable_examples_are_executable_with_a_shebang() -> None:
    """Each example with a __main__ block starts with a python3 shebang and is executable
    (docs run `examples/fence_boundaries.py outbox` as a command; 0644 said Permission denied)."""
    examples = _runnable_examples()
    assert len(examples) >= 4, examples
    for path in examples:
        assert path.read_text().startswith("#!/usr/bin/env python3\n"), path.name
        assert os.access(path, os.X_OK), f"{path.name} is not executable"


@pytest.mark.slow
def test_the_wheel_keeps_the_examples_executable(wheel: Path) -> None:
    """Inside the wheel the runnable examples keep their execute bits (pip installs them so)."""
    infos = {i.filename: i for i in zipfile.ZipFile(wheel).infolist()}
    for path in _runnable_examples():
        info = infos[f"streams/_data/examples/{path.name}"]
        assert (info.external_attr >> 16) & 0o111 == 0o111, f"{path.name}: {info.external_attr:o}"


@pytest.mark.slow
def test_the_wheel_carries_the_specification_and_the_broker_script(wheel: Path) -> None:
    """docs/spec.md (what every SPEC §N names) and fencewatch local's script, version and jar
    list ship as package data, byte for byte."""
    with zipfile.ZipFile(wheel) as zf:
        shipped = {
            "streams/_data/spec.md": ROOT / "docs" / "spec.md",
            "streams/_data/kafka-local/kafka-local": ROOT / "scripts" / "kafka-local",
            "streams/_data/kafka-local/kafka-version": ROOT / "scripts" / "kafka-version",
            "streams/_data/kafka-local/kafka-jars": ROOT / "scripts" / "kafka-jars",
        }
        for name, source in shipped.items():
            assert zf.read(name) == source.read_bytes(), name


def test_the_compiled_wheel_compiles_exactly_the_native_modules() -> None:
    """pyproject's mypyc hook compiles the modules streams._native lists (one list in effect)."""
    import tomllib

    from streams._native import NATIVE_MODULES, source_path

    hooks = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]
    mypyc = hooks["targets"]["wheel"]["hooks"]["mypyc"]
    assert mypyc["include"] == [source_path(m) for m in NATIVE_MODULES]
    assert mypyc["enable-by-default"] is False  # the default wheel stays pure


@pytest.mark.slow
def test_the_default_wheel_is_pure_python(wheel: Path) -> None:
    """Without the mypyc hook asked for: py3-none-any, no extension module, no manifest."""
    assert wheel.name.endswith("-py3-none-any.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert [n for n in names if n.endswith((".so", ".pyd")) or "native-build" in n] == []


@pytest.mark.slow
@pytest.mark.timeout(1200)  # the first build of this source: minutes of mypyc on a busy machine
def test_the_compiled_wheel_runs_the_compiled_detector(tmp_path: Path) -> None:
    """HATCH_BUILD_HOOK_ENABLE_MYPYC=true builds a platform wheel carrying the compiled core and
    its manifest; installed, the detector is 'compiled' (not stale) and the audit is the same."""
    from streams._native import NATIVE_MODULES
    from tests.support.installed import compiled_wheel

    built = compiled_wheel()  # built from a clean copy of the tree, cached by source hash
    assert not built.name.endswith("-none-any.whl"), built.name  # a platform wheel
    names = zipfile.ZipFile(built).namelist()
    for module in NATIVE_MODULES:
        stem = module.replace(".", "/") + "."
        assert any(n.startswith(stem) and n.endswith(".so") for n in names), module
    assert "streams/core/native-build.json" in names
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target),
         str(built)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    code = (
        "import json, sys; from streams._native import native_summary; "
        "from streams.cli import main; print(native_summary()); "
        "from streams.fixtures import reference_fixture; "
        "sys.exit(main(['audit', '--format', 'jsonl', str(reference_fixture())]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(target)!r}); {code}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    lines = out.stdout.splitlines()
    assert lines[0] == "compiled", out.stderr
    assert out.returncode == 1 and len(lines[1:]) == 4, out.stderr  # SPEC §5's four findings
    assert "stale" not in out.stderr
