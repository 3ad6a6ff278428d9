"""fencewatch's error family: the one module that lists it (httpx's
``_exceptions.py`` is the model).

Client libraries raise their own exceptions (confluent_kafka.KafkaException,
aiokafka errors, sqlite3/psycopg errors); adapters translate them into these
at the boundary (Kafka: :func:`streams.kafka.errors.kafka_errors`, one
mapping) so the CLI and the processor handle one family of errors. The base,
:class:`FencewatchError`, and the pure core's errors live in
:mod:`streams.core.errors` (the core may not import adapters) and are
re-exported here. Every error round-trips through pickle (tests/sdk/test_public_errors.py).

::

    FencewatchError
    ├── ConfigError (ValueError)        a setting missing or out of range
    │   └── StoreURLError               a fences database URL no store supports
    ├── InvalidEvent (ValueError)       an event that breaks the contract
    ├── StateError (ValueError)         detector state that cannot be decoded
    ├── NotAFinding (ValueError)        a findings-topic record that is not a finding
    ├── InvalidEffectMessage (ValueError)  an effects-topic message without our headers
    ├── InvalidSpan (ValueError)        a span that cannot be evidence (OTLP)
    ├── UnknownEffect (ValueError)      fencewatch verify: no evidence of the effect
    ├── BrokerError                     a Kafka operation failed (code, retriable)
    │   ├── BrokerUnreachable
    │   ├── AuthenticationFailed
    │   ├── AuthorizationFailed
    │   ├── TopicMissing
    │   ├── ProducerFenced
    │   ├── MigrationError              fencewatch migrate cannot run
    │   ├── LeaseUnpublished            a lease held, its evidence not published
    │   └── PartitionsChanged           the live engine refuses a changed partition count
    ├── StoreError                      a lease-store or sink database failed
    │   └── StoreUnavailable
    ├── EffectRefused, LeaseHeld, LeaseLost, StaleOwner   the fences' refusals
    ├── CommitFailed, TooManyFindings, StatusTopicError   reading findings and status
    ├── DeliveryFailed                  handing a finding to a hook
    ├── NoCurrentEpoch                  fencewatch verify: no current epoch known
    ├── WorkerCrashed                   the live worker stopped on an error
    ├── DemoError                       a demo could not run to its end
    ├── ProcessorStalled                a demo's processor did not commit in time
    ├── StrictStop, Interrupted         a file audit stopped (--strict; Ctrl-C)
    ├── WorkerDied                      a sharded audit's worker ended without a result
    ├── MergeRefused                    shard reports that do not merge into one
    ├── FaustSeamMismatch               faust/aiokafka are not the code the seam was checked against
    ├── TransactionUnavailable          the faust engine's transactions (these three
    ├── TransactionFenced               are defined in streams.kafka.errors)
    │   └── ProducerFailed
    └── MissingExtra (ModuleNotFoundError)   an optional extra not installed

Every error is defined here, but the faust engine's transaction errors, which
are defined in :mod:`streams.kafka.errors`; each is re-exported where it is
raised (``streams.extras.MissingExtra``, ``streams.fences.lease.LeaseUnpublished``,
``streams.live.partitions.PartitionsChanged``...), so those imports keep working.
``__all__`` is the public part (``fencewatch`` exports each); InvalidSpan,
MigrationError, NoCurrentEpoch, StatusTopicError, UnknownEffect,
WorkerCrashed, DemoError, ProcessorStalled, StrictStop, Interrupted,
PartitionsChanged, FaustSeamMismatch, WorkerDied, MergeRefused, EtcdCompacted
and TooManyKeys are the
commands' and adapters' own, defined here with the family but not public API.
"""

from __future__ import annotations

from typing import Any

from streams.core.errors import ConfigError, FencewatchError, InvalidEvent, StateError

__all__ = [
    "AuthenticationFailed",
    "AuthorizationFailed",
    "BrokerError",
    "BrokerUnreachable",
    "CommitFailed",
    "ConfigError",
    "DeliveryFailed",
    "EffectRefused",
    "FencewatchError",
    "InvalidEffectMessage",
    "InvalidEvent",
    "LeaseHeld",
    "LeaseLost",
    "LeaseUnpublished",
    "MissingExtra",
    "NotAFinding",
    "ProducerFenced",
    "StaleOwner",
    "StateError",
    "StoreError",
    "StoreURLError",
    "StoreUnavailable",
    "TooManyFindings",
    "TopicMissing",
]


class _FieldsError(FencewatchError):
    """An error whose ``args`` are its constructor's arguments (its fields)
    and whose ``str`` is its message. So ``type(e)(*e.args)`` rebuilds it:
    what Celery does with an exception stored by its JSON result backend
    (``exc_message`` is ``e.args``), where a message-only ``args`` made
    ``StaleOwner(message)`` fail and the caller got a bare ``Exception``."""

    def __init__(self, message: str, *fields: object) -> None:
        super().__init__(*fields)
        self._message = message

    def __str__(self) -> str:
        return self._message


