"""The per-workflow status record (SPEC §8): where one workflow key stands
now, built from the key's detector state, its findings and the health view.

Pure: no clock and no Kafka. The Kafka record timestamps the record carries
(``last_seen_ms`` per stale epoch, ``updated_ms``) are passed in by the
caller: the live processor knows them from the records it consumes; a replay
of a file has none (they stay null), which is why comparisons of live and
replayed status leave them aside (:meth:`WorkflowStatus.content`).

The same code serves both sides: the live processor calls
:func:`build_status` with :func:`findings_of` (the latest revision of each
finding, rebuilt from the state it stores), and the audit calls
:func:`status_from_replay` with the replay's own findings; the health of
each finding is :func:`streams.core.health.assess` in both.

Bounded like the detector: everything here is read from the evidence a key
retains (``max_events_per_key``), so a stale epoch's ``events`` count covers
the retained events only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
import orjson

from streams.core.detector import (
    _ACQ,
    _COM,
    _G_ATTEMPT,
    _G_COMMIT,
    _REJ,
    _REL,
    Detector,
    KeyState,
    _as_list,
    _build,
    _finding,
)
from streams.core.document import StatusDocument
from streams.core.findings import Finding
from streams.core.health import CLEARED, assess
from streams.core.records import SEVERITY_RANK

__all__ = [
    "ATTEMPTED",
    "COMMITTED",
    "REJECTED",
    "UNNAMED_SINK",
    "FindingRef",
    "StaleEpoch",
    "WorkflowStatus",
    "build_status",
    "findings_of",
    "pending_json",
    "stale_effects",
    "stale_seen",
    "status_from_replay",
    "status_json",
    "status_seen",
]

#: Outcomes of a stale effect (see :func:`stale_effects`).
ATTEMPTED = "attempted"
REJECTED = "rejected"
COMMITTED = "committed"
#: The sink label of effect events that name none.
UNNAMED_SINK = "unnamed"


@dataclass(frozen=True, slots=True)
class FindingRef:
    """A finding as the status lists it."""

    finding_id: str
    kind: str
    severity: str
    revision: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "finding_id": self.finding_id,
            "kind": self.kind,
            "severity": self.severity,
            "revision": self.revision,
        }


@dataclass(frozen=True, slots=True)
class StaleEpoch:
    """A displaced epoch still producing evidence after its displacement."""

    epoch: int
    worker: str
    events: int
    last_position: int
    last_seen_ms: int | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "worker": self.worker,
            "events": self.events,
            "last_position": self.last_position,
            "last_seen_ms": self.last_seen_ms,
        }


@dataclass(frozen=True, slots=True)
class WorkflowStatus:
    """One record of the status topic (SPEC §8), key = ``workflow_key``."""

    workflow_key: str
    current_epoch: int | None
    current_worker: str | None
    acquired_seq: int | None
    acquisition_implied: bool | None
    released: bool
    last_position: int | None
    stale_epochs: tuple[StaleEpoch, ...]
    open: tuple[FindingRef, ...]
    cleared: tuple[FindingRef, ...]
    worst_open: str | None
    updated_ms: int | None

    def to_dict(self) -> dict[str, Any]:
        return _document(
            (
                self.workflow_key,
                self.current_epoch,
                self.current_worker,
                self.acquired_seq,
                self.acquisition_implied,
                self.released,
                self.last_position,
                self.stale_epochs,
                self.open,
                self.cleared,
                self.worst_open,
                self.updated_ms,
            )
        )

    def to_json(self) -> bytes:
        # orjson serializes (slotted) dataclasses in field order: the same
        # document as to_dict(), without building it.
        return orjson.dumps(self)

    def content(self) -> dict[str, Any]:
        """:meth:`to_dict` without the Kafka timestamps: what a replay of the
        same events gives, whatever the broker's clock said."""
        doc = self.to_dict()
        del doc["updated_ms"]
        for s in doc["stale_epochs"]:
            del s["last_seen_ms"]
        return doc

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> WorkflowStatus:
        """The record from its JSON form (as read back from the topic)."""
        return cls(
            workflow_key=doc["workflow_key"],
            current_epoch=doc["current_epoch"],
            current_worker=doc["current_worker"],
            acquired_seq=doc["acquired_seq"],
            acquisition_implied=doc["acquisition_implied"],
            released=doc["released"],
            last_position=doc["last_position"],
            stale_epochs=tuple(StaleEpoch(**s) for s in doc["stale_epochs"]),
            open=tuple(FindingRef(**f) for f in doc["open"]),
            cleared=tuple(FindingRef(**f) for f in doc["cleared"]),
            worst_open=doc["worst_open"],
            updated_ms=doc["updated_ms"],
        )


#: :class:`WorkflowStatus`'s fields, in order.
_Fields = tuple[
    str,
    int | None,
    str | None,
    int | None,
    bool | None,
    bool,
    int | None,
    tuple[StaleEpoch, ...],
    tuple[FindingRef, ...],
    tuple[FindingRef, ...],
    str | None,
    int | None,
]


