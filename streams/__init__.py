"""fencewatch: stale-owner (split-brain) detection and fencing on Kafka.

Importing ``streams`` is cheap and pure: the Kafka, Faust and database adapters
live in subpackages that are imported only when used.
"""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
