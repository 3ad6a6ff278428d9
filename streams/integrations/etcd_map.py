"""etcd elections as ownership transitions (pure: no client, no Kafka, no clock).

An etcd election (``concurrency.NewElection(session, "/election/export")`` in
Go, the same layout in every client) is a key prefix: each candidate puts
``<election>/<lease id>`` bound to its lease, with its identity as the value,
and the candidate whose key has the **lowest create revision** leads. So:

* the election's name (the key without its last path segment) is the
  ``workflow_key``;
* the leader key's create revision is the owner epoch: unique, and strictly
  rising from one leader to the next (a successor's key is newer than the
  deleted leader's, which was the oldest);
* the revision at which a key *becomes* leader is the acquisition's ``seq``:
  its own creation's (= its mod revision) when it led at once, else the
  revision that deleted its predecessor (the mod revision of the DELETE event).
  Not the successor key's own create or mod revision: that is older than the
  handover, and the old leader's evidence in between was legitimate;
* a leader whose deletion leaves the election empty is ``lease_released`` at
  the deletion's revision. A deletion that hands over publishes only the
  successor's ``lease_acquired``: both would carry the one revision, and a
  ``seq`` is unique per key (SPEC §2); the acquisition names the predecessor
  in its ``attrs``.

:class:`Elections` replays a snapshot and the watch's revisions and says what
changed. Bad values are :class:`Rejected` (naming the field), never raised.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from streams.errors import TooManyKeys

__all__ = [
    "MAX_KEY_CHARS",
    "MAX_WORKER_CHARS",
    "Change",
    "Elections",
    "KeyValue",
    "Rejected",
    "TooManyKeys",
    "Transition",
    "election_of",
]

MAX_KEY_CHARS = 512  # SPEC §2 workflow_key
MAX_WORKER_CHARS = 256  # SPEC §2 worker_id


@dataclass(frozen=True, slots=True)
class KeyValue:
    """One etcd key as a range or a watch event gives it (value empty for a delete)."""

    key: bytes
    create_revision: int
    mod_revision: int
    value: bytes = b""


@dataclass(frozen=True, slots=True)
class Change:
    """One watch event: ``put`` False is a delete (``kv.mod_revision`` is the
    deletion's revision)."""

    put: bool
    kv: KeyValue


@dataclass(frozen=True, slots=True)
class Transition:
    """A leadership change to publish. ``acquired`` False is a release."""

    acquired: bool
    workflow_key: str
    epoch: int
    seq: int
    worker_id: str
    etcd_key: str
    previous_epoch: int | None = None
    previous_worker: str | None = None


@dataclass(frozen=True, slots=True)
class Rejected:
    """A leader whose key or value cannot be evidence: skipped and counted."""

    etcd_key: str
    field: str
    reason: str
    revision: int

    def describe(self) -> str:
        return f"etcd key {self.etcd_key} at revision {self.revision}: {self.field} {self.reason}"


def _show(key: bytes) -> str:
    # A key is shown in messages whatever its bytes, bounded.
    text = key.decode("utf-8", "backslashreplace")
    return text if len(text) <= 200 else text[:200] + "..."


def election_of(key: bytes) -> bytes | None:
    """The election a candidate key belongs to: the key up to its last '/'
    (``/election/export/694d7a...`` is in ``/election/export``); None for a
    key with no '/' inside it or ending in one (not a candidate)."""
    cut = key.rfind(b"/")
    if cut <= 0 or cut + 1 >= len(key):
        return None
    return key[:cut]


def _text(raw: bytes, limit: int) -> str | None:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if not 1 <= len(text) <= limit or any(ord(c) < 0x20 or ord(c) == 0x7F for c in text):
        return None
    return text


class Elections:
    """The candidates of every election under ``prefix``, and their leaders.

    ``max_keys`` bounds the candidate keys held (every key under the prefix
    that looks like a candidate): past it :class:`TooManyKeys` is raised,
    since dropping a key would misplace a leader."""

    def __init__(self, prefix: bytes, *, max_keys: int = 100_000) -> None:
        if not prefix:
            raise ValueError("the prefix must not be empty")
        if max_keys < 1:
            raise ValueError("max_keys must be at least 1")
        self.prefix = prefix
        self.max_keys = max_keys
        self._keys: dict[bytes, dict[bytes, KeyValue]] = {}
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def load(self, kvs: Iterable[KeyValue]) -> None:
        """Replace the state by a snapshot (a range of the prefix)."""
        self._keys.clear()
        self._count = 0
        for kv in kvs:
            self._put(kv)

    def leader(self, election: bytes) -> KeyValue | None:
        cands = self._keys.get(election)
        if not cands:
            return None
        return min(cands.values(), key=lambda kv: kv.create_revision)

    def leaders(self) -> list[tuple[bytes, KeyValue]]:
        """Each election's current leader, in key order."""
        out = []
        for election in sorted(self._keys):
            lead = self.leader(election)
            if lead is not None:
                out.append((election, lead))
        return out

    def snapshot_transitions(self, revision: int) -> list[Transition | Rejected]:
        """An acquisition for each current leader, positioned at ``revision``
        (a snapshot's: the moment the source saw it, at or after the real one)."""
        return [self._acquired(e, kv, revision, None) for e, kv in self.leaders()]

    def apply(self, revision: int, changes: Iterable[Change]) -> list[Transition | Rejected]:
        """Apply one revision's changes (a transaction's may be several) and
        return the leadership changes they made, at most one per election."""
        touched: dict[bytes, KeyValue | None] = {}
        batch = list(changes)
        for ch in batch:
            election = election_of(ch.kv.key)
            if election is not None and election not in touched:
                touched[election] = self.leader(election)
        for ch in batch:
            if ch.put:
                self._put(ch.kv)
            else:
                self._delete(ch.kv.key)
        out: list[Transition | Rejected] = []
        for election, before in touched.items():
            after = self.leader(election)
            if after is not None and (before is None or after.key != before.key):
                out.append(self._acquired(election, after, revision, before))
            elif after is None and before is not None:
                out.append(self._released(election, before, revision))
        return out

    # -- internals ---------------------------------------------------------

    def _put(self, kv: KeyValue) -> None:
        election = election_of(kv.key)
        if election is None:
            return
        cands = self._keys.setdefault(election, {})
        if kv.key not in cands:
            if self._count >= self.max_keys:
                raise TooManyKeys(
                    f"more than {self.max_keys} candidate keys under {_show(self.prefix)}"
                )
            self._count += 1
        # A value changed in place (an election's Proclaim) keeps the key's
        # create revision: the same epoch, still led by the same key.
        cands[kv.key] = kv

    def _delete(self, key: bytes) -> None:
        election = election_of(key)
        if election is None:
            return
        cands = self._keys.get(election)
        if cands is not None and cands.pop(key, None) is not None:
            self._count -= 1
            if not cands:
                del self._keys[election]

    def _identity(self, election: bytes, kv: KeyValue, revision: int) -> tuple[str, str] | Rejected:
        key = _show(kv.key)
        wkey = _text(election, MAX_KEY_CHARS)
        if wkey is None:
            return Rejected(
                key,
                "workflow_key",
                f"(the election name) must be 1-{MAX_KEY_CHARS} characters of UTF-8"
                " without control characters",
                revision,
            )
        worker = _text(kv.value, MAX_WORKER_CHARS)
        if worker is None:
            return Rejected(
                key,
                "worker_id",
                f"(the key's value) must be 1-{MAX_WORKER_CHARS} characters of UTF-8 without"
                f" control characters, got {len(kv.value)} bytes",
                revision,
            )
        return wkey, worker

    def _acquired(
        self, election: bytes, kv: KeyValue, revision: int, before: KeyValue | None
    ) -> Transition | Rejected:
        ident = self._identity(election, kv, revision)
        if isinstance(ident, Rejected):
            return ident
        prev_epoch = prev_worker = None
        if before is not None:
            prev_epoch = before.create_revision
            prev = self._identity(election, before, revision)
            prev_worker = None if isinstance(prev, Rejected) else prev[1]
        return Transition(
            True,
            ident[0],
            kv.create_revision,
            revision,
            ident[1],
            _show(kv.key),
            prev_epoch,
            prev_worker,
        )

    def _released(self, election: bytes, kv: KeyValue, revision: int) -> Transition | Rejected:
        ident = self._identity(election, kv, revision)
        if isinstance(ident, Rejected):
            return ident
        return Transition(False, ident[0], kv.create_revision, revision, ident[1], _show(kv.key))
