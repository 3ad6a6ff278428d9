"""What the text and JSON renderers read from an audit: a
:class:`~streams.core.replay.Replay` fits, and so does the merge of shard
reports (:class:`streams.report.merge.MergedReport`), which has the figures
but not the evidence behind them (the HTML timelines need the replay)."""

from __future__ import annotations

from typing import Any, Protocol

from streams.core.destinations import Destination
from streams.core.findings import Finding
from streams.core.health import Health
from streams.core.records import Severity
from streams.core.replay import Invalid

__all__ = ["ReportData"]


class ReportData(Protocol):
    """An audit's results, as :func:`~streams.report.render_text` and
    :func:`~streams.report.render_json` read them."""

    @property
    def records(self) -> int: ...

    @property
    def invalid_count(self) -> int: ...

    @property
    def invalid(self) -> list[Invalid]: ...

    def latest_findings(self) -> list[Finding]: ...

    def health(self) -> list[Health]: ...

    def destinations(self) -> list[Destination]: ...

    def summary(self, health: list[Health] | None = None) -> dict[str, Any]: ...

    def worst_severity(self) -> Severity | None: ...
