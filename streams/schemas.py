"""Load the JSON Schemas of the records (the contract in code).

An installed wheel carries them as ``streams/_schemas`` (see pyproject's
force-include); a checkout or editable install reads the repository's
``schemas/`` directory.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = ["SCHEMA_NAMES", "load_schema", "schema_dir"]

SCHEMA_NAMES = ("event", "finding", "audit-report")


def schema_dir() -> Path:
    packaged = resources.files("streams") / "_schemas"
    if packaged.is_dir():
        return Path(str(packaged))
    checkout = Path(__file__).resolve().parent.parent / "schemas"
    if checkout.is_dir():
        return checkout
    raise FileNotFoundError("fencewatch schemas not found (neither packaged nor in a checkout)")


def load_schema(name: str) -> dict[str, Any]:
    """The schema document ``schemas/<name>.schema.json``."""
    if name not in SCHEMA_NAMES:
        raise KeyError(f"unknown schema {name!r}; known: {', '.join(SCHEMA_NAMES)}")
    with (schema_dir() / f"{name}.schema.json").open("rb") as fh:
        doc: dict[str, Any] = json.load(fh)
    return doc
