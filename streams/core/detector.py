"""The detector state machine (SPEC §3-4). Implementation in progress."""

from __future__ import annotations

from dataclasses import dataclass

from streams.core.findings import Finding
from streams.core.records import Event

__all__ = ["DEFAULT_MAX_EVENTS_PER_KEY", "Detector", "DetectorConfig", "KeyState"]

DEFAULT_MAX_EVENTS_PER_KEY = 1024


@dataclass(frozen=True, slots=True)
class DetectorConfig:
    max_events_per_key: int = DEFAULT_MAX_EVENTS_PER_KEY


class KeyState:
    """All the detector knows about one workflow key."""

    def to_bytes(self) -> bytes:
        raise NotImplementedError

    @classmethod
    def from_bytes(cls, data: bytes) -> KeyState:
        raise NotImplementedError


class Detector:
    def __init__(self, config: DetectorConfig | None = None) -> None:
        self.config = config or DetectorConfig()

    def new_state(self) -> KeyState:
        return KeyState()

    def process(self, state: KeyState, event: Event, offset: int) -> list[Finding]:
        """Apply ``event`` (arrived at ``offset``) to ``state`` in place; return
        the finding records whose content changed (new, or revision + 1)."""
        raise NotImplementedError
