"""The faust seam: every patch of faust-streaming/aiokafka behaviour, and every
reach into their internals, in one place, pinned to the versions it was
written against.

Why one module: the live processor relies on faust 0.15.3 and aiokafka 0.14
details that are not API (private attributes, the order of hooks, what a
method does *not* do). An upgrade that changes one of them can switch a fix
off silently, and the first sign would be lost state or duplicate findings
after a failover. So:

* :func:`install` (called when the app is built) first checks the installed
  ``faust-streaming`` and ``aiokafka`` versions and the SHA-256 of the source
  of every function listed in :data:`TARGETS` (the ones patched here, and the
  ones whose internals the helpers below rely on) against the manifest
  committed in :mod:`streams.live.faust.manifest`. A mismatch raises
  :class:`FaustSeamMismatch`, one line naming the first function that changed
  (expected vs found versions and digests). ``FENCEWATCH_ALLOW_UNVERIFIED_FAUST=1``
  lets someone who has re-read the changed code go on (a warning is logged);
  ``scripts/faust-manifest`` rewrites the manifest after that review.
* Then it applies the patches (process-wide, idempotent; faust has no
  per-app consumer or producer class). Each is documented where it is
  defined and in docs/live.md ("Exactly-once, and what faust does not do for
  you"); ``tests/live/test_faust_seam.py`` shows, without a broker, faust's
  own behaviour and the corrected one for each.
* The rest of ``streams/live`` reaches faust/aiokafka internals only through
  the small helpers at the bottom of this module.

The live runtime gives the patched code what it needs through one typed
object, :class:`LiveHooks`, attached once to the app (:func:`attach_hooks`).
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import inspect
import itertools
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from streams.errors import FaustSeamMismatch
from streams.kafka.errors import ProducerFailed, TransactionFenced, TransactionUnavailable

__all__ = [
    "ALLOW_UNVERIFIED_ENV",
    "FETCH_MAX_WAIT_MS",
    "TARGETS",
    "FaustSeamMismatch",
    "LiveHooks",
    "Manifest",
    "ProducerFailed",
    "TransactionFenced",
    "TransactionUnavailable",
    "add_gap",
    "append_records",
    "attach_hooks",
    "check",
    "connection_lost",
    "crash_reason",
    "current_manifest",
    "describe_failure",
    "group_join_failure",
    "hooks_of",
    "install",
    "install_commit_gate",
    "is_crashed",
    "is_fencing",
    "mark_inbound",
    "memory_store_apply",
    "memory_store_put",
    "original",
    "poison",
    "quiet_worker",
    "read_offsets",
    "render_manifest",
    "rocksdb_key_estimate",
    "set_table_store",
    "stop_worker",
    "store_put",
    "take_stop_signals",
    "transaction_lock",
    "transaction_producer",
    "transaction_producer_ready",
]

log = logging.getLogger(__name__)

#: Set to ``1`` to start although the installed faust/aiokafka differ from
#: the manifest (after checking the seam against the new code).
ALLOW_UNVERIFIED_ENV = "FENCEWATCH_ALLOW_UNVERIFIED_FAUST"

#: Longest a fetch request may wait at the broker for data (aiokafka's
#: ``fetch_max_wait_ms``); see :func:`_fix_fetch_wait`.
FETCH_MAX_WAIT_MS = 20

_MARK = "_fencewatch_fixed"
_PACKAGES = ("faust-streaming", "aiokafka")

#: Every function this module patches (P) or whose behaviour or private state
#: the live runtime relies on (R), as ``module:Qualified.name``. The digest
#: of a patched function is taken from the original.
TARGETS: tuple[str, ...] = (
    # P fix 5 + intake: the fetcher's per-record loop.
    "faust.transport.consumer:Consumer.getmany",
    # R the intake repeats its read-offset and gap bookkeeping.
    "faust.transport.consumer:Consumer._drain_messages",
    "faust.transport.consumer:Consumer._add_gap",
    # R TapMessage must carry what ack reads.
    "faust.transport.consumer:Consumer.ack",
    # P fix 3: the commit gate wraps it (the one entry point of every commit).
    "faust.transport.consumer:Consumer.force_commit",
    # R fix 2: it does not flush send_soon under exactly-once.
    "faust.transport.consumer:Consumer._commit_offsets",
    # R fix 1: it picks the producer by destination topic (the bypass).
    "faust.transport.consumer:TransactionManager.send",
    # R the transactional id format the sender uses for a source partition.
    "faust.transport.consumer:TransactionManager.commit",
    # P fix 6.
    "faust.transport.consumer:ThreadDelegateConsumer.seek_to_committed",
    # P fix 7: it drops the ack bookkeeping before the app's revoke commit.
    "faust.transport.consumer:Consumer.on_partitions_revoked",
    # R fix 7: the revoke commit waits for a periodic commit in flight.
    "faust.transport.consumer:Consumer.maybe_wait_for_commit_to_finish",
    # R fix 7: it suspends the flow only after on_partitions_revoked's pops.
    "faust.app.base:App._on_partitions_revoked",
    # P fix 4.
    "faust.transport.drivers.aiokafka:AIOKafkaConsumerThread._highwaters",
    # P fetch wait.
    "faust.transport.drivers.aiokafka:AIOKafkaConsumerThread._create_worker_consumer",
    # R its slow-processing check reads the monitor's stream_inbound_time.
    "faust.transport.drivers.aiokafka:AIOKafkaConsumerThread.verify_event_path",
    # P concurrent commit.
    "faust.transport.drivers.aiokafka:Producer.commit_transactions",
    # R where _transaction_producers and _trn_locks are filled.
    "faust.transport.drivers.aiokafka:Producer.begin_transaction",
    # R the memory store's data / _key_partition, as the fast restore uses them.
    "faust.stores.memory:Store.__post_init__",
    "faust.stores.memory:Store.apply_changelog_batch",
    "faust.stores.memory:Store.on_recovery_completed",
    "faust.stores.memory:Store.persisted_offset",
    # R RocksDB's _set, repeated with the partition given; _dbs per partition.
    "faust.stores.rocksdb:Store._set",
    "faust.stores.rocksdb:Store._db_for_partition",
    # R the table's store is created lazily into _data by this.
    "faust.tables.base:Collection._new_store_by_url",
    "faust.tables.base:Collection.data",
    # R store hooks run before recovery, which asks persisted_offset.
    "faust.tables.manager:TableManager.on_rebalance",
    "faust.tables.recovery:Recovery.on_rebalance",
    "faust.sensors.monitor:Monitor.on_stream_event_in",
    # R the transactional sender appends to the accumulator as send() does.
    "aiokafka.producer.producer:AIOKafkaProducer.send",
    "aiokafka.producer.producer:AIOKafkaProducer._partition",
    "aiokafka.producer.message_accumulator:MessageAccumulator.add_message",
    "aiokafka.client:AIOKafkaClient._wait_on_metadata",
    "aiokafka.producer.transaction_manager:TransactionManager.error_transaction",
    "aiokafka.producer.transaction_manager:TransactionManager.is_in_transaction",
    "aiokafka.producer.transaction_manager:TransactionManager.is_fatal_error",
    # R a producer's fatal error is its sender task's exception (_fatal_cause).
    "aiokafka.producer.sender:Sender._fail_all",
    # R the stop signals go to the worker's _on_sigterm/_on_sigint, and a
    # stop is scheduled as a signal's (take_stop_signals, stop_worker).
    "mode.worker:Worker._install_signal_handlers_unix",
    "mode.worker:Worker._schedule_shutdown",
    # R a worker with a spinner sets the root logger to DEBUG (quiet_worker).
    "faust.worker:Worker.on_setup_root_logger",
    "faust.worker:Worker._setup_spinner_handler",
    # R a group join refused as fatal is raised by perform_group_join and
    # held in the coordinator's _pending_exception until check_errors
    # raises it, which faust's fetcher never calls (group_join_failure; the
    # coordinator is the consumer's _coordinator, the consumer the thread's
    # _consumer).
    "aiokafka.consumer.group_coordinator:CoordinatorGroupRebalance.perform_group_join",
    "aiokafka.consumer.group_coordinator:GroupCoordinator._push_error_to_user",
    "aiokafka.consumer.group_coordinator:GroupCoordinator.check_errors",
    "faust.transport.drivers.aiokafka:AIOKafkaConsumerThread._ensure_consumer",
    # R the app's consumer is made on first use of this property (read as
    # _consumer from another thread, never made there).
    "faust.app.base:App.consumer",
    # R fetch wait is read by start(); fix 4 replaces last_stable_offset by end_offsets.
    "aiokafka.consumer.consumer:AIOKafkaConsumer.start",
    "aiokafka.consumer.consumer:AIOKafkaConsumer.last_stable_offset",
    "aiokafka.consumer.consumer:AIOKafkaConsumer.end_offsets",
)

#: name -> the function a patch replaced (what the digest is taken of).
_ORIGINALS: dict[str, Any] = {}


@dataclass(frozen=True, slots=True)
class Manifest:
    """Package versions and ``target -> sha256`` of the sources."""

    versions: Mapping[str, str]
    digests: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class LiveHooks:
    """What the patched faust code needs from the live runtime, attached once
    to the app as ``app.fencewatch``.

    ``intake`` takes the records of its topics from the fetcher (fix 5 /
    intake); ``stable_offsets(assignment)`` returns once the group's committed
    offsets are stable (fix 6); ``runtime`` is the live runtime itself, for
    tests and introspection."""

    runtime: Any
    intake: Any
    stable_offsets: Callable[[Any], Awaitable[None]]


def attach_hooks(app: Any, hooks: LiveHooks) -> None:
    """Attach ``hooks`` to ``app`` (once: a second attach is a bug)."""
    if getattr(app, "fencewatch", None) is not None:
        raise RuntimeError("fencewatch hooks are already attached to this app")
    app.fencewatch = hooks


def hooks_of(app: Any) -> LiveHooks | None:
    hooks = getattr(app, "fencewatch", None)
    return hooks if isinstance(hooks, LiveHooks) else None


# -- the manifest -------------------------------------------------------------


def _resolve(target: str) -> Any:
    module, _, qual = target.partition(":")
    obj: Any = importlib.import_module(module)
    for part in qual.split("."):
        obj = getattr(obj, part)
    return obj


def _digest(target: str) -> str:
    fn: Any = _ORIGINALS.get(target)
    if fn is None:
        fn = _resolve(target)
    if isinstance(fn, property):
        fn = fn.fget
    return hashlib.sha256(inspect.getsource(fn).encode("utf-8")).hexdigest()


def _installed_versions() -> dict[str, str]:
    found: dict[str, str] = {}
    for name in _PACKAGES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "not installed"
    return found


def current_manifest(targets: Iterable[str] = TARGETS) -> Manifest:
    """The manifest of what is installed now (originals of patched functions)."""
    digests: dict[str, str] = {}
    for t in targets:
        try:
            digests[t] = _digest(t)
        except (ImportError, AttributeError, OSError, TypeError):
            digests[t] = "missing"
    return Manifest(_installed_versions(), digests)


def render_manifest(manifest: Manifest) -> str:
    """The source of :mod:`streams.live.faust.manifest` for ``manifest``."""
    lines = [
        '"""Generated by scripts/faust-manifest after reviewing streams/live/faust/seam.py',
        "against the installed faust-streaming and aiokafka. Do not edit by hand.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        '__all__ = ["DIGESTS", "VERSIONS"]',
        "",
        "VERSIONS: dict[str, str] = {",
        *(f'    "{k}": "{v}",' for k, v in sorted(manifest.versions.items())),
        "}",
        "",
        "DIGESTS: dict[str, str] = {",
        *(f'    "{k}": (\n        "{v}"\n    ),' for k, v in manifest.digests.items()),
        "}",
        "",
    ]
    return "\n".join(lines)


