"""fencewatch: stale-owner (split-brain) detection and fencing on Kafka.

Importing ``streams`` is cheap and pure: the Kafka, Faust and database adapters
live in subpackages that are imported only when used.
"""

from __future__ import annotations

__all__ = ["__version__"]


def __getattr__(name: str) -> str:
    # One version number: pyproject.toml's, as installed. Read on first use:
    # importlib.metadata loads socket and threading, which importing the pure
    # core must not (tests/core/test_purity.py).
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("fencewatch")
        except PackageNotFoundError:  # a checkout that was never installed
            return "unknown"
    raise AttributeError(f"module 'streams' has no attribute {name!r}")
