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
    │   ├── LeaseUnpublished *          (streams.fences.lease: carries the Lease)
    │   └── PartitionsChanged *         (streams.live.partitions: carries the change)
    ├── StoreError                      a lease-store or sink database failed
    │   └── StoreUnavailable
    ├── EffectRefused, LeaseHeld, LeaseLost, StaleOwner   the fences' refusals
    ├── CommitFailed, TooManyFindings, StatusTopicError   reading findings and status
    ├── DeliveryFailed                  handing a finding to a hook
    ├── NoCurrentEpoch                  fencewatch verify: no current epoch known
    ├── WorkerCrashed                   the live worker stopped on an error
    ├── DemoError                       a demo could not run to its end
    └── MissingExtra * (ModuleNotFoundError)   (streams.extras: an extra not installed)

``*``: defined in the module named, next to what it carries (a Lease, a
partition change, the extras table); every other error is defined here and
re-exported where it is raised.
``__all__`` is the public part (``fencewatch`` exports each); InvalidSpan,
MigrationError, NoCurrentEpoch, StatusTopicError, UnknownEffect,
WorkerCrashed and DemoError are the commands' and adapters' own, defined here
with the family but not public API.
"""

from __future__ import annotations

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
