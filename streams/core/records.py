"""The wire records of SPEC §2 and §4 as typed, immutable values.

Pure: no I/O, no clock, no environment. Everything else in fencewatch (the live
processor, replay, the SDK, the fences) speaks these types.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

import msgspec

__all__ = [
    "EFFECT_TYPES",
    "MAX_INT63",
    "SEVERITY_RANK",
    "STALE_TYPES",
    "Confidence",
    "Event",
    "EventType",
    "Kind",
    "Severity",
    "event_to_dict",
]

MAX_INT63 = (1 << 63) - 1
Int63 = Annotated[int, msgspec.Meta(ge=0, le=MAX_INT63)]


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


class Confidence(StrEnum):
    """How far a finding rests on authoritative sources (SPEC §4): the order
    of the acquisition and the destination's acknowledgement."""

    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


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


class Event(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    """One validated ownership event (SPEC §2): a frozen, slotted record.

    Optional fields are ``None`` when absent (a JSON ``null`` counts as absent).
    ``attrs`` is kept as given; it is never interpreted. Derive a changed copy
    with ``msgspec.structs.replace``.

    A msgspec Struct rather than a frozen dataclass on purpose: one is built
    per event on the hot path, and msgspec decodes *and* type-checks the JSON
    straight into it in C. A frozen dataclass's ``__init__`` alone
    (``object.__setattr__`` per field) measured 1.7 µs here, more than parsing
    the JSON. The field annotations state the SPEC §2 limits; the rules they
    cannot state (effect key required by type, record version, Kafka key) are
    checked in :mod:`streams.core.validate`.
    """

    type: EventType
    workflow_key: Annotated[str, msgspec.Meta(min_length=1, max_length=512)]
    epoch: Int63
    worker_id: Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
    seq: Int63 | None = None
    effect_key: Annotated[str, msgspec.Meta(min_length=1, max_length=1024)] | None = None
    sink: Annotated[str, msgspec.Meta(min_length=1, max_length=1024)] | None = None
    event_id: Annotated[str, msgspec.Meta(min_length=1, max_length=256)] | None = None
    run_id: Annotated[str, msgspec.Meta(min_length=1, max_length=256)] | None = None
    ts: Annotated[str, msgspec.Meta(min_length=1, max_length=64)] | None = None
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