def _pinned() -> Manifest:
    from streams.live.faust import manifest as faust_manifest

    return Manifest(faust_manifest.VERSIONS, faust_manifest.DIGESTS)


def check(expected: Manifest | None = None, found: Manifest | None = None) -> str | None:
    """``None`` when the installed code matches ``expected`` (the committed
    manifest by default), else one line naming what changed."""
    expected = _pinned() if expected is None else expected
    found = current_manifest(expected.digests) if found is None else found

    def versions(m: Manifest) -> str:
        return ", ".join(f"{k} {v}" for k, v in sorted(m.versions.items()))

    changed = [t for t, d in expected.digests.items() if found.digests.get(t) != d]
    moved = [k for k, v in expected.versions.items() if found.versions.get(k) != v]
    if not changed and not moved:
        return None
    if changed:
        t = changed[0]
        more = f" (and {len(changed) - 1} more)" if len(changed) > 1 else ""
        what = (
            f"{t} changed{more}: expected sha256 {expected.digests[t][:12]} "
            f"({versions(expected)}), found {found.digests.get(t, 'missing')[:12]} "
            f"({versions(found)})"
        )
    else:
        k = moved[0]
        what = (
            f"{k} {found.versions.get(k)} installed, the seam was checked against "
            f"{expected.versions[k]} (sources unchanged)"
        )
    return (
        f"faust seam: {what}; review streams/live/faust/seam.py, then run "
        f"scripts/faust-manifest, or set {ALLOW_UNVERIFIED_ENV}=1 to start anyway"
    )


