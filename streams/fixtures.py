"""The SPEC §5 reference fixture, the specification itself, the examples
and the deploy files, wherever fencewatch runs from: inside the installed
package (``streams/_data``, put there by the wheel build) or in a checkout."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

__all__ = ["project_files", "reference_fixture", "specification"]


def reference_fixture() -> Path:
    """Path of ``reference.jsonl``; FileNotFoundError when neither copy exists."""
    packaged = resources.files("streams") / "_data" / "reference.jsonl"
    if packaged.is_file():
        return Path(str(packaged))
    checkout = Path(__file__).resolve().parent.parent / "examples" / "reference.jsonl"
    if checkout.is_file():
        return checkout
    raise FileNotFoundError("the reference fixture is neither packaged nor in a checkout")


def project_files() -> Path:
    """The directory holding ``examples/`` and ``deploy/`` (the example
    workers, the Prometheus and Grafana files the docs run): the packaged
    copy, else the checkout; FileNotFoundError when neither exists."""
    packaged = resources.files("streams") / "_data"
    if (packaged / "examples").is_dir() and (packaged / "deploy").is_dir():
        return Path(str(packaged))
    checkout = Path(__file__).resolve().parent.parent
    if (checkout / "examples").is_dir() and (checkout / "deploy").is_dir():
        return checkout
    raise FileNotFoundError("examples/ and deploy/ are neither packaged nor in a checkout")


def specification() -> Path:
    """Path of the specification every "SPEC §N" refers to (docs/spec.md);
    FileNotFoundError when neither copy exists."""
    packaged = resources.files("streams") / "_data" / "spec.md"
    if packaged.is_file():
        return Path(str(packaged))
    checkout = Path(__file__).resolve().parent.parent / "docs" / "spec.md"
    if checkout.is_file():
        return checkout
    raise FileNotFoundError("docs/spec.md is neither packaged nor in a checkout")
