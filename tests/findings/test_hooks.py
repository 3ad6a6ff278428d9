"""Alert hooks against a real local HTTP server and a real shell command."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from streams.cli import main
from streams.errors import DeliveryFailed
from streams.findings import (
    DeadLetterFile,
    Delivery,
    ExecTarget,
    HookSender,
    RetryPolicy,
    WebhookTarget,
)
from streams.kafka import committed_offsets, end_offsets
from streams.kafka.connection import KafkaConnection
from tests.findings.conftest import fixture_findings, synthetic_findings
from tests.findings.receiver import webhook_receiver
from tests.support.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
FAST = RetryPolicy(max_attempts=3, base_delay_s=0.01, max_delay_s=0.05)


def _deliveries() -> list[Delivery]:
    return [Delivery(f, 0, i, -1, None) for i, f in enumerate(fixture_findings())]


def _send_all(target: object, tmp_path: Path, items: list[Delivery]) -> tuple[list[int], Path]:
    done: list[int] = []
    finished = threading.Event()
    dead = tmp_path / "dead.jsonl"

    def on_done(d: Delivery) -> None:
        done.append(d.offset)
        if len(done) == len(items):
            finished.set()

    sender = HookSender(target, on_done, policy=FAST, dead_letters=DeadLetterFile(dead))  # type: ignore[arg-type]
    for d in items:
        sender.submit(d)
    assert finished.wait(20)
    sender.close()
    return done, dead


def test_webhook_posts_with_idempotency_key_and_retries_5xx(tmp_path: Path) -> None:
    """Two 503s then success: delivered once, in order, keyed finding_id/revision."""
    items = _deliveries()
    with webhook_receiver() as rx:
        rx.fail_first[items[1].idempotency_key] = [503, 503]
        done, dead = _send_all(WebhookTarget(rx.url), tmp_path, items)
        assert rx.keys() == [d.idempotency_key for d in items]
        assert rx.posts[0].body == items[0].finding.to_dict()
    assert done == [0, 1, 2, 3, 4]
    assert not dead.exists()


def test_webhook_lanes_keep_each_findings_revisions_in_order(tmp_path: Path) -> None:
    """Four lanes (four connections): every revision arrives once, each finding's
    revisions in increasing order, and every delivery is reported done."""
    findings = synthetic_findings(200, revisions=3)
    items = [Delivery(f, 0, i, -1, None) for i, f in enumerate(findings)]
    with webhook_receiver() as rx:
        rx.delay_s = 0.001  # lanes overlap their waits
        targets = [WebhookTarget(rx.url) for _ in range(4)]
        done, dead = _send_all(targets, tmp_path, items)
        keys = rx.keys()
    assert sorted(keys) == sorted(d.idempotency_key for d in items)
    by_id: dict[str, list[int]] = {}
    for key in keys:
        fid, rev = key.rsplit("/", 1)
        by_id.setdefault(fid, []).append(int(rev))
    assert all(revs == sorted(revs) for revs in by_id.values())
    assert sorted(done) == list(range(len(items))) and not dead.exists()
    # The premise: the lanes did interleave findings (not one lane doing all).
    assert keys != [d.idempotency_key for d in items]


def test_closing_the_sender_closes_each_lanes_webhook_connection(tmp_path: Path) -> None:
    """After HookSender.close() the receiver holds no connection from its lanes."""
    items = [Delivery(f, 0, i, -1, None) for i, f in enumerate(synthetic_findings(40))]
    with webhook_receiver() as rx:
        done, _ = _send_all([WebhookTarget(rx.url) for _ in range(4)], tmp_path, items)
        assert len(done) == len(items)
        deadline = time.monotonic() + 10  # a bound on waiting for the server side
        while rx.open_connections and time.monotonic() < deadline:
            time.sleep(0.02)
        assert rx.open_connections == 0


def test_webhook_dead_letters_after_max_attempts_and_at_once_on_4xx(tmp_path: Path) -> None:
    """Always-503 is dead-lettered after 3 attempts, a 400 after 1; both count as done."""
    items = _deliveries()
    with webhook_receiver() as rx:
        rx.fail_first[items[0].idempotency_key] = [503] * 10
        rx.fail_first[items[2].idempotency_key] = [400]
        done, dead = _send_all(WebhookTarget(rx.url), tmp_path, items)
        assert rx.keys() == [items[i].idempotency_key for i in (1, 3, 4)]
    letters = [json.loads(line) for line in dead.read_text().splitlines()]
    assert [(x["idempotency_key"], x["attempts"]) for x in letters] == [
        (items[0].idempotency_key, 3), (items[2].idempotency_key, 1),
    ]  # fmt: skip
    assert "answered 503" in letters[0]["error"] and "answered 400" in letters[1]["error"]
    assert letters[0]["finding"] == items[0].finding.to_dict()
    assert sorted(done) == [0, 1, 2, 3, 4]


def test_webhook_connection_refused_is_retried_then_dead_lettered(tmp_path: Path) -> None:
    """Nothing listening: each finding is tried max_attempts times, then dead-lettered."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    items = _deliveries()[:2]
    done, dead = _send_all(WebhookTarget(f"http://127.0.0.1:{port}/x"), tmp_path, items)
    letters = [json.loads(line) for line in dead.read_text().splitlines()]
    assert [x["attempts"] for x in letters] == [3, 3] and done == [0, 1]


