"""`fencewatch source etcd` against a real etcd (built by scripts/etcd-local,
cached) and a real broker: a frozen leader's evidence after its successor's
election is a high-confidence finding; a source killed with -9 mid-stream and
restarted loses and duplicates nothing; bad values are skipped and counted;
a compacted resume point is resynced from a snapshot."""

from __future__ import annotations

import base64
import json
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from streams.core.records import Event
from streams.core.validate import parse_event
from streams.demo.processes import Child, Children
from streams.integrations.etcd import EtcdClient
from streams.kafka.connection import KafkaConnection
from streams.kafka.reader import iter_topic
from tests.integrations.conftest import replay_topic, wait_step
from tests.support.worker import free_port

ROOT = Path(__file__).resolve().parents[2]
WORKER = ROOT / "examples" / "etcd_worker.py"


def _etcd_binary() -> str:
    built = subprocess.run(
        [str(ROOT / "scripts" / "etcd-local"), "build"], capture_output=True, text=True
    )
    if built.returncode != 0:
        pytest.fail(f"scripts/etcd-local build failed:\n{built.stderr[-3000:]}", pytrace=False)
    return built.stdout.strip().splitlines()[-1]


def _start_etcd(binary: str, work: Path, client: int, peer: int) -> subprocess.Popen[bytes]:
    """etcd on ``client``/``peer`` with its data in ``work``; returns once healthy."""
    url = f"http://127.0.0.1:{client}"
    argv = [binary, "--name", "t", "--data-dir", str(work / "data")]
    argv += ["--listen-client-urls", url, "--advertise-client-urls", url]
    argv += ["--listen-peer-urls", f"http://127.0.0.1:{peer}"]
    argv += ["--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}"]
    argv += ["--initial-cluster", f"t=http://127.0.0.1:{peer}"]
    with (work / "etcd.log").open("ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(url + "/health", timeout=1) as resp:
                if json.loads(resp.read()).get("health") == "true":
                    return proc
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            _stop_etcd(proc)
            pytest.fail(f"etcd did not start: {(work / 'etcd.log').read_text()[-2000:]}")
        time.sleep(0.1)


def _stop_etcd(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(15)


@pytest.fixture(scope="module")
def etcd_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A private single-member etcd 3.7 on free ports with a temp data dir
    (the binary built once into the cache by scripts/etcd-local); stopped after."""
    client = free_port()
    proc = _start_etcd(_etcd_binary(), tmp_path_factory.mktemp("etcd"), client, free_port())
    try:
        yield f"http://127.0.0.1:{client}"
    finally:
        _stop_etcd(proc)


def _source(
    children: Children, tmp: Path, name: str, etcd: str, prefix: str, topic: str, kafka: str
) -> Child:
    argv = [sys.executable, "-m", "streams", "source", "etcd", "--endpoints", etcd]
    argv += ["--prefix", prefix, "--events-topic", topic, "--state-topic", f"{topic}.state"]
    argv += ["--bootstrap-servers", kafka]
    return children.start(name, argv, log_path=tmp / f"{name}.log", death_signal=signal.SIGKILL)


def _worker(
    children: Children, tmp: Path, name: str, etcd: str, election: str, topic: str, kafka: str
) -> Child:
    argv = [sys.executable, str(WORKER), "--endpoints", etcd, "--election", election]
    argv += ["--worker", name, "--ttl", "2", "--steps", "400", "--interval", "0.1"]
    argv += ["--bootstrap-servers", kafka, "--topic", topic]
    return children.start(
        name, argv, log_path=tmp / f"{name}.log", lines=children.lines, death_signal=signal.SIGKILL
    )


def _events(kafka: str, topic: str) -> list[Event]:
    return [
        parse_event(v, key=k) for k, v, _p, _o in iter_topic(KafkaConnection(kafka), topic) if v
    ]


def _until(what: str, check: Callable[[], Any], timeout: float, child: Child) -> Any:
    """Poll ``check`` until it returns something true (a bound, not a timing claim)."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if child.poll() is not None:
            pytest.fail(f"{child.name} exited ({child.poll()}): {child.tail()}", pytrace=False)
        if time.monotonic() > deadline:
            pytest.fail(f"{what} not seen within {timeout} s: {child.tail()}", pytrace=False)
        time.sleep(0.2)


def _watching(source: Child) -> None:
    """Wait until the source has started its watch (its first transaction is in)."""
    _until("the source's watch", lambda: "watching" in source.log_path.read_text(), 60, source)


@pytest.fixture
def topic(unique_topic: Callable[..., str]) -> Iterator[str]:
    name = unique_topic()
    unique_topic(prefix=f"{name}.state", config={"cleanup.policy": "compact"})
    yield name


def test_a_frozen_leader_woken_after_its_successor_gives_a_high_confidence_finding(
    children: Children, tmp_path: Path, kafka_bootstrap: str, etcd_url: str, topic: str
) -> None:
    """alpha leads the election, beta waits; alpha is frozen (SIGSTOP) past its
    2 s lease, etcd deletes its key and beta leads; the source publishes beta's
    lease_acquired at that revision; alpha wakes, reports progress at its old
    epoch (stamped by etcd) and exits 3; the detector reports stale_activity for
    alpha's epoch, confidence high, transition explicit."""
    prefix = f"/election-{uuid.uuid4().hex[:8]}/"
    election = prefix + "export"
    source = _source(children, tmp_path, "source", etcd_url, prefix, topic, kafka_bootstrap)
    alpha = _worker(children, tmp_path, "alpha", etcd_url, election, topic, kafka_bootstrap)
    a_epoch = wait_step(children, "alpha", "leader", 60)["epoch"]
    wait_step(children, "alpha", "progress", 60)
    beta = _worker(children, tmp_path, "beta", etcd_url, election, topic, kafka_bootstrap)
    b_epoch = wait_step(children, "beta", "campaigning", 60)["epoch"]
    alpha.pause()
    assert wait_step(children, "beta", "leader", 60)["epoch"] == b_epoch > a_epoch

    def beta_acquired() -> list[Event]:
        return [
            e
            for e in _events(kafka_bootstrap, topic)
            if e.type.value == "lease_acquired" and e.epoch == b_epoch
        ]

    (acq,) = _until("beta's lease_acquired", beta_acquired, 60, source)
    assert acq.worker_id == "beta" and acq.workflow_key == election
    assert acq.seq is not None and acq.seq > b_epoch  # at alpha's deletion, not beta's creation
    assert acq.attrs is not None and acq.attrs["previous_epoch"] == a_epoch
    alpha.resume()
    displaced = wait_step(children, "alpha", "displaced", 60)
    assert displaced["current_epoch"] == b_epoch
    assert alpha.wait(30) == 3, alpha.tail()
    wait_step(children, "beta", "progress", 30)
    beta.stop()
    # A SIGTERM resigns: beta's key is gone now, not when its 2 s lease runs out.
    assert EtcdClient(etcd_url).range_prefix(election.encode())[1] == []
    source.stop()

    replay = replay_topic(kafka_bootstrap, topic)
    assert replay.invalid_count == 0
    stale = [f for f in replay.latest_findings() if f.stale_epoch == a_epoch]
    assert [(f.kind.value, f.stale_worker, f.current_epoch, f.current_worker) for f in stale] == [
        ("stale_activity", "alpha", b_epoch, "beta")
    ]
    (finding,) = stale
    assert finding.confidence.value == "high"
    assert finding.ordering == "authoritative" and finding.transition_implied is False
    assert finding.transition_seq == acq.seq


def _churn(etcd: EtcdClient, prefix: str, n: int) -> list[tuple[str, str, int, int]]:
    """n elections, each a candidate created then deleted: the expected
    (type, election, epoch, seq) of each, in etcd's order."""
    gw = etcd.gateway

    def revision(path: str, key: str, **body: str) -> int:
        # The revision etcd gave this very write (its response header): the
        # store's revision read after it may already count a foreign write,
        # such as the previous test's worker lease expiring.
        out = gw.post(gw.get_url(path), json={"key": _b64(key), **body})
        return int(out["header"]["revision"])

    expected = []
    for i in range(n):
        election = f"{prefix}job{i:03d}"
        key = f"{election}/k"
        created = revision("/kv/put", key, value=_b64(f"w{i}"))
        deleted = revision("/kv/deleterange", key)
        expected += [("lease_acquired", election, created, created)]
        expected += [("lease_released", election, created, deleted)]
    return expected


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _seen(kafka: str, topic: str) -> list[tuple[str, str, int, int | None]]:
    return [(e.type.value, e.workflow_key, e.epoch, e.seq) for e in _events(kafka, topic)]


def test_a_source_killed_mid_stream_resumes_without_loss_or_duplicates(
    children: Children, tmp_path: Path, kafka_bootstrap: str, etcd_url: str, topic: str
) -> None:
    """The source is killed with SIGKILL while 120 elections churn (a candidate
    created, then deleted, in each); restarted, it resumes from the revision in
    its state record: every transition is in the topic exactly once."""
    prefix = f"/churn-{uuid.uuid4().hex[:8]}/"
    etcd = EtcdClient(etcd_url)
    first = _source(children, tmp_path, "source1", etcd_url, prefix, topic, kafka_bootstrap)
    # The first start's snapshot transaction (empty prefix) marks it running.
    _watching(first)
    expected = _churn(etcd, prefix, 40)
    _until("some evidence", lambda: _seen(kafka_bootstrap, topic), 60, first)
    expected += _churn(etcd, prefix, 40)
    first.kill()
    partial = _seen(kafka_bootstrap, topic)
    expected += _churn(etcd, prefix, 40)
    second = _source(children, tmp_path, "source2", etcd_url, prefix, topic, kafka_bootstrap)
    _until(
        "every transition",
        lambda: len(_seen(kafka_bootstrap, topic)) >= len(expected),
        120,
        second,
    )
    second.stop()
    seen = _seen(kafka_bootstrap, topic)
    # Some evidence was out before the kill; the last 40 elections churned
    # while no source ran, so the second one had to resume from history.
    assert 0 < len(partial) < len(expected)
    assert "resuming" in (tmp_path / "source2.log").read_text()
    assert not [item for item, n in Counter(seen).items() if n > 1]
    assert sorted(seen, key=str) == sorted(expected, key=str)


def test_bad_values_are_skipped_and_counted_and_the_source_goes_on(
    children: Children, tmp_path: Path, kafka_bootstrap: str, etcd_url: str, topic: str
) -> None:
    """A leader whose value is 300 characters, and one whose value is not
    UTF-8, are each skipped with one line naming worker_id; the valid
    election after them is published."""
    prefix = f"/bad-{uuid.uuid4().hex[:8]}/"
    etcd = EtcdClient(etcd_url)
    source = _source(children, tmp_path, "source", etcd_url, prefix, topic, kafka_bootstrap)
    _watching(source)
    etcd.gateway.put(f"{prefix}long/k", "x" * 300)
    etcd.gateway.put(f"{prefix}binary/k", b"\xff\xfe\x00")
    etcd.gateway.put(f"{prefix}good/k", "gamma")
    (good,) = _until("the valid election", lambda: _events(kafka_bootstrap, topic), 60, source)
    assert (good.workflow_key, good.worker_id) == (f"{prefix}good", "gamma")
    assert source.poll() is None
    source.stop()
    log = (tmp_path / "source.log").read_text()
    skipped = [line for line in log.splitlines() if "skipped" in line and "worker_id" in line]
    assert len(skipped) == 2, log
    assert "Traceback" not in log
    assert "2 skipped" in log.splitlines()[-1]


def test_a_compacted_resume_point_is_resynced_from_a_snapshot(
    children: Children, tmp_path: Path, kafka_bootstrap: str, etcd_url: str, topic: str
) -> None:
    """Stopped, then its resume revision compacted away: the restarted source
    says so in one line and publishes an acquisition for the current leader,
    positioned at the snapshot's revision."""
    prefix = f"/compact-{uuid.uuid4().hex[:8]}/"
    etcd = EtcdClient(etcd_url)
    first = _source(children, tmp_path, "source1", etcd_url, prefix, topic, kafka_bootstrap)
    _watching(first)
    etcd.gateway.put(f"{prefix}a/1", "alpha")
    _until("alpha", lambda: _events(kafka_bootstrap, topic), 60, first)
    first.stop()
    etcd.gateway.put(f"{prefix}a/2", "beta")
    etcd.gateway.delete(f"{prefix}a/1")
    now = etcd.range_prefix(b"/")[0]
    etcd.gateway.post(etcd.gateway.get_url("/kv/compaction"), json={"revision": now})
    second = _source(children, tmp_path, "source2", etcd_url, prefix, topic, kafka_bootstrap)
    events = _until(
        "the resync",
        lambda: [e for e in _events(kafka_bootstrap, topic) if e.worker_id == "beta"],
        60,
        second,
    )
    second.stop()
    assert [(e.type.value, e.seq) for e in events] == [("lease_acquired", now)]
    lines = [
        line for line in (tmp_path / "source2.log").read_text().splitlines() if "compacted" in line
    ]
    assert len(lines) == 1


def test_the_docs_worker_lines_lead_and_report_progress_stamped_by_etcd(
    kafka_bootstrap: str, etcd_url: str, topic: str
) -> None:
    """The etcd section's worker lines run as written against the real etcd
    and broker: the worker leads and its progress carries its key's create
    revision as the epoch and an etcd revision past it as seq."""
    from streams.sdk import OwnershipReporter, ReporterSettings
    from tests.integrations.test_docs_snippets import _snippet

    code = _snippet("etcd")
    assert '"http://127.0.0.1:2379"' in code
    code = code.replace('"http://127.0.0.1:2379"', repr(etcd_url))
    election = f"/docs-{uuid.uuid4().hex[:8]}/export"
    with OwnershipReporter(ReporterSettings(kafka_bootstrap, "docs", topic=topic)) as reporter:
        names: dict[str, Any] = {"__name__": "docs", "election": election, "me": "docs"}
        names["reporter"] = reporter
        exec(compile(code, "<docs/integrations.md: etcd>", "exec"), names)
        reporter.flush()
    names["lease"].revoke()
    (event,) = _events(kafka_bootstrap, topic)
    assert (event.type.value, event.workflow_key, event.worker_id) == ("progress", election, "docs")
    assert event.epoch == names["epoch"] and event.seq is not None and event.seq > event.epoch


def test_the_source_rides_out_an_etcd_restart_without_loss_or_duplicates(
    children: Children, tmp_path: Path, kafka_bootstrap: str, topic: str
) -> None:
    """etcd (its own member here) is killed with SIGKILL while the source
    watches and restarted on its data: the source reconnects, watches on from
    its last revision, and every transition is in the topic exactly once."""
    binary, work = _etcd_binary(), tmp_path / "etcd"
    work.mkdir()
    client, peer = free_port(), free_port()
    url = f"http://127.0.0.1:{client}"
    proc = _start_etcd(binary, work, client, peer)
    try:
        prefix = "/restart/"
        source = _source(children, tmp_path, "source", url, prefix, topic, kafka_bootstrap)
        _watching(source)
        expected = _churn(EtcdClient(url), prefix, 20)
        _until("some evidence", lambda: _seen(kafka_bootstrap, topic), 60, source)
        proc.kill()
        proc.wait(15)
        _until("the reconnect", lambda: "reconnecting" in source.log_path.read_text(), 60, source)
        proc = _start_etcd(binary, work, client, peer)
        expected += _churn(EtcdClient(url), prefix + "later-", 20)
        _until(
            "every transition",
            lambda: len(_seen(kafka_bootstrap, topic)) >= len(expected),
            120,
            source,
        )
        source.stop()
    finally:
        _stop_etcd(proc)
    seen = _seen(kafka_bootstrap, topic)
    assert "etcd answers again" in source.log_path.read_text()
    assert not [item for item, n in Counter(seen).items() if n > 1]
    assert sorted(seen, key=str) == sorted(expected, key=str)


def test_an_unreachable_etcd_and_bad_arguments_are_one_line_each(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """No etcd at the endpoint, an endpoint that is no URL, a prefix without
    a leading '/': exit 2 and one line naming the problem, no traceback."""
    from streams.cli import main

    port = free_port()
    base = ["source", "etcd", "--bootstrap-servers", "127.0.0.1:9"]
    cases = [
        (["--endpoints", f"http://127.0.0.1:{port}", "--prefix", "/e/"], "did not answer"),
        (["--endpoints", "ftp://host", "--prefix", "/e/"], "etcd endpoint 'ftp://host'"),
        (["--endpoints", f"http://127.0.0.1:{port}", "--prefix", "e/"], "--prefix 'e/'"),
    ]
    for argv, needle in cases:
        assert main([*base, *argv]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and needle in err and "Traceback" not in err, err
