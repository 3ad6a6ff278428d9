"""``fencewatch demo``: the live and split-brain demos against the real broker,
their findings read back independently from the findings topic, and their
children always stopped."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streams.cli import main
from streams.kafka.admin import TopicAdmin
from streams.kafka.connection import KafkaConnection
from streams.kafka.reader import iter_topic
from tests.support.dropped_sigint import dropped_sigint_argv

REPO = Path(__file__).resolve().parents[2]
_TOPICS = re.compile(r"topics: (\S+) -> (\S+) \(dead letters: (\S+)\)")
_RUN = re.compile(r"\(run ([0-9a-f]{8})\)")


def run_ids_alive(run_id: str) -> list[str]:
    """Command lines of live processes that belong to a demo run."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if run_id in cmd:
            found.append(cmd)
    return found


def delete_run(bootstrap: str, run_id: str) -> None:
    """Remove what a demo run kept (or left behind when killed)."""
    app = f"fencewatch-demo-{run_id}"
    TopicAdmin(KafkaConnection(bootstrap)).delete(
        [
            f"{app}.events",
            f"{app}.findings",
            f"{app}.events.dlq",
            f"{app}-owner-state-changelog",
            f"{app}-__assignor-__leader",
        ]
    )
    for leftover in Path(tempfile.gettempdir()).glob(f"{app}-*"):
        shutil.rmtree(leftover, ignore_errors=True)


class Demo:
    """One in-process ``fencewatch demo ... --keep-topics`` run."""

    def __init__(self, bootstrap: str, capsys: pytest.CaptureFixture[str], *args: str) -> None:
        self.bootstrap = bootstrap
        self.status = main(["demo", *args, "--bootstrap-servers", bootstrap, "--keep-topics"])
        self.out = capsys.readouterr().out
        topics = _TOPICS.search(self.out)
        run = _RUN.search(self.out)
        assert topics and run, self.out
        self.events, self.findings, self.dlq = topics.groups()
        self.run_id = run.group(1)

    def latest(self) -> dict[str, dict[str, Any]]:
        """Latest revision of each finding, read here (read_committed)."""
        latest: dict[str, dict[str, Any]] = {}
        for rec in iter_topic(KafkaConnection(self.bootstrap), self.findings, timeout=20):
            doc = json.loads(rec.value or b"")
            if (
                doc["finding_id"] not in latest
                or doc["revision"] > latest[doc["finding_id"]]["revision"]
            ):
                latest[doc["finding_id"]] = doc
        return latest

    def cleanup(self) -> None:
        delete_run(self.bootstrap, self.run_id)


@pytest.fixture
def demo(kafka_bootstrap: str, capsys: pytest.CaptureFixture[str]) -> Iterator[Any]:
    made: list[Demo] = []

    def run(*args: str) -> Demo:
        d = Demo(kafka_bootstrap, capsys, *args)
        made.append(d)
        return d

    yield run
    for d in made:
        d.cleanup()


def kinds(latest: dict[str, dict[str, Any]]) -> list[tuple[str, Any]]:
    return sorted(
        (d["kind"], d["sink_outcome"] if d["kind"] == "stale_attempt" else d["event_seq"])
        for d in latest.values()
    )


@pytest.mark.kafka
@pytest.mark.timeout(90)
def test_demo_live_exits_0_with_the_four_spec_findings_on_the_topic(demo: Any) -> None:
    """`demo live` exits 0, prints the four SPEC §5 findings, which are exactly
    what the findings topic holds (latest revisions), and leaves no process."""
    d = demo("live")
    assert d.status == 0, d.out
    latest = d.latest()
    assert sorted((x["workflow_key"], x["kind"], x["event_seq"]) for x in latest.values()) == [
        ("export-ledger", "conflicting_commit", 9),
        ("export-ledger", "stale_activity", 6),
        ("export-ledger", "stale_attempt", 7),
        ("export-ledger", "stale_commit", 8),
    ]
    for kind in ("stale_activity", "stale_attempt", "stale_commit", "conflicting_commit"):
        assert re.search(rf"^\s+\w+\s+{kind}\s+seq \d", d.out, re.M), d.out
    assert run_ids_alive(d.run_id) == []


