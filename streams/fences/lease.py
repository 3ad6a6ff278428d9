"""The lease store port: who may own a workflow key, and at which epoch.

Every acquisition allocates the next owner epoch for the key (strictly
increasing, never reused, atomically) and a ``seq`` from the key's store
revision, so evidence carries an authoritative position (SPEC §3). Lease
expiry is judged by the store's clock only: a worker paused past its TTL
learns on its next ``renew`` or ``stamp`` that it was displaced.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from streams.core.records import Event
from streams.errors import LeaseUnpublished

__all__ = [
    "MAX_KEY_CHARS",
    "MAX_WORKER_CHARS",
    "EventPublisher",
    "Lease",
    "LeaseStore",
    "LeaseUnpublished",
    "Stamp",
    "TakeOverLeaseStore",
    "check_lease_args",
    "grant_attrs",
]

MAX_KEY_CHARS = 512
MAX_WORKER_CHARS = 256


@dataclass(frozen=True, slots=True)
class Lease:
    """A granted lease. ``expires_at`` is in the store's clock (Unix seconds);
    ``seq`` is the store revision of the acquisition."""

    key: str
    epoch: int
    worker_id: str
    seq: int
    expires_at: float


@dataclass(frozen=True, slots=True)
class Stamp:
    """An authoritative ``seq`` for one piece of evidence, and whether the
    epoch it was asked for is still the key's current (highest) epoch."""

    seq: int
    current: bool
    current_epoch: int


class EventPublisher(Protocol):
    """Where the lease store sends its ``lease_acquired`` events (the SDK's
    :class:`~streams.sdk.OwnershipReporter` implements it). A failure to hand
    an event on is a :class:`~streams.errors.BrokerError`."""

    def publish(self, event: Event) -> None: ...


class LeaseStore(Protocol):
    """Epoch allocation and TTL leases per workflow key."""

    def acquire(self, key: str, worker_id: str, ttl: float) -> Lease:
        """Allocate the next epoch for ``key`` and grant ``worker_id`` a lease
        for ``ttl`` seconds of store time. Raises
        :class:`~streams.errors.LeaseHeld` while another worker holds an
        unexpired lease (the same ``worker_id`` may take over its own lease,
        e.g. after a restart; it still gets a new epoch)."""
        ...

    def renew(self, key: str, epoch: int, worker_id: str, ttl: float) -> Lease:
        """Extend a live lease to ``ttl`` seconds from now (store time). Raises
        :class:`~streams.errors.LeaseLost` when it expired, was released or
        was displaced by a higher epoch."""
        ...

    def release(self, key: str, epoch: int, worker_id: str) -> Stamp:
        """Let go of the lease if this worker still holds ``epoch`` (a no-op
        otherwise); returns the seq for the ``lease_released`` evidence."""
        ...

    def stamp(self, key: str, epoch: int) -> Stamp:
        """Hand out the next authoritative seq of ``key``, saying whether
        ``epoch`` is still current. Expiry alone does not make an epoch stale:
        only a higher acquisition does (use ``renew`` to learn about expiry)."""
        ...

    def current_epoch(self, key: str) -> int:
        """The highest epoch ever allocated for ``key`` (0 if none)."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class TakeOverLeaseStore(LeaseStore, Protocol):
    """A lease store that can also grant a key over a live holder."""

    def take_over(self, key: str, worker_id: str, ttl: float) -> Lease:
        """As ``acquire``, but never :class:`~streams.errors.LeaseHeld`: the
        next epoch is granted even while another worker's lease is unexpired,
        so that holder is displaced (an outside authority, e.g. a broker's
        redelivery, already handed the work on)."""
        ...


def check_lease_args(key: str, worker_id: str | None = None, ttl: float | None = None) -> None:
    """Reject what would become invalid evidence before touching the store."""
    if not isinstance(key, str) or not 1 <= len(key) <= MAX_KEY_CHARS:
        raise ValueError(f"workflow key must be a string of 1-{MAX_KEY_CHARS} characters")
    if worker_id is not None and (
        not isinstance(worker_id, str) or not 1 <= len(worker_id) <= MAX_WORKER_CHARS
    ):
        raise ValueError(f"worker id must be a string of 1-{MAX_WORKER_CHARS} characters")
    if ttl is not None and (
        isinstance(ttl, bool)
        or not isinstance(ttl, int | float)
        or not math.isfinite(ttl)
        or ttl <= 0
    ):
        raise ValueError(f"ttl must be a positive finite number of seconds, got {ttl!r}")


def grant_attrs(ttl: float, *, take_over: bool = False) -> dict[str, Any]:
    """The ``lease_acquired`` attrs of a grant: its TTL, and ``take_over``
    when it was a take-over (it displaces a live holder, if there was one)."""
    return {"ttl_s": ttl, "take_over": True} if take_over else {"ttl_s": ttl}
