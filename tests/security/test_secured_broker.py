"""Every Kafka entry point against a real SASL_SSL/SCRAM-SHA-512 broker with
ACLs: credentials from the environment work; a wrong password, no credentials
or a missing ACL fail fast with one clear line; the password never leaks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from streams.core import EventType
from tests.security.conftest import REPO, SecureKafka
from tests.support.worker import WorkerProcess

pytestmark = pytest.mark.kafka

FIXTURE = REPO / "examples" / "reference.jsonl"
# A bound on each refused command (the connect timeout is 10 s): a retry
# loop would run into it; not a timing measurement.
REFUSED_WITHIN_S = 45


def fencewatch(
    args: list[str], env: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``fencewatch ARGS`` with only ``env``'s Kafka settings (the session's are dropped)."""
    full = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("FENCEWATCH_") and k != "KAFKA_BOOTSTRAP"
    }
    full.update(env)
    return subprocess.run(
        [sys.executable, "-m", "streams", *args],
        env=full,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def produce_fixture(kafka: SecureKafka, topic: str) -> int:
    from confluent_kafka import Producer

    p = Producer(kafka.librdkafka("fencewatch"))
    n = 0
    for line in FIXTURE.read_text().splitlines():
        if line.strip():
            p.produce(topic, line.encode(), key=json.loads(line)["workflow_key"].encode())
            n += 1
    assert p.flush(30) == 0
    return n


def read_all(kafka: SecureKafka, topic: str, user: str = "fencewatch") -> list[bytes]:
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    c = Consumer(
        {
            **kafka.librdkafka(user),
            "group.id": "probe",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    out: list[bytes] = []
    try:
        meta = c.list_topics(topic, timeout=20)
        parts = list(meta.topics[topic].partitions)
        c.assign([TopicPartition(topic, q, 0) for q in parts])
        pending = set(parts)
        deadline = time.monotonic() + 30
        while pending and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    pending.discard(m.partition())
                continue
            out.append(m.value())
    finally:
        c.close()
    return out


def one_line(done: subprocess.CompletedProcess[str], command: str) -> str:
    """The error line: stderr holds only the command's own lines (``fencewatch CMD:
    ...``; no client log lines, no traceback), and the last one is the error."""
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines, "nothing on stderr"
    foreign = [line for line in lines if not line.startswith(f"fencewatch {command}")]
    assert not foreign, f"stderr has more than the command's own lines:\n{done.stderr[-3000:]}"
    return lines[-1]


def assert_no_secret(kafka: SecureKafka, *texts: str) -> None:
    for user in ("fencewatch", "reader", "admin"):
        secret = kafka.password(user)
        for text in texts:
            assert secret not in text


@pytest.mark.timeout(600)
def test_entry_points_work_with_credentials_from_the_environment(
    secure_kafka: SecureKafka, tmp_path: Path
) -> None:
    """As `fencewatch` with SASL_SSL settings from FENCEWATCH_* variables: `topics create`
    makes the topics, `run` turns the SPEC §5 fixture into its four findings, `audit --topic`
    and `findings` read them back; the password is in none of their outputs, the worker's
    log, /health or /proc/<pid>/cmdline."""
    kafka = secure_kafka
    events, findings, dlq, app_id = kafka.names()
    env = kafka.env("fencewatch")
    created = fencewatch(
        ["topics", "create", "--events-topic", events, "--findings-topic", findings,
         "--dlq-topic", dlq, "--partitions", "2"],
        env,
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    n = produce_fixture(kafka, events)

    worker_env = {
        **env,
        "FENCEWATCH_EVENTS_TOPIC": events,
        "FENCEWATCH_FINDINGS_TOPIC": findings,
        "FENCEWATCH_DLQ_TOPIC": dlq,
        "FENCEWATCH_APP_ID": app_id,
        "FENCEWATCH_DATA_DIR": str(tmp_path / "data"),
        "FENCEWATCH_LOG_LEVEL": "debug",
    }
    w = WorkerProcess(worker_env, tmp_path / "worker.log", cwd=REPO)
    try:
        health = w.wait_ready(180)
        w.wait_processed(n, timeout=120)
        cmdline = Path(f"/proc/{w.proc.pid}/cmdline").read_bytes().decode(errors="replace")
        environ_shown = json.dumps(health)
        metrics = w.metrics()
    finally:
        w.stop()
    log = w.tail(10_000_000)
    latest = {}
    for value in read_all(kafka, findings):
        doc = json.loads(value)
        latest[doc["finding_id"]] = doc
    assert len(latest) == 4, log[-3000:]

    audit = fencewatch(["audit", "--topic", events, "--format", "json", "--fail-on", "never"], env)
    assert audit.returncode == 0, audit.stderr
    assert len(json.loads(audit.stdout)["findings"]) == 4

    listed = fencewatch(["findings", "--topic", findings, "--format", "jsonl"], env)
    assert listed.returncode == 0, listed.stderr
    assert len([x for x in listed.stdout.splitlines() if x.strip()]) == 4

    assert_no_secret(
        kafka,
        created.stdout + created.stderr,
        audit.stdout + audit.stderr,
        listed.stdout + listed.stderr,
        log,
        cmdline,
        environ_shown,
        metrics,
    )


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    "command",
    [
        ["topics", "create", "--events-topic", "ownership.events-refused"],
        ["audit", "--topic", "ownership.events-refused"],
        ["findings", "--topic", "ownership.findings-refused"],
        ["run", "--events-topic", "ownership.events-refused", "--app-id", "fencewatch-refused"],
    ],
    ids=["topics-create", "audit-topic", "findings", "run"],
)
@pytest.mark.parametrize("credentials", ["wrong-password", "none"])
def test_bad_or_missing_credentials_are_refused_in_one_line(
    secure_kafka: SecureKafka, tmp_path: Path, command: list[str], credentials: str
) -> None:
    """A wrong password (or no credentials at all against the TLS listener) makes each
    entry point exit non-zero within a bound, with one line on stderr naming the problem
    and the broker, never the password and no retry loop."""
    kafka = secure_kafka
    wrong = "not-the-password-" + kafka.password("fencewatch")[:6]
    env = (
        kafka.env("fencewatch", password=wrong)
        if credentials == "wrong-password"
        else kafka.env(None)
    )
    env["FENCEWATCH_DATA_DIR"] = str(tmp_path / "data")
    # A wrong password is refused by an event (librdkafka's error callback), so its
    # connect timeout is long: a slow SASL handshake on a busy machine must not turn the
    # refusal into a timeout. A plaintext client on the TLS port gets no answer at all:
    # there the timeout is what ends it, so it is short.
    env["FENCEWATCH_KAFKA_CONNECT_TIMEOUT"] = "30" if credentials == "wrong-password" else "3"
    done = fencewatch(command, env, timeout=REFUSED_WITHIN_S)
    assert done.returncode != 0
    line = one_line(done, command[0])
    prog = "fencewatch topics create" if command[0] == "topics" else f"fencewatch {command[0]}"
    if credentials == "wrong-password":
        # librdkafka's error callback saw the refusal: reported as what it is.
        assert line.startswith(f"{prog}: broker {kafka.bootstrap} refused the connection: "), line
        assert "SASL authentication error" in line, line
        assert line.endswith(
            "(check the SASL user, FENCEWATCH_SASL_PASSWORD, the mechanism and the CA)"
        ), line
    else:
        # A plaintext client on the TLS port: TCP is accepted, nothing answers.
        assert line.startswith(
            f"{prog}: no answer from broker {kafka.bootstrap} within 3 s (it accepts TCP"
            " connections; check the security settings and the broker's advertised listeners): "
        ), line
    assert wrong not in done.stdout + done.stderr
    assert_no_secret(kafka, done.stdout + done.stderr)


@pytest.mark.timeout(600)
def test_a_principal_without_rights_on_the_findings_topic_gets_an_authorization_error(
    secure_kafka: SecureKafka, tmp_path: Path
) -> None:
    """`reader` (no ACL on ownership.findings*) running the processor or reading findings
    gets one line naming the authorization failure and an exit, not a crash loop."""
    kafka = secure_kafka
    events, findings, dlq, app_id = kafka.names()
    made = fencewatch(
        ["topics", "create", "--events-topic", events, "--findings-topic", findings,
         "--dlq-topic", dlq],
        kafka.env("fencewatch"),
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    env = kafka.env("reader")
    run = fencewatch(
        ["run", "--events-topic", events, "--findings-topic", findings, "--dlq-topic", dlq,
         "--app-id", app_id, "--data-dir", str(tmp_path / "data")],
        env,
        timeout=REFUSED_WITHIN_S,
    )  # fmt: skip
    assert run.returncode != 0
    assert "authoriz" in one_line(run, "run").lower()
    listed = fencewatch(["findings", "--topic", findings], env, timeout=REFUSED_WITHIN_S)
    assert listed.returncode != 0
    assert "authoriz" in one_line(listed, "findings").lower()
    assert_no_secret(kafka, run.stdout + run.stderr, listed.stdout + listed.stderr)


def test_settings_never_show_the_password(secure_kafka: SecureKafka) -> None:
    """The connection settings built from the environment keep the password out of
    repr/str, and so out of every log line and error built from them."""
    from streams.live.settings import settings_from_env

    env = secure_kafka.env("fencewatch")
    settings: Any = settings_from_env(env)
    for text in (repr(settings), str(settings)):
        assert secure_kafka.password("fencewatch") not in text
        assert "fencewatch" in text  # the user name is not a secret


@pytest.mark.timeout(300)
def test_sdk_and_outbox_connect_with_credentials_from_the_environment(
    secure_kafka: SecureKafka, tmp_path: Path
) -> None:
    """The SDK reporter and the outbox producer, given connection_from_env(FENCEWATCH_*),
    publish over SASL_SSL as `fencewatch` (events read back), and neither the connection's
    nor the settings' repr shows the password."""
    from streams.fences import SqlLeaseStore, open_database
    from streams.fences.outbox import Outbox, OutboxProducer, OutboxSettings
    from streams.kafka.connection import connection_from_env
    from streams.sdk import OwnershipReporter, ReporterSettings

    kafka = secure_kafka
    events, effects, _dlq, _app = kafka.names()
    made = fencewatch(
        ["topics", "create", "--events-topic", events, "--findings-topic", effects],
        kafka.env("fencewatch"),
    )
    assert made.returncode == 0, made.stderr
    conn = connection_from_env(kafka.env("fencewatch"))

    settings = ReporterSettings(conn, "alpha", topic=events)
    with OwnershipReporter(settings) as rep:
        for i in range(20):
            rep.emit(EventType.PROGRESS, "wf-sdk", 1, seq=i + 1)
    assert len(read_all(kafka, events)) == 20

    db = open_database(f"sqlite:///{tmp_path / 'owner.db'}")
    try:
        lease = SqlLeaseStore(db).acquire("wf-outbox", "alpha", ttl=60)
        Outbox(db).stage("wf-outbox", lease.epoch, "effect-1", b"payload")
        box = OutboxProducer(
            db,
            OutboxSettings(conn, effects, op_timeout_s=30),
            workflow_key="wf-outbox",
            epoch=lease.epoch,
            worker_id="alpha",
        )
        try:
            box.init()
            assert box.publish_pending() == 1
        finally:
            box.close()
    finally:
        db.close()
    assert read_all(kafka, effects) == [b"payload"]
    assert_no_secret(kafka, repr(conn), str(conn), repr(settings))