@pytest.mark.kafka
@pytest.mark.timeout(90)
def test_demo_live_with_a_custom_fixture_expects_its_file_audit(demo: Any, tmp_path: Path) -> None:
    """`demo live --fixture FILE` with a file that is not SPEC §5 is judged by the file's
    own audit (its findings, its invalid line dead-lettered) and exits 0."""
    path = tmp_path / "custom.jsonl"
    path.write_bytes(
        b'{"type":"lease_acquired","workflow_key":"demo-custom/1","epoch":1,"worker_id":"a"}\n'
        b'{"type":"lease_acquired","workflow_key":"demo-custom/1","epoch":2,"worker_id":"b"}\n'
        b'{"type":"progress","workflow_key":"demo-custom/1","epoch":1,"worker_id":"a"}\n'
        b'{"type":"progress","workflow_key":"demo-custom/1","epoch":"x","worker_id":"a"}\n'
    )
    d = demo("live", "--fixture", str(path))
    assert d.status == 0, d.out
    assert (
        "as expected: the 1 finding of `fencewatch audit custom.jsonl` and 1 dead letter" in d.out
    )
    assert [x["kind"] for x in d.latest().values()] == ["stale_activity"]


@pytest.mark.kafka
@pytest.mark.timeout(90)
def test_demo_split_brain_fenced_shows_a_rejected_near_miss(demo: Any) -> None:
    """Fenced: worker-a's late effect is rejected; the findings topic holds its
    stale progress and a stale_attempt with sink outcome rejected, and no
    stale_commit or conflicting_commit; exit 0; no process left."""
    d = demo("split-brain")
    assert d.status == 0, d.out
    latest = d.latest()
    assert [
        (x["kind"], x["sink_outcome"]) for x in latest.values() if x["kind"] == "stale_attempt"
    ] == [("stale_attempt", "rejected")]
    assert sorted(x["kind"] for x in latest.values()) == ["stale_activity", "stale_attempt"]
    assert {(x["stale_epoch"], x["stale_worker"], x["current_epoch"]) for x in latest.values()} == {
        (1, "worker-a", 2)
    }
    assert "rejected (stale_epoch, current epoch 2)" in d.out
    assert run_ids_alive(d.run_id) == []


@pytest.mark.kafka
@pytest.mark.timeout(90)
def test_demo_split_brain_unfenced_shows_stale_and_conflicting_commits(demo: Any) -> None:
    """Unfenced: worker-a's late effect is written; the findings topic holds
    stale_commit and conflicting_commit (epochs 1 and 2) next to the stale
    progress and the committed stale_attempt; exit 0."""
    d = demo("split-brain", "--unfenced")
    assert d.status == 0, d.out
    latest = d.latest()
    by_kind = {x["kind"]: x for x in latest.values()}
    assert sorted(by_kind) == [
        "conflicting_commit",
        "stale_activity",
        "stale_attempt",
        "stale_commit",
    ]
    assert len(latest) == 4
    assert by_kind["stale_attempt"]["sink_outcome"] == "committed"
    assert by_kind["conflicting_commit"]["epochs"] == [1, 2]
    assert by_kind["stale_commit"]["stale_worker"] == "worker-a"
    assert "written 2 time(s)" in d.out
    assert run_ids_alive(d.run_id) == []


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _split_brain_argv(bootstrap: str) -> list[str]:
    # A 30 s lease: worker-b cannot take over (and worker-a is not resumed)
    # for 30 s, so worker-a is still frozen whenever the test acts.
    return [
        "demo",
        "split-brain",
        "--bootstrap-servers",
        bootstrap,
        "--tool-seconds",
        "2",
        "--ttl",
        "30",
    ]


def _popen(argv: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        argv,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        # Ctrl-C as at a terminal: a suite started as a background job of a
        # non-interactive shell inherits SIGINT ignored, and Python then
        # leaves it ignored (the demo would never see the test's SIGINT).
        preexec_fn=_default_sigint,
    )


def _read_until(proc: subprocess.Popen[str], marker: str) -> tuple[str, list[str]]:
    """The run id and the lines read until one holds ``marker`` (or the end)."""
    assert proc.stdout is not None
    run_id, seen = "", []
    for line in proc.stdout:
        seen.append(line)
        if m := _RUN.search(line):
            run_id = m.group(1)
        if marker in line:
            break
    return run_id, seen


