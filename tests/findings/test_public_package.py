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


def test_every_public_error_class_is_importable_from_fencewatch() -> None:
    """Each public FencewatchError subclass of the error modules, the Kafka layer, the
    fences, the findings consumer and the extras is exported by ``fencewatch``."""
    import inspect

    import fencewatch
    import streams.errors
    import streams.extras
    import streams.fences
    import streams.fences.outbox
    import streams.findings
    import streams.kafka

    modules = (
        streams.errors,
        streams.extras,
        streams.fences,
        streams.fences.outbox,
        streams.findings,
        streams.kafka,
    )
    errors = {
        obj
        for module in modules
        for name in module.__all__
        if inspect.isclass(obj := getattr(module, name))
        and issubclass(obj, fencewatch.FencewatchError)
    }
    assert {streams.errors.InvalidEvent, streams.kafka.BrokerUnreachable} <= errors
    missing = sorted(e.__name__ for e in errors if getattr(fencewatch, e.__name__, None) is not e)
    assert missing == []
    assert {e.__name__ for e in errors} <= set(fencewatch.__all__)


INTEGRATIONS = ("otel", "otlp", "langgraph", "celery", "temporal", "runs")


@pytest.mark.parametrize("module", INTEGRATIONS)
def test_integrations_have_a_public_name(module: str) -> None:
    """``fencewatch.integrations.<runtime>`` exports exactly the adapter's
    ``__all__``, as the implementation's own objects."""
    import importlib

    public = importlib.import_module(f"fencewatch.integrations.{module}")
    impl = importlib.import_module(f"streams.integrations.{module}")
    assert public.__all__ == impl.__all__
    assert all(getattr(public, n) is getattr(impl, n) for n in impl.__all__)


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
    assert {f"fencewatch/integrations/{m}.py" for m in INTEGRATIONS} <= set(names)
