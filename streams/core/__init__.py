"""The pure core: records, validation, the detector state machine, the health view.

Imports no Kafka client, Faust, asyncio, clock or environment; a test proves it.
"""

from __future__ import annotations

from streams.core.detector import DEFAULT_MAX_EVENTS_PER_KEY, Detector, DetectorConfig, KeyState
from streams.core.errors import ConfigError, FencewatchError, InvalidEvent, StateError
from streams.core.findings import ACTIONS, Evidence, Finding, finding_id
from streams.core.health import Health, assess
from streams.core.records import (
    SEVERITY_RANK,
    Event,
    EventType,
    Kind,
    Severity,
    event_to_dict,
)
from streams.core.validate import DEFAULT_MAX_EVENT_BYTES, parse_event, to_event

__all__ = [
    "ACTIONS",
    "DEFAULT_MAX_EVENTS_PER_KEY",
    "DEFAULT_MAX_EVENT_BYTES",
    "SEVERITY_RANK",
    "ConfigError",
    "Detector",
    "DetectorConfig",
    "Event",
    "EventType",
    "Evidence",
    "FencewatchError",
    "Finding",
    "Health",
    "InvalidEvent",
    "KeyState",
    "Kind",
    "Severity",
    "StateError",
    "assess",
    "event_to_dict",
    "finding_id",
    "parse_event",
    "to_event",
]