def original(target: str) -> Any:
    """The function ``target`` names as faust/aiokafka define it (the one a
    patch replaced, if patched): what the seam's tests run unpatched."""
    fn = _ORIGINALS.get(target)
    return _resolve(target) if fn is None else fn


def install(*, environ: Mapping[str, str] | None = None, expected: Manifest | None = None) -> None:
    """Check the installed faust/aiokafka against ``expected`` (the committed
    manifest by default), then apply the patches. Raises
    :class:`FaustSeamMismatch` on a mismatch unless
    ``FENCEWATCH_ALLOW_UNVERIFIED_FAUST=1``."""
    env = os.environ if environ is None else environ
    problem = check(expected)
    if problem is not None:
        if env.get(ALLOW_UNVERIFIED_ENV, "") not in ("1", "true", "yes"):
            raise FaustSeamMismatch(problem)
        log.warning("%s (%s=1: starting anyway)", problem, ALLOW_UNVERIFIED_ENV)
    _fix_getmany()
    _fix_highwaters()
    _fix_fetch_wait()
    _fix_sequential_commit()
    _fix_unstable_offsets()
    _fix_revoke_commit()


def _patch(cls: Any, name: str, target: str, replacement: Any) -> None:
    original = getattr(cls, name)
    if getattr(original, _MARK, False):
        return
    _ORIGINALS[target] = original
    setattr(replacement, _MARK, True)
    setattr(cls, name, replacement)


# -- the patches ----------------------------------------------------------------


