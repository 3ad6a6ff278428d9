"""The two engines of ``fencewatch run`` against each other: the same input
gives the same findings and status, and a deployment switches engine by
restarting without losing or repeating anything."""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from typing import Any

import pytest

from tests.live.test_live_kafka import assert_exactly_once_and_audit, assert_status_equals_audit

pytestmark = pytest.mark.kafka

Live = Callable[..., Any]
#: The restore line of either engine (faust's fast restore, rdkafka's).
RESTORED = re.compile(r"(?:loaded|restored) (\d+) changelog records")


def _without_offsets(findings: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Findings with their arrival fields dropped (offsets differ by run)."""
    out = {}
    for fid, doc in findings.items():
        d = dict(doc)
        d.pop("event_offset", None)
        d["evidence"] = [{k: v for k, v in e.items() if k != "offset"} for e in d["evidence"]]
        out[fid] = d
    return out


@pytest.mark.timeout(150)
def test_both_engines_give_the_same_findings_and_status_for_the_same_shuffled_input(
    live: Live,
) -> None:
    """The same shuffled input (keys interleaved at random, some events late)
    through a faust and an rdkafka worker gives the same latest findings and
    the same status topic (offsets and Kafka timestamps aside), each exactly
    once and equal to the audit."""
    from streams.core.status import WorkflowStatus

    events = live(partitions=3).scenario_events(n_keys=250, epochs=4, seed=23)
    random.Random(3).shuffle(events)  # per-key order too: positions come from seq
    results = {}
    workers = {}
    harnesses = {}
    for engine in ("faust", "rdkafka"):
        h = harnesses[engine] = live(partitions=3, engine=engine)
        workers[engine] = h.start(f"diff-{engine}")
    for engine, h in harnesses.items():
        workers[engine].wait_ready()
        h.produce(events)
    for engine, h in harnesses.items():
        h.wait_all_committed(timeout=90)
        latest = assert_exactly_once_and_audit(h)
        status = {k: WorkflowStatus.from_dict(v).content() for k, v in h.live_status().items()}
        results[engine] = (_without_offsets(latest), status)
    assert len(results["faust"][0]) > 100
    assert results["faust"][0] == results["rdkafka"][0]
    assert results["faust"][1] == results["rdkafka"][1]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("order", [("faust", "rdkafka", "faust"), ("rdkafka", "faust", "rdkafka")])
def test_switching_engine_by_restart_loses_and_repeats_nothing(
    live: Live, order: tuple[str, str, str]
) -> None:
    """A worker stopped (SIGTERM) mid-stream and restarted with the other
    engine, then back: one changelog, one consumer group, so every (finding
    id, revision) is seen exactly once, the findings equal the audit and the
    status topic equals the audit's status."""
    h = live(partitions=3)
    events = h.scenario_events(n_keys=300, epochs=4, seed=17)
    third = len(events) // 3
    chunks = [events[:third], events[third : 2 * third], events[2 * third :]]
    for i, (engine, chunk) in enumerate(zip(order, chunks, strict=True)):
        w = h.start(f"switch-{i}", extra={"FENCEWATCH_ENGINE": engine})
        w.wait_ready(timeout=90)
        h.produce(chunk)
        h.wait_all_committed(timeout=90)
        w.stop()
        assert w.proc.returncode == 0, w.tail()
    latest = assert_exactly_once_and_audit(h)
    assert len(latest) > 100
    assert_status_equals_audit(h)
    # Each later run started from the state the other engine left: it read
    # the changelog (the same topic and record format).
    for w in h.workers[1:]:
        loaded = [int(n) for n in RESTORED.findall(w.tail(400_000))]
        assert loaded and max(loaded) > 0, w.tail()


@pytest.mark.timeout(90)
def test_rdkafka_engine_at_least_once_gives_the_audits_findings(live: Live) -> None:
    """The rdkafka engine with --at-least-once (no transactions: outputs
    flushed, then offsets committed) gives the SPEC §5 fixture's findings,
    equal to the audit, and reports exactly_once false."""
    h = live(partitions=2, engine="rdkafka")
    w = h.start(extra={"FENCEWATCH_EXACTLY_ONCE": "false"})
    health = w.wait_ready()
    assert health["exactly_once"] is False
    h.produce(h.fixture_events())
    h.wait_all_committed()
    latest, _seen = h.live_findings()
    assert latest == h.audit()
    assert sorted(d["kind"] for d in latest.values()) == [
        "conflicting_commit",
        "stale_activity",
        "stale_attempt",
        "stale_commit",
    ]


@pytest.mark.timeout(150)
@pytest.mark.parametrize(("first", "second"), [("faust", "rdkafka"), ("rdkafka", "faust")])
def test_a_worker_of_the_other_engine_is_refused_in_one_line_and_the_group_goes_on(
    live: Live, first: str, second: str
) -> None:
    """A worker started with the other engine in a running group (a rolling
    restart across the default's change) exits 2 with one line naming the
    group and the flag that joins it, once the session timeout has passed;
    the running worker keeps processing, every (finding id, revision) once."""
    import time

    h = live(partitions=3)
    events = h.scenario_events(n_keys=150, epochs=3, seed=29)
    w1 = h.start("w1", extra={"FENCEWATCH_ENGINE": first})
    w1.wait_ready(timeout=90)
    h.produce(events[: len(events) // 2])
    h.wait_all_committed(timeout=60)
    started = time.monotonic()
    w2 = h.start("w2", extra={"FENCEWATCH_ENGINE": second})
    assert w2.proc.wait(timeout=60) == 2, w2.tail()
    waited = time.monotonic() - started
    log = w2.tail(20_000)
    error = [line for line in log.splitlines() if line.startswith("fencewatch run: ")][-1]
    assert (
        f"fencewatch run: consumer group {h.app_id} has 1 member running the {first} engine"
        in error
    ), log
    assert f"start this one with --engine {first}" in error
    assert "Traceback" not in log
    assert waited >= 6  # the harness's session timeout: a departing member's time
    h.produce(events[len(events) // 2 :])
    h.wait_all_committed(timeout=60)
    assert w1.proc.poll() is None
    assert_exactly_once_and_audit(h)


@pytest.mark.timeout(150)
def test_a_faust_worker_refused_after_the_check_stops_in_one_line_instead_of_idling(
    live: Live,
) -> None:
    """A faust worker past the start's group check (frozen right after it)
    while an rdkafka worker takes the group: thawed, its JoinGroup is
    refused, and instead of staying up with no partitions (aiokafka holds
    the refusal where faust's fetcher never looks) it exits 2 with the one
    line; the rdkafka worker keeps processing, every finding revision once."""
    import time

    h = live(partitions=3)
    events = h.scenario_events(n_keys=100, epochs=3, seed=31)
    faust_worker = h.start("faust", extra={"FENCEWATCH_ENGINE": "faust"})
    deadline = time.monotonic() + 60
    # Logged after prepare() (the check) and before faust starts to join.
    while "streams.live.runner: starting" not in faust_worker.tail(200_000):
        assert time.monotonic() < deadline and faust_worker.proc.poll() is None, faust_worker.tail()
        time.sleep(0.005)
    faust_worker.pause()
    try:
        rdkafka_worker = h.start("rdkafka", extra={"FENCEWATCH_ENGINE": "rdkafka"})
        rdkafka_worker.wait_ready(timeout=90)
    finally:
        faust_worker.resume()
    h.produce(events)
    assert faust_worker.proc.wait(timeout=60) == 2, faust_worker.tail()
    log = faust_worker.tail(200_000)
    last = [line for line in log.splitlines() if line.startswith("fencewatch run: ")][-1]
    assert last.startswith(
        f"fencewatch run: consumer group {h.app_id} has members of another group protocol "
        "(the rdkafka engine's"
    ), log
    assert "start this one with --engine rdkafka" in last
    h.wait_all_committed(timeout=60)
    assert rdkafka_worker.proc.poll() is None
    assert_exactly_once_and_audit(h)
