"""The finding record (SPEC §4, output): identity, recommended actions, JSON."""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec
import orjson

from streams.core.records import Confidence, Kind, Severity

__all__ = ["ACTIONS", "Evidence", "Finding", "confidence_of", "finding_id"]

#: Recommended response per kind (SPEC §4), carried on every finding so an
#: on-call engineer reading one record knows what to do next.
ACTIONS: dict[Kind, str] = {
    Kind.STALE_ACTIVITY: (
        "Stop or quarantine the old worker if that is authorized, then verify it emits "
        "nothing more."
    ),
    Kind.STALE_ATTEMPT: (
        "Keep the sink's answer (a rejection is the fence's receipt); find out why the "
        "worker missed its lease loss; check the current owner still progresses."
    ),
    Kind.STALE_COMMIT: (
        "Freeze further effects for this workflow, inspect the committed result, and decide "
        "whether compensation is safe."
    ),
    Kind.DUPLICATE_COMMIT: (
        "Check the destination is idempotent for this effect key; a same-owner repeat is a "
        "client retry, a repeat across a handover means the new owner redid finished work."
    ),
    Kind.CONFLICTING_COMMIT: (
        "Treat the outcome as uncertain until an external predicate or a person verifies it; "
        "never fix it by retrying the current owner (that can make a third effect)."
    ),
    Kind.EPOCH_REUSE: (
        "The coordination store handed one epoch to two workers: fence both, audit the "
        "lease store, and verify every effect of this workflow."
    ),
    Kind.EPOCH_REGRESSION: (
        "An acquisition went backwards: check the lease store's monotonicity and clock-free "
        "allocation, and stop the worker that acquired the lower epoch."
    ),
}


def finding_id(kind: Kind, workflow_key: str, epoch: int | None, effect_key: str | None) -> str:
    """Deterministic id from the identity of SPEC §4 (the kind's family, key,
    epoch, effect key): the same on every replay, restart and arrival order;
    ``duplicate_commit`` and ``conflicting_commit`` share one (``commit_repeat``)."""
    parts = (
        kind.family.value,
        workflow_key,
        "" if epoch is None else str(epoch),
        "" if effect_key is None else effect_key,
    )
    # Length-prefix each part so no choice of strings can collide by concatenation.
    material = "".join(f"{len(p)}:{p}" for p in parts).encode("utf-8")
    return "fw1-" + hashlib.blake2b(material, digest_size=12).hexdigest()


def confidence_of(
    kind: Kind, ordering: str, transition_implied: bool | None, sink_outcome: str | None
) -> Confidence:
    """SPEC §4 "Confidence", from the finding's own fields: ``low`` when the
    order is by arrival (some evidence had no seq); else ``medium`` when the
    transition is implied, or for a stale attempt with no receipt from the
    destination; else ``high``. One function, used by the detector and for
    records written before the field existed, so the rule lives in one place."""
    if ordering != "authoritative":
        return Confidence.LOW
    if transition_implied or (kind is Kind.STALE_ATTEMPT and sink_outcome == "unknown"):
        return Confidence.MEDIUM
    return Confidence.HIGH


_TO_BUILTINS = msgspec.to_builtins


class Evidence(msgspec.Struct, frozen=True, gc=False):
    """One source event behind a finding. ``position`` is the event's ``seq``
    when it has one, else its arrival (offset or line)."""

    position: int
    epoch: int
    worker_id: str
    type: str
    effect_key: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "epoch": self.epoch,
            "worker_id": self.worker_id,
            "type": self.type,
            "effect_key": self.effect_key,
        }


class Finding(msgspec.Struct, frozen=True, gc=False):
    """One finding revision (SPEC §4, output): frozen, compared and hashed by value.

    A msgspec Struct rather than a frozen dataclass for the reason
    :class:`~streams.core.records.Event` is one: a frozen dataclass's
    ``__init__`` sets each field through ``object.__setattr__``, several times
    slower to build (measured: docs/performance.md). ``gc=False``: it holds
    only strings, numbers and tuples of :class:`Evidence`, so it can never be
    part of a cycle.
    """

    finding_id: str
    revision: int
    kind: Kind
    severity: Severity
    workflow_key: str
    stale_epoch: int
    stale_worker: str
    current_epoch: int | None
    current_worker: str | None
    transition_seq: int | None
    transition_implied: bool | None
    epochs: tuple[int, ...] | None
    event_type: str
    event_seq: int | None
    event_offset: int
    effect_key: str | None
    sink: str | None
    sink_outcome: str | None
    same_owner: bool | None
    ordering: str
    evidence: tuple[Evidence, ...]
    action: str
    confidence: Confidence

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON-ready builtins, in field order (the wire format).

        One C call (``msgspec.to_builtins``: enums by value, nested
        :class:`Evidence` as dicts) rather than a dict built field by field:
        a report renders every finding (0.9 of 3 µs each, measured), then the
        two tuples become the lists the record has always had."""
        doc: dict[str, Any] = _TO_BUILTINS(self)
        doc["evidence"] = list(doc["evidence"])
        epochs = doc["epochs"]
        if epochs is not None:
            doc["epochs"] = list(epochs)
        return doc

    def to_json(self) -> bytes:
        return orjson.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Finding:
        """Inverse of :meth:`to_dict` (e.g. a record read back from the
        findings topic). Raises KeyError/ValueError/TypeError for a record that
        is not a finding. A record written before ``confidence`` existed gets
        it from its other fields, by the same rule the detector applies."""
        epochs = doc["epochs"]
        kind = Kind(doc["kind"])
        conf = doc.get("confidence")
        return cls(
            finding_id=doc["finding_id"],
            revision=int(doc["revision"]),
            kind=kind,
            severity=Severity(doc["severity"]),
            workflow_key=doc["workflow_key"],
            stale_epoch=doc["stale_epoch"],
            stale_worker=doc["stale_worker"],
            current_epoch=doc["current_epoch"],
            current_worker=doc["current_worker"],
            transition_seq=doc["transition_seq"],
            transition_implied=doc["transition_implied"],
            epochs=None if epochs is None else tuple(epochs),
            event_type=doc["event_type"],
            event_seq=doc["event_seq"],
            event_offset=doc["event_offset"],
            effect_key=doc["effect_key"],
            sink=doc["sink"],
            sink_outcome=doc["sink_outcome"],
            same_owner=doc["same_owner"],
            ordering=doc["ordering"],
            evidence=tuple(Evidence(**e) for e in doc["evidence"]),
            action=doc["action"],
            confidence=(
                confidence_of(kind, doc["ordering"], doc["transition_implied"], doc["sink_outcome"])
                if conf is None
                else Confidence(conf)
            ),
        )