def _fix_getmany() -> None:
    """fix 5 and the intake. ``Consumer.getmany`` fetches a batch for the
    *live* set of active partitions, then yields its records one by one,
    awaiting the agent between them, and skips every record whose partition
    left that set meanwhile (paused for recovery or a full buffer). The
    fetch position is already past them, so they are never fetched again:
    the partition's acked offsets have a gap, faust never commits past a gap
    and the committed offset stops while the worker reports healthy. The
    replacement yields the same records and seeks a still-assigned partition
    back to its first skipped record. It also hands the records of the
    intake's topics to the intake (:mod:`streams.live.faust.intake`) instead of
    yielding them, after the same checks."""
    from faust.transport.consumer import Consumer

    async def getmany(self: Any, timeout: float) -> Any:
        records, active_partitions = await self._wait_next_records(timeout)
        generation_id = self.app.consumer_generation_id
        if records is None or self.should_stop:
            return
        if not self.flow_active:
            # As faust: the flow stopped while we waited; rebalance seeks back.
            try:
                await self.perform_seek()
            except Exception as exc:  # faust logs and carries on here too
                self.log.warning(f"exception performing seek when flow not active {exc}")
            return
        to_message = self._to_message
        hooks = hooks_of(self.app)
        intake: Any = None if hooks is None else hooks.intake
        tapped = intake.topics if intake is not None else frozenset()
        skipped: dict[Any, int] = {}  # tp -> offset of its first record not yielded
        stopped = False
        for tp, record in self.scheduler.iterate(records):
            if stopped:
                continue
            if not self.flow_active or self.app.consumer_generation_id != generation_id:
                # The rebalance that follows seeks every assigned partition to
                # its committed offset, which re-fetches the rest of this batch.
                stopped = True
                continue
            if (
                active_partitions is None
                or tp in active_partitions
                or tp in self._buffered_partitions
            ):
                if tp.topic in tapped:
                    if not intake.offer(self, tp, record, generation_id):
                        await intake.accept(self, tp, record, generation_id)
                    continue
                self.app.monitor.track_tp_end_offset(tp, self.highwater(tp))
                yield tp, to_message(tp, record)
            elif tp not in skipped:
                skipped[tp] = record.offset
        if skipped and not stopped:
            assigned = self.assignment()
            for tp, offset in skipped.items():
                if tp in assigned:
                    self.log.info("re-fetching %s from %s (skipped while inactive)", tp, offset)
                    await self.seek(tp, offset)

    _patch(Consumer, "getmany", "faust.transport.consumer:Consumer.getmany", getmany)


def _fix_highwaters() -> None:
    """fix 4. ``AIOKafkaConsumerThread._highwaters`` returns
    ``consumer.last_stable_offset(tp)`` when transactions are on; aiokafka
    knows it only after a fetch from that partition, so for a changelog
    partition just taken over it is unknown, recovery computes highwater -1,
    reads nothing, and the partition is processed against an empty table.
    The replacement asks the broker (ListOffsets; under read_committed the
    answer is the LSO, as faust intends)."""
    from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

    async def _highwaters(self: Any, partitions: Any) -> Any:
        consumer = self._ensure_consumer()
        return await consumer.end_offsets(list(partitions))

    _patch(
        AIOKafkaConsumerThread,
        "_highwaters",
        "faust.transport.drivers.aiokafka:AIOKafkaConsumerThread._highwaters",
        _highwaters,
    )


def _fix_fetch_wait() -> None:
    """faust hard-codes ``fetch_max_wait_ms=1500`` for the worker's consumer.
    aiokafka sends one fetch per broker at a time and leaves out partitions
    whose fetched records are still buffered, so a fetch can go out holding
    only partitions without new data; the broker then keeps it up to that
    wait while new events pile up elsewhere (stalls measured in docs/live.md).
    A short wait bounds the stall; the cost is
    an empty fetch round trip every ``FETCH_MAX_WAIT_MS`` on an idle topic."""
    from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

    target = "faust.transport.drivers.aiokafka:AIOKafkaConsumerThread._create_worker_consumer"
    original = _ORIGINALS.get(target, AIOKafkaConsumerThread._create_worker_consumer)

    def _create_worker_consumer(self: Any, transport: Any) -> Any:
        consumer = original(self, transport)
        consumer._fetch_max_wait_ms = FETCH_MAX_WAIT_MS  # read by its start()
        return consumer

    _patch(AIOKafkaConsumerThread, "_create_worker_consumer", target, _create_worker_consumer)


def _fix_sequential_commit() -> None:
    """``Producer.commit_transactions`` commits the partitions' transactions
    one after the other (offsets, EndTxn, begin: several round trips each),
    so N partitions take N times as long and the batches wait for it (commit
    gate). The transactions belong to independent producers, so this runs
    the same per-partition steps, under the same per-producer locks,
    concurrently. If one fails the error is raised as before; the others
    complete. A *fenced* producer (:func:`is_fencing`: another producer took
    its transactional id while this worker was paused or cut off) raises
    :class:`TransactionFenced` naming every partition refused, which faust's
    ``TransactionManager.commit`` does not catch (it would crash the app on
    ``ProducerFenced``): the commit gate hands it to the live runtime. A
    producer that failed for good without being fenced (its sender stopped on
    a lost connection) raises :class:`ProducerFailed` the same way: its
    transactions can never commit either, and faust's commit would crash the
    app with the aiokafka error's tracebacks."""
    from faust.transport.drivers.aiokafka import Producer

    async def commit_transactions(
        self: Any,
        tid_to_offset_map: Any,
        group_id: str,
        start_new_transaction: bool = True,
    ) -> None:
        async def commit_one(transactional_id: str, offsets: Any) -> None:
            async with self._trn_locks[transactional_id]:
                txp = self._transaction_producers.get(transactional_id)
                if txp is None:
                    self.log.warning(f"Commit invoked for unknown transaction {transactional_id}")
                    return
                await txp.send_offsets_to_transaction(offsets, group_id)
                await txp.commit_transaction()
                if start_new_transaction:
                    await txp.begin_transaction()

        items = list(tid_to_offset_map.items())
        results = await asyncio.gather(
            *(commit_one(tid, offsets) for tid, offsets in items), return_exceptions=True
        )
        fenced: list[int] = []
        first: BaseException | None = None
        failed: list[int] = []
        first_failed: BaseException | None = None
        other: BaseException | None = None
        for (tid, offsets), result in zip(items, results, strict=True):
            if not isinstance(result, BaseException):
                continue
            if is_fencing(result):
                fenced.extend(tp.partition for tp in offsets)
                first = first or result
            elif _is_fatal(self._transaction_producers.get(tid)):
                failed.extend(tp.partition for tp in offsets)
                first_failed = first_failed or result
            elif other is None:
                other = result
        if first is not None:
            raise TransactionFenced(sorted(fenced), first) from first
        if first_failed is not None:
            raise ProducerFailed(sorted(failed), first_failed) from first_failed
        if other is not None:
            raise other

    _patch(
        Producer,
        "commit_transactions",
        "faust.transport.drivers.aiokafka:Producer.commit_transactions",
        commit_transactions,
    )


