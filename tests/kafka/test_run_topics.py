"""`fencewatch run` creates only the topics it was told to (issue 23): a named
topic that does not exist is an error unless --create-topics, and each topic
it creates is one line."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

from streams.kafka import TopicAdmin

ROOT = Path(__file__).resolve().parents[2]


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FENCEWATCH_")}
    return subprocess.run(
        [sys.executable, "-m", "streams", "run", *args],
        cwd=cwd, env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip


def test_a_mistyped_topic_is_refused_and_nothing_is_created(
    kafka_bootstrap: str, kafka_admin: TopicAdmin, tmp_path: Path
) -> None:
    """--events-topic naming a topic that does not exist: one line, exit 2, neither it nor
    its DLQ created, no local state (was: both created in silence)."""
    typo = f"ownership.evnts-{uuid.uuid4().hex[:8]}"
    proc = _run(["--bootstrap-servers", kafka_bootstrap, "--events-topic", typo], tmp_path)
    assert proc.returncode == 2
    assert proc.stderr == (
        f"fencewatch run: topic {typo} does not exist on {kafka_bootstrap}: check the name, "
        "or give --create-topics to create it\n"
    )
    assert kafka_admin.partitions([typo, f"{typo}.dlq"]) == {}
    assert not (tmp_path / ".fencewatch").exists()


def test_create_topics_creates_them_one_line_each(
    kafka_bootstrap: str, kafka_admin: TopicAdmin, tmp_path: Path
) -> None:
    """--create-topics creates the named topics and says so per topic (the run then stops
    on a data directory that is a file, after the topics)."""
    tag = uuid.uuid4().hex[:8]
    names = [f"rt-events-{tag}", f"rt-findings-{tag}", f"rt-status-{tag}"]
    not_a_dir = tmp_path / "state"
    not_a_dir.write_text("")
    try:
        proc = _run(
            ["--bootstrap-servers", kafka_bootstrap, "--create-topics", "--partitions", "2",
             "--events-topic", names[0], "--findings-topic", names[1], "--status-topic",
             names[2], "--data-dir", str(not_a_dir)],
            tmp_path,
        )  # fmt: skip
        created = [ln for ln in proc.stderr.splitlines() if "created topic" in ln]
        assert sorted(created) == sorted(
            f"fencewatch run: created topic {n} (2 partitions)" for n in [*names, f"{names[0]}.dlq"]
        ), proc.stderr
        assert proc.returncode == 2  # the data directory, after the topics
        assert set(kafka_admin.partitions([*names, f"{names[0]}.dlq"]).values()) == {2}
    finally:
        kafka_admin.delete([*names, f"{names[0]}.dlq"])
