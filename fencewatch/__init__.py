"""fencewatch: stale-owner (split-brain) detection and fencing for agents.

The public import name. ``streams`` is the implementation package; everything
here is re-exported from it, and only what is listed in ``__all__`` is the
supported API::

    import fencewatch

    with fencewatch.OwnershipReporter(fencewatch.ReporterSettings("kafka:9092", "w1")) as r:
        r.progress("tenant/export/2026-07-26", epoch=18)

See docs/sdk.md (the SDK and fences) and docs/operate.md (findings consumer).
"""

from __future__ import annotations

from streams import __version__  # one version: the installed package metadata's
from streams.core.findings import Evidence, Finding
from streams.core.records import Event, EventType, Kind, Severity
from streams.errors import (
    AuthenticationFailed,
    AuthorizationFailed,
    BrokerError,
    BrokerUnreachable,
    ConfigError,
    EffectRefused,
    FencewatchError,
    InvalidEvent,
    LeaseHeld,
    LeaseLost,
    ProducerFenced,
    StaleOwner,
    StateError,
    StoreError,
    StoreUnavailable,
    StoreURLError,
    TopicMissing,
)
from streams.extras import MissingExtra
from streams.fences import (
    AppliedEffect,
    Database,
    EffectSink,
    EventPublisher,
    FencedSink,
    Lease,
    LeaseStore,
    LeaseUnpublished,
    Promotion,
    Receipt,
    SqlLeaseStore,
    StagedSink,
    Stamp,
    UnfencedSink,
    open_database,
)
from streams.fences.outbox import (
    EffectApplier,
    InvalidEffectMessage,
    Outbox,
    OutboxProducer,
    OutboxSettings,
)
from streams.findings import (
    FROM_BEGINNING,
    ONLY_NEW,
    CommitFailed,
    DeadLetterFile,
    Delivery,
    DeliveryFailed,
    ExecTarget,
    FindingFilter,
    FindingsConsumer,
    FindingsSettings,
    HookSender,
    NotAFinding,
    RetryPolicy,
    Since,
    TooManyFindings,
    WebhookTarget,
)
from streams.kafka.connection import KafkaConnection
from streams.sdk import (
    EffectBoundary,
    EffectOutcome,
    Owner,
    OwnershipReporter,
    Report,
    ReporterSettings,
    ReporterStats,
    Risk,
)

#: Deprecated: the old name of :class:`ConfigError` (the same class), kept
#: for existing imports; catch ``ConfigError``.
SettingsError = ConfigError

__all__ = [
    "FROM_BEGINNING",
    "ONLY_NEW",
    "AppliedEffect",
    "AuthenticationFailed",
    "AuthorizationFailed",
    "BrokerError",
    "BrokerUnreachable",
    "CommitFailed",
    "ConfigError",
    "Database",
    "DeadLetterFile",
    "Delivery",
    "DeliveryFailed",
    "EffectApplier",
    "EffectBoundary",
    "EffectOutcome",
    "EffectRefused",
    "EffectSink",
    "Event",
    "EventPublisher",
    "EventType",
    "Evidence",
    "ExecTarget",
    "FencedSink",
    "FencewatchError",
    "Finding",
    "FindingFilter",
    "FindingsConsumer",
    "FindingsSettings",
    "HookSender",
    "InvalidEffectMessage",
    "InvalidEvent",
    "KafkaConnection",
    "Kind",
    "Lease",
    "LeaseHeld",
    "LeaseLost",
    "LeaseStore",
    "LeaseUnpublished",
    "MissingExtra",
    "NotAFinding",
    "Outbox",
    "OutboxProducer",
    "OutboxSettings",
    "Owner",
    "OwnershipReporter",
    "ProducerFenced",
    "Promotion",
    "Receipt",
    "Report",
    "ReporterSettings",
    "ReporterStats",
    "RetryPolicy",
    "Risk",
    "SettingsError",
    "Severity",
    "Since",
    "SqlLeaseStore",
    "StagedSink",
    "StaleOwner",
    "Stamp",
    "StateError",
    "StoreError",
    "StoreURLError",
    "StoreUnavailable",
    "TooManyFindings",
    "TopicMissing",
    "UnfencedSink",
    "WebhookTarget",
    "__version__",
    "open_database",
]
