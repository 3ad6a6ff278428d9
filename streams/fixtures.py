"""The SPEC §5 reference fixture, wherever fencewatch runs from: inside the
installed package (``streams/_data``, put there by the wheel build) or in a
checkout (``examples/``)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

__all__ = ["reference_fixture"]


def reference_fixture() -> Path:
    """Path of ``reference.jsonl``; FileNotFoundError when neither copy exists."""
    packaged = resources.files("streams") / "_data" / "reference.jsonl"
    if packaged.is_file():
        return Path(str(packaged))
    checkout = Path(__file__).resolve().parent.parent / "examples" / "reference.jsonl"
    if checkout.is_file():
        return checkout
    raise FileNotFoundError("the reference fixture is neither packaged nor in a checkout")
