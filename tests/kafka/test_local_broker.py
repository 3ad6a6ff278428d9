"""``fencewatch local`` (issue 44): a pip user's broker. From the wheel,
installed non-editable into a fresh virtualenv and run from a directory
outside the checkout, ``local start`` gives a bootstrap address that
``publish`` and ``audit --topic`` use, ``status`` reports it, ``stop`` stops
it. Without Java: one line pointing to Docker. The jar list the script
downloads is the Kafka version the project runs."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from streams.cli import main
from streams.kafka.local_broker import missing_requirement
from tests.support.installed import Installed

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.kafka
@pytest.mark.slow
@pytest.mark.timeout(1200)  # when first: the compiled wheel's build (cached) and its venv
def test_local_start_from_the_installed_wheel_gives_a_working_broker(
    installed: Installed, tmp_path: Path
) -> None:
    """Wheel in a fresh venv, from a temp dir: local start prints a bootstrap that publish,
    audit --topic (the four SPEC §5 findings) and the packaged outbox example use; status says
    running, stop stops it."""
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = installed.env()
    env["FENCEWATCH_KAFKA_DIR"] = str(tmp_path / "state")
    # The script's watchdog stops the broker if this pytest dies without teardown.
    env["FENCEWATCH_KAFKA_OWNER_PID"] = str(os.getpid())
    if "FENCEWATCH_CACHE" in os.environ:  # the jars already downloaded, not again
        env["FENCEWATCH_CACHE"] = os.environ["FENCEWATCH_CACHE"]
    fencewatch = installed.fencewatch

    def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [fencewatch, *args], cwd=work, env=env, capture_output=True, text=True, timeout=timeout
        )

    spec = Path(cli("spec").stdout.strip())  # what every SPEC §N names, packaged
    assert spec.is_relative_to(installed.venv) and spec.name == "spec.md", spec
    assert cli("spec", "5").stdout.startswith("## 5. The reference fixture\n")

    before = cli("local", "status")
    assert (before.returncode, before.stdout) == (3, "stopped\n"), before
    started = cli("local", "start", timeout=300)
    try:
        assert started.returncode == 0, started.stderr[-3000:]
        assert re.fullmatch(r"127\.0\.0\.1:\d+\n", started.stdout), started.stdout
        bootstrap = started.stdout.strip()
        assert "fencewatch local: ready" in started.stderr  # its own name, not the script's
        status = cli("local", "status")
        assert status.returncode == 0, status
        assert f"bootstrap={bootstrap}" in status.stdout
        pid = int(re.search(r"pid=(\d+)", status.stdout).group(1))  # type: ignore[union-attr]

        created = cli("topics", "create", "--bootstrap-servers", bootstrap)
        assert created.returncode == 0, created.stderr
        fixture = cli("demo", "fixture", "--path").stdout.strip()
        sent = cli("publish", "--bootstrap-servers", bootstrap, fixture)
        assert sent.returncode == 0, sent.stderr
        assert sent.stdout == "published 16 event(s) to ownership.events\n"
        audit = cli(
            "audit", "--topic", "ownership.events", "--bootstrap-servers", bootstrap,
            "--format", "json",
        )  # fmt: skip
        assert audit.returncode == 1, audit.stderr
        assert len(json.loads(audit.stdout)["findings"]) == 4

        # The packaged example runs as a command, as docs/fences.md writes it.
        example = Path(cli("demo", "files").stdout.strip()) / "examples" / "fence_boundaries.py"
        outbox = subprocess.run(
            [str(example), "outbox"], cwd=work, capture_output=True, text=True, timeout=120,
            env={**env, "FENCEWATCH_BOOTSTRAP_SERVERS": bootstrap},
        )  # fmt: skip
        assert outbox.returncode == 0, outbox.stderr[-3000:]
        assert "the consumer applies it: committed" in outbox.stdout, outbox.stdout
    finally:
        stopped = cli("local", "stop")
    assert stopped.returncode == 0, stopped.stderr
    after = cli("local", "status")
    assert (after.returncode, after.stdout) == (3, "stopped\n"), after
    assert not Path(f"/proc/{pid}").exists()  # the JVM is gone, not just unlisted


def test_local_start_without_java_is_one_line_pointing_to_docker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No java on PATH: local start exits 2 with one line naming Java 17+ and the Docker way."""
    only_bash = tmp_path / "bin"
    only_bash.mkdir()
    (only_bash / "bash").symlink_to("/bin/bash")
    monkeypatch.setenv("PATH", str(only_bash))
    monkeypatch.setenv("FENCEWATCH_KAFKA_DIR", str(tmp_path / "state"))
    assert main(["local", "start"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("fencewatch local: needs Java 17+ on PATH")
    assert "docker compose up -d" in err[0] and "apache/kafka:" in err[0]
    assert not (tmp_path / "state").exists()  # nothing started, nothing written


def test_missing_requirement_names_bash_before_java() -> None:
    """Without bash the script cannot run at all: that is what is named."""
    assert "bash" in (missing_requirement({"bash": None, "java": None}) or "")
    assert missing_requirement({"bash": "/bin/bash", "java": "/usr/bin/java"}) is None
    # status and stop run no JVM: no Java is fine for them.
    assert missing_requirement({"bash": "/bin/bash", "java": None}, java=False) is None


def test_the_jar_list_is_for_the_kafka_version_the_project_runs() -> None:
    """scripts/kafka-jars lists the version in scripts/kafka-version, each jar with a SHA-256."""
    version = (ROOT / "scripts" / "kafka-version").read_text().strip()
    lines = (ROOT / "scripts" / "kafka-jars").read_text().splitlines()
    assert f"# kafka {version}" in lines
    jars = [line.split() for line in lines if line and not line.startswith("#")]
    assert any(path.endswith(f"/kafka_2.13-{version}.jar") for _, path in jars)
    assert all(re.fullmatch(r"[0-9a-f]{64}", digest) for digest, _ in jars)
    assert all(path.endswith(".jar") and not path.startswith("/") for _, path in jars)


def _jar_repository(tmp_path: Path) -> Path:
    """A Maven-layout repository of the jars scripts/kafka-jars lists (file:// for curl),
    symlinked from the jar cache (filled with scripts/kafka-local fetch when empty)."""
    cache = subprocess.run(
        [str(ROOT / "scripts" / "kafka-local"), "fetch"],
        capture_output=True, text=True, check=True, timeout=600,
    ).stdout.strip()  # fmt: skip
    repo = tmp_path / "repo"
    for line in (ROOT / "scripts" / "kafka-jars").read_text().splitlines():
        if line and not line.startswith("#"):
            path = line.split()[1]
            (repo / path).parent.mkdir(parents=True, exist_ok=True)
            (repo / path).symlink_to(Path(cache) / Path(path).name)
    return repo


def _fetch_without_maven(
    tmp_path: Path, repo: Path
) -> tuple[subprocess.CompletedProcess[str], Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    called = tmp_path / "mvn-called"
    mvn = bin_dir / "mvn"  # first on PATH: any call to Maven leaves a mark
    mvn.write_text(f"#!/bin/sh\ntouch {called}\nexit 99\n")
    mvn.chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "FENCEWATCH_CACHE": str(tmp_path / "cache"),
        "FENCEWATCH_MAVEN_REPO": repo.as_uri(),
    }
    proc = subprocess.run(
        [str(ROOT / "scripts" / "kafka-local"), "fetch"],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert not called.exists(), "Maven was called"
    return proc, tmp_path / "cache"


def test_a_first_fetch_needs_no_maven_and_checks_every_jar(tmp_path: Path) -> None:
    """The listed jars come through curl alone, each checked; the cache is marked complete."""
    repo = _jar_repository(tmp_path)
    proc, cache = _fetch_without_maven(tmp_path, repo)
    assert proc.returncode == 0, proc.stderr
    version = (ROOT / "scripts" / "kafka-version").read_text().strip()
    libs = cache / f"kafka-{version}" / "libs"
    assert proc.stdout.strip() == str(libs)
    assert (libs.parent / ".complete").is_file()
    listed = (ROOT / "scripts" / "kafka-jars").read_text().splitlines()
    assert len(list(libs.glob("*.jar"))) == len([ln for ln in listed if ln[:1] not in ("", "#")])


def test_a_jar_that_does_not_match_its_digest_fails_the_fetch_and_caches_nothing(
    tmp_path: Path,
) -> None:
    """A corrupted download (or a wrong mirror) is named with both digests; no cache is left."""
    repo = _jar_repository(tmp_path)
    victim = next(repo.rglob("kafka-clients-*.jar"))
    victim.unlink()  # a symlink to the cache: replace it, never write through it
    victim.write_bytes(b"not the jar")
    proc, cache = _fetch_without_maven(tmp_path, repo)
    assert proc.returncode != 0
    assert f"{victim.name}: SHA-256 " in proc.stderr and ", expected " in proc.stderr
    assert not list(cache.glob("kafka-*/.complete"))
    assert not list(cache.glob("kafka-*.tmp.*"))  # the partial download is removed


def test_a_port_out_of_range_is_one_line_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """local start --port 70000: exit 2, one line naming the flag; no state directory made."""
    monkeypatch.setenv("FENCEWATCH_KAFKA_DIR", str(tmp_path / "state"))
    assert main(["local", "start", "--port", "70000"]) == 2
    assert capsys.readouterr().err == "fencewatch local: --port must be 1..65535, got 70000\n"
    assert not (tmp_path / "state").exists()