def _document(f: _Fields) -> dict[str, Any]:
    """The JSON object of a status with fields ``f`` (field order, like
    ``orjson.dumps`` of the dataclass)."""
    return {
        "workflow_key": f[0],
        "current_epoch": f[1],
        "current_worker": f[2],
        "acquired_seq": f[3],
        "acquisition_implied": f[4],
        "released": f[5],
        "last_position": f[6],
        "stale_epochs": [s.to_dict() for s in f[7]],
        "open": [r.to_dict() for r in f[8]],
        "cleared": [r.to_dict() for r in f[9]],
        "worst_open": f[10],
        "updated_ms": f[11],
    }


def findings_of(state: KeyState, workflow_key: str) -> list[Finding]:
    """The latest revision of every finding the detector has emitted for
    this key, rebuilt from ``state`` (the live processor keeps states, not
    findings). Equal to the findings a replay of the key's events kept
    (tested), because the detector re-emits a finding whenever its content
    changes."""
    emitted = state.emitted
    if not emitted:
        return []
    out: list[Finding] = []
    for ident in Detector._all_identities(state):
        built = _build(state, ident, workflow_key)
        if built is None:
            continue
        fid, content = built
        prev = emitted.get(fid)
        if prev is not None:
            out.append(_finding(fid, int(prev[0]), content))
    return out


def _severity_order(ref: FindingRef) -> tuple[int, str]:
    return (-SEVERITY_RANK[ref.severity], ref.finding_id)  # type: ignore[index]


def _status_fields(
    workflow_key: str,
    state: KeyState,
    findings: Iterable[Finding],
    *,
    seen_ms: Mapping[int, int] | None = None,
    event_ms: Mapping[int, int] | None = None,
    updated_ms: int | None = None,
    stale: dict[int, list[Any]] | None = None,
) -> _Fields:
    """:func:`build_status`'s fields. ``stale``: :meth:`KeyState.stale_epochs` of ``state``
    when the caller has it already (the live processor scanned the events
    for it at the batch's end, and the state has not changed since)."""
    seen = seen_ms or {}
    times = event_ms or {}
    events = state.events
    current_epoch: int | None = None
    current_worker: str | None = None
    acquired_seq: int | None = None
    implied: bool | None = None
    if state.acq:
        current_epoch = state.max_epoch
        acq = state.acq[current_epoch]
        current_worker = acq.worker
        acquired_seq = acq.seq
        implied = acq.code != _ACQ
    last = events[-1] if events else None
    released = (
        last is not None
        and last.code == _REL
        and current_epoch is not None
        and last.epoch == current_epoch
    )
    if stale is None:
        stale = state.stale_epochs()
    opened: list[FindingRef] = []
    cleared: list[FindingRef] = []
    for f in findings:
        ref = FindingRef(f.finding_id, f.kind.value, f.severity.value, f.revision)
        (cleared if assess(f, state).status == CLEARED else opened).append(ref)
    if len(opened) > 1:
        opened.sort(key=_severity_order)
    if len(cleared) > 1:
        cleared.sort(key=_severity_order)
    return (
        workflow_key,
        current_epoch,
        current_worker,
        acquired_seq,
        implied,
        released,
        None if last is None else last.position,
        (
            tuple(
                StaleEpoch(epoch, w, n, pos, times.get(pos, seen.get(epoch)))
                for epoch, (w, n, pos) in sorted(stale.items())
            )
            if stale
            else ()
        ),
        tuple(opened),
        tuple(cleared),
        opened[0].severity if opened else None,
        updated_ms,
    )


def build_status(
    workflow_key: str,
    state: KeyState,
    findings: Iterable[Finding],
    *,
    seen_ms: Mapping[int, int] | None = None,
    event_ms: Mapping[int, int] | None = None,
    updated_ms: int | None = None,
) -> WorkflowStatus:
    """The status of ``workflow_key`` from its ``state`` and its latest
    ``findings``. Kafka timestamps, where known: ``event_ms`` maps positions
    of events to their record timestamps (a stale epoch's ``last_seen_ms``
    is its latest stale event's, else ``seen_ms``'s: stale epoch -> the
    timestamp known before); ``updated_ms`` is the timestamp of the latest
    event that changed the record."""
    return WorkflowStatus(
        *_status_fields(
            workflow_key, state, findings, seen_ms=seen_ms, event_ms=event_ms, updated_ms=updated_ms
        )
    )


def status_json(
    workflow_key: str,
    state: KeyState,
    findings: Iterable[Finding],
    *,
    seen_ms: Mapping[int, int] | None = None,
    event_ms: Mapping[int, int] | None = None,
    updated_ms: int | None = None,
    stale: dict[int, list[Any]] | None = None,
) -> tuple[bytes, tuple[StaleEpoch, ...]]:
    """``build_status(...).to_json()`` and the status's stale epochs, without
    building the :class:`WorkflowStatus`: the live processor writes one per
    changed key per batch, and a frozen dataclass's ``__init__`` runs
    interpreted (``object.__setattr__`` per field), which was a quarter of
    the status path's instructions (docs/performance.md)."""
    fields = _status_fields(
        workflow_key,
        state,
        findings,
        seen_ms=seen_ms,
        event_ms=event_ms,
        updated_ms=updated_ms,
        stale=stale,
    )
    # Positional, not ``*fields``: compiled, a star call packs a tuple and
    # goes through the generic call path, once per status record.
    doc = StatusDocument(
        fields[0],
        fields[1],
        fields[2],
        fields[3],
        fields[4],
        fields[5],
        fields[6],
        fields[7],
        fields[8],
        fields[9],
        fields[10],
        fields[11],
    )
    return _encode(doc), fields[7]


