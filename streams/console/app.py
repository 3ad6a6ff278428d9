"""The console assembled: followers, view, server and the two Kafka actions
(replay and verification), started and stopped together."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from streams.console.auth import Auth
from streams.console.follow import (
    Follower,
    findings_follower,
    processor_follower,
    status_follower,
)
from streams.console.hosting import ConsoleServer
from streams.console.limits import ServerLimits
from streams.console.metrics import ConsoleMetrics
from streams.console.processor import DEFAULT_EVERY_S, ProcessorWatch
from streams.console.server import Console
from streams.console.sessions import Sessions
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

__all__ = ["REPLAY_CONSUMER", "ConsoleApp", "ConsoleSettings"]

#: librdkafka settings of a replay's consumer: its prefetch is bounded (the
#: defaults queue up to 64 MiB per consumer, which 40 concurrent timelines
#: turned into 2.3 GB). They win over --kafka-config: they are the console's
#: memory bound, not a tuning choice.
REPLAY_CONSUMER = {
    "queued.max.messages.kbytes": "4096",
    "fetch.max.bytes": "4194304",
    "max.partition.fetch.bytes": "1048576",
}


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
    limits: ServerLimits = field(default_factory=ServerLimits)
    #: The processor's consumer group (its app id, FENCEWATCH_APP_ID), whose
    #: committed offsets say whether it makes progress.
    processor_group: str = "fencewatch-live"
    #: Seconds a partition with lag may go without a commit before the
    #: console says the processor is stalled (the worker's own default).
    stall_after: float = 60.0
    #: Seconds between two looks at the processor's offsets.
    processor_every_s: float = DEFAULT_EVERY_S


class ConsoleApp:
    """Binds the port at construction (an OSError names a taken port);
    :meth:`start` starts the followers and serves from a thread."""

    def __init__(self, settings: ConsoleSettings) -> None:
        self.settings = s = settings
        self.view = ConsoleView(s.max_workflows)
        self.metrics = ConsoleMetrics()
        self.processor = ProcessorWatch(s.processor_group, s.stall_after)
        self.followers: list[Follower] = [
            status_follower(s.connection, s.status_topic, self.view, self.metrics),
            findings_follower(s.connection, s.findings_topic, self.view, self.metrics),
            processor_follower(
                s.connection, s.events_topic, self.processor, self.metrics, s.processor_every_s
            ),
        ]
        lim = s.limits
        auth = Auth(s.token, Sessions(lim.session_ttl_s, lim.max_sessions))
        self._replay_connection = replace(
            s.connection, extra={**s.connection.extra, **REPLAY_CONSUMER}
        )
        console = Console(
            self.view,
            auth,
            self.metrics,
            self._replay,
            self._verify,
            self._errors,
            self.processor,
        )
        self.server = ConsoleServer((s.host, s.port), console, lim)

    @property
    def url(self) -> str:
        return self.server.url

    def _errors(self) -> list[str]:
        out = [f"lost {f.what}: {f.error} (retrying)" for f in self.followers if f.error]
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
            self._replay_connection,
            s.events_topic,
            key,
            limit=s.replay_events,
            scan=s.replay_scan,
            max_bytes=s.limits.replay_bytes,
            max_seconds=s.limits.replay_s,
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
        self.server.stop()
        for f in self.followers:
            f.stop()
