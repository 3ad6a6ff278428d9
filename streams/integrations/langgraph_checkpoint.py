"""LangGraph: a checkpointer that fences the checkpoint chain itself.

Two processes that resume one thread both continue its last checkpoint, and
the chain forks (langgraph issue 8796): each later resume picks one branch
and the other's work is silently dropped, or mixed in through pending writes.
:class:`FencedCheckpointer` wraps any ``BaseCheckpointSaver`` (SQLite,
PostgreSQL, in-memory...) and treats every checkpoint write as an effect of
the thread's owner:

* the owner is the :class:`~streams.integrations.runs.OwnedRun` a
  :class:`~streams.integrations.langgraph.GraphOwner` puts in the config
  (the workflow key is the thread: ``langgraph/<thread_id>``); a write with no
  owner raises RuntimeError (nothing to fence it by);
* each checkpoint's metadata is stamped with ``fencewatch_epoch`` and
  ``fencewatch_worker``, so the saver's own data says which epoch wrote what;
* ``put`` and ``put_writes`` (and ``aput``, ``aput_writes``) from a displaced
  epoch are refused with :class:`~streams.errors.StaleOwner` and nothing is
  written. With the owner's lease store on SQL (``SqlLeaseStore``, SQLite or
  PostgreSQL) the check and the write are one atomic step: the lease row is
  read under a share lock that is held until the saver's write has
  committed, so a new epoch cannot be granted in between (the acquisition
  waits for it) and no interleaving of a pause lets a stale write in. Other
  lease stores: a check (a stamp) just before the write, which leaves the
  window of that gap. A lease store that does not answer fails the write
  with its error, nothing written (fail closed);
* each ``put`` is published as evidence on the thread's key: the effect key
  is the parent checkpoint (``checkpoint after <parent id>``, or ``after
  start`` for a thread's first), ``effect_attempted`` then
  ``effect_committed`` (or ``effect_rejected``), sink ``checkpoints``. Two
  writers continuing one parent are thus two commits of one effect key: the
  detector reports ``stale_commit`` and ``conflicting_commit`` when a stale
  one got through (``enforce=False``, or a saver written around the
  wrapper), and ``stale_attempt`` with the sink's ``rejected`` when the fence
  refused it. A refused ``put_writes`` is reported as ``effect_rejected`` on
  the same effect key (its writes continue the same parent).

``enforce=False`` only stamps and reports (a way to measure before fencing).
The fenced writes (and their lease-store calls) run on the wrapper's own
``max_threads`` threads (default 4): LangGraph writes from a new thread pool
for every run and the lease store keeps a connection per thread, so this is
what bounds the connections; at the bound a write waits for a free thread.
``close()`` stops them.
With SQLite the lease store and the checkpoints must be separate files: the
lease store's write lock is held during the checkpoint write. Reads (``get``,
``list``...) and maintenance (``delete_thread``...) go to the wrapped saver
unchanged. Needs the ``langgraph`` extra.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

from streams.errors import StaleOwner
from streams.extras import needs_extra
from streams.fences.lease import LeaseStore
from streams.fences.lease_sql import SqlLeaseStore, read_lease_epoch
from streams.fences.sink import Receipt
from streams.integrations.langgraph import DEFAULT_KEY_PREFIX, owned_run, workflow_key_for
from streams.integrations.runs import OwnedRun

with needs_extra("langgraph"):
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (
        BaseCheckpointSaver,
        ChannelVersions,
        Checkpoint,
        CheckpointMetadata,
        CheckpointTuple,
    )

__all__ = ["EPOCH_FIELD", "SINK", "WORKER_FIELD", "FencedCheckpointer", "parent_effect_key"]

#: Metadata fields stamped on every checkpoint written through the wrapper.
EPOCH_FIELD = "fencewatch_epoch"
WORKER_FIELD = "fencewatch_worker"
#: The sink named on checkpoint evidence.
SINK = "checkpoints"

T = TypeVar("T")


def parent_effect_key(config: RunnableConfig) -> str:
    """The effect key of a write continuing the config's checkpoint: two
    writers continuing one parent share it (a subgraph's namespace prefixes it)."""
    conf = config.get("configurable") or {}
    parent = conf.get("checkpoint_id") or "start"
    ns = conf.get("checkpoint_ns") or ""
    return f"checkpoint {ns + ' ' if ns else ''}after {parent}"


class _Write:
    """One write's owner and evidence identity."""

    __slots__ = ("effect_key", "epoch", "key", "run")

    def __init__(self, run: OwnedRun, key: str, effect_key: str) -> None:
        self.run = run
        self.key = key
        self.epoch = run.epoch
        self.effect_key = effect_key


class FencedCheckpointer(BaseCheckpointSaver[Any]):
    """Wraps ``inner`` (any ``BaseCheckpointSaver``): checkpoint writes under
    the run's owner epoch, refused once displaced, published as evidence.

    ``enforce``: refuse displaced writes (else only stamp and report).
    ``key_prefix``: as the GraphOwner's (the thread's workflow key).
    """

    def __init__(
        self,
        inner: BaseCheckpointSaver[Any],
        *,
        enforce: bool = True,
        key_prefix: str = DEFAULT_KEY_PREFIX,
        max_threads: int = 4,
    ) -> None:
        if not isinstance(inner, BaseCheckpointSaver):
            raise TypeError(f"inner must be a LangGraph BaseCheckpointSaver, not {inner!r}")
        if isinstance(max_threads, bool) or not isinstance(max_threads, int):
            raise TypeError(f"max_threads must be an int, got {type(max_threads).__name__}")
        if not 1 <= max_threads <= 64:
            raise ValueError(f"max_threads must be in 1..64, got {max_threads}")
        super().__init__(serde=inner.serde)
        self.inner = inner
        self.enforce = enforce
        self.key_prefix = key_prefix
        # LangGraph writes checkpoints from a new thread pool per run, and the
        # lease store keeps one connection per thread: the fenced writes run
        # on these threads instead, so the connections stay bounded (at the
        # bound a write waits for a free thread).
        self._pool = ThreadPoolExecutor(max_threads, thread_name_prefix="fencewatch-checkpoints")

    def close(self) -> None:
        """Stop the write threads (the wrapped saver is the caller's to close)."""
        self._pool.shutdown(wait=True)

    def _on_pool(self, fn: Callable[..., T], *args: Any) -> T:
        return self._pool.submit(fn, *args).result()

    async def _on_pool_async(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    # -- what is fenced -----------------------------------------------------

    def _write_for(self, config: RunnableConfig) -> _Write:
        run = owned_run(config)
        key = workflow_key_for(config, self.key_prefix)
        if run.key != key:
            # The owner must own this thread, or its epoch fences nothing.
            raise ValueError(f"the run owns {run.key!r}, but the checkpoint is for {key!r}")
        return _Write(run, key, parent_effect_key(config))

    def _stamped(self, w: _Write, metadata: CheckpointMetadata) -> CheckpointMetadata:
        stamped: dict[str, Any] = {**metadata, EPOCH_FIELD: w.epoch, WORKER_FIELD: w.run.worker_id}
        return stamped  # type: ignore[return-value]  # a TypedDict with extra keys

    def _store(self, w: _Write) -> LeaseStore:
        return w.run.owner.store

    def _receipt(self, w: _Write, checkpoint_id: str, current: int | None) -> Receipt:
        """The write's receipt; ``current``: the epoch it was checked against
        (unenforced: the one the attempt's stamp saw)."""
        cur = w.epoch if current is None else current
        stale = self.enforce and cur != w.epoch
        return Receipt(
            "rejected" if stale else "committed",
            w.key,
            w.epoch,
            w.effect_key,
            checkpoint_id,
            cur,
            SINK,
            "stale_epoch" if stale else None,
        )

    def _stale(self, w: _Write, current: int, what: str) -> StaleOwner:
        return StaleOwner(
            w.key, w.epoch, current, f"{what} refused: epoch {current} owns the thread"
        )

    def _write_if_current(self, w: _Write, write: Callable[[], T]) -> tuple[T | None, int | None]:
        """``(write(), current epoch)``, or ``(None, current epoch)`` without
        writing when the epoch is displaced; ``current`` is None unenforced."""
        if not self.enforce:
            return write(), None
        store = self._store(w)
        if isinstance(store, SqlLeaseStore):
            failure: BaseException | None = None
            result: T | None = None
            # The share lock on the lease row lasts until the write returns:
            # an acquisition (FOR UPDATE) of a new epoch waits for it.
            with store.db.transaction() as tx:
                current = read_lease_epoch(tx, store.prefix, w.key, share_lock=True)
                if current != w.epoch:
                    return None, current
                try:
                    result = write()
                except BaseException as exc:  # the saver's own error, not the store's
                    failure = exc
            if failure is not None:
                raise failure
            return result, current
        stamp = store.stamp(w.key, w.epoch)  # a check before the write: a window
        if not stamp.current:
            return None, stamp.current_epoch
        return write(), stamp.current_epoch

    async def _awrite_if_current(
        self, w: _Write, write: Callable[[], Awaitable[T]]
    ) -> tuple[T | None, int | None]:
        """:meth:`_write_if_current` for an awaitable write: the lease row's
        share lock is held by a worker thread while the loop awaits the write."""
        if not self.enforce:
            return await write(), None
        store = self._store(w)
        if not isinstance(store, SqlLeaseStore):
            stamp = await self._on_pool_async(store.stamp, w.key, w.epoch)
            if not stamp.current:
                return None, stamp.current_epoch
            return await write(), stamp.current_epoch
        loop = asyncio.get_running_loop()
        checked: asyncio.Future[int] = loop.create_future()
        written = threading.Event()

        def hold(sql: SqlLeaseStore) -> None:
            with sql.db.transaction() as tx:
                current = read_lease_epoch(tx, sql.prefix, w.key, share_lock=True)
                loop.call_soon_threadsafe(checked.set_result, current)
                if current == w.epoch:
                    written.wait()

        holder: asyncio.Future[None] = asyncio.ensure_future(self._on_pool_async(hold, store))
        try:
            waiting: set[asyncio.Future[Any]] = {checked, holder}
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            if not checked.done():
                await holder  # the store failed before answering: raise its error
                raise RuntimeError("the lease check ended without an answer")
            current = checked.result()
            if current != w.epoch:
                return None, current
            return await write(), current
        finally:
            written.set()
            await holder

    def _report(self, w: _Write, receipt: Receipt) -> None:
        w.run.owner.reporter.effect_result(receipt, sink=SINK)

    # -- put ----------------------------------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self._on_pool(self._put, config, checkpoint, metadata, new_versions)

    def _put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        w = self._write_for(config)
        stamped = self._stamped(w, metadata)
        reporter = w.run.owner.reporter
        seen = reporter.emit("effect_attempted", w.key, w.epoch, effect_key=w.effect_key, sink=SINK)
        result, current = self._write_if_current(
            w, lambda: self.inner.put(config, checkpoint, stamped, new_versions)
        )
        receipt = self._receipt(
            w, checkpoint["id"], seen.current_epoch if current is None else current
        )
        self._report(w, receipt)
        if result is None:
            raise self._stale(w, receipt.current_epoch, f"checkpoint {checkpoint['id']}")
        return result

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        w = self._write_for(config)
        stamped = self._stamped(w, metadata)
        reporter = w.run.owner.reporter
        attempt = partial(reporter.emit, effect_key=w.effect_key, sink=SINK)
        seen = await self._on_pool_async(attempt, "effect_attempted", w.key, w.epoch)
        result, current = await self._awrite_if_current(
            w, lambda: self.inner.aput(config, checkpoint, stamped, new_versions)
        )
        receipt = self._receipt(
            w, checkpoint["id"], seen.current_epoch if current is None else current
        )
        await self._on_pool_async(self._report, w, receipt)
        if result is None:
            raise self._stale(w, receipt.current_epoch, f"checkpoint {checkpoint['id']}")
        return result

    # -- put_writes: fenced, reported only when refused (they are many) --------

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self._on_pool(self._put_writes, config, writes, task_id, task_path)

    def _put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> None:
        w = self._write_for(config)

        def write() -> bool:
            self.inner.put_writes(config, writes, task_id, task_path)
            return True

        done, current = self._write_if_current(w, write)
        if done is None and current is not None:
            self._refuse_writes(w, task_id, current)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        w = self._write_for(config)

        async def write() -> bool:
            await self.inner.aput_writes(config, writes, task_id, task_path)
            return True

        done, current = await self._awrite_if_current(w, write)
        if done is None and current is not None:
            await self._on_pool_async(self._refuse_writes, w, task_id, current)

    def _refuse_writes(self, w: _Write, task_id: str, current: int) -> None:
        self._report(w, self._receipt(w, f"writes {task_id}", current))
        raise self._stale(w, current, f"writes of task {task_id}")

    # -- everything else: the wrapped saver's --------------------------------

    @property
    def config_specs(self) -> list[Any]:
        return list(self.inner.config_specs)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self.inner.get_tuple(config)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        return self.inner.list(config, filter=filter, before=before, limit=limit)

    def delete_thread(self, thread_id: str) -> None:
        self.inner.delete_thread(thread_id)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self.inner.delete_for_runs(run_ids)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self.inner.copy_thread(source_thread_id, target_thread_id)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self.inner.prune(thread_ids, strategy=strategy)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self.inner.aget_tuple(config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        async for item in self.inner.alist(config, filter=filter, before=before, limit=limit):
            yield item

    async def adelete_thread(self, thread_id: str) -> None:
        await self.inner.adelete_thread(thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self.inner.adelete_for_runs(run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self.inner.acopy_thread(source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self.inner.aprune(thread_ids, strategy=strategy)

    def get_next_version(self, current: Any, channel: None) -> Any:
        return self.inner.get_next_version(current, channel)

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, Any]:
        return self.inner.get_delta_channel_history(config=config, channels=channels)

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, Any]:
        return await self.inner.aget_delta_channel_history(config=config, channels=channels)
