"""The nemesis soak's own logic, without a cluster: the seeded schedule, the
group coordinator's partition, and which engine restarts count as explained."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.cluster.nemesis import (
    FAULT_KINDS,
    Fault,
    Injected,
    SoakConfig,
    classify_engine_restarts,
    contained_crashes,
    group_coordinator_partition,
    java_string_hash,
    log_time,
    schedule,
    unexplained_lines,
)


def test_a_seed_replays_the_same_schedule_and_another_seed_does_not() -> None:
    """The same seed gives the same faults, in order; a different seed other faults."""
    config = SoakConfig(seed=67, minutes=20.0)
    assert schedule(config) == schedule(SoakConfig(seed=67, minutes=20.0))
    assert schedule(config) != schedule(SoakConfig(seed=68, minutes=20.0))


def test_the_first_faults_are_every_kind_once_and_holds_fit_the_kind() -> None:
    """Six faults meet every kind once; a frozen worker is held past its session."""
    plan = schedule(SoakConfig(seed=5, minutes=20.0, session_timeout_s=20))
    assert sorted(f.kind for f in plan[: len(FAULT_KINDS)]) == sorted(FAULT_KINDS)
    assert all(f.hold_s > 20 for f in plan if f.kind == "worker-pause")
    assert all(f.at_s < 20 * 60 for f in plan)
    assert [f.at_s for f in plan] == sorted(f.at_s for f in plan)


def test_java_string_hash_matches_java() -> None:
    """String.hashCode of known strings, including the one that hashes to Integer.MIN_VALUE."""
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert java_string_hash("é€") == 233 * 31 + 0x20AC


def test_group_coordinator_partition_follows_kafkas_rule() -> None:
    """Utils.abs(hashCode) % partitions, with abs(MIN_VALUE) taken as 0."""
    assert group_coordinator_partition("hello", 4) == 99162322 % 4
    assert group_coordinator_partition("polygenelubricants", 50) == 0
    assert group_coordinator_partition("a", 50) == 97 % 50


SOAK = Path(__file__).resolve().parents[2] / "scripts" / "soak"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--minutes", "0"], "--minutes must be above 0"),
        (["--rate", "-1"], "--rate must be above 0"),
        (["--rate", "1000", "--minutes", "20"], "over the soak's bound of 600000"),
        (["--engine", "kafka-streams"], "invalid choice"),
        (["--workers", "9"], "invalid choice"),
    ],
)
def test_the_soak_driver_refuses_a_bad_argument_in_one_line(args: list[str], says: str) -> None:
    """scripts/soak exits 2 with one error line naming the problem, before any cluster starts."""
    done = subprocess.run(
        [sys.executable, str(SOAK), *args], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    errors = [line for line in done.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and says in errors[0], done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


def _fault(began_at: float, undone_at: float) -> Injected:
    return Injected(Fault(0.0, "broker-kill", "coordinator", 1.0), 0.0, 1.0, "node 1", "",
                    began_at, undone_at)  # fmt: skip


def test_a_crash_restart_is_unexplained_and_a_stall_after_a_fault_is_explained() -> None:
    """died of SIGSEGV never counts as explained; a stall does only near a fault."""
    at = log_time("2026-12-06 04:00:00,000 x")
    assert at is not None
    log = "\n".join(
        [
            "2026-12-06 04:00:10,000 ERROR streams.live.supervisor: the rdkafka engine (pid 7) "
            "died of SIGSEGV (its threads' stacks are in the log above), holding partitions "
            "[0]; restarting it in 1 s (restart 1 of at most 5 within 600 s)",
            "[2026-12-06 04:01:00,500] [9] [ERROR] the faust engine (pid 8) was stalled: no "
            "commit for 180 s with lag (killed), holding partitions [1]; restarting it in 1 s "
            "(restart 1 of at most 5 within 600 s)",
            "2026-12-06 05:00:00,000 ERROR streams.live.supervisor: the rdkafka engine (pid 9) "
            "stopped reporting for 190 s (killed), holding no partitions; restarting it in 2 s "
            "(restart 2 of at most 5 within 600 s)",
            "2026-12-06 04:00:20,000 INFO unrelated line",
        ]
    )
    explained, unexplained = classify_engine_restarts(log, [_fault(at, at + 30)])
    assert [line[:30] for line in explained] == ["[2026-12-06 04:01:00,500] [9] "]
    assert len(unexplained) == 2
    assert "died of SIGSEGV" in unexplained[0] and "stopped reporting" in unexplained[1]


def test_a_traceback_or_a_native_crash_in_a_log_is_unexplained() -> None:
    """Crash markers are found; recovery lines and a contained coordinator crash are not."""
    log = (
        "producer fenced (ProducerFenced): restarting the faust app in this process\n"
        "Traceback (most recent call last):\n"
        "Fatal Python error: Segmentation fault\n"
        "Disconnected: connection closed by peer\n"
        "2026-12-06 04:25:18,881 WARNING streams.kafka.coordinator: the coordinator request "
        "(committed g) crashed its child process (SIGABRT: librdkafka issue 5040, the reason "
        "it runs in a child); the caller goes on without it. Its stderr ended: Fatal Python "
        "error: Aborted\n"
    )
    assert unexplained_lines(log) == [
        "Traceback (most recent call last):",
        "Fatal Python error: Segmentation fault",
    ]
    assert len(contained_crashes(log)) == 1
