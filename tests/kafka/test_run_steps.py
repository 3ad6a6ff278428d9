"""`fencewatch run` validates, probes, prepares and starts, each once (issue 19 item 1):
it once validated the connection five times, probed the broker twice, checked the
store's extra three times and made the data directory twice."""

from __future__ import annotations

import os
import sys
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import streams.live.faust.run as faust_run
from streams.cli import main
from streams.kafka import admin as kafka_admin_module
from streams.kafka.admin import TopicAdmin
from streams.kafka.connection import KafkaConnection, check_reachable
from streams.live import prepare as prepare_module
from streams.live import settings as live_settings
from streams.live.settings import LiveSettings


def _count_function(
    monkeypatch: pytest.MonkeyPatch, counts: Counter[str], name: str, original: Callable[..., Any]
) -> None:
    """Count every call of ``original`` whichever module it was imported into."""

    def counting(*args: Any, **kwargs: Any) -> Any:
        counts[name] += 1
        return original(*args, **kwargs)

    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("streams"):
            for attr, value in list(vars(module).items()):
                if value is original:
                    monkeypatch.setattr(module, attr, counting)


def _count_method(
    monkeypatch: pytest.MonkeyPatch, counts: Counter[str], cls: type, method: str
) -> None:
    original = getattr(cls, method)

    def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
        counts[f"{cls.__name__}.{method}"] += 1
        return original(self, *args, **kwargs)

    monkeypatch.setattr(cls, method, counting)


_starts: Counter[str] = Counter()


class _Worker:
    """Stands in for faust.Worker: counts the start, returns at once."""

    def __init__(self, app: Any, **_kw: Any) -> None:
        self.app = app

    def install_signal_handlers(self) -> None:
        """mode's Worker installs the loop's stop handlers here (never called: no start)."""

    def execute_from_commandline(self) -> None:
        _starts["faust"] += 1


class _Engine:
    """Stands in for the RdkafkaEngine: counts the start, returns at once."""

    def __init__(self, settings: LiveSettings, **_kw: Any) -> None:
        self.settings = settings

    def run(self) -> None:
        _starts["rdkafka"] += 1


@pytest.mark.parametrize("engine", ["rdkafka", "faust"])
def test_run_validates_probes_prepares_and_starts_once(
    kafka_bootstrap: str,
    kafka_admin: TopicAdmin,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    engine: str,
) -> None:
    """From the flags to the engine's start: one validation of the connection and of the
    settings, one TCP probe and one metadata probe, one topic preparation, one check of
    the store's extra, one data directory, one start of the engine asked for."""
    import faust

    import streams.live.rdkafka.run as rdkafka_run

    counts: Counter[str] = Counter()
    _count_method(monkeypatch, counts, KafkaConnection, "validate")
    _count_method(monkeypatch, counts, LiveSettings, "validate")
    _count_method(monkeypatch, counts, TopicAdmin, "probe")
    _count_function(monkeypatch, counts, "check_reachable", check_reachable)
    _count_function(monkeypatch, counts, "ensure_topics", kafka_admin_module.ensure_topics)
    _count_function(monkeypatch, counts, "require_store_extra", live_settings.require_store_extra)
    _count_function(monkeypatch, counts, "prepare_local_state", live_settings.prepare_local_state)
    _count_function(monkeypatch, counts, "prepare", prepare_module.prepare)
    monkeypatch.setattr(faust, "Worker", _Worker)
    monkeypatch.setattr(rdkafka_run, "RdkafkaEngine", _Engine)
    _starts.clear()
    # The start's process-wide GC settings stay out of the test process.
    monkeypatch.setattr(faust_run, "tune_collector", lambda: None)
    monkeypatch.setattr(rdkafka_run, "_tune_collector", lambda: None)
    for name in list(os.environ):
        if name.startswith("FENCEWATCH_"):
            monkeypatch.delenv(name)

    tag = uuid.uuid4().hex[:8]
    topics = [f"steps-events-{tag}", f"steps-findings-{tag}", f"steps-status-{tag}"]
    data_dir = tmp_path / "state"
    try:
        status = main(
            ["run", "--bootstrap-servers", kafka_bootstrap, "--create-topics",
             "--partitions", "1", "--events-topic", topics[0], "--findings-topic", topics[1],
             "--status-topic", topics[2], "--app-id", f"steps-{tag}",
             "--data-dir", str(data_dir), "--log-level", "warning", "--engine", engine,
             "--no-supervise"]  # the engine in this process, where its steps are counted
        )  # fmt: skip
        assert status == 0, capsys.readouterr().err
    finally:
        kafka_admin.delete([*topics, f"{topics[0]}.dlq", f"steps-{tag}-owner-state-changelog"])
    assert data_dir.is_dir()
    assert dict(_starts) == {engine: 1}
    assert dict(counts) == {
        "KafkaConnection.validate": 1,
        "LiveSettings.validate": 1,
        "TopicAdmin.probe": 1,
        "check_reachable": 1,
        "prepare": 1,
        "ensure_topics": 1,
        "require_store_extra": 1,
        "prepare_local_state": 1,
    }
