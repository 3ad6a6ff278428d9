"""The wire records of SPEC §2 and §4 as typed, immutable values.

Pure: no I/O, no clock, no environment. Everything else in fencewatch (the live
processor, replay, the SDK, the fences) speaks these types.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Final

import msgspec

__all__ = [
    "EFFECT_TYPES",
    "MAX_INT63",
    "SEVERITY_RANK",
    "WORKFLOW_KEY_FIELD",
    "Confidence",
    "Event",
    "EventType",
    "Family",
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

    @property
    def family(self) -> Family:
        return _KIND_FAMILY[self]


class Family(StrEnum):
    """A finding's identity family (SPEC §4): the first part of its identity.
    One per kind, except that ``duplicate_commit`` and ``conflicting_commit``
    share ``commit_repeat`` (the record escalates from one to the other under
    one id). The values are part of every ``finding_id``: never change them."""

    STALE_ACTIVITY = "stale_activity"
    STALE_ATTEMPT = "stale_attempt"
    STALE_COMMIT = "stale_commit"
    COMMIT_REPEAT = "commit_repeat"
    EPOCH_REUSE = "epoch_reuse"
    EPOCH_REGRESSION = "epoch_regression"


_KIND_SEVERITY: dict[Kind, Severity] = {
    Kind.STALE_ACTIVITY: Severity.DIAGNOSTIC,
    Kind.STALE_ATTEMPT: Severity.WARNING,
    Kind.STALE_COMMIT: Severity.INCIDENT,
    Kind.DUPLICATE_COMMIT: Severity.WARNING,
    Kind.CONFLICTING_COMMIT: Severity.CRITICAL,
    Kind.EPOCH_REUSE: Severity.CRITICAL,
    Kind.EPOCH_REGRESSION: Severity.CRITICAL,
}
_KIND_FAMILY: dict[Kind, Family] = {
    Kind.STALE_ACTIVITY: Family.STALE_ACTIVITY,
    Kind.STALE_ATTEMPT: Family.STALE_ATTEMPT,
    Kind.STALE_COMMIT: Family.STALE_COMMIT,
    Kind.DUPLICATE_COMMIT: Family.COMMIT_REPEAT,
    Kind.CONFLICTING_COMMIT: Family.COMMIT_REPEAT,
    Kind.EPOCH_REUSE: Family.EPOCH_REUSE,
    Kind.EPOCH_REGRESSION: Family.EPOCH_REGRESSION,
}


class Event(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    """One validated ownership event (SPEC §2): a frozen, slotted record.

    Optional fields are ``None`` when absent (a JSON ``null`` counts as absent).
    ``attrs`` is kept as given; it is never interpreted. Derive a changed copy
    with ``msgspec.structs.replace``.

    A msgspec Struct rather than a frozen dataclass on purpose: one is built
    per event on the hot path, and msgspec decodes *and* type-checks the JSON
    straight into it in C, where a frozen dataclass's ``__init__`` alone costs
    more than parsing the JSON (docs/performance.md). The field annotations
    state the SPEC §2 limits and the record version; the rules they cannot
    state (effect key required by type, Kafka key) are checked in
    :mod:`streams.core.validate`.
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
    #: The record version: decoding accepts only the versions this build knows
    #: (``validate.KNOWN_VERSIONS``; a test holds the two together).
    v: Annotated[int, msgspec.Meta(ge=1, le=1)] = 1


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


#: ``workflow_key``'s position in ``msgspec.structs.astuple(event)``: compiled
#: callers read an event's fields from that tuple (validate.decode_event).
WORKFLOW_KEY_FIELD: Final = 1
if Event.__struct_fields__[WORKFLOW_KEY_FIELD] != "workflow_key":  # pragma: no cover
    raise ImportError("Event fields moved; update records.WORKFLOW_KEY_FIELD")
