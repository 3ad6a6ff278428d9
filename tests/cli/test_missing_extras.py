"""A command or import that needs an optional extra that is not installed says
which `pip install 'fencewatch[...]'` to run, in one line, without a traceback."""

from __future__ import annotations

import pickle
import sys

import pytest

from streams.cli import main
from streams.errors import FencewatchError
from streams.extras import MissingExtra, extra_for, needs_extra

KAFKA_MODULES = ("confluent_kafka", "faust", "aiokafka")


def _without(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    """Make `import M` fail as it does when M is not installed (None in sys.modules)."""
    for name in list(sys.modules):
        if name.split(".", 1)[0] in modules:
            monkeypatch.delitem(sys.modules, name)
    for name in modules:
        monkeypatch.setitem(sys.modules, name, None)


@pytest.mark.parametrize(
    "argv",
    [
        ["topics", "create", "--bootstrap-servers", "127.0.0.1:1"],
        ["audit", "--topic", "ownership.events", "--bootstrap-servers", "127.0.0.1:1"],
        ["findings", "--bootstrap-servers", "127.0.0.1:1"],
        ["status", "--bootstrap-servers", "127.0.0.1:1"],
        [
            "verify",
            "--bootstrap-servers",
            "127.0.0.1:1",
            "--workflow",
            "w",
            "--effect",
            "e",
            "--by",
            "me",
            "--epoch",
            "1",
        ],
    ],
    ids=lambda argv: " ".join(argv[:2]),
)
def test_kafka_command_without_the_kafka_extra_names_the_pip_install(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without confluent-kafka/faust installed, every Kafka command exits 2 with one
    line naming `pip install 'fencewatch[kafka]'` (it was a ModuleNotFoundError traceback)."""
    _without(monkeypatch, *KAFKA_MODULES)
    status = main(argv)
    err = capsys.readouterr().err
    assert status == 2
    assert err.count("\n") == 1, err
    assert "pip install 'fencewatch[kafka]'" in err
    assert err.startswith(f"fencewatch {argv[0]}: ")


def test_run_without_the_kafka_extra_names_the_pip_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: object
) -> None:
    """`fencewatch run` without faust installed: one line, `pip install 'fencewatch[kafka]'`."""
    _without(monkeypatch, *KAFKA_MODULES)
    monkeypatch.chdir(str(tmp_path))
    status = main(["run", "--bootstrap-servers", "127.0.0.1:1"])
    err = capsys.readouterr().err
    assert status == 2
    assert "pip install 'fencewatch[kafka]'" in err
    assert "Traceback" not in err and len(err.splitlines()) <= 2, err


def test_needs_extra_names_the_extra_and_stays_a_module_not_found_error() -> None:
    """needs_extra turns a missing optional module into MissingExtra (a
    ModuleNotFoundError and a FencewatchError) naming the extra; an unknown module
    passes unchanged."""
    expected = r"pip install 'fencewatch\[otel\]'"
    with pytest.raises(MissingExtra, match=expected) as caught, needs_extra("otel"):
        raise ModuleNotFoundError("No module named 'opentelemetry'", name="opentelemetry")
    assert isinstance(caught.value, ModuleNotFoundError)
    assert isinstance(caught.value, FencewatchError)
    assert extra_for(caught.value) == "otel"
    again = pickle.loads(pickle.dumps(caught.value))
    assert (str(again), again.extra, again.name) == (
        str(caught.value),
        "otel",
        "opentelemetry",
    )
    with pytest.raises(ModuleNotFoundError) as plain, needs_extra("otel"):
        raise ModuleNotFoundError("No module named 'not_ours'", name="not_ours")
    assert not isinstance(plain.value, MissingExtra)


@pytest.mark.parametrize(
    ("module", "blocked", "extra"),
    [
        ("streams.integrations.otel", "opentelemetry", "otel"),
        ("streams.integrations.langgraph", "langchain_core", "langgraph"),
        ("streams.integrations.celery", "celery", "celery"),
    ],
)
def test_integration_import_without_its_extra_names_the_pip_install(
    module: str, blocked: str, extra: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Importing an integration without its extra raises MissingExtra naming
    `pip install 'fencewatch[<extra>]'`."""
    _without(monkeypatch, blocked)
    monkeypatch.delitem(sys.modules, module, raising=False)
    with pytest.raises(MissingExtra, match=rf"pip install 'fencewatch\[{extra}\]'"):
        __import__(module)


def test_open_database_without_psycopg_names_the_postgres_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A postgresql:// URL without psycopg installed: MissingExtra naming
    `pip install 'fencewatch[postgres]'` (was ModuleNotFoundError: No module named 'psycopg')."""
    from streams.fences import open_database

    _without(monkeypatch, "psycopg", "psycopg_binary")
    monkeypatch.delitem(sys.modules, "streams.fences.postgres_db", raising=False)
    with pytest.raises(MissingExtra, match=r"pip install 'fencewatch\[postgres\]'"):
        open_database("postgresql://u@db.example/prod")
