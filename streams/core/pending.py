"""A key's status record (SPEC §8) as a batch leaves it, encoded when it is
first read: the one object per changed key per batch that goes from the
batch logic (:class:`streams.core.batch.BatchCore`) to the engine's commit.

Interpreted, not compiled (mypyc does not compile ``msgspec.Struct``
subclasses); the work it calls, :func:`~streams.core.status.pending_json`
and :func:`~streams.core.status.status_seen`, is compiled.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from streams.core.detector import KeyState
from streams.core.status import pending_json, status_seen

__all__ = ["PendingStatus", "pending_status"]


class PendingStatus(msgspec.Struct, gc=False, eq=False):
    """A status record whose value is encoded when it is first read
    (:attr:`value`) rather than when its batch ran: the engines write only
    the latest one per key per transaction (SPEC §8), so a key changed by
    several batches of a transaction is encoded once (the status was a
    third of the worker's CPU with the status on, docs/performance.md).
    Reads like the engines' output records (``topic``, ``key``, ``value``,
    ``headers``, ``partition``), so they produce it as it is.

    It holds the key's live state object, so it stands for the status as of
    its batch only until the key's next batch: the engines read it at their
    commit, before any later batch, and a later batch that changes the
    status makes a new one for the same key, which replaces this one. A read
    after the state's accepted evidence moved on raises instead of writing a
    later status under this one's timestamps.

    One object, not three: the batch made a compiled ``PendingStatus``, a
    ``(key, pending)`` tuple, and the processor copied both into a record
    Struct, per changed key per batch (docs/performance.md). Not tracked by
    the collector: one lives per changed key until the commit, and tracked
    objects that live that long are promoted and bring the next full
    collection closer. No cycle runs through it: it refers to the key's
    state, which never refers back."""

    topic: str
    key: bytes
    workflow_key: str
    state: KeyState
    #: Stale epoch -> last_seen_ms as of the batch (the status meta's).
    seen: dict[int, int]
    updated_ms: int | None
    accepted: int
    #: The stale-epoch scan of ``state`` as of the batch (status_seen),
    #: reused when the JSON is built: the state is the same then.
    stale: dict[int, list[Any]] | None = None
    headers: tuple[tuple[str, bytes], ...] = ()
    #: ``None``: the producer's partitioner (murmur2 of the key), like a finding's.
    partition: int | None = None
    encoded: bytes | None = None

    @property
    def value(self) -> bytes:
        """``build_status(...).to_json()`` of the key as of its batch."""
        doc = self.encoded
        if doc is None:
            doc = self.encoded = pending_json(
                self.workflow_key,
                self.state,
                self.seen,
                self.updated_ms,
                self.accepted,
                self.stale,
            )
        return doc

    def to_json(self) -> bytes:
        """The record's value (:attr:`value`)."""
        return self.value

    def __eq__(self, other: object) -> bool:
        # Equal to any record with the same topic, key, value, headers and
        # partition (the engines' OutRecord included): what a test compares.
        try:
            theirs = (other.topic, other.key, other.value, tuple(other.headers), other.partition)  # type: ignore[attr-defined]
        except AttributeError:
            return NotImplemented
        ours = (self.topic, self.key, self.value, tuple(self.headers), self.partition)
        return bool(theirs == ours)

    __hash__ = None  # type: ignore[assignment]


def pending_status(
    workflow_key: str,
    state: KeyState,
    accepted: int,
    *,
    seen_ms: dict[int, int],
    event_ms: Mapping[int, int],
    updated_ms: int | None,
    topic: str = "",
) -> PendingStatus:
    """The status of ``workflow_key`` after a batch, to be encoded when it is
    written (what the batch logic builds per changed key; see
    :func:`~streams.core.status.status_seen` for ``seen_ms`` and
    ``event_ms``)."""
    seen, stale = status_seen(state, seen_ms, event_ms)
    return PendingStatus(
        topic, workflow_key.encode("utf-8"), workflow_key, state, seen, updated_ms, accepted, stale
    )
