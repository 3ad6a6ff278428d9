"""Load the JSON Schemas of the records (the contract) from the checkout's
``schemas/`` directory, for the tests that validate against them.

Test support, not shipped: the product validates with ``streams.core.validate``;
the wheel carries the schema files themselves as ``streams/_schemas``
(tests/core/test_packaging.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["SCHEMA_DIR", "SCHEMA_NAMES", "load_schema"]

SCHEMA_NAMES = ("event", "finding", "audit-report")
SCHEMA_DIR = Path(__file__).resolve().parents[2] / "schemas"


def load_schema(name: str) -> dict[str, Any]:
    """The schema document ``schemas/<name>.schema.json``."""
    if name not in SCHEMA_NAMES:
        raise KeyError(f"unknown schema {name!r}; known: {', '.join(SCHEMA_NAMES)}")
    with (SCHEMA_DIR / f"{name}.schema.json").open("rb") as fh:
        doc: dict[str, Any] = json.load(fh)
    return doc
