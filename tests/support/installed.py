"""fencewatch as a pip user gets it: the compiled platform wheel, installed
non-editable into a fresh virtualenv, run from outside the checkout.

The wheel is built the way a release is (``HATCH_BUILD_HOOK_ENABLE_MYPYC=true``:
hatch-mypyc compiles the hot core, hatch_build.py writes its manifest), from a
clean copy of the tree, because hatch-mypyc compiles in place. A build takes a
minute or two of mypyc, so it is made once per source hash and kept under
``${FENCEWATCH_CACHE:-~/.cache/fencewatch}/wheels/`` (as scripts/kafka-local
keeps its jars); sessions in other worktrees share it under a lock, and only
the most recently used few are kept.

The virtualenv's dependencies come from the same cache's wheelhouse (filled
from the index on a first run, offline in seconds after).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

__all__ = [
    "CACHE",
    "TREE",
    "WHEELHOUSE",
    "Installed",
    "clean_env",
    "compiled_wheel",
    "install",
    "installed",
    "source_hash",
]

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("FENCEWATCH_CACHE", Path.home() / ".cache" / "fencewatch"))
#: Dependency wheels kept between runs (the first run fills it from the index;
#: later ones install offline in seconds).
WHEELHOUSE = CACHE / "wheelhouse"
WHEELS = CACHE / "wheels"
#: Compiled wheels kept: this worktree's and a few others' (each about 3 MB).
KEEP_WHEELS = 6

#: What a wheel is built from (pyproject's packages and force-includes).
TREE = ("pyproject.toml", "README.md", "hatch_build.py", ".gitignore", "streams", "fencewatch",
        "schemas", "examples", "deploy", "docs/spec.md", "scripts/kafka-local",
        "scripts/kafka-version", "scripts/kafka-jars")  # fmt: skip
#: Build products and the checkout's own compiled modules: never sources.
_IGNORED = ("*.so", "*.pyd", "*.pyc", "__pycache__", "native-build.json", "build")


def _files() -> Iterator[Path]:
    for name in TREE:
        path = ROOT / name
        if path.is_file():
            yield path
            continue
        for sub in sorted(path.rglob("*")):
            rel = sub.relative_to(ROOT)
            if sub.is_file() and not any(rel.match(p) or p in rel.parts for p in _IGNORED):
                yield sub


def source_hash() -> str:
    """SHA-256 of what goes into the wheel (paths, modes and bytes), the Python
    and the mypy that compile it; README.md is left out (only the metadata's
    long description), so the prose changing does not cost a rebuild."""
    import mypy.version

    digest = hashlib.sha256(f"{sys.version}\0{mypy.version.__version__}\0".encode())
    for path in _files():
        rel = path.relative_to(ROOT).as_posix()
        if rel == "README.md":
            continue
        digest.update(f"{rel}\0{path.stat().st_mode & 0o111:o}\0".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:20]


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _build(into: Path) -> None:
    """The mypyc wheel from a clean copy of the tree (hatch-mypyc compiles in place)."""
    with tempfile.TemporaryDirectory(prefix="fencewatch-wheel-") as tmp:
        tree = Path(tmp) / "tree"
        for path in _files():
            dst = tree / path.relative_to(ROOT)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dst)
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--disable-pip-version-check", "--no-deps",
             "--no-build-isolation", "-q", "-w", str(into), str(tree)],
            capture_output=True, text=True, timeout=1200,
            env={**os.environ, "HATCH_BUILD_HOOK_ENABLE_MYPYC": "true"},
        )  # fmt: skip
        if proc.returncode != 0:
            raise AssertionError(f"the compiled wheel did not build:\n{proc.stderr[-4000:]}")


def compiled_wheel() -> Path:
    """The compiled platform wheel of the tree as it is now: from the cache,
    or built once (under a lock: another session may be building the same)."""
    key = source_hash()
    entry = WHEELS / key
    with _locked(WHEELS / f".{key}.lock"):
        wheels = sorted(entry.glob("fencewatch-*.whl"))
        if not wheels:
            partial = WHEELS / f".{key}.partial"
            shutil.rmtree(partial, ignore_errors=True)
            _build(partial)
            partial.rename(entry)  # a complete entry or none
            wheels = sorted(entry.glob("fencewatch-*.whl"))
    os.utime(entry)  # most recently used: kept by the pruning below
    _prune(keep=entry)
    (wheel,) = wheels
    return wheel


def _prune(keep: Path) -> None:
    entries = sorted(
        (p for p in WHEELS.iterdir() if p.is_dir() and not p.name.startswith(".")),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    for old in entries[KEEP_WHEELS:]:
        if old != keep and time.time() - old.stat().st_mtime > 3600:  # not one in use now
            shutil.rmtree(old, ignore_errors=True)
            (WHEELS / f".{old.name}.lock").unlink(missing_ok=True)


def _pip(*args: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if proc.returncode != 0:
        raise AssertionError(f"pip {' '.join(args[:2])} failed:\n{proc.stderr[-3000:]}")


def install(wheel: Path, venv: Path, extras: str = "kafka") -> Path:
    """A fresh venv with ``wheel[extras]`` installed non-editable; its bin dir."""
    # No pip inside: this process's pip installs into it (--python), which is
    # faster than bootstrapping one and installs the same way.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    target = ["--python", str(venv / "bin" / "python"), "install", "-q", "--no-compile"]
    requirement = f"{wheel}[{extras}]"
    try:
        _pip(*target, "--no-index", "--find-links", str(WHEELHOUSE), requirement)
    except AssertionError:  # first run, or new dependencies: fill the wheelhouse
        # pip wheel copies ours in too, and next time takes a fencewatch wheel
        # already there (same name, an older build: maybe without a new
        # dependency) for the one named: never keep one.
        with _locked(CACHE / ".wheelhouse.lock"):
            for stale in WHEELHOUSE.glob("fencewatch-*.whl"):
                stale.unlink()
            _pip("wheel", "-q", "-w", str(WHEELHOUSE), requirement)
            for copied in WHEELHOUSE.glob("fencewatch-*.whl"):
                copied.unlink()
        _pip(*target, "--no-index", "--find-links", str(WHEELHOUSE), requirement)
    return venv / "bin"


def clean_env(bin_dir: Path) -> dict[str, str]:
    """This environment without fencewatch's, Python's and the venv's variables,
    with the installed venv's bin first on PATH."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("FENCEWATCH_", "PYTHON", "VIRTUAL_ENV"))
    }
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return env


@dataclass(frozen=True, slots=True)
class Installed:
    """The session's installed fencewatch: its venv, bin dir and wheel."""

    venv: Path
    bin: Path
    wheel: Path

    @property
    def fencewatch(self) -> str:
        return str(self.bin / "fencewatch")

    def env(self) -> dict[str, str]:
        return clean_env(self.bin)


#: The extras the installed tests and the docs use: the plain install's kafka,
#: and otel for docs/integrations.md's OpenTelemetry example.
EXTRAS = "kafka,otel"


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """The compiled wheel[kafka,otel] in a fresh venv, once per session (tests that
    run it must not change it: each uses its own directories and state)."""
    wheel = compiled_wheel()
    venv = tmp_path_factory.mktemp("installed") / "venv"
    return Installed(venv, install(wheel, venv, EXTRAS), wheel)