def _fix_unstable_offsets() -> None:
    """fix 6. After a rebalance faust seeks each partition to its committed
    offset, read with aiokafka's OffsetFetch v2, which cannot ask for stable
    offsets (KIP-447 ``require_stable``): right after the previous owner's
    last transaction the broker can answer the older offset, and the new
    owner processes again events whose outputs are committed (duplicates).
    The replacement first awaits the hooks' ``stable_offsets`` (a
    read_committed librdkafka read of the same offsets, which sends
    ``require_stable`` and retries while a commit is pending)."""
    from faust.transport.consumer import ThreadDelegateConsumer

    target = "faust.transport.consumer:ThreadDelegateConsumer.seek_to_committed"
    original = _ORIGINALS.get(target, ThreadDelegateConsumer.seek_to_committed)

    async def seek_to_committed(self: Any) -> Any:
        hooks = hooks_of(self.app)
        if hooks is not None:
            await hooks.stable_offsets(self.assignment())
        return await original(self)

    _patch(ThreadDelegateConsumer, "seek_to_committed", target, seek_to_committed)


def _fix_revoke_commit() -> None:
    """fix 7. faust's ``Consumer.on_partitions_revoked`` first drops the
    revoked partitions' ack bookkeeping (``_acked``, ``_committed_offset``...),
    *then* runs the app's revoke handler, whose commit therefore no longer
    covers the events acked since the last commit. Under exactly-once their
    outputs and changelog records are already in the open transactions,
    which stay open. For a partition the worker keeps, the rebalance then
    restores its state from the (committed) changelog and seeks to the
    committed offset: those events are processed again, and when the
    transaction finally commits, both copies of their findings are visible
    (duplicate revisions on a graceful join; seen under CPU load, when
    batches are more often acked but not yet committed at the revocation).

    The replacement, before faust's bookkeeping goes, suspends the flow (the
    transactional sender acks no batch after that), waits for a periodic
    commit in flight, and commits every acked offset through the gated
    ``force_commit``, ending the transactions (the rebalance begins new
    ones)."""
    from faust.transport.consumer import Consumer

    target = "faust.transport.consumer:Consumer.on_partitions_revoked"
    original = _ORIGINALS.get(target, Consumer.on_partitions_revoked)

    async def on_partitions_revoked(self: Any, revoked: Any) -> None:
        app = self.app
        if app.in_transaction and not app.client_only:
            app.flow_control.suspend()
            await self.maybe_wait_for_commit_to_finish()
            await self.force_commit(start_new_transaction=False)
        await original(self, revoked)

    _patch(Consumer, "on_partitions_revoked", target, on_partitions_revoked)


def install_commit_gate(
    consumer: Any,
    gate: asyncio.Lock,
    before_commit: Callable[[], Awaitable[None]] | None = None,
    *,
    on_fenced: Callable[[TransactionFenced], None] | None = None,
    blocked: Callable[[], bool] | None = None,
    after_commit: Callable[[bool, float], None] | None = None,
) -> None:
    """fix 3. The periodic commit computes the committable offsets first and
    takes the per-partition transaction lock later, so it can commit a
    batch's outputs with the offset before it. Make ``consumer.force_commit``
    (the one entry point of every commit) hold ``gate`` from computing the
    offsets to the end of the transaction commit; ``before_commit`` runs
    first, under the gate (records that belong at the end of the
    transactions). Per consumer instance.

    While ``blocked()`` nothing is committed (a fenced worker never commits
    again from its old generation); a :class:`TransactionFenced` raised by
    the commit goes to ``on_fenced`` (the commit then counts as not done);
    ``after_commit(done, seconds)`` runs after a commit that completed:
    whether it committed anything, and how long it took under the gate."""
    original = consumer.force_commit
    if getattr(original, _MARK, False):
        return

    async def gated_force_commit(*args: Any, **kwargs: Any) -> bool:
        async with gate:
            if blocked is not None and blocked():
                return False
            began = time.monotonic()
            try:
                if before_commit is not None:
                    await before_commit()
                done = bool(await original(*args, **kwargs))
            except TransactionFenced as exc:
                if on_fenced is None:
                    raise
                on_fenced(exc)
                return False
            if after_commit is not None:
                after_commit(done, time.monotonic() - began)
            return done

    setattr(gated_force_commit, _MARK, True)
    consumer.force_commit = gated_force_commit


