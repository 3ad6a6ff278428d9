"""One error family (issue 14 item 4): the core's errors are typed FencewatchError subclasses."""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import pickle
import pkgutil
from pathlib import Path

import pytest

import streams.core
import streams.errors
from streams.core import Detector, DetectorConfig, KeyState, parse_event
from streams.core.errors import ConfigError, FencewatchError, InvalidEvent, StateError


def test_streams_errors_reexports_the_core_base() -> None:
    """streams.errors.FencewatchError is the core's class; the adapters' errors derive from it."""
    assert streams.errors.FencewatchError is FencewatchError
    for name in ("BrokerError", "StoreError", "LeaseHeld", "LeaseLost", "StaleOwner"):
        assert issubclass(getattr(streams.errors, name), FencewatchError), name


def test_every_exception_class_in_the_core_is_a_fencewatch_error() -> None:
    """Each exception class defined under streams/core derives from FencewatchError."""
    seen = []
    for info in pkgutil.iter_modules(streams.core.__path__, "streams.core."):
        module = importlib.import_module(info.name)
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, BaseException) and obj.__module__.startswith("streams."):
                seen.append(obj)
                assert issubclass(obj, FencewatchError), obj
    assert {InvalidEvent, StateError, ConfigError} <= set(seen)


def test_invalid_event_is_typed_and_still_a_value_error() -> None:
    """A rejected event raises InvalidEvent (a ValueError) with field and reason set in __init__."""
    with pytest.raises(ValueError) as info:
        parse_event(b'{"type": "progress"}')
    exc = info.value
    assert isinstance(exc, InvalidEvent) and isinstance(exc, FencewatchError)
    assert exc.field == "workflow_key" and exc.reason == "is required"
    again = pickle.loads(pickle.dumps(exc))
    assert (again.field, again.reason, str(again)) == (exc.field, exc.reason, str(exc))


def test_detector_config_out_of_range_is_a_config_error() -> None:
    """A detector bound below its minimum raises ConfigError, a ValueError."""
    with pytest.raises(ConfigError, match="max_events_per_key must be at least 8"):
        DetectorConfig(max_events_per_key=2)
    with pytest.raises(ValueError, match="max_findings_per_key"):
        Detector(DetectorConfig(max_findings_per_key=0))


def test_corrupt_state_is_a_state_error() -> None:
    """Undecodable key state raises StateError, a FencewatchError and a ValueError."""
    with pytest.raises(StateError, match="corrupt key state"):
        KeyState.from_bytes(b"not json")
    with pytest.raises(FencewatchError, match="state version"):
        KeyState.from_bytes(b'{"v": 99}')


_ROOT = Path(__file__).resolve().parents[2]
# Every built-in exception (ModuleNotFoundError, LookupError ... too): a class
# deriving from any of them is an error class the walk must see.
_BUILTIN_ERRORS = {
    name
    for name, obj in vars(builtins).items()
    if isinstance(obj, type) and issubclass(obj, BaseException)
}


def test_every_public_error_class_in_the_project_is_a_fencewatch_error() -> None:
    """Each public exception class defined under streams/ or fencewatch/ derives (directly or
    through another project error) from FencewatchError; private control-flow signals
    (leading underscore, never raised to a caller) are exempt."""
    bases: dict[str, list[str]] = {}
    where: dict[str, str] = {}
    for path in [*(_ROOT / "streams").rglob("*.py"), *(_ROOT / "fencewatch").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                names = [b.id if isinstance(b, ast.Name) else ast.unparse(b) for b in node.bases]
                bases[node.name] = [n.rsplit(".", 1)[-1] for n in names]
                where[node.name] = str(path.relative_to(_ROOT))

    def is_error(name: str, seen: frozenset[str] = frozenset()) -> bool:
        if name in _BUILTIN_ERRORS or name == "FencewatchError":
            return True
        return name not in seen and any(is_error(b, seen | {name}) for b in bases.get(name, []))

    def is_ours(name: str, seen: frozenset[str] = frozenset()) -> bool:
        if name == "FencewatchError":
            return True
        return name not in seen and any(is_ours(b, seen | {name}) for b in bases.get(name, []))

    errors = [n for n in bases if n != "FencewatchError" and is_error(n)]
    assert {"InvalidEvent", "BrokerError", "StateError", "MissingExtra"} <= set(errors)
    strays = [f"{where[n]}: {n}" for n in errors if not n.startswith("_") and not is_ours(n)]
    assert strays == []


#: Where the project's error classes are defined (streams/errors.py lists the family).
_ERRORS_MODULES = {"streams/core/errors.py", "streams/errors.py", "streams/kafka/errors.py"}


def _public_errors_outside(paths: list[Path], root: Path) -> list[str]:
    """``path: Name`` of each public exception class defined outside the errors modules."""
    classes: dict[str, tuple[str, list[str]]] = {}
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                names = [b.id if isinstance(b, ast.Name) else ast.unparse(b) for b in node.bases]
                where = path.relative_to(root).as_posix()
                classes[node.name] = (where, [n.rsplit(".", 1)[-1] for n in names])

    def is_error(name: str, seen: frozenset[str] = frozenset()) -> bool:
        if name in _BUILTIN_ERRORS or name == "FencewatchError":
            return True
        bases = classes.get(name, ("", []))[1]
        return name not in seen and any(is_error(b, seen | {name}) for b in bases)

    return sorted(
        f"{where}: {name}"
        for name, (where, _bases) in classes.items()
        if not name.startswith("_") and where not in _ERRORS_MODULES and is_error(name)
    )


def test_public_error_classes_are_defined_in_the_errors_modules() -> None:
    """Outside streams/errors.py, streams/kafka/errors.py and the core's errors, no module
    defines a public exception class (a private control-flow signal may live where it is
    used); the modules that raise them re-export them."""
    paths = [*(_ROOT / "streams").rglob("*.py"), *(_ROOT / "fencewatch").rglob("*.py")]
    assert _public_errors_outside(paths, _ROOT) == []
    assert streams.errors.MissingExtra is importlib.import_module("streams.extras").MissingExtra


def test_the_errors_module_check_sees_a_stray(tmp_path: Path) -> None:
    """A public error class defined in another module is reported; a private one is not."""
    module = tmp_path / "streams" / "live" / "x.py"
    module.parent.mkdir(parents=True)
    module.write_text(
        "class Stray(ValueError):\n    pass\n\n\nclass _Signal(Exception):\n    pass\n"
    )
    assert _public_errors_outside([module], tmp_path) == ["streams/live/x.py: Stray"]