class BrokerError(FencewatchError):
    """A Kafka operation failed (unreachable broker, rejected request, timeout).

    ``code`` is the client's error name (e.g. ``"_TRANSPORT"``,
    ``"TOPIC_AUTHORIZATION_FAILED"``, ``"TIMEOUT"``) so callers can branch on
    it without importing the client library; ``retriable`` says whether the
    same call may succeed later.
    """

    def __init__(self, message: str, *, code: str = "UNKNOWN", retriable: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.retriable = retriable


class BrokerUnreachable(BrokerError):
    """No broker could be reached (refused, unknown host, timed out)."""


class AuthenticationFailed(BrokerError):
    """The brokers refused the credentials (SASL) or the TLS handshake."""


class AuthorizationFailed(BrokerError):
    """Authenticated, but an ACL forbids the operation."""


class TopicMissing(BrokerError):
    """The topic or partition does not exist."""


class ProducerFenced(BrokerError):
    """A newer producer with this transactional id fenced this one."""


class StoreError(FencewatchError):
    """A coordination-store or sink database operation failed (sqlite3/psycopg
    errors, translated at the boundary). ``retriable`` is true for lock
    timeouts, serialization failures and lost connections."""

    def __init__(self, message: str, *, retriable: bool = False) -> None:
        super().__init__(message)
        self.retriable = retriable


class StoreURLError(_FieldsError, ConfigError):
    """A fences database URL that no store supports (an unknown scheme, a
    malformed ``sqlite:`` URL, a SQLite file in a directory that does not
    exist). ``url`` is the URL with any password masked (the caller masks
    it: ``streams.fences.connect.mask_url``); ``reason`` says what is wrong
    and which forms are accepted."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"store URL {url!r}: {reason}", url, reason)
        self.url = url
        self.reason = reason


class StoreUnavailable(StoreError):
    """The store could not be reached or did not answer within its bounded
    timeout (connection refused or lost, connect or statement timeout, a lock
    wait past the busy timeout). Always retriable: the same call may succeed
    once the store answers again."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retriable=True)


class EffectRefused(_FieldsError):
    """The SDK refused an effect before attempting it: nothing reached the
    destination. ``reason`` is ``store_unavailable`` (an ``irreversible``
    effect whose epoch the lease store could not confirm) or
    ``deferred_queue_full`` (a ``deferrable`` effect past the owner's bound);
    ``detail`` names the underlying cause. ``evidence_error`` is the error
    that kept the refusal's evidence from Kafka too, if any."""

    def __init__(
        self,
        key: str,
        epoch: int,
        effect_key: str,
        risk: str,
        reason: str,
        detail: str,
        *,
        evidence_error: FencewatchError | None = None,
    ) -> None:
        super().__init__(
            f"{risk} effect {effect_key!r} of {key!r} at epoch {epoch} was not attempted:"
            f" {reason} ({detail})",
            key,
            epoch,
            effect_key,
            risk,
            reason,
            detail,
        )
        self.key = key
        self.epoch = epoch
        self.effect_key = effect_key
        self.risk = risk
        self.reason = reason
        self.detail = detail
        self.evidence_error = evidence_error


class LeaseHeld(_FieldsError):
    """Another worker holds an unexpired lease on the workflow key."""

    def __init__(self, key: str, holder: str, epoch: int, expires_at: float) -> None:
        super().__init__(
            f"{key!r} is held by {holder!r} at epoch {epoch}", key, holder, epoch, expires_at
        )
        self.key = key
        self.holder = holder
        self.epoch = epoch
        self.expires_at = expires_at


class LeaseLost(_FieldsError):
    """The lease can no longer be renewed: expired by the store's clock,
    released, or displaced by a higher epoch (``current_epoch``)."""

    def __init__(self, key: str, epoch: int, current_epoch: int, reason: str) -> None:
        super().__init__(
            f"lease on {key!r} at epoch {epoch} is lost: {reason}",
            key,
            epoch,
            current_epoch,
            reason,
        )
        self.key = key
        self.epoch = epoch
        self.current_epoch = current_epoch
        self.reason = reason


class StaleOwner(_FieldsError):
    """A displaced owner tried to act: its epoch is no longer current, or its
    Kafka transactional producer was fenced by a newer owner's producer."""

    def __init__(self, key: str, epoch: int, current_epoch: int | None, reason: str) -> None:
        super().__init__(
            f"stale owner of {key!r} at epoch {epoch}: {reason}", key, epoch, current_epoch, reason
        )
        self.key = key
        self.epoch = epoch
        self.current_epoch = current_epoch
        self.reason = reason


class CommitFailed(FencewatchError):
    """The group's position could not be stored at close (the broker did not
    answer in the connect timeout): nothing is lost, but a restart repeats."""


class TooManyFindings(FencewatchError):
    """A bounded read found more distinct findings than it may hold."""


class NotAFinding(FencewatchError, ValueError):
    """A record of the findings topic that does not decode as a finding."""


class DeliveryFailed(FencewatchError):
    """One attempt to hand a finding to a hook failed; ``retriable`` says
    whether another attempt may succeed."""

    def __init__(self, message: str, *, retriable: bool) -> None:
        super().__init__(message)
        self.retriable = retriable


class StatusTopicError(FencewatchError):
    """The status topic holds records that are not status records, or too many."""


class InvalidEffectMessage(FencewatchError, ValueError):
    """An effects-topic message without valid fencewatch headers."""


class MigrationError(BrokerError):
    """The migration cannot run (or stopped): one line naming why."""


class WorkerCrashed(FencewatchError):
    """The worker stopped on an error (e.g. the state store's disk is full);
    the message is one line naming the cause, the log has the details."""


class DemoError(FencewatchError):
    """The demo could not run to its end (processor down, timeout, ...)."""


class NoCurrentEpoch(FencewatchError):
    """The status topic knows no current epoch for the workflow."""


class UnknownEffect(FencewatchError, ValueError):
    """The events topic holds no evidence of the effect for the workflow (a typo?)."""


class InvalidSpan(FencewatchError, ValueError):
    """A span (or an OTLP line) that cannot be evidence; ``attribute`` names
    the culprit when one attribute is at fault."""

    def __init__(self, attribute: str | None, reason: str) -> None:
        self.attribute = attribute
        self.reason = reason
        super().__init__(f"{attribute}: {reason}" if attribute else reason)


class LeaseUnpublished(BrokerError):
    """The lease was granted but its ``lease_acquired`` event could not be
    published: the lease (``lease``) is still held, so the caller can publish
    the evidence again or release it. Message, ``code`` and ``retriable`` are
    the publisher's :class:`~streams.errors.BrokerError` (``__cause__``).
    ``lease`` is a :class:`streams.fences.lease.Lease` (typed loosely: this
    module imports nothing above the core)."""

    def __init__(self, lease: Any, cause: BrokerError) -> None:
        super().__init__(str(cause), code=cause.code, retriable=cause.retriable)
        self.lease = lease


class PartitionsChanged(BrokerError):
    """The engine refuses to consume: the events topic's partitions changed.
    ``change`` is a :class:`streams.live.partitions.PartitionChange`."""

    def __init__(self, change: Any) -> None:
        super().__init__(change.message(), code="PARTITIONS_CHANGED")
        self.change = change


class MissingExtra(FencewatchError, ModuleNotFoundError):
    """An optional dependency is not installed; the message names the extra.

    A ``ModuleNotFoundError`` still, so code that already tolerates a missing
    module keeps working."""

    def __init__(self, extra: str, module: str | None) -> None:
        super().__init__(
            f"needs the {extra} extra: pip install 'fencewatch[{extra}]'"
            f" (no module named {module!r})",
            name=module,
        )
        self.extra = extra

    def __reduce__(self) -> tuple[type[MissingExtra], tuple[str, str | None]]:
        # Exceptions pickle their ``args``; this one's constructor takes two.
        return (type(self), (self.extra, self.name))


class StrictStop(FencewatchError):
    """First invalid record under --strict (``inputs``: the files read so far,
    :class:`streams.audit.files.Input`)."""

    def __init__(self, inputs: list[Any] | None = None) -> None:
        super().__init__()
        self.inputs = inputs or []


class Interrupted(FencewatchError):
    """Ctrl-C while reading a file: the replay stops between two records."""


class ProcessorStalled(FencewatchError):
    """The processor did not commit all events within the wait."""


class FaustSeamMismatch(FencewatchError):
    """The installed faust-streaming/aiokafka are not the code the seam was
    checked against."""


class WorkerDied(FencewatchError):
    """A worker process ended without a result (killed)."""


class MergeRefused(FencewatchError):
    """Shard reports that do not merge into one report (the message says why)."""


class EtcdCompacted(StoreError):
    """The etcd revision asked for is older than etcd's compaction point (the
    etcd source resyncs from a snapshot: docs/integrations.md)."""

    def __init__(self, revision: int, compact_revision: int) -> None:
        kept = f" (history kept from {compact_revision})" if compact_revision else ""
        super().__init__(f"etcd compacted revision {revision} away{kept}")
        self.revision = revision
        self.compact_revision = compact_revision


class TooManyKeys(FencewatchError, ValueError):
    """The etcd prefix holds more candidate keys than the source may track
    (``--max-keys``)."""