# -- the worker ----------------------------------------------------------------


def take_stop_signals(
    worker: Any,
    on_signal: Callable[[int], None],
    on_arrival: Callable[[int, Any], None] | None = None,
) -> None:
    """Route the SIGTERM/SIGINT handlers mode's ``Worker`` installs on its
    loop at start to ``on_signal(signum)`` (which decides when to call
    :func:`stop_worker`). With ``on_arrival``, it becomes the Python-level
    handler of both signals once mode has installed its own: asyncio's
    ``add_signal_handler`` sets a no-op there and learns of the signal from
    the wakeup fd, which CPython writes whichever Python handler is set, so
    the loop still calls ``on_signal`` and ``on_arrival`` runs at once, in
    the main thread, even while the loop is busy. Call before
    ``execute_from_commandline``."""
    worker._on_sigterm = lambda: on_signal(signal.SIGTERM)
    worker._on_sigint = lambda: on_signal(signal.SIGINT)
    if on_arrival is None:
        return
    install = worker.install_signal_handlers

    def install_then_note_arrivals() -> None:
        install()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, on_arrival)

    worker.install_signal_handlers = install_then_note_arrivals


def stop_worker(worker: Any, signum: int) -> None:
    """Stop ``worker`` as mode does on a stop signal (once; its
    ``execute_from_commandline`` then returns). Call on its loop."""
    worker._schedule_shutdown(signal.Signals(signum))


def quiet_worker(worker: Any) -> None:
    """Keep ``worker``'s log level where it was asked for. At ``warning`` or
    above, faust's ``Worker.on_setup_root_logger`` installs a terminal
    spinner handler and sets the *root* logger to DEBUG (the spinner turns on
    every record), and leaves it so after start-up: every debug call of
    aiokafka, faust and mode then builds a log record and runs the handlers
    for nothing (its cost: docs/live.md, "The faust seam").
    Without a spinner faust only sets the handler's level. Call before
    ``execute_from_commandline``."""
    worker.spinner = None


#: The frameworks' loggers whose INFO lines are lifecycle chatter (every
#: service's "Starting..."/"Stopping...", subscription tables, group joins).
FRAMEWORK_LOGGERS = ("faust", "mode", "aiokafka")
#: Kept at the worker's level: table recovery's few lines say what a restart
#: or rebalance is waiting for ("Highwater ...", "Recovery complete").
RECOVERY_LOGGER = "faust.tables.recovery"


class _TransientCoordinator(logging.Filter):
    """aiokafka logs ``Group Coordinator Request failed: [Error 15]
    GroupCoordinatorNotAvailableError`` at ERROR when a fresh broker has not
    elected the group's coordinator yet, and retries at once. The first few
    are shown as what they are, INFO (so hidden by default); a coordinator
    that stays unavailable keeps its ERROR lines."""

    TRANSIENT = 3

    def __init__(self) -> None:
        super().__init__()
        self.seen = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.ERROR or self.seen >= self.TRANSIENT:
            return True
        if "GroupCoordinatorNotAvailable" not in record.getMessage():
            return True
        self.seen += 1
        record.levelno, record.levelname = logging.INFO, "INFO"
        return logging.getLogger(record.name).isEnabledFor(logging.INFO)


#: Where aiokafka logs the transient coordinator error (its module logger).
_COORDINATOR_LOGGER = "aiokafka.consumer.group_coordinator"


#: aiokafka's module loggers that log an exception with its traceback
#: (``log.exception``) on paths a broker going away can take: the producer's
#: sender routine (a coordinator look-up on a closed connection), the
#: fetcher's and the group coordinator's routines, the connection itself.
_TRACEBACK_LOGGERS = (
    "aiokafka.producer.sender",
    "aiokafka.consumer.fetcher",
    "aiokafka.consumer.group_coordinator",
    "aiokafka.consumer.consumer",
    "aiokafka.conn",
    # faust's services log what crashed them through their module's logger
    # (mode's Service.crash, the consumer's commit): a commit or fetch that
    # failed on a lost connection is a line there too.
    "faust.transport.consumer",
    "faust.transport.drivers.aiokafka",
    "faust.app.base",
    "mode.services",
)


def connection_lost(exc: BaseException | None) -> bool:
    """Whether ``exc`` or an exception it was raised from is a lost or refused
    connection to the broker (Python's or aiokafka's)."""
    from aiokafka.errors import KafkaConnectionError, NodeNotReadyError, RequestTimedOutError

    lost = (ConnectionError, KafkaConnectionError, NodeNotReadyError, RequestTimedOutError)
    return any(isinstance(e, lost) for e in _chain(exc))


def _chain(exc: BaseException | None) -> Iterator[BaseException]:
    """``exc`` and the exceptions it was raised from (``__cause__``, else
    ``__context__``), outermost first, each once (a chain can loop)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


class _BrokerGoneTraceback(logging.Filter):
    """A broker that dies while a transaction commits makes aiokafka log
    ``Unexpected error in sender routine`` with three chained tracebacks
    (about 40 lines, once per transactional producer; found by the fault
    test that kills the broker under a faust worker, 2026-12-04). A lost
    connection is an operational condition, not a bug: the record keeps its
    level and becomes one line naming the error and those it was raised from
    (:func:`describe_failure`). Any other exception keeps its traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and connection_lost(exc):
            record.msg = f"{record.getMessage()}: {describe_failure(exc)}"
            # An empty tuple, not None: mode's formatter wraps a non-tuple as
            # (None,), and "msg" % (None,) fails ("--- Logging error ---" and
            # a traceback in the worker's log; fault test, 2026-12-05).
            record.args = ()
            record.exc_info = None
            record.exc_text = None
        return True


