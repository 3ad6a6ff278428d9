"""What a topic audit read, carried by its JSON report as ``"source"`` so that
reports of shards (``--partitions``) can be merged into the one report a
single audit of their partitions would write (``fencewatch report merge``).

Pure data: the CLI fills it from the topic audit; :mod:`streams.report.merge`
reads it back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Source"]


@dataclass(frozen=True, slots=True)
class Source:
    """A topic audit's read. ``bounds``: per partition read, the offset the
    read began at and the one it reached. ``start`` and ``end``: the bounds
    asked for, as JSON (``"beginning"``, ``"end"``, ``{"offset": N}``,
    ``{"offsets": {"P": N}}``, ``{"time_ms": N}``): shards read with
    different bounds do not merge. ``settings``: the detector's settings
    (findings depend on them); ``version``: fencewatch's. ``history_keys``:
    the partition of each finding's workflow key read from a partition with
    deleted history (what the notes on those findings need)."""

    topic: str
    bounds: Mapping[int, tuple[int, int]]
    start: Any
    end: Any
    settings: Mapping[str, int]
    version: str
    history_keys: Mapping[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partitions": {
                str(p): {"from": b, "to": r} for p, (b, r) in sorted(self.bounds.items())
            },
            "start": self.start,
            "end": self.end,
            "settings": dict(sorted(self.settings.items())),
            "version": self.version,
            "history_keys": dict(sorted(self.history_keys.items())),
        }

    @staticmethod
    def from_dict(doc: Mapping[str, Any]) -> Source:
        """Inverse of :meth:`to_dict`. Raises KeyError, TypeError or
        ValueError for a document that is not one."""
        parts = doc["partitions"]
        if not isinstance(parts, dict):
            raise TypeError("partitions is not an object")
        return Source(
            topic=str(doc["topic"]),
            bounds={int(p): (int(v["from"]), int(v["to"])) for p, v in parts.items()},
            start=doc["start"],
            end=doc["end"],
            settings={str(k): int(v) for k, v in dict(doc["settings"]).items()},
            version=str(doc["version"]),
            history_keys={str(k): int(v) for k, v in dict(doc.get("history_keys", {})).items()},
        )
