"""The supervisor's rules and the stall rule, without a broker: children
that exit, crash, crash in a loop or report a stall (streams/live/supervisor.py,
streams/live/liveness.py)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from streams.live.liveness import FREEZE_GAP_S, Liveness
from streams.live.supervisor import RestartPolicy, supervise

FAST = RestartPolicy(restart_after=2.0, max_restarts=2, window_s=60.0, backoff_s=(0.05,))


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


@pytest.mark.parametrize("code", [0, 3])
def test_an_engine_that_exits_on_its_own_ends_the_supervisor_with_its_status(
    code: int, caplog: pytest.LogCaptureFixture
) -> None:
    """No restart for an exit of the engine's own: its status is the supervisor's."""
    assert supervise(_python(f"raise SystemExit({code})"), engine="rdkafka", policy=FAST) == code
    assert not [r for r in caplog.records if r.name == "streams.live.supervisor"]


def test_a_crash_loop_is_restarted_then_given_up_with_exit_1(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Each SIGABRT is one line and a restart; past max_restarts, one line and exit 1."""
    caplog.set_level(logging.ERROR, "streams.live.supervisor")
    crash = _python("import os, signal; os.kill(os.getpid(), signal.SIGABRT)")
    assert supervise(crash, engine="faust", policy=FAST) == 1
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3, lines
    assert "died of SIGABRT" in lines[0] and "restart 1 of at most 2 within 60 s" in lines[0]
    assert "restart 2 of at most 2" in lines[1]
    assert "2 restarts within 60 s, giving up (exit 1)" in lines[2]


def test_the_restart_count_reaches_the_next_engine(tmp_path: Path) -> None:
    """The restarted engine is told how many restarts came before it."""
    out = tmp_path / "seen"
    script = (
        "import os, signal, sys\n"
        f"open({str(out)!r}, 'a').write(os.environ['FENCEWATCH_ENGINE_RESTARTS'] + '\\n')\n"
        "if os.environ['FENCEWATCH_ENGINE_RESTARTS'] == '0': os.kill(os.getpid(), signal.SIGSEGV)\n"
    )
    assert supervise(_python(script), engine="rdkafka", policy=FAST) == 0
    assert out.read_text().split() == ["0", "1"]


def test_an_engine_reporting_a_stall_is_killed_and_restarted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A report of partitions with no commit for restart_after s: SIGUSR1 for
    the stacks, then SIGKILL, one line, a restart."""
    caplog.set_level(logging.ERROR, "streams.live.supervisor")
    marker = tmp_path / "restarted"
    script = (
        "import json, os, sys, time\n"
        f"if os.path.exists({str(marker)!r}): raise SystemExit(0)\n"
        f"open({str(marker)!r}, 'w').close()\n"
        "out = os.fdopen(int(os.environ['FENCEWATCH_SUPERVISOR_FD']), 'w')\n"
        "while True:\n"
        "    out.write(json.dumps({'partitions': [4], 'recovering': False, "
        "'stalled_for': 2.5, 'loop_age': 0.1}) + '\\n'); out.flush(); time.sleep(0.2)\n"
    )
    assert supervise(_python(script), engine="rdkafka", policy=FAST) == 0
    (line,) = [r.getMessage() for r in caplog.records]
    assert "was stalled: no commit for 2 s with lag (killed), holding partitions [4]" in line


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _look(live: Liveness, clock: _Clock, seconds: float, **state: object) -> dict[str, object]:
    """Advance ``seconds`` in one-second looks (as the reporter looks)."""
    doc: dict[str, object] = {}
    for _ in range(int(seconds)):
        clock.now += 1.0
        live.turned()
        doc = live.assess(**state)  # type: ignore[arg-type]
    return doc


def test_stalled_needs_partitions_lag_and_no_commit() -> None:
    """Lag with no commit for stall_after s is a stall; a commit, no lag or
    a restore starts the count again."""
    clock = _Clock()
    live = Liveness(10.0, clock=clock)
    held = {"partitions": [0], "lag": 5, "recovering": False}
    assert _look(live, clock, 9, **held)["stalled"] is False
    assert _look(live, clock, 1, **held) == {"stalled": True, "stalled_for": 10.0, "loop_age": 0.0}
    live.committed()
    assert _look(live, clock, 1, **held)["stalled_for"] == 1.0
    assert _look(live, clock, 20, partitions=[0], lag=0, recovering=False)["stalled"] is False
    assert _look(live, clock, 20, partitions=[0], lag=5, recovering=True)["stalled"] is False
    assert _look(live, clock, 20, partitions=[], lag=5, recovering=False)["stalled"] is False
    assert _look(live, clock, 11, **held)["stalled"] is True


def test_a_freeze_of_the_whole_process_is_not_a_stall() -> None:
    """A jump of the clock between looks (SIGSTOP, a suspended VM) starts the
    counts again: a thawed worker gets the time to rejoin."""
    clock = _Clock()
    live = Liveness(10.0, clock=clock)
    held = {"partitions": [0], "lag": 5, "recovering": False}
    _look(live, clock, 5, **held)
    clock.now += FREEZE_GAP_S + 60
    doc = live.assess(**held)  # type: ignore[arg-type]
    assert doc == {"stalled": False, "stalled_for": 0.0, "loop_age": 0.0}


def test_a_loop_that_does_not_turn_shows_in_loop_age() -> None:
    """loop_age counts from the loop's last turn."""
    clock = _Clock()
    live = Liveness(10.0, clock=clock)
    live.turned()
    for _ in range(4):
        clock.now += 1.0
        doc = live.assess(partitions=[0], lag=0, recovering=False)
    assert doc["loop_age"] == 4.0


def test_the_stall_threshold_is_never_under_three_commit_intervals() -> None:
    """--stall-timeout 60 with a 60 s commit interval: stalled after 180 s;
    a stall timeout out of 5..3600 is refused, naming the flag."""
    from streams.errors import ConfigError
    from streams.kafka.connection import KafkaConnection
    from streams.live.settings import LiveSettings

    conn = KafkaConnection("127.0.0.1:9092")
    assert LiveSettings(conn, commit_interval=60.0, transaction_timeout=120).stall_after == 180.0
    assert LiveSettings(conn).stall_after == 60.0
    with pytest.raises(ConfigError, match=r"stall timeout must be within 5\.\.3600"):
        LiveSettings(conn, stall_timeout=1.0)


def test_an_engine_module_already_imported_counts_as_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """faust replaces its module with one that has no __spec__ (find_spec
    raises ValueError): already imported is installed; None is missing."""
    import types

    from streams.cli.run import _require_modules

    lazy = types.ModuleType("fw_lazy_mod")
    lazy.__spec__ = None
    monkeypatch.setitem(sys.modules, "fw_lazy_mod", lazy)
    _require_modules(("fw_lazy_mod",))
    monkeypatch.setitem(sys.modules, "fw_lazy_mod", None)
    with pytest.raises(ModuleNotFoundError):
        _require_modules(("fw_lazy_mod",))
