"""The rdkafka engine's state table, in memory and in RocksDB: the same
behaviour, nothing trusted from a previous run, one worker per directory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from streams.errors import ConfigError
from streams.live.rdkafka.table import ROCKS_DIR, MemoryTable, RocksTable, StateTable, open_table


@pytest.fixture(params=["memory", "rocksdb"])
def table(request: pytest.FixtureRequest, tmp_path: Path) -> StateTable:
    t = open_table(request.param, tmp_path)
    request.addfinalizer(t.close)
    return t


def test_write_get_delete_and_clear(table: StateTable) -> None:
    """Writes land in order (None deletes), get answers None for a missing key, clear empties."""
    table.write([(b"a", b"1"), (b"b", b"2"), (b"a", b"3"), (b"b", None)])
    assert (table.get(b"a"), table.get(b"b"), table.get(b"zz")) == (b"3", None, None)
    table.write([(b"a", None)])
    assert table.get(b"a") is None
    table.write([(f"k{i}".encode(), b"v") for i in range(100)])
    assert table.get(b"k99") == b"v" and len(table) > 0
    table.clear()
    assert table.get(b"k99") is None and len(table) == 0


def test_open_table_picks_the_store(tmp_path: Path) -> None:
    """memory -> a dict-backed table; rocksdb -> RocksDB under the data directory."""
    mem = open_table("memory", tmp_path)
    assert isinstance(mem, MemoryTable) and mem.kind == "memory store"
    rocks = open_table("rocksdb", tmp_path)
    try:
        assert isinstance(rocks, RocksTable) and rocks.kind == "rocksdb store"
        assert (tmp_path / ROCKS_DIR).is_dir()
    finally:
        rocks.close()
    assert not (tmp_path / ROCKS_DIR).exists(), "a closed table leaves no state behind"


def test_rocksdb_table_trusts_nothing_a_previous_run_left(tmp_path: Path) -> None:
    """What a crashed run wrote (perhaps for a transaction later aborted) is gone on open."""
    from rocksdict import Options, Rdict

    (tmp_path / ROCKS_DIR / "db-0").mkdir(parents=True)
    db = Rdict(str(tmp_path / ROCKS_DIR / "db-0"), Options(raw_mode=True))
    db[b"ghost"] = b"state of an aborted transaction"
    db.close()
    t = RocksTable(tmp_path / ROCKS_DIR)
    try:
        assert t.get(b"ghost") is None
    finally:
        t.close()


def test_a_second_worker_on_the_same_directory_is_refused(tmp_path: Path) -> None:
    """Two tables on one directory: the second is one ConfigError naming --data-dir,
    and the first keeps its data (the refusal wipes nothing)."""
    first = RocksTable(tmp_path / ROCKS_DIR)
    try:
        first.write([(b"k", b"v")])
        with pytest.raises(ConfigError, match=r"in use by another worker.*--data-dir"):
            RocksTable(tmp_path / ROCKS_DIR)
        assert first.get(b"k") == b"v"
    finally:
        first.close()


def test_the_directory_is_free_again_after_its_holder_is_killed(tmp_path: Path) -> None:
    """A worker killed with SIGKILL holds no lock: the next one opens the table."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; "
            "from streams.live.rdkafka.table import RocksTable; "
            "t = RocksTable(Path(sys.argv[1])); print('open', flush=True); sys.stdin.read()",
            str(tmp_path / ROCKS_DIR),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "open"
        with pytest.raises(ConfigError, match="in use by another worker"):
            RocksTable(tmp_path / ROCKS_DIR)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    t = RocksTable(tmp_path / ROCKS_DIR)
    t.close()