def quiet_framework_logs(level: str) -> None:
    """Below ``debug``, faust's, mode's and aiokafka's loggers pass on
    warnings and errors only (table recovery's lines excepted): at the
    default ``info`` a worker's log is fencewatch's own lines (state,
    restore, the partitions it processes) plus any trouble the clients
    report. ``debug`` shows everything. At every level an error record
    caused by a lost broker connection is one line, without its traceback."""
    if level.lower() != "debug":
        root = logging.getLogger().getEffectiveLevel()
        for name in FRAMEWORK_LOGGERS:
            logging.getLogger(name).setLevel(max(logging.WARNING, root))
        logging.getLogger(RECOVERY_LOGGER).setLevel(root)
    coordinator = logging.getLogger(_COORDINATOR_LOGGER)
    if not any(isinstance(f, _TransientCoordinator) for f in coordinator.filters):
        coordinator.addFilter(_TransientCoordinator())
    for name in _TRACEBACK_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _BrokerGoneTraceback) for f in logger.filters):
            logger.addFilter(_BrokerGoneTraceback())


# -- reaches into faust's consumer (intake) -----------------------------------


def read_offsets(consumer: Any) -> dict[Any, int]:
    """faust's per-partition read offset (``Consumer._read_offset``; records
    below it are redeliveries), mutable as ``_drain_messages`` mutates it."""
    offsets: dict[Any, int] = consumer._read_offset
    return offsets


async def add_gap(consumer: Any, tp: Any, start: int, end: int) -> None:
    """Tell faust offsets ``start``..``end`` (exclusive) hold no record
    (transaction markers), so its commit moves past them."""
    await consumer._add_gap(tp, start, end)


# -- reaches into faust's producer and aiokafka (transactional sender) -----------


def transaction_producer(producer: Any, tid: str) -> Any | None:
    """The aiokafka producer of faust's transaction ``tid``, or ``None``."""
    return producer._transaction_producers.get(tid)


def transaction_producer_ready(producer: Any, tid: str) -> bool:
    return tid in producer._transaction_producers and tid in producer._trn_locks


def transaction_lock(producer: Any, tid: str) -> asyncio.Lock:
    """faust's per-transaction lock (held by its commit and begin)."""
    lock: asyncio.Lock = producer._trn_locks[tid]
    return lock


#: aiokafka errors that mean this worker's producer or group membership is
#: stale: the worker must rejoin and restore, never publish from it again.
_FENCING_ERRORS = frozenset(
    {
        "ProducerFenced",
        "InvalidProducerEpoch",
        "IllegalGenerationError",
        "UnknownMemberIdError",
        "FencedInstanceIdError",
    }
)


def _is_fatal(txp: Any) -> bool:
    manager = getattr(txp, "_txn_manager", None)
    return manager is not None and bool(manager.is_fatal_error())


def _fatal_cause(txp: Any) -> BaseException | None:
    """The exception aiokafka's sender task of ``txp`` ended on, if it did:
    ``Sender._fail_all`` moves the producer to its fatal state with it. None
    when the task runs on or was cancelled (a fenced producer's state is set
    from the broker's answer, and its sender task may still run)."""
    task = getattr(getattr(txp, "_sender", None), "sender_task", None)
    if task is None or not task.done() or task.cancelled():
        return None
    exc: BaseException | None = task.exception()
    return exc


def describe_failure(exc: BaseException) -> str:
    """``exc`` and the exceptions it was raised from, innermost last, in one
    line: ``KafkaError: Unexpected error during batch delivery, from
    KafkaConnectionError: Connection at ... closed``."""
    parts: list[str] = []
    for current in itertools.islice(_chain(exc), 4):
        text = str(current)
        name = type(current).__name__
        parts.append(f"{name}: {text}" if text and not text.startswith(name) else text or name)
    return ", from ".join(parts)


def is_fencing(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it was raised from) says this
    worker's producer was fenced or its group generation is stale."""
    return any(
        isinstance(e, TransactionFenced) or type(e).__name__ in _FENCING_ERRORS for e in _chain(exc)
    )


