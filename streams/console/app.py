"""The console assembled: followers, view, server and the two Kafka actions
(replay and verification), started and stopped together."""

from __future__ import annotations

from dataclasses import dataclass

from streams.console.auth import Auth
from streams.console.follow import Follower, findings_follower, status_follower
from streams.console.metrics import ConsoleMetrics
from streams.console.server import Console, ConsoleServer
from streams.console.timeline import (
    DEFAULT_REPLAY_EVENTS,
    DEFAULT_REPLAY_SCAN,
    Timeline,
    replay_key,
)
from streams.console.view import DEFAULT_MAX_WORKFLOWS, ConsoleView
from streams.kafka.connection import KafkaConnection
from streams.kafka.topics import (
    DEFAULT_EVENTS_TOPIC,
    DEFAULT_FINDINGS_TOPIC,
    DEFAULT_STATUS_TOPIC,
)

__all__ = ["ConsoleApp", "ConsoleSettings"]


@dataclass(frozen=True, slots=True)
class ConsoleSettings:
    connection: KafkaConnection
    host: str = "127.0.0.1"
    port: int = 8765
    token: str | None = None
    events_topic: str = DEFAULT_EVENTS_TOPIC
    findings_topic: str = DEFAULT_FINDINGS_TOPIC
    status_topic: str = DEFAULT_STATUS_TOPIC
    replay_events: int = DEFAULT_REPLAY_EVENTS
    replay_scan: int = DEFAULT_REPLAY_SCAN
    max_workflows: int = DEFAULT_MAX_WORKFLOWS


class ConsoleApp:
    """Binds the port at construction (an OSError names a taken port);
    :meth:`start` starts the followers and serves from a thread."""

    def __init__(self, settings: ConsoleSettings) -> None:
        self.settings = s = settings
        self.view = ConsoleView(s.max_workflows)
        self.metrics = ConsoleMetrics()
        self.followers: list[Follower] = [
            status_follower(s.connection, s.status_topic, self.view, self.metrics),
            findings_follower(s.connection, s.findings_topic, self.view, self.metrics),
        ]
        console = Console(
            self.view, Auth(s.token), self.metrics, self._replay, self._verify, self._errors
        )
        self.server = ConsoleServer((s.host, s.port), console)

    @property
    def url(self) -> str:
        return self.server.url

    def _errors(self) -> list[str]:
        out = [f"lost the {f.name} topic: {f.error} (retrying)" for f in self.followers if f.error]
        if self.view.refused:
            out.append(
                f"{self.view.refused:,} workflows not shown: the view holds at most "
                f"{self.view.max_workflows:,} (--max-workflows)"
            )
        if self.view.invalid:
            out.append(f"{self.view.invalid:,} records skipped; last: {self.view.last_invalid}")
        return out

    def _replay(self, key: str) -> Timeline:
        s = self.settings
        return replay_key(
            s.connection, s.events_topic, key, limit=s.replay_events, scan=s.replay_scan
        )

    def _verify(self, key: str, effect: str, by: str, epoch: int, note: str | None) -> str:
        from streams.findings.verify import build_verification, publish_verification

        event = build_verification(key, effect, by, epoch, note=note)
        publish_verification(self.settings.connection, event, self.settings.events_topic)
        assert event.event_id is not None
        return event.event_id

    def start(self) -> None:
        for f in self.followers:
            f.start()
        self.server.start()

    def serve_forever(self) -> None:
        for f in self.followers:
            f.start()
        self.server.serve_forever()

    def stop(self) -> None:
        if self.server._thread is not None:
            self.server.stop()
        else:
            self.server.server_close()
        for f in self.followers:
            f.stop()