def _frozen(run_id: str, worker: str) -> bool:
    """Whether the run's ``worker`` process is stopped (SIGSTOP)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if any(run_id.encode() in a for a in cmd) and worker.encode() in cmd:
            return stat.rsplit(")", 1)[1].split()[0] == "T"
    return False


def _start_demo(bootstrap: str) -> tuple[subprocess.Popen[str], str]:
    """A split-brain demo in a subprocess, read until it waits for worker-b
    with worker-a frozen (the lease line it says after the freeze, its
    imports done); returns it and its run id."""
    proc = _popen([sys.executable, "-m", "streams", *_split_brain_argv(bootstrap)])
    run_id, seen = _read_until(proc, "lease store: epoch 1 held by worker-a")
    assert run_id and "lease store: epoch 1" in seen[-1], "".join(seen)
    assert len(run_ids_alive(run_id)) >= 3  # processor, worker-a, worker-b (and guards exec'd)
    assert _frozen(run_id, "worker-a"), "".join(seen)
    return proc, run_id


def _gone(run_id: str, timeout: float = 30.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while (left := run_ids_alive(run_id)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def _interrupted_once(out: str) -> None:
    """The demo's output ends its story with the one line of a Ctrl-C, and
    Python printed no dropped exception or traceback."""
    assert out.count("interrupted\n") == 1, out
    assert "Exception ignored" not in out, out
    assert "Traceback" not in out, out


@pytest.mark.kafka
@pytest.mark.timeout(90)
def test_ctrl_c_stops_every_child_including_the_paused_worker(kafka_bootstrap: str) -> None:
    """SIGINT to the demo alone (its children do not get it) while worker-a is
    frozen: the demo exits 130 and the processor and both workers are gone."""
    proc, run_id = _start_demo(kafka_bootstrap)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out
    _interrupted_once(out)
    assert _gone(run_id, timeout=5) == []
    delete_run(kafka_bootstrap, run_id)


@pytest.mark.kafka
@pytest.mark.timeout(90)
def test_a_ctrl_c_python_drops_after_the_freeze_still_stops_the_demo(
    kafka_bootstrap: str,
) -> None:
    """The flake: a SIGINT that lands inside a weakref callback (the end of an
    import) right after worker-a is frozen is dropped by Python; the demo
    still stops, exits 130 with one line, and leaves no child behind (it used
    to run on and exit 0)."""
    proc = _popen(dropped_sigint_argv("open_database", *_split_brain_argv(kafka_bootstrap)))
    run_id, seen = _read_until(proc, "SIGSTOP worker-a")
    assert run_id and "SIGSTOP worker-a" in seen[-1], "".join(seen)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, "".join(seen) + out
    _interrupted_once(out)
    assert "as expected" not in out  # the story did not run on to its end
    assert _gone(run_id, timeout=5) == []
    delete_run(kafka_bootstrap, run_id)


@pytest.mark.kafka
@pytest.mark.timeout(90)
def test_an_early_ctrl_c_python_drops_while_the_cli_imports_stops_the_demo(
    kafka_bootstrap: str,
) -> None:
    """A SIGINT dropped while the command line is still being parsed (the
    demo's module being imported): exit 130, one line, no child left."""
    proc = _popen(dropped_sigint_argv("import:demo", *_split_brain_argv(kafka_bootstrap)))
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out
    _interrupted_once(out)
    assert "SIGSTOP worker-a" not in out  # stopped well before the story's middle
    if run := _RUN.search(out):
        assert _gone(run.group(1), timeout=5) == []
        delete_run(kafka_bootstrap, run.group(1))


@pytest.mark.kafka
@pytest.mark.timeout(90)
def test_children_die_with_a_killed_demo(kafka_bootstrap: str) -> None:
    """SIGKILL of the demo (no cleanup code runs): the processor and both
    workers still end, through the parent-death signal."""
    proc, run_id = _start_demo(kafka_bootstrap)
    proc.kill()
    proc.wait(10)
    assert _gone(run_id) == []
    delete_run(kafka_bootstrap, run_id)


def test_demo_without_a_broker_address_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No --bootstrap-servers and no KAFKA_BOOTSTRAP: exit 2 with a message."""
    monkeypatch.delenv("KAFKA_BOOTSTRAP", raising=False)
    assert main(["demo", "live"]) == 2
    assert "bootstrap servers are required (--bootstrap-servers" in capsys.readouterr().err
