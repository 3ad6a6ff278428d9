"""One workflow's ownership timeline for the console: a bounded replay of
that key's events (only its partition of the events topic, only its
records, at most ``limit`` of them: the last ones), drawn by the HTML
report's timeline renderer with the findings the console holds for the key
(their health from the status record)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from streams.core.detector import Detector, DetectorConfig
from streams.core.findings import Evidence, Finding
from streams.core.health import Health
from streams.core.replay import Replay
from streams.kafka.connection import KafkaConnection
from streams.kafka.keyread import KeyRead, read_key

__all__ = ["DEFAULT_REPLAY_EVENTS", "DEFAULT_REPLAY_SCAN", "Timeline", "draw", "replay_key"]

#: Events of the key a replay keeps (the last ones).
DEFAULT_REPLAY_EVENTS = 2000
#: Records of each candidate partition a replay reads at most (the last ones).
DEFAULT_REPLAY_SCAN = 200_000


@dataclass(frozen=True, slots=True)
class Timeline:
    events: list[Evidence]
    read: KeyRead
    invalid: int
    limit: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "events": [e.to_dict() for e in self.events],
            "matched": self.read.matched,
            "kept": len(self.read.records),
            "limit": self.limit,
            "partitions": list(self.read.partitions),
            "scan_cut": self.read.scan_cut,
            "truncated": self.read.truncated,
            "invalid": self.invalid,
        }


def replay_key(
    connection: KafkaConnection,
    topic: str,
    key: str,
    *,
    limit: int,
    scan: int,
    max_bytes: int | None = None,
    max_seconds: float | None = None,
) -> Timeline:
    read = read_key(
        connection,
        topic,
        key.encode(),
        limit=limit,
        scan=scan,
        max_bytes=max_bytes,
        max_seconds=max_seconds,
    )
    replay = Replay(Detector(DetectorConfig(max_events_per_key=max(8, limit))))
    for rec in read.records:
        replay.feed(
            rec.value or b"", key=key.encode(), offset=rec.offset, source=f"{topic}/{rec.partition}"
        )
    state = replay.states.get(key)
    events = state.timeline() if state is not None else []
    return Timeline(events, read, replay.invalid_count, limit)


def draw(timeline: Timeline, findings: list[Finding], cleared: set[str]) -> str:
    """The report's timeline HTML (every event-derived string escaped by it)."""
    from streams.report.html import render_timeline

    health = {
        f.finding_id: Health(
            f.finding_id,
            f.workflow_key,
            "cleared" if f.finding_id in cleared else "open",
            None,
            None,
            None,
        )
        for f in findings
    }
    return render_timeline(timeline.events, findings, health)
