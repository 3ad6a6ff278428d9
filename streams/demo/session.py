"""What both demos share: run-unique topics and app id, a temporary
directory, the live processor as a child process, a clock for the story, and
the final read of the findings topic.

Output goes through the ``out`` callback the CLI passes in (only the CLI
prints). Every line of the story is prefixed with the time since the demo
started.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from streams.core.findings import Finding
from streams.demo import kafka_io
from streams.demo.expected import render_findings
from streams.demo.processes import Child, Children, free_port, is_ready, read_health
from streams.errors import DemoError, FencewatchError
from streams.kafka.connection import ENV_VARIABLES, KafkaConnection

__all__ = ["DemoError", "DemoSession", "DemoSettings", "Output"]

Output = Callable[[str], None]

# faust names a table's changelog "<app id>-<table name>-changelog" and keeps
# partition assignment in "<app id>-__assignor-__leader"; the table name is
# streams.live.faust.app.TABLE_NAME (not imported: that would load faust here).
_INTERNAL_TOPICS = ("{app}-owner-state-changelog", "{app}-__assignor-__leader")


@dataclass(frozen=True, slots=True)
class DemoSettings:
    """``timeout`` bounds each wait (processor start, all events committed);
    ``keep_topics`` leaves the run's topics on the broker for a later
    ``fencewatch audit --topic``."""

    connection: KafkaConnection
    timeout: float = 60.0
    partitions: int = 3
    keep_topics: bool = False
    commit_interval: float = 0.1

    def __post_init__(self) -> None:
        if self.timeout <= 0:
            raise ValueError(f"--timeout must be positive, got {self.timeout:g}")
        if self.partitions < 1:
            raise ValueError(f"partitions must be at least 1, got {self.partitions}")


class DemoSession:
    """One demo run. Use as a context manager: leaving it stops every child,
    deletes the run's topics (unless kept) and removes the temporary directory
    (kept, and named, when the demo failed)."""

    def __init__(self, settings: DemoSettings, name: str, out: Output) -> None:
        self.settings = settings
        self.out = out
        self.run_id = uuid.uuid4().hex[:8]
        prefix = f"fencewatch-demo-{self.run_id}"
        self.app_id = prefix
        self.events_topic = f"{prefix}.events"
        self.findings_topic = f"{prefix}.findings"
        self.dlq_topic = f"{prefix}.events.dlq"
        self.status_topic = f"{prefix}.status"
        self.tmp = Path(tempfile.mkdtemp(prefix=f"{prefix}-"))
        self.children = Children()
        self.processor: Child | None = None
        self.failed = True  # until the demo says otherwise
        self._t0 = time.monotonic()
        self.say(f"fencewatch demo {name} (run {self.run_id})")
        self.say(
            f"topics: {self.events_topic} -> {self.findings_topic} (dead letters: {self.dlq_topic})"
        )

    # -- the story ------------------------------------------------------

    def elapsed(self, at: float | None = None) -> float:
        return (time.monotonic() if at is None else at) - self._t0

    def say(self, text: str, *, at: float | None = None) -> None:
        self.out(f"{self.elapsed(at):+7.2f}s  {text}")

    def child_env(self) -> dict[str, str]:
        """The environment of a child process: this one's, with the demo's
        connection as its ``FENCEWATCH_*`` variables (the passwords go by
        environment, never on a command line)."""
        env = {k: v for k, v in os.environ.items() if k not in ENV_VARIABLES}
        env.update(self.settings.connection.to_env())
        return env

    # -- the live processor --------------------------------------------

    def start_processor(self) -> None:
        """Start ``fencewatch run`` on this run's topics and wait until it has
        its partitions (it creates the topics if they are missing)."""
        s = self.settings
        port = free_port()
        argv = [
            sys.executable,
            "-m",
            "streams",
            "run",
            "--create-topics",  # this run's own topics
            "--events-topic",
            self.events_topic,
            "--findings-topic",
            self.findings_topic,
            "--dlq-topic",
            self.dlq_topic,
            "--status-topic",
            self.status_topic,
            "--app-id",
            self.app_id,
            "--partitions",
            str(s.partitions),
            "--data-dir",
            str(self.tmp / "live"),
            "--commit-interval",
            str(s.commit_interval),
            "--metrics-port",
            str(port),
            "--log-level",
            "warning",
        ]
        self.say(f"starting the live processor (fencewatch run, app id {self.app_id})")
        self.processor = self.children.start(
            "processor",
            argv,
            log_path=self.tmp / "processor.log",
            env=self.child_env(),
            death_signal=signal.SIGTERM,
        )
        deadline = time.monotonic() + s.timeout
        while True:
            problem = self.processor_problem()
            if problem is not None:
                raise DemoError(problem)
            health = read_health(port)
            if health is not None and is_ready(health):
                break
            if time.monotonic() >= deadline:
                raise DemoError(
                    f"the live processor was not ready within {s.timeout:g} s; its log ends:\n"
                    + self.processor.tail()
                )
            time.sleep(0.2)
        self.say(f"live processor ready (partitions {', '.join(map(str, health['partitions']))})")

    def processor_problem(self) -> str | None:
        """Why the processor is not running, or None while it runs."""
        if self.processor is None:
            return "the live processor was not started"
        status = self.processor.poll()
        if status is None:
            return None
        return f"the live processor exited with status {status}; its log ends:\n" + (
            self.processor.tail()
        )

    def settled_findings(self) -> tuple[list[Finding], int]:
        """Wait until the processor has committed every event on the events
        topic, then read the findings topic (read_committed): the latest
        revision of each finding, and how many records (revisions) it held."""
        self.say("waiting for the processor to commit every event ...")
        try:
            end = kafka_io.wait_committed(
                self.settings.connection,
                self.app_id,
                self.events_topic,
                self.settings.timeout,
                alive=self.processor_problem,
            )
        except kafka_io.ProcessorStalled as exc:
            raise DemoError(f"{exc}\nprocessor log ends:\n{self._processor_tail()}") from None
        latest, revisions = kafka_io.latest_findings(self.settings.connection, self.findings_topic)
        self.say(
            f"all {sum(end.values())} events processed; {revisions} finding record"
            f"{'s' if revisions != 1 else ''} on {self.findings_topic}"
        )
        return latest, revisions

    def show_findings(self) -> list[Finding]:
        """:meth:`settled_findings`, told in the audit report's style."""
        findings, _ = self.settled_findings()
        self.out("")
        self.out(f"findings read from {self.findings_topic} (latest revision of each):")
        for line in render_findings(findings):
            self.out("  " + line)
        self.out("")
        return findings

    def conclude(self, findings: list[Finding], problems: list[str], expected: str) -> bool:
        """The verdict: ``problems`` plus a disagreement with an offline audit
        of the events topic make it a mismatch; otherwise say ``expected``."""
        if not self.audit_agrees(findings):
            problems = [*problems, "an audit of the events topic gives different findings"]
        if problems:
            self.out("NOT as expected: " + "; ".join(problems))
            return False
        self.failed = False
        self.out(expected)
        return True

    def audit_agrees(self, live: list[Finding]) -> bool:
        """Whether an audit of the events topic (the core detector, offline)
        gives exactly the live findings."""
        audit = kafka_io.audit_topic(self.settings.connection, self.events_topic)
        return audit == {f.finding_id: f.to_dict() for f in live}

    def dead_letters(self) -> int:
        return kafka_io.record_count(self.settings.connection, self.dlq_topic)

    def _processor_tail(self) -> str:
        return self.processor.tail() if self.processor is not None else ""

    # -- cleanup ----------------------------------------------------------

    def close(self) -> None:
        try:
            self.children.stop_all()
        finally:
            self._cleanup()

    def _cleanup(self) -> None:
        if self.settings.keep_topics:
            self.out(
                f"topics kept; replay them with: fencewatch audit --topic {self.events_topic} "
                f"--bootstrap-servers {self.settings.connection.bootstrap_servers}"
            )
        else:
            from streams.kafka.admin import TopicAdmin

            internal = [t.format(app=self.app_id) for t in _INTERNAL_TOPICS]
            try:
                TopicAdmin(self.settings.connection, timeout_s=15).delete(
                    [
                        self.events_topic,
                        self.findings_topic,
                        self.dlq_topic,
                        self.status_topic,
                        *internal,
                    ]
                )
            except FencewatchError as exc:
                self.out(f"warning: could not delete the demo's topics: {exc}")
        if self.failed:
            self.out(f"logs kept in {self.tmp}")
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self) -> DemoSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