#: The status document's bytes: msgspec writes the same bytes as
#: ``orjson.dumps`` for this document (compact, field order, UTF-8 unescaped,
#: integers within 64 bits; tested against ``WorkflowStatus.to_json``), but
#: an exact-size bytes object. orjson returns its 1 KiB working buffer shrunk
#: in place, and the engines keep one per changed key until their commit:
#: ~1,000 of those left glibc's heap fragmented, so each new one took fresh
#: pages (page faults), 4.3 µs a document against 1.0 µs when freed at once
#: (docs/performance.md).
_encode = msgspec.json.Encoder().encode


def pending_json(
    workflow_key: str,
    state: KeyState,
    seen: dict[int, int],
    updated_ms: int | None,
    accepted: int,
    stale: dict[int, list[Any]] | None = None,
) -> bytes:
    """The JSON of a :class:`~streams.core.pending.PendingStatus` with these
    fields: raises if ``state`` accepted evidence since. ``stale``: the
    pending status's scan of the state (:func:`status_seen`), reused."""
    if state.n_events - state.n_redeliveries != accepted:
        raise RuntimeError(
            f"the status of {workflow_key!r} was read after a later batch of the key"
        )
    return status_json(
        workflow_key,
        state,
        findings_of(state, workflow_key),
        seen_ms=seen,
        updated_ms=updated_ms,
        stale=stale,
    )[0]


def status_seen(
    state: KeyState, seen_ms: dict[int, int], event_ms: Mapping[int, int]
) -> tuple[dict[int, int], dict[int, list[Any]]]:
    """A key's status meta ``seen`` after a batch and the stale-epoch scan it
    came from (:meth:`KeyState.stale_epochs`, reused when the JSON is built: the state is
    the same then). ``seen``: stale epoch -> the Kafka timestamp of its
    latest stale event, ``event_ms`` of the batch's events by position, else
    the one known before, ``seen_ms``. Encoding the status later with
    ``seen`` alone gives what :func:`status_json` gives now with both (a
    stale epoch's ``last_seen_ms`` is exactly its entry in ``seen``)."""
    stale = state.stale_epochs()
    return (stale_seen(stale, seen_ms, event_ms) if stale else seen_ms), stale


def stale_seen(
    stale: dict[int, list[Any]], seen_ms: dict[int, int], event_ms: Mapping[int, int]
) -> dict[int, int]:
    """:func:`status_seen`'s ``seen`` from the state's scan ``stale`` (not
    empty), for a caller that has the scan already."""
    seen: dict[int, int] = {}
    for epoch, entry in stale.items():
        ms = event_ms.get(entry[2], seen_ms.get(epoch))
        if ms is not None:
            seen[epoch] = ms
    return seen


def stale_effects(workflow_key: str, state: KeyState) -> set[tuple[str, str, int, str | None]]:
    """The key's distinct stale effects by outcome, as ``(outcome, sink,
    epoch, effect key)``: every effect a displaced epoch attempted, was
    refused or committed after its displacement is ``attempted``; those with
    a stale ``effect_rejected`` are also ``rejected``, those with a stale
    ``effect_committed`` also ``committed``. Grows as evidence arrives
    (within the detector's retention bound), so a caller counts what is new."""
    out: set[tuple[str, str, int, str | None]] = set()
    disp = state.displaced_at()
    for (tag, epoch, ek), g in state.groups.items():
        if tag != _G_ATTEMPT and tag != _G_COMMIT:
            continue
        t = disp.get(epoch) if epoch is not None else None
        if t is None or epoch is None:
            continue
        for ev in _as_list(g):
            if not ev.k > t:
                continue
            sink = UNNAMED_SINK if ev.sink is None else ev.sink
            out.add((ATTEMPTED, sink, epoch, ek))
            if ev.code == _REJ:
                out.add((REJECTED, sink, epoch, ek))
            elif ev.code == _COM:
                out.add((COMMITTED, sink, epoch, ek))
    return out


def status_from_replay(
    states: Mapping[str, KeyState], latest: Iterable[Finding]
) -> dict[str, WorkflowStatus]:
    """Every key's status after a replay (``Replay.states``,
    ``Replay.latest.values()``): what the live status topic holds, latest per
    key, after the same events (timestamps aside)."""
    by_key: dict[str, list[Finding]] = {}
    for f in latest:
        by_key.setdefault(f.workflow_key, []).append(f)
    return {
        key: build_status(key, state, by_key.get(key, ())) for key, state in sorted(states.items())
    }
