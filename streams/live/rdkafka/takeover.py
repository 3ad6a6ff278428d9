"""The rdkafka engine's takeover of a departed worker's partitions: fence the
previous owner's transactional id, so the transaction it left open is
aborted now instead of at the broker's transaction timeout.

Why. Each rdkafka worker has one transactional id of its own (its slot's,
:func:`~streams.live.rdkafka.engine.transactional_id`). A worker frozen (a GC
pause, a suspended VM) or killed keeps its transaction open on the output
partitions it wrote to, and read_committed readers see nothing past it there
until the broker aborts it: the transaction timeout plus up to the broker's
check interval (10 s each by default), so findings of the taken-over
partitions were visible 10 to 20 s after the survivor took them. The faust
engine never waited: its producers' transactional ids are per partition, so
the new owner's ``init_transactions`` fences the old producer and aborts its
transaction at once. This does the same for the rdkafka engine.

How. Every commit's offsets carry the committing worker's transactional id
as their metadata (:func:`owner_metadata`). On an assignment, the new owner
reads that metadata for its partitions (not "stable": a transaction that
commits offsets and hangs open is the case at hand) and asks the group
coordinator who the members are, both in a child process
(:mod:`streams.kafka.coordinator`: librdkafka issue 5040) (each rdkafka worker's consumer
``client.id`` is its transactional id), and calls ``init_transactions`` with
the id of every previous owner that is **not a member** (:func:`departed`).
The broker then bumps that id's epoch: its open transaction is aborted (or
one already committing completes first), and the old producer, if it ever
runs again, is fenced (librdkafka ``_FENCED``), which the engine already
handles by rejoining.

A previous owner still in the group is never fenced: under eager assignment
it committed or aborted its own transaction before it rejoined, and fencing
it would only cost it a rewind. A worker restarted in a departed worker's
slot (same transactional id) that has not joined the group yet may be fenced
once; it survives that as any fence (one line, a rejoin). Everything here is
best effort: a call that fails or times out leaves the broker's timeout to
do the abort, as before, with one log line saying so.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from streams.errors import BrokerError
from streams.kafka.clients import TransactionalProducer
from streams.kafka.connection import KafkaConnection
from streams.kafka.coordinator import committed_and_members

__all__ = [
    "OWNER_PREFIX",
    "DepartedOwners",
    "departed",
    "owner_metadata",
    "owner_of",
]

log = logging.getLogger(__name__)

#: Marks committed-offset metadata written by this engine (the faust engine
#: writes none; an operator's tools may write their own).
OWNER_PREFIX = "fencewatch-txn:"
#: Bound of each admin request and of each ``init_transactions`` here.
CALL_TIMEOUT_S = 10.0
#: Ids fenced and not seen in the group since are not fenced again (a
#: departed worker's metadata stays on a partition until its next commit);
#: past this many the memory is cleared and they may be fenced once more.
MAX_REMEMBERED = 1024


def owner_metadata(transactional_id: str) -> str:
    """The offsets' metadata naming the worker that commits them."""
    return OWNER_PREFIX + transactional_id


def owner_of(metadata: str | None) -> str | None:
    """The transactional id a committed offset's metadata names, if this
    engine wrote it."""
    if not metadata or not metadata.startswith(OWNER_PREFIX):
        return None
    owner = metadata[len(OWNER_PREFIX) :]
    return owner or None


def departed(
    owners: Mapping[int, str | None], members: Iterable[str], own: str
) -> dict[str, list[int]]:
    """The previous owners to fence, each with the partitions it last
    committed: named by the metadata, not this worker, not a member now."""
    present = set(members)
    out: dict[str, list[int]] = {}
    for partition, owner in sorted(owners.items()):
        if owner is None or owner == own or owner in present:
            continue
        out.setdefault(owner, []).append(partition)
    return out


class DepartedOwners:
    """Fences the departed previous owners of the partitions a worker is
    assigned (see the module's docstring), over ``connection``."""

    def __init__(
        self,
        connection: KafkaConnection,
        *,
        group: str,
        topic: str,
        own: str,
        transaction_timeout_ms: int,
    ) -> None:
        self.connection = connection
        self.group, self.topic, self.own = group, topic, own
        self._timeout_ms = transaction_timeout_ms
        #: Ids this worker fenced that have not been members since.
        self.fenced: set[str] = set()

    def lookup(self, partitions: list[int]) -> tuple[dict[int, str | None], set[str]]:
        """Who last committed each partition (its offsets' metadata), and the
        client ids of the group's members now: both asked in one child
        process (:mod:`streams.kafka.coordinator`: librdkafka issue 5040
        crashes the process that asks when the coordinator moves, which is
        when a takeover happens)."""
        offsets, group = committed_and_members(
            self.connection, self.group, self.topic, partitions, timeout_s=CALL_TIMEOUT_S
        )
        owners = {p: owner_of(c.metadata) for p, c in offsets.items()}
        return owners, set(group.client_ids)

    def fence(self, partitions: list[int]) -> list[str]:
        """Fence the departed previous owners of ``partitions``; the ids
        fenced. Never raises: a failure is one warning, and the broker's
        transaction timeout aborts what was left open, as without this."""
        if not partitions:
            return []
        try:
            owners, members = self.lookup(partitions)
        except BrokerError as exc:  # best effort
            log.warning(
                "could not look up the previous owners of partitions %s (%s); a departed "
                "owner's open transaction is left to the broker's transaction timeout",
                partitions,
                exc,
            )
            return []
        self.fenced -= members
        if len(self.fenced) >= MAX_REMEMBERED:
            self.fenced.clear()
        done: list[str] = []
        for owner, theirs in departed(owners, members, self.own).items():
            if owner in self.fenced:
                continue
            if self._init(owner, theirs):
                self.fenced.add(owner)
                done.append(owner)
        return done

    def _init(self, owner: str, partitions: list[int]) -> bool:
        try:
            TransactionalProducer(
                self.connection,
                owner,
                settings={"transaction.timeout.ms": self._timeout_ms},
                op_timeout_s=CALL_TIMEOUT_S,
            ).init()
        except BrokerError as exc:  # best effort
            log.warning(
                "could not fence transactional id %s, the previous owner of partitions %s "
                "(%s); its open transaction, if any, ends at the broker's transaction timeout",
                owner,
                partitions,
                exc,
            )
            return False
        log.info(
            "fenced transactional id %s, which last committed partitions %s and is no "
            "longer in group %s (a paused, cut-off or dead worker): its open transaction, "
            "if any, is aborted now rather than at the broker's transaction timeout",
            owner,
            partitions,
            self.group,
        )
        return True