class _CannedServer:
    """A raw HTTP server on 127.0.0.1 answering each request with the next
    canned response (bytes, and whether to close the connection after it);
    records (connection number, request head, body) per request."""

    def __init__(self, answers: list[tuple[bytes, bool]]) -> None:
        self.answers = list(answers)
        self.requests: list[tuple[int, bytes, bytes]] = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/hook?x=1"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn_no = 0
        while self.answers:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                buf = b""
                while self.answers:
                    while b"\r\n\r\n" not in buf:
                        chunk = conn.recv(65536)
                        if not chunk:
                            break
                        buf += chunk
                    if b"\r\n\r\n" not in buf:
                        break  # the client closed this connection
                    head, _, buf = buf.partition(b"\r\n\r\n")
                    length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                    while len(buf) < length:
                        buf += conn.recv(65536)
                    body, buf = buf[:length], buf[length:]
                    self.requests.append((conn_no, head, body))
                    answer, close = self.answers.pop(0)
                    conn.sendall(answer)
                    if close:
                        break
            conn_no += 1

    def close(self) -> None:
        self.sock.close()
        self.thread.join(5)


def test_webhook_reads_every_http_answer_style_and_keeps_the_connection_only_when_allowed() -> None:
    """Content-Length, 100 then chunked with a trailer, 204, an HTTP/1.0
    close-delimited body and Connection: close are each read whole: the
    connection is reused until the server ends it, never after."""
    items = [*_deliveries()[:5], _deliveries()[0]]
    server = _CannedServer(
        [
            (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", False),
            (
                b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\nT: t\r\n\r\n",
                False,
            ),
            (b"HTTP/1.1 204 No Content\r\n\r\n", False),
            (b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the close", True),
            (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", True),
            (b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", False),
        ]
    )
    target = WebhookTarget(server.url)
    try:
        for d in items:
            target.send(d)
    finally:
        target.close()
        server.close()
    assert [c for c, _, _ in server.requests] == [0, 0, 0, 0, 1, 2]
    for (_, head, body), d in zip(server.requests, items, strict=True):
        lines = head.decode().split("\r\n")
        assert lines[0] == "POST /hook?x=1 HTTP/1.1"
        assert f"Idempotency-Key: {d.idempotency_key}" in lines
        assert "Content-Type: application/json" in lines
        assert json.loads(body) == d.finding.to_dict()


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (b"SSH-2.0-OpenSSH\r\n\r\n", "not HTTP/1.x"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-3\r\nabc\r\n", "answered 200"),
    ],
)
def test_webhook_answer_that_is_not_http_is_a_retriable_failure(answer: bytes, reason: str) -> None:
    """A server answering something that is not HTTP (a bad status line, a
    negative chunk size) fails the delivery, retriably."""
    server = _CannedServer([(answer, True)])
    target = WebhookTarget(server.url)
    try:
        with pytest.raises(DeliveryFailed) as failed:
            target.send(_deliveries()[0])
    finally:
        target.close()
        server.close()
    assert failed.value.retriable and reason in str(failed.value)


def test_exec_gets_the_finding_on_stdin_and_key_fields_in_env(tmp_path: Path) -> None:
    """--exec: stdin is the finding JSON; FENCEWATCH_* variables name it; exit 1 is retried."""
    out = tmp_path / "out"
    out.mkdir()
    flag = tmp_path / "failed-once"
    cmd = (
        f'if [ "$FENCEWATCH_REVISION" = 2 ] && [ ! -e {flag} ]; then touch {flag}; exit 1; fi; '
        f'cat > {out}/"$FENCEWATCH_FINDING_ID.$FENCEWATCH_REVISION.json"; '
        f'echo "$FENCEWATCH_KIND $FENCEWATCH_SEVERITY $FENCEWATCH_WORKFLOW_KEY '
        f'$FENCEWATCH_IDEMPOTENCY_KEY" >> {out}/env.txt'
    )
    items = _deliveries()
    done, dead = _send_all(ExecTarget(cmd), tmp_path, items)
    assert sorted(done) == [0, 1, 2, 3, 4] and not dead.exists()
    lines = (out / "env.txt").read_text().splitlines()
    assert lines[0] == f"stale_activity diagnostic export-ledger {items[0].idempotency_key}"
    assert len(lines) == 5 and flag.exists()
    f = items[3].finding
    assert json.loads((out / f"{f.finding_id}.2.json").read_text()) == f.to_dict()


def test_cli_webhook_delivers_each_revision_of_a_bounded_read(
    kafka_bootstrap: str,
    findings_topic: Callable[..., str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`findings --webhook` without --follow posts every revision once and returns 0."""
    topic = findings_topic()
    with webhook_receiver() as rx:
        rc = main(
            ["findings", "--bootstrap-servers", kafka_bootstrap, "--topic", topic,
             "--webhook", rx.url, "--dead-letter", str(tmp_path / "dead.jsonl")]
        )  # fmt: skip
        assert rc == 0
        assert sorted(rx.keys()) == sorted(
            f"{f.finding_id}/{f.revision}" for f in fixture_findings()
        )
    assert capsys.readouterr().out.count("\n") == 5


def _committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed positions once two reads 0.5 s apart agree: a
    commit the killed follower had sent may still land after its death."""
    last = committed_offsets(KafkaConnection(bootstrap), group, topic, range(partitions))
    for _ in range(20):
        time.sleep(0.5)
        now = committed_offsets(KafkaConnection(bootstrap), group, topic, range(partitions))
        if now == last:
            return now
        last = now
    raise AssertionError(f"the committed positions kept moving after the kill: {last}")


def _positions(bootstrap: str, topic: str) -> dict[str, tuple[int, int]]:
    from streams.kafka.tail import TopicTail

    out: dict[str, tuple[int, int]] = {}
    tail = TopicTail(KafkaConnection(bootstrap), topic, stop_at_end=True)
    try:
        while (rec := tail.poll(10)) is not None:
            d = json.loads(rec.value or b"")
            out[f"{d['finding_id']}/{d['revision']}"] = (rec.partition, rec.offset)
    finally:
        tail.close()
    return out


def test_sigkill_mid_stream_loses_nothing_and_resends_only_the_uncommitted(
    kafka_bootstrap: str, findings_topic: Callable[..., str], tmp_path: Path
) -> None:
    """kill -9 of a --follow --webhook --group follower, then a restart: every revision
    arrives, and the repeats are exactly the ones at or past the committed position."""
    findings = synthetic_findings(600, revisions=2)  # 1,200 revisions on 3 partitions
    topic = findings_topic(findings, partitions=3)
    group = f"hook-{os.getpid()}-{time.monotonic_ns()}"
    positions = _positions(kafka_bootstrap, topic)
    cmd = [
        sys.executable, "-m", "streams", "findings", "--bootstrap-servers", kafka_bootstrap,
        "--topic", topic, "--follow", "--group", group, "--format", "jsonl",
        "--max-in-flight", "100", "--dead-letter", str(tmp_path / "dead.jsonl"),
    ]  # fmt: skip
    logs = [tmp_path / "first.log", tmp_path / "second.log"]

    def follower(log: Path) -> subprocess.Popen[bytes]:
        # stderr to a file, never an unread pipe: a full pipe would block the follower.
        with log.open("wb") as err:
            return subprocess.Popen(
                [*cmd, "--webhook", rx.url], cwd=REPO, stdout=subprocess.DEVNULL, stderr=err
            )

    def evidence() -> str:
        missing = sorted(set(positions) - set(rx.counts()))
        dead = tmp_path / "dead.jsonl"
        return (
            f"{len(missing)} never received, e.g. {[(k, positions[k]) for k in missing[:5]]};"
            f" dead letters: {dead.read_text()[:500] if dead.exists() else 'none'};"
            + "".join(f" {log.name}: {log.read_text()[-1500:]!r}" for log in logs if log.exists())
        )

    with webhook_receiver() as rx:
        # ~3.6 s for the stream with the follower's 16 requests in flight (2
        # lanes x 8): the kill lands in the middle, after the position was
        # committed at least once (every 0.5 s).
        rx.delay_s = 0.048
        first = follower(logs[0])
        rx.wait_for(400, sender=first)
        # The kill lands just after a commit, when up to 100 findings are queued
        # on the lanes: a follower that committed what it had queued but not yet
        # delivered would lose them here.
        seen = committed_offsets(KafkaConnection(kafka_bootstrap), group, topic, range(3))
        deadline = time.monotonic() + 10
        while committed_offsets(KafkaConnection(kafka_bootstrap), group, topic, range(3)) == seen:
            assert time.monotonic() < deadline, "the follower committed nothing in 10 s"
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        # A POST the dead follower had sent may still be completing: its connection
        # closes (and the count is final) when the receiver has handled it.
        wait_until(lambda: rx.open_connections == 0, timeout=30, what="the dead follower's POSTs")
        before = rx.counts()
        assert 400 <= sum(before.values()) < len(findings), "the kill was not mid-stream"
        committed = _committed(kafka_bootstrap, group, topic, 3)
        uncommitted = {k for k, (p, o) in positions.items() if o >= committed[p]}
        rx.delay_s = 0.0
        second = follower(logs[1])
        try:
            rx.wait_for(sum(before.values()) + len(uncommitted), timeout=90, sender=second)
            # Anything beyond the expected is sent by the time the follower has drained
            # and exited, and received once the receiver has closed its connections.
            second.terminate()
            second.wait(20)
            wait_until(lambda: rx.open_connections == 0, timeout=30, what="the follower's POSTs")
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}; {sum(before.values())} before the kill, {len(uncommitted)} at or past"
                f" the committed {committed}; {evidence()}"
            ) from None
        finally:
            second.terminate()
            second.wait(20)
    after = rx.counts()
    assert second.returncode == 0, evidence()
    assert set(after) == set(positions), f"a finding revision was lost: {evidence()}"
    repeated = {k for k, n in after.items() if n > 1}
    assert max(after.values()) <= 2
    # Exactly the revisions delivered before the kill at or past the committed position.
    assert repeated == uncommitted & set(before)
    # The follower had committed a position before it died (a partition it had
    # not reached yet has none: all of it is "uncommitted", and was not sent).
    assert any(o >= 0 for o in committed.values())
    assert len(repeated) < sum(before.values())


def test_cli_exec_runs_the_command_once_per_revision(
    kafka_bootstrap: str, findings_topic: Callable[..., str], tmp_path: Path
) -> None:
    """`findings --exec CMD` hands each revision's JSON to CMD on stdin."""
    topic = findings_topic()
    out = tmp_path / "got.jsonl"
    rc = main(
        ["findings", "--bootstrap-servers", kafka_bootstrap, "--topic", topic,
         "--exec", f'cat >> {out}; echo >> {out}', "--format", "jsonl"]
    )  # fmt: skip
    assert rc == 0
    got = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    assert [(d["finding_id"], d["revision"]) for d in got] == [
        (f.finding_id, f.revision) for f in fixture_findings()
    ]


@pytest.mark.faults
def test_sigterm_drains_and_commits_so_a_restart_repeats_nothing(
    kafka_bootstrap: str, findings_topic: Callable[..., str], tmp_path: Path
) -> None:
    """A follower stopped with SIGTERM commits what it delivered: a restart sends only the rest."""
    findings = synthetic_findings(1_000, revisions=1)
    topic = findings_topic(findings, partitions=3)
    group = f"hook-term-{os.getpid()}-{time.monotonic_ns()}"
    with webhook_receiver() as rx:
        cmd = [
            sys.executable, "-m", "streams", "findings", "--bootstrap-servers", kafka_bootstrap,
            "--topic", topic, "--follow", "--group", group, "--format", "jsonl",
            "--webhook", rx.url, "--dead-letter", str(tmp_path / "dead.jsonl"),
        ]  # fmt: skip
        # ~2.5 s for the 1,000 with the follower's window of 32 requests in
        # flight. A stop still hands over the batch the reader holds (up to
        # --max-in-flight, 100) and drains what is queued (100 more): sent at
        # the 100th, it ends the run near the 300th, mid-stream. (With 300
        # findings, the reader often held the last batch already.)
        rx.delay_s = 0.08
        first = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL)
        rx.wait_for(100)
        first.send_signal(signal.SIGTERM)
        assert first.wait(40) == 0
        delivered = rx.count()
        assert delivered < len(findings), "the stop was not mid-stream"
        rx.delay_s = 0.0
        second = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL)
        try:
            rx.wait_for(len(findings), timeout=60)
            # Every record read and acknowledged (so any repeat was sent)
            # once the group's position is the topic's end.
            ends = end_offsets(KafkaConnection(kafka_bootstrap), topic)
            wait_until(
                lambda: (
                    committed_offsets(KafkaConnection(kafka_bootstrap), group, topic, range(3))
                    == ends
                ),
                timeout=60,
                what="the second follower committing the end of the topic",
            )
        finally:
            second.terminate()
            second.wait(20)
        counts = rx.counts()
    assert len(counts) == len(findings)
    assert max(counts.values()) == 1, "a graceful stop must not cause repeats"


def test_a_batch_with_a_refused_finding_in_the_middle_delivers_the_rest(tmp_path: Path) -> None:
    """submit_batch of five, the third answered 400: the other four are posted once
    each, the third is dead-lettered after one attempt, and all five are done."""
    items = _deliveries()
    done: list[int] = []
    finished = threading.Event()

    def on_done(d: Delivery) -> None:
        done.append(d.offset)
        if len(done) == len(items):
            finished.set()

    dead = tmp_path / "dead.jsonl"
    with webhook_receiver() as rx:
        rx.fail_first[items[2].idempotency_key] = [400]
        sender = HookSender(
            [WebhookTarget(rx.url) for _ in range(2)],
            on_done,
            policy=FAST,
            dead_letters=DeadLetterFile(dead),
        )
        assert sender.submit_batch(items)
        assert finished.wait(20)
        sender.close()
        assert sorted(rx.keys()) == sorted(items[i].idempotency_key for i in (0, 1, 3, 4))
    assert sorted(done) == [0, 1, 2, 3, 4]
    letters = [json.loads(line) for line in dead.read_text().splitlines()]
    assert [(x["idempotency_key"], x["attempts"]) for x in letters] == [
        (items[2].idempotency_key, 1)
    ]


class _Gate:
    """A hook target that holds every send until released."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.sent: list[int] = []

    def send(self, delivery: Delivery) -> None:
        self.open.wait(20)
        self.sent.append(delivery.offset)


def test_submit_batch_holds_at_most_max_in_flight_and_gives_up_the_rest_when_stopping(
    tmp_path: Path,
) -> None:
    """A target that does not answer: of a batch of ten, max_in_flight (4) are
    taken; submit_batch returns False once stopping() is true, and only those four
    are delivered (and reported done) after the target answers again."""
    gate = _Gate()
    done: list[int] = []
    sender = HookSender(
        gate, lambda d: done.append(d.offset), policy=FAST,
        dead_letters=DeadLetterFile(tmp_path / "dead.jsonl"), max_in_flight=4,
    )  # fmt: skip
    items = [Delivery(f, 0, i, -1, None) for i, f in enumerate(synthetic_findings(10))]
    stop_at = time.monotonic() + 0.5
    assert not sender.submit_batch(items, stopping=lambda: time.monotonic() > stop_at)
    assert sender.pending == 4
    gate.open.set()
    sender.close()
    assert gate.sent == done == [0, 1, 2, 3]
    assert sender.pending == 0


def test_submit_batch_waiting_for_room_gives_up_at_stop_now(tmp_path: Path) -> None:
    """A graceful stop keeps queueing its batch (no stopping callable); a second
    signal's stop_now() ends the wait: submit_batch returns False, the queued four
    stay the only ones taken."""
    gate = _Gate()
    sender = HookSender(
        gate, lambda d: None, policy=FAST,
        dead_letters=DeadLetterFile(tmp_path / "dead.jsonl"), max_in_flight=4,
    )  # fmt: skip
    items = [Delivery(f, 0, i, -1, None) for i, f in enumerate(synthetic_findings(10))]
    timer = threading.Timer(0.3, sender.stop_now)
    timer.start()
    try:
        assert not sender.submit_batch(items)
    finally:
        timer.cancel()
        gate.open.set()
    assert sender.pending <= 4
    sender.close()


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    """A throwaway certificate for 127.0.0.1 and its key (openssl)."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
         "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


def test_a_tls_receiver_is_verified_refused_untrusted_and_reached_with_its_ca(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """https to a self-signed receiver: refused as untrusted (retriable), nothing
    received; with SSL_CERT_FILE naming its certificate, the finding is delivered."""
    cert, key = _self_signed(tmp_path)
    item = _deliveries()[0]
    with webhook_receiver(tls=(cert, key)) as rx:
        monkeypatch.delenv("SSL_CERT_FILE", raising=False)
        untrusted = WebhookTarget(rx.url, timeout_s=5)
        try:
            with pytest.raises(DeliveryFailed) as refused:
                untrusted.send(item)
        finally:
            untrusted.close()
        assert refused.value.retriable and "not trusted" in str(refused.value)
        assert rx.count() == 0
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        trusted = WebhookTarget(rx.url, timeout_s=5)
        try:
            trusted.send(item)
        finally:
            trusted.close()
        assert rx.keys() == [item.idempotency_key]


def test_requests_made_together_each_get_their_outcome() -> None:
    """send_many of three at once (three connections): the 503 in the middle is that
    one's retriable failure, the other two are delivered."""
    items = _deliveries()[:3]
    with webhook_receiver() as rx:
        rx.fail_first[items[1].idempotency_key] = [503]
        target = WebhookTarget(rx.url, concurrency=16)
        try:
            outcomes = target.send_many(items)
        finally:
            target.close()
        assert sorted(rx.keys()) == sorted(items[i].idempotency_key for i in (0, 2))
    assert outcomes[0] is None and outcomes[2] is None
    assert isinstance(outcomes[1], DeliveryFailed) and outcomes[1].retriable
    assert "answered 503" in str(outcomes[1])


def test_a_revision_that_fails_among_requests_made_together_is_retried_before_the_next(
    tmp_path: Path,
) -> None:
    """One lane with 16 requests at once, revision 1 of ten findings then revision 2 of
    each, f-00003/1 answered 503 twice: everything is delivered once, and each finding's
    revisions arrive in increasing order (a retry never lets a later revision overtake it)."""
    findings = synthetic_findings(10, revisions=2)
    items = [Delivery(f, 0, i, -1, None) for i, f in enumerate(findings)]
    with webhook_receiver() as rx:
        rx.fail_first["f-00003/1"] = [503, 503]
        done, dead = _send_all(WebhookTarget(rx.url, concurrency=16), tmp_path, items)
        keys = rx.keys()
    assert sorted(keys) == sorted(d.idempotency_key for d in items)
    assert keys.index("f-00003/1") < keys.index("f-00003/2")
    assert sorted(done) == list(range(len(items))) and not dead.exists()


def test_requests_made_together_to_a_receiver_too_slow_end_at_the_deadline() -> None:
    """send_many of three to a receiver that takes 2 s per answer, with a 0.5 s
    timeout: each outcome is a retriable failure naming the deadline."""
    with webhook_receiver() as rx:
        rx.delay_s = 2.0
        target = WebhookTarget(rx.url, timeout_s=0.5, concurrency=4)
        try:
            outcomes = target.send_many(_deliveries()[:3])
        finally:
            target.close()
    assert len(outcomes) == 3
    for failed in outcomes:
        assert isinstance(failed, DeliveryFailed) and failed.retriable
        assert "within 0.5 s" in str(failed)


def test_the_environments_proxy_is_used_and_no_proxy_bypasses_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """HTTP_PROXY set: the POST goes to the proxy with the absolute URL (the receiver's
    host never resolved here); NO_PROXY naming the host: it goes direct (and fails to
    resolve this host, said so)."""
    proxy = _CannedServer([(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", True)])
    proxy_url = proxy.url.split("/hook")[0]
    monkeypatch.setenv("HTTP_PROXY", proxy_url)
    monkeypatch.delenv("http_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    item = _deliveries()[0]
    through = WebhookTarget("http://receiver.invalid/hook", timeout_s=5)
    try:
        through.send(item)
    finally:
        through.close()
        proxy.close()
    head = proxy.requests[0][1].decode().split("\r\n")
    assert head[0] == "POST http://receiver.invalid/hook HTTP/1.1"
    assert f"Idempotency-Key: {item.idempotency_key}" in head
    monkeypatch.setenv("NO_PROXY", "receiver.invalid")
    direct = WebhookTarget("http://receiver.invalid/hook", timeout_s=5)
    try:
        with pytest.raises(DeliveryFailed, match="cannot resolve the host name"):
            direct.send(item)
    finally:
        direct.close()
