"""The demos a person runs against a real broker (``fencewatch demo``,
docs/demo.md): the SPEC §5 fixture through the live processor
(:mod:`streams.demo.live`) and two real workers splitting the brain over one
lease (:mod:`streams.demo.split_brain`, workers in :mod:`streams.demo.worker`).

Submodules are imported on use: they need the Kafka and database clients.
"""

from __future__ import annotations

__all__: list[str] = []
