"""Findings on a real topic: the reference fixture's revisions, and many
synthetic ones for the follower tests."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path

import msgspec
import pytest

from streams.core.findings import Finding
from streams.core.replay import Replay

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "examples" / "reference.jsonl"


def fixture_findings() -> list[Finding]:
    """Every finding revision of the SPEC §5 fixture, in emission order
    (stale_attempt is emitted twice: revision 1, then 2)."""
    r = Replay()
    out: list[Finding] = []
    for i, line in enumerate(FIXTURE.read_bytes().splitlines(), start=1):
        if line.strip():
            out.extend(r.feed(line, offset=i, source="fixture"))
    return out


def synthetic_findings(n: int, revisions: int = 2) -> list[Finding]:
    """``n`` distinct findings (ids f-00000...), each emitted ``revisions``
    times with increasing revision, revision r of every id before r + 1."""
    base = fixture_findings()[0]
    out = []
    for r in range(1, revisions + 1):
        for i in range(n):
            out.append(
                msgspec.structs.replace(
                    base, finding_id=f"f-{i:05d}", revision=r, workflow_key=f"wf-{i % 50:03d}"
                )
            )
    return out


def produce_findings(bootstrap: str, topic: str, findings: Iterable[Finding]) -> None:
    """Produce each finding keyed by its workflow key (as the processor does)."""
    from confluent_kafka import Producer

    # Idempotent: the order within a partition is what these tests check (a
    # revision read after a newer one of its finding is skipped), and a plain
    # producer may reorder a partition's batches when one is retried (a new
    # topic's leader not ready yet on a loaded host): the older revisions
    # then land after the newer ones and are never delivered.
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    for f in findings:
        while True:
            try:
                p.produce(topic, f.to_json(), key=f.workflow_key.encode())
                break
            except BufferError:
                p.poll(0.1)
    assert p.flush(30) == 0


def produce_raw(bootstrap: str, topic: str, values: Iterable[bytes]) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for v in values:
        p.produce(topic, v)
    assert p.flush(30) == 0


def fixture_event_lines() -> list[bytes]:
    return [ln for ln in FIXTURE.read_bytes().splitlines() if ln.strip()]


@pytest.fixture
def findings_topic(kafka_bootstrap: str, unique_topic: Callable[..., str]) -> Callable[..., str]:
    """Factory: a fresh topic holding ``findings`` (default: the fixture's)."""

    def make(findings: Iterable[Finding] | None = None, partitions: int = 3) -> str:
        topic = unique_topic(partitions, prefix="findings")
        produce_findings(
            kafka_bootstrap, topic, fixture_findings() if findings is None else findings
        )
        return topic

    return make


def jsonl(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]
