"""What an :class:`~streams.sdk.owner.Owner` needs from the reporter that made
it: a port, so that ``owner.py`` depends on this small interface and
``reporter.py`` on ``owner.py``, never both ways round (the two modules used
to import each other behind late and type-only imports)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from streams.core.records import Event, EventType
from streams.fences.lease import Stamp
from streams.fences.sink import Receipt

__all__ = ["EvidencePublisher", "Report"]


@dataclass(frozen=True, slots=True)
class Report:
    """What was published, and what the lease store said when stamping it:
    ``current`` is False once a higher epoch was acquired (the worker has been
    displaced and should stop); None when the reporter has no lease store."""

    event: Event
    current: bool | None
    current_epoch: int | None


class EvidencePublisher(Protocol):
    """Publishes one worker's ownership evidence (``OwnershipReporter`` is the one
    implementation)."""

    @property
    def worker_id(self) -> str: ...

    def emit(
        self,
        etype: EventType | str,
        key: str,
        epoch: int,
        *,
        effect_key: str | None = None,
        sink: str | None = None,
        attrs: dict[str, Any] | None = None,
        stamp: Stamp | None = None,
        seq: int | None = None,
        unstamped: str | None = None,
    ) -> Report: ...

    def progress(self, key: str, epoch: int, *, attrs: dict[str, Any] | None = None) -> Report: ...

    def lease_released(self, key: str, epoch: int, *, stamp: Stamp | None = None) -> Report: ...

    def effect_result(
        self, receipt: Receipt, *, sink: str | None = None, unstamped: str | None = None
    ) -> Report: ...
