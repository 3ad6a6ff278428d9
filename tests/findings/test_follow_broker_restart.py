"""A long-running `findings --follow --group --webhook` follower lives through a
kill -9 of the broker: it keeps running, and every revision arrives."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

import pytest

from streams.core.findings import Finding
from streams.kafka import TopicAdmin, TopicSpec, committed_offsets, end_offsets
from streams.kafka.connection import KafkaConnection
from tests.findings.conftest import produce_findings, synthetic_findings
from tests.findings.receiver import webhook_receiver
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.faults]

REPO = Path(__file__).resolve().parents[2]


def _topic(bootstrap: str, prefix: str, revisions: list[Finding]) -> tuple[str, str]:
    """A fresh 3-partition topic holding ``revisions``, and a group name for it."""
    topic = f"{prefix}-{os.getpid()}-{time.monotonic_ns()}"
    TopicAdmin(KafkaConnection(bootstrap)).ensure([TopicSpec(topic, 3, 1)])
    produce_findings(bootstrap, topic, revisions)
    return topic, f"g-{topic}"


def _follower(
    bootstrap: str, topic: str, group: str, url: str, tmp_path: Path, err: IO[bytes]
) -> subprocess.Popen[bytes]:
    """`findings --follow --group --webhook`, as deployed; its stderr to ``err``."""
    return subprocess.Popen(
        [sys.executable, "-m", "streams", "findings", "--bootstrap-servers", bootstrap,
         "--topic", topic, "--follow", "--group", group, "--format", "jsonl",
         "--webhook", url, "--dead-letter", str(tmp_path / "dead.jsonl")],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=err,
    )  # fmt: skip


def test_a_follower_lives_through_a_broker_kill9_and_delivers_everything(
    restartable_kafka: Any, tmp_path: Path
) -> None:
    """kill -9 of the broker while the follower is delivering and committing, then a
    restart: the follower is still running, and every revision (before, during and
    after the outage) reaches the webhook."""
    broker = restartable_kafka
    bootstrap = broker.bootstrap
    topic = f"follow-restart-{os.getpid()}-{time.monotonic_ns()}"
    TopicAdmin(KafkaConnection(bootstrap)).ensure([TopicSpec(topic, 3, 1)])
    revisions = synthetic_findings(60, revisions=4)  # revisions 1-2 first, 3-4 after
    produce_findings(bootstrap, topic, revisions[:120])
    log = tmp_path / "follower.log"
    group = f"g-{topic}"
    with webhook_receiver() as rx, log.open("wb") as err:
        rx.delay_s = 0.02  # 120 POSTs on 4 lanes: ~0.6 s, so the kill lands mid-stream
        follower = _follower(bootstrap, topic, group, rx.url, tmp_path, err)
        try:
            rx.wait_for(30, sender=follower)
            broker.kill9()
            # What it had fetched is still delivered, its commits failing meanwhile.
            rx.wait_for(120, timeout=60, sender=follower)
            # It polls and commits against the dead broker, and says so once.
            wait_until(
                lambda: f"committing the position of group {group} failed" in log.read_text(),
                timeout=60,
                what="the follower reporting its commits failing",
            )
            assert follower.poll() is None, log.read_text()[-2000:]
            broker.start()
            # The positions whose commit failed in the outage are committed
            # again, with nothing new to deliver (a commit taken for done would
            # leave them behind: a restart would repeat what was delivered).
            _wait_committed(bootstrap, topic, group)
            wait_until(
                lambda: f"the position of group {group} is stored again" in log.read_text(),
                timeout=60,
                what="the follower reporting its position stored again",
            )
            assert log.read_text().count("failed (") == 1, log.read_text()  # once, not per retry
            produce_findings(bootstrap, topic, revisions[120:])
            rx.wait_for(len(revisions), timeout=90, sender=follower)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; follower log: {log.read_text()[-2000:]!r}") from None
        finally:
            follower.send_signal(signal.SIGTERM)
            code = follower.wait(40)
    keys = rx.counts()
    assert set(keys) == {f"{f.finding_id}/{f.revision}" for f in revisions}
    assert code == 0, log.read_text()[-2000:]
    assert not (tmp_path / "dead.jsonl").exists()
    # The stop committed everything it delivered: a restart would repeat nothing.
    ends = end_offsets(KafkaConnection(bootstrap), topic)
    assert committed_offsets(KafkaConnection(bootstrap), group, topic, range(3)) == ends


def _wait_committed(bootstrap: str, topic: str, group: str) -> None:
    ends = end_offsets(KafkaConnection(bootstrap), topic)
    deadline = time.monotonic() + 60  # a bound on waiting, not a timing assertion
    while (got := committed_offsets(KafkaConnection(bootstrap), group, topic, range(3))) != ends:
        assert time.monotonic() < deadline, f"committed {got}, end offsets {ends}"
        time.sleep(0.5)


def test_a_stop_while_the_broker_is_down_says_the_position_was_not_committed(
    restartable_kafka: Any, tmp_path: Path
) -> None:
    """SIGTERM to a follower whose broker is dead: it exits 2 with one line naming
    the group and what a restart repeats (it exited 0 after 45 s, nothing stored)."""
    broker = restartable_kafka
    bootstrap = broker.bootstrap
    revisions = synthetic_findings(40, revisions=2)
    topic, group = _topic(bootstrap, "follow-down", revisions)
    log = tmp_path / "follower.log"
    with webhook_receiver() as rx, log.open("wb") as err:
        rx.delay_s = 0.02
        follower = _follower(bootstrap, topic, group, rx.url, tmp_path, err)
        try:
            rx.wait_for(10, sender=follower)
            broker.kill9()
            rx.wait_for(len(revisions), timeout=60, sender=follower)
            follower.send_signal(signal.SIGTERM)
            code = follower.wait(60)  # a bound on waiting: 2 x the connect timeout at most
        finally:
            if follower.poll() is None:
                follower.kill()
            broker.start()
    text = log.read_text()
    assert code == 2, text
    assert text.count("\n") == 1 and "Traceback" not in text, text
    assert f"committing the position of group {group} failed (" in text
    assert "a restart delivers again what came after the last committed position" in text
    assert len(rx.counts()) == len(revisions)


def test_a_stop_while_the_broker_is_down_after_everything_was_stored_exits_0(
    restartable_kafka: Any, tmp_path: Path
) -> None:
    """Every position stored before the broker died: a SIGTERM then has nothing to
    commit, exits 0 and says nothing (the stored position is the delivered one)."""
    broker = restartable_kafka
    bootstrap = broker.bootstrap
    revisions = synthetic_findings(20, revisions=2)
    topic, group = _topic(bootstrap, "follow-stored", revisions)
    log = tmp_path / "follower.log"
    with webhook_receiver() as rx, log.open("wb") as err:
        follower = _follower(bootstrap, topic, group, rx.url, tmp_path, err)
        try:
            rx.wait_for(len(revisions), timeout=60, sender=follower)
            _wait_committed(bootstrap, topic, group)
            # The broker has answered every commit; the follower, stopping,
            # waits for those answers rather than commit again.
            broker.kill9()
            follower.send_signal(signal.SIGTERM)
            code = follower.wait(60)
        finally:
            if follower.poll() is None:
                follower.kill()
            broker.start()
    assert code == 0, log.read_text()
    assert log.read_text() == ""
    assert committed_offsets(KafkaConnection(bootstrap), group, topic, range(3)) == end_offsets(
        KafkaConnection(bootstrap), topic
    )
