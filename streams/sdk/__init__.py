"""The agent SDK: report ownership evidence (lease transitions, progress,
effect boundaries) to Kafka, stamped with the lease store's authoritative seq.

See docs/sdk.md and examples/agent_worker.py.
"""

from __future__ import annotations

from streams.sdk.owner import RISKS, EffectOutcome, Owner, Risk
from streams.sdk.reporter import (
    EffectBoundary,
    OwnershipReporter,
    Report,
    ReporterSettings,
    ReporterStats,
)

__all__ = [
    "RISKS",
    "EffectBoundary",
    "EffectOutcome",
    "Owner",
    "OwnershipReporter",
    "Report",
    "ReporterSettings",
    "ReporterStats",
    "Risk",
]
