"""The rdkafka engine's state table: key -> stored value of the partitions
the worker holds, in memory (``memory://``) or in RocksDB (``rocksdb://``).

The changelog is the table's truth in both: every assignment and every
rewind drops the table and restores it from the changelog (eager
assignment, docs/live.md), so RocksDB here buys *capacity* (state larger
than memory), not a faster restart. That is also why its writes skip the
write-ahead log and why a start wipes what a previous run left: nothing on
disk is ever trusted over the changelog, so a write of a transaction that
was later aborted cannot survive (the defect faust's RocksDB store had,
docs/live.md).
"""

from __future__ import annotations

import contextlib
import fcntl
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

from streams.errors import ConfigError, StoreError

__all__ = ["ROCKS_DIR", "MemoryTable", "RocksTable", "StateTable", "open_table"]

#: The table's directory under the worker's ``--data-dir``.
ROCKS_DIR = "rdkafka-state"
#: One RocksDB memtable; at most two are held (16 MiB of the worker's memory).
_WRITE_BUFFER_BYTES = 8 * 1024 * 1024


class StateTable(Protocol):
    """What the engine and the processor use of a table."""

    kind: str

    def get(self, key: bytes, /) -> bytes | None: ...

    def write(self, items: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Store each ``(key, value)`` in order; a ``None`` value deletes the key."""

    def clear(self) -> None: ...
    def __len__(self) -> int: ...
    def close(self) -> None: ...


class MemoryTable(dict[bytes, bytes]):
    """A dict (its ``get`` is the processor's hot lookup, kept a C call)."""

    kind = "memory store"

    def write(self, items: Iterable[tuple[bytes, bytes | None]]) -> None:
        for key, value in items:
            if value is None:
                self.pop(key, None)
            else:
                self[key] = value

    def close(self) -> None:
        self.clear()


class RocksTable:
    """A RocksDB database (rocksdict, raw bytes) under ``path``, wiped when
    opened and when cleared. Bounded by the disk, not memory: what stays in
    memory is RocksDB's memtables (two of 8 MiB at most) and caches, and the
    processor's LRU of decoded states (``--state-cache-keys``). ``len`` is
    RocksDB's estimate.

    A lock file beside the directory (``flock``, released by the kernel
    when the process dies, kill -9 included) is held for the table's life:
    a second worker given the same ``--data-dir`` is refused before it
    could wipe the first one's table."""

    kind = "rocksdb store"

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._lock = open(path.with_name(path.name + ".lock"), "a+b")  # noqa: SIM115
        except OSError as exc:
            raise ConfigError(f"cannot create the state directory {path}: {exc.strerror}") from None
        try:
            fcntl.flock(self._lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._lock.close()
            raise ConfigError(
                f"the state directory {path} is in use by another worker "
                "(give each worker on a host its own --data-dir)"
            ) from None
        self._db: Any = None
        #: Each clear opens a new database in a new directory (db-0, db-1...):
        #: the old one's background work never meets the new one's files.
        self._generation = 0
        shutil.rmtree(path, ignore_errors=True)  # under the lock: ours to wipe
        self._open()

    def _dir(self, generation: int) -> Path:
        return self.path / f"db-{generation}"

    def _open(self) -> None:
        from rocksdict import Options, Rdict, WriteOptions

        options = Options(raw_mode=True)
        # Memtables bound the table's memory (RocksDB's default is 64 MiB
        # each): a changed key's state is written once per batch, so they
        # fill with versions, and a smaller one flushes to disk sooner.
        options.set_write_buffer_size(_WRITE_BUFFER_BYTES)
        options.set_max_write_buffer_number(2)
        where = self._dir(self._generation)
        try:
            where.mkdir(parents=True, exist_ok=True)
            db = Rdict(str(where), options)
        except Exception as exc:  # rocksdict raises a bare Exception
            raise self._failed("opening", exc) from None
        write = WriteOptions()
        # The changelog, not a log of ours, makes the table durable. A
        # property at run time (rocksdict 0.3); its stub calls it a method.
        setattr(write, "disable_wal", True)  # noqa: B010
        db.set_write_options(write)
        self._db = db

    def _discard(self) -> None:
        """Close the current database and delete its directory."""
        db, self._db = self._db, None
        if db is None:
            return
        # Its contents are thrown away: stop its flushes and compactions
        # rather than have them write (or fail, on a full disk) first.
        with contextlib.suppress(Exception):
            db.cancel_all_background(True)
        with contextlib.suppress(Exception):
            db.close()
        shutil.rmtree(self._dir(self._generation), ignore_errors=True)

    def get(self, key: bytes, /) -> bytes | None:
        try:
            value: bytes | None = self._db.get(key)
        except Exception as exc:  # rocksdict raises a bare Exception
            raise self._failed("reading", exc) from None
        return value

    def write(self, items: Iterable[tuple[bytes, bytes | None]]) -> None:
        from rocksdict import WriteBatch

        batch = WriteBatch(raw_mode=True)
        for key, value in items:
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
        try:
            self._db.write(batch)
        except Exception as exc:  # e.g. "IO error: No space left on device"
            raise self._failed("writing", exc) from None

    def clear(self) -> None:
        # A fresh database rather than deletes: no assumption about the keys,
        # and no tombstones left for compaction after every rebalance.
        self._discard()
        self._generation += 1
        self._open()

    def __len__(self) -> int:
        return int(self._db.property_int_value("rocksdb.estimate-num-keys") or 0)

    def close(self) -> None:
        self._discard()
        shutil.rmtree(self.path, ignore_errors=True)
        self._lock.close()

    def _failed(self, doing: str, exc: Exception) -> StoreError:
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return StoreError(f"{doing} the RocksDB state in {self.path}: {text}")


def open_table(store_kind: str, data_dir: Path) -> StateTable:
    """The table for ``--store``: ``memory`` or ``rocksdb`` (under ``data_dir``)."""
    if store_kind == "rocksdb":
        return RocksTable(data_dir / ROCKS_DIR)
    return MemoryTable()
