"""Every ```python block of docs/sdk.md and docs/fences.md runs as written
against a real broker, in a fresh directory: the broker placeholder
``"127.0.0.1:9092"`` becomes this run's broker (and a topic of this test),
names a block leaves to the reader's own code are defined, and each
``print(...)  # text`` line must print that text."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from streams.core.validate import parse_event
from streams.fences import FencedSink, SqlLeaseStore, open_database
from streams.kafka.connection import KafkaConnection
from streams.sdk import OwnershipReporter, ReporterSettings

DOCS = Path(__file__).resolve().parents[2] / "docs"
_PRINT = re.compile(r"^\s*print\(.*\)\s+#\s*(.+?)\s*$", re.M)


def _blocks(doc: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (DOCS / doc).read_text(), re.S)


def _run(
    doc: str,
    index: int,
    code: str,
    names: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
    broker: str,
    topic: str,
) -> dict[str, Any]:
    """Execute one block; check its printed lines against their comments."""
    source = code.replace('"127.0.0.1:9092"', f'"{broker}", topic="{topic}"')
    names.setdefault("__name__", "docs")
    capsys.readouterr()
    exec(compile(source, f"<{doc} block {index + 1}>", "exec"), names)
    out = capsys.readouterr().out
    for expected in _PRINT.findall(code):
        assert expected in out, f"{doc} block {index + 1}: {expected!r} not in {out!r}"
    return names


def _read(bootstrap: str, topic: str) -> list[tuple[str, str]]:
    from streams.kafka.reader import iter_topic

    return [
        (e.workflow_key, e.type.value)
        for e in (
            parse_event(v, key=k)
            for k, v, _p, _o in iter_topic(KafkaConnection(bootstrap), topic)
            if v
        )
    ]


def test_every_sdk_doc_block_runs(
    kafka_bootstrap: str,
    unique_topic: Callable[..., str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """docs/sdk.md's blocks (the takeover-safe worker, own(), input, the broker
    checks and the counts) all run; their evidence reaches the topic."""
    monkeypatch.chdir(tmp_path)
    topic = unique_topic(partitions=1)
    # The doc reads its broker from the environment, as a user's code would, and
    # publishes to the default topic: this test's topic instead.
    import functools

    import fencewatch

    monkeypatch.setenv("FENCEWATCH_BOOTSTRAP_SERVERS", kafka_bootstrap)
    monkeypatch.setattr(
        fencewatch, "ReporterSettings", functools.partial(ReporterSettings, topic=topic)
    )
    blocks = _blocks("sdk.md")
    assert len(blocks) >= 4
    results = []
    for i, code in enumerate(blocks):
        own_db = open_database(f"sqlite:///{tmp_path / f'own-{i}.db'}")
        leases = SqlLeaseStore(own_db)
        names: dict[str, Any] = {
            # What the own() block leaves to the reader.
            "OwnershipReporter": OwnershipReporter,
            "db": own_db,
            "settings": ReporterSettings(kafka_bootstrap, "alpha", topic=topic),
            "leases": leases,
            "sink": FencedSink(own_db, name="ledger"),
            "stop_my_work": lambda owner: None,
        }
        try:
            results.append(_run("sdk.md", i, code, names, capsys, kafka_bootstrap, topic))
        finally:
            own_db.close()
            if names.get("db") not in (None, own_db):
                names["db"].close()
    first, own = results[0], results[1]
    assert first["receipt"].status == "committed"
    assert own["out"].status == "committed" and own["owner"].lost.is_set() is False
    seen = set(_read(kafka_bootstrap, topic))
    assert {
        ("tenant/sdk-export/2026-07-26", "lease_acquired"),
        ("tenant/sdk-export/2026-07-26", "effect_committed"),
        ("tenant/sdk-export/2026-07-26", "lease_released"),
        ("docs/sdk-input", "progress"),
        ("docs/sdk-stats", "progress"),
    } <= seen


def test_every_fences_doc_block_runs(
    kafka_bootstrap: str,
    unique_topic: Callable[..., str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """docs/fences.md's blocks (a lease and a fenced write, a refused store
    URL with its password masked) run in a fresh directory."""
    monkeypatch.chdir(tmp_path)
    topic = unique_topic(partitions=1)
    blocks = _blocks("fences.md")
    assert len(blocks) >= 2
    results = [
        _run("fences.md", i, code, {}, capsys, kafka_bootstrap, topic)
        for i, code in enumerate(blocks)
    ]
    assert results[0]["receipt"].status == "committed"
    results[0]["db"].close()
    assert (tmp_path / "fences.db").is_file()
