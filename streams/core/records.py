"""The wire records of SPEC §2 and §4 as typed, immutable values.

Pure: no I/O, no clock, no environment. Everything else in fencewatch (the live
processor, replay, the SDK, the fences) speaks these types.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = [
    "EFFECT_TYPES",
    "MAX_INT63",
    "SEVERITY_RANK",
    "STALE_TYPES",
    "Event",
    "EventType",
    "Kind",
    "Severity",
    "event_to_dict",
]

MAX_INT63 = (1 << 63) - 1


class EventType(StrEnum):
    LEASE_ACQUIRED = "lease_acquired"
    LEASE_RELEASED = "lease_released"
    PROGRESS = "progress"
    EFFECT_ATTEMPTED = "effect_attempted"
    EFFECT_COMMITTED = "effect_committed"
    EFFECT_REJECTED = "effect_rejected"
    OUTCOME_VERIFIED = "outcome_verified"


#: Types that must name the externally visible result they concern.
EFFECT_TYPES = frozenset(
    {
        EventType.EFFECT_ATTEMPTED,
        EventType.EFFECT_COMMITTED,
        EventType.EFFECT_REJECTED,
        EventType.OUTCOME_VERIFIED,
    }
)

#: Types that can be stale (SPEC §4: all but lease_acquired and outcome_verified).
STALE_TYPES = frozenset(
    {
        EventType.LEASE_RELEASED,
        EventType.PROGRESS,
        EventType.EFFECT_ATTEMPTED,
        EventType.EFFECT_COMMITTED,
        EventType.EFFECT_REJECTED,
    }
)


class Severity(StrEnum):
    DIAGNOSTIC = "diagnostic"
    WARNING = "warning"
    INCIDENT = "incident"
    CRITICAL = "critical"


SEVERITY_RANK: dict[Severity, int] = {
    Severity.DIAGNOSTIC: 0,
    Severity.WARNING: 1,
    Severity.INCIDENT: 2,
    Severity.CRITICAL: 3,
}


class Kind(StrEnum):
    STALE_ACTIVITY = "stale_activity"
    STALE_ATTEMPT = "stale_attempt"
    STALE_COMMIT = "stale_commit"
    DUPLICATE_COMMIT = "duplicate_commit"
    CONFLICTING_COMMIT = "conflicting_commit"
    EPOCH_REUSE = "epoch_reuse"
    EPOCH_REGRESSION = "epoch_regression"

    @property
    def severity(self) -> Severity:
        return _KIND_SEVERITY[self]


_KIND_SEVERITY: dict[Kind, Severity] = {
    Kind.STALE_ACTIVITY: Severity.DIAGNOSTIC,
    Kind.STALE_ATTEMPT: Severity.WARNING,
    Kind.STALE_COMMIT: Severity.INCIDENT,
    Kind.DUPLICATE_COMMIT: Severity.WARNING,
    Kind.CONFLICTING_COMMIT: Severity.CRITICAL,
    Kind.EPOCH_REUSE: Severity.CRITICAL,
    Kind.EPOCH_REGRESSION: Severity.CRITICAL,
}


@dataclass(frozen=True, slots=True)
class Event:
    """One validated ownership event (SPEC §2).

    Optional fields are ``None`` when absent (a JSON ``null`` counts as absent).
    ``attrs`` is kept as given; it is never interpreted.
    """

    type: EventType
    workflow_key: str
    epoch: int
    worker_id: str
    seq: int | None = None
    effect_key: str | None = None
    sink: str | None = None
    event_id: str | None = None
    run_id: str | None = None
    ts: str | None = None
    attrs: dict[str, Any] | None = None
    v: int = 1


def event_to_dict(event: Event) -> dict[str, Any]:
    """The JSON object for ``event``, optional fields left out when absent."""
    out: dict[str, Any] = {
        "type": event.type.value,
        "workflow_key": event.workflow_key,
        "epoch": event.epoch,
        "worker_id": event.worker_id,
    }
    for name in ("seq", "effect_key", "sink", "event_id", "run_id", "ts", "attrs"):
        value = getattr(event, name)
        if value is not None:
            out[name] = value
    if event.v != 1:
        out["v"] = event.v
    return out