async def append_records(
    txp: Any,
    records: Sequence[Any],
    on_done: Callable[[asyncio.Future[Any]], None],
) -> None:
    """Append ``records`` (each with ``topic``, ``key``, ``value``,
    ``headers``, ``partition``), in order, to ``txp``'s pending batches.

    This is what ``AIOKafkaProducer.send`` ends in (the accumulator's
    ``add_message``) without its per-record metadata wait, serializer and
    debug log, which cost more than the append (profiled). A record joins the
    partition's batch still waiting for the sender; the accumulator waits
    only when that batch is full. ``on_done`` is called with each delivery
    future."""
    from aiokafka.structs import TopicPartition

    manager = txp._txn_manager
    if manager is not None and manager.is_fatal_error():
        # aiokafka moves a fenced producer to its fatal state, and one whose
        # sender routine stopped on an error (_fatal_cause tells them apart).
        cause = _fatal_cause(txp)
        if cause is None or is_fencing(cause):
            raise TransactionFenced([], cause or RuntimeError(f"{manager.transactional_id} fenced"))
        raise ProducerFailed([], cause) from cause
    if manager is not None and not manager.is_in_transaction():
        raise TransactionUnavailable(
            f"transactional producer {manager.transactional_id} is not in a transaction"
        )
    accumulator = txp._message_accumulator
    timeout = txp._request_timeout_ms / 1000
    futures: list[Any] = []
    known: set[str] = set()
    for r in records:
        if r.topic not in known:
            # Also registers the topic with the producer's client: its
            # metadata refreshes cover only registered topics (all topics
            # while none is), and a batch for a partition whose leader it
            # does not know is never sent -- the commit would wait forever.
            await txp.client._wait_on_metadata(r.topic)
            known.add(r.topic)
        partition = r.partition
        if partition is None:
            partition = txp._partition(r.topic, None, r.key, r.value, r.key, r.value)
        tp = TopicPartition(r.topic, partition)
        fut = await accumulator.add_message(tp, r.key, r.value, timeout, headers=list(r.headers))
        futures.append(fut)
    for fut in futures:
        fut.add_done_callback(on_done)


def poison(txp: Any, exc: BaseException) -> None:
    """Put ``txp``'s transaction in aiokafka's abortable-error state, so it
    can never commit (some of a batch's outputs may be in it, its offsets
    are not)."""
    manager = getattr(txp, "_txn_manager", None)
    if manager is None:
        return
    try:
        manager.error_transaction(
            exc if isinstance(exc, Exception) else RuntimeError("batch interrupted")
        )
    except Exception:  # already in an error state: it cannot commit either
        log.debug("transaction of %r already failed", txp, exc_info=True)


# -- reaches into faust's stores, monitor and app ---------------------------------


def memory_store_put(store: Any, key: bytes, value: bytes, partition: int) -> None:
    """Write ``key`` into faust's memory store as its ``__setitem__`` does
    (raw codec), and record the key's partition: the store forgets keys of
    partitions this worker lost only if it knows their partition."""
    store.data[key] = value
    store._key_partition[key] = partition


def memory_store_apply(store: Any, partition: int, key: bytes, value: bytes | None) -> None:
    """Apply one changelog record as ``apply_changelog_batch`` does (``None``
    deletes)."""
    if value is None:
        store.data.pop(key, None)
        store._key_partition.pop(key, None)
    else:
        store.data[key] = value
        store._key_partition[key] = partition


def store_put(store: Any, key: bytes, value: bytes, partition: int) -> None:
    """Write ``key`` to a table store outside a stream event. faust's RocksDB
    store picks the partition from the current stream event (a context
    variable); batches have none, so this is its ``_set`` with the partition
    given."""
    db_for_partition = getattr(store, "_db_for_partition", None)
    if db_for_partition is not None:
        store._key_index[key] = partition
        db_for_partition(partition).put(key, value)
        return
    store[key] = value
    key_partition = getattr(store, "_key_partition", None)
    if isinstance(key_partition, dict):
        key_partition[key] = partition


def set_table_store(table: Any, store: Any) -> None:
    """Make ``store`` the table's store before the app starts (faust creates
    the store lazily from ``table._data``; ``Collection._new_store_by_url``
    is what would build it)."""
    table._data = store


def rocksdb_key_estimate(store: Any) -> int:
    """Keys in faust's RocksDB store, estimated per partition database
    (counting a large RocksDB exactly is a full scan); 0 when unknown."""
    total = 0
    for db in list(getattr(store, "_dbs", {}).values()):
        try:
            total += int(db.property_int_value("rocksdb.estimate-num-keys") or 0)
        except Exception:
            return 0
    return total


def mark_inbound(app: Any, tps: Iterable[Any], now: float) -> None:
    """faust's "slow processing" check logs an error for a partition that is
    fetched but whose stream never took an event; it learns of events from
    the monitor's ``stream_inbound_time``, which our batches bypass."""
    inbound = getattr(app.monitor, "stream_inbound_time", None)
    if inbound is not None:
        for tp in tps:
            inbound[tp] = now


def group_join_failure(app: Any) -> BaseException | None:
    """The error aiokafka's group coordination holds for the consumer, if
    any (a JoinGroup refused as fatal: ``InconsistentGroupProtocolError``
    when the group's members run the other engine), read without taking it.
    aiokafka raises it from ``check_errors``, which faust's fetcher bypasses:
    left alone, the worker stays up with no partitions for good. Safe to
    call from any thread (attribute reads; the consumer is never made here)."""
    thread = getattr(getattr(app, "_consumer", None), "_thread", None)
    consumer = getattr(thread, "_consumer", None)
    coordinator = getattr(consumer, "_coordinator", None)
    failure = getattr(coordinator, "_pending_exception", None)
    return failure if isinstance(failure, BaseException) else None


def is_crashed(app: Any) -> bool:
    """Whether the faust app crashed (mode's ``_crash_reason``)."""
    return bool(getattr(app, "_crash_reason", None))


def crash_reason(app: Any) -> BaseException | None:
    """The exception the faust app crashed with, if it did."""
    reason = getattr(app, "_crash_reason", None)
    return reason if isinstance(reason, BaseException) else None
