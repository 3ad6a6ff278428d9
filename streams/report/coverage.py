"""What an audit's evidence covers, for every report format: whether the read
stopped early (and where each partition got to, to resume it), and which
partitions had records deleted before the read (retention,
``delete_records``), so that findings on their keys may lack earlier
evidence.

Pure data: the CLI fills it from the topic reader; the renderers say it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from streams.core.findings import Finding

__all__ = ["INTERRUPTED", "Coverage", "MissingHistory"]

#: ``Coverage.partial`` for a Ctrl-C.
INTERRUPTED = "interrupted"


@dataclass(frozen=True, slots=True)
class MissingHistory:
    """One partition of ``topic`` whose log starts at ``log_start_offset``,
    above ``from_offset`` where the audit was to start: ``missing`` records
    were deleted before the read."""

    topic: str
    partition: int
    from_offset: int
    log_start_offset: int
    missing: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "from_offset": self.from_offset,
            "log_start_offset": self.log_start_offset,
            "missing": self.missing,
        }

    def text(self) -> str:
        """``partition 0 of T starts at offset 4: 4 records deleted before it``."""
        n = self.missing
        return (
            f"partition {self.partition} of {self.topic} starts at offset "
            f"{self.log_start_offset:,}: {n:,} record{'s' if n != 1 else ''} from offset "
            f"{self.from_offset:,} deleted before the audit"
        )


@dataclass(frozen=True, slots=True)
class Coverage:
    """``partial``: None for a complete read, else why it stopped early
    (:data:`INTERRUPTED`, or the one line saying the broker is unreachable).
    ``next_offsets``: for a partial topic audit, the next offset of each
    partition (``--from-offset P:N,...`` resumes there). ``missing``: the
    partitions with deleted history; ``keys``: the partition of each
    workflow key read from one of them."""

    partial: str | None = None
    next_offsets: Mapping[int, int] | None = None
    missing: tuple[MissingHistory, ...] = ()
    keys: Mapping[str, int] = field(default_factory=dict)

    @property
    def missing_records(self) -> int:
        return sum(m.missing for m in self.missing)

    def resume_arg(self) -> str | None:
        """``0:123,1:456``: the ``--from-offset`` value that resumes the read."""
        if not self.next_offsets:
            return None
        return ",".join(f"{p}:{o}" for p, o in sorted(self.next_offsets.items()))

    def history_note(self, f: Finding) -> str | None:
        """Why ``f``'s confidence may be overstated: its key's partition lost
        records before the audit (an earlier acquisition or act may be
        gone); None when nothing is missing there."""
        p = self.keys.get(f.workflow_key)
        if p is None:
            return None
        m = next((m for m in self.missing if m.partition == p), None)
        if m is None:
            return None
        return f"earlier evidence may be missing: {m.text()}"

    def summary(self, findings: list[Finding]) -> dict[str, Any]:
        """``summary.missing_history`` of the JSON report (empty when none)."""
        if not self.missing:
            return {}
        affected = [f.finding_id for f in findings if self.keys.get(f.workflow_key) is not None]
        return {
            "missing_history": {
                "records": self.missing_records,
                "partitions": [m.to_dict() for m in self.missing],
                "finding_ids": affected,
            }
        }

    @staticmethod
    def of(partial: bool) -> Coverage | None:
        """The coverage a bare ``partial`` flag says (the renderers' older argument)."""
        return Coverage(partial=INTERRUPTED) if partial else None
