"""Which of the hot core modules run compiled (mypyc, ``scripts/build-native``).

Python imports a compiled extension module in preference to the ``.py`` file
next to it, so a compiled module built from an older source would be used
silently. ``scripts/build-native`` writes the SHA-256 of each source it
compiled to ``streams/core/native-build.json``; :func:`native_status` compares
them with the sources on disk.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

__all__ = [
    "MANIFEST",
    "NATIVE_MODULES",
    "native_status",
    "native_summary",
    "source_digest",
    "source_path",
]

NATIVE_MODULES: tuple[str, ...] = (
    "streams.core.batch",
    "streams.core.destinations",
    "streams.core.detector",
    "streams.core.health",
    "streams.core.replay",
    "streams.core.status",
    "streams.core.validate",
)
#: Written by ``scripts/build-native``: source path -> SHA-256 it was compiled from.
MANIFEST = Path(__file__).resolve().parent / "core" / "native-build.json"
_ROOT = MANIFEST.parent.parent.parent


def source_path(name: str) -> str:
    """``streams.core.detector`` -> ``streams/core/detector.py`` (the manifest's key)."""
    return name.replace(".", "/") + ".py"


def source_digest(name: str) -> str:
    """SHA-256 of the module's source file in this checkout (OSError if absent)."""
    return hashlib.sha256((_ROOT / source_path(name)).read_bytes()).hexdigest()


def native_status() -> dict[str, str]:
    """Module name -> ``"compiled"``, ``"interpreted"`` or ``"stale"`` (compiled
    from a source that has changed since: rebuild with ``make native``)."""
    try:
        manifest: dict[str, str] = json.loads(MANIFEST.read_text())
    except (OSError, ValueError):
        manifest = {}
    out: dict[str, str] = {}
    for name in NATIVE_MODULES:
        spec = importlib.util.find_spec(name)
        origin = spec.origin if spec is not None else None
        if origin is None or origin.endswith(".py"):
            out[name] = "interpreted"
            continue
        try:
            digest = source_digest(name)
        except OSError:
            # An installed build without its sources: nothing to compare.
            out[name] = "compiled"
            continue
        out[name] = "compiled" if manifest.get(source_path(name)) == digest else "stale"
    return out


def native_summary() -> str:
    """One word for all of them: compiled, interpreted, stale or mixed."""
    states = set(native_status().values())
    if "stale" in states:
        return "stale"
    return states.pop() if len(states) == 1 else "mixed"
