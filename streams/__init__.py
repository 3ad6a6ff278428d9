"""fencewatch: stale-owner (split-brain) detection and fencing on Kafka.

Importing ``streams`` is cheap and pure: the Kafka, Faust and database adapters
live in subpackages that are imported only when used.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

__all__ = ["__version__"]

try:
    # One version number: pyproject.toml's, as installed.
    __version__ = version("fencewatch")
except PackageNotFoundError:  # a checkout that was never installed
    __version__ = "unknown"
