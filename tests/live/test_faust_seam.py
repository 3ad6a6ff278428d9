"""The faust seam (streams/live/faust/seam.py), without a broker: the version
and source pin, and for each patch faust's own behaviour next to the
corrected one. faust's functions run for real; the consumer/producer objects
they are called on are minimal stand-ins holding only the state they read."""

from __future__ import annotations

import asyncio
import dataclasses
from collections import defaultdict
from types import SimpleNamespace
from typing import Any

import pytest
from faust.transport.utils import DefaultSchedulingStrategy
from faust.types import TP

from streams.live.faust import seam as faust_seam
from streams.live.faust.seam import FaustSeamMismatch, LiveHooks, Manifest

faust_seam.install()  # the patches under test (verified against the manifest)

GETMANY = "faust.transport.consumer:Consumer.getmany"
HIGHWATERS = "faust.transport.drivers.aiokafka:AIOKafkaConsumerThread._highwaters"
WORKER_CONSUMER = "faust.transport.drivers.aiokafka:AIOKafkaConsumerThread._create_worker_consumer"
COMMIT = "faust.transport.drivers.aiokafka:Producer.commit_transactions"
SEEK = "faust.transport.consumer:ThreadDelegateConsumer.seek_to_committed"


def patched(target: str) -> Any:
    return faust_seam._resolve(target)


# -- the pin ---------------------------------------------------------------------


def test_the_committed_manifest_matches_the_installed_faust_and_aiokafka() -> None:
    """The repository's manifest is the installed code (else the worker would refuse to start)."""
    assert faust_seam.check() is None


def test_a_changed_function_source_is_detected_and_named_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A reached-into aiokafka function with new source is named by the check, in one line."""
    import aiokafka.client

    async def _wait_on_metadata(self: Any, topic: str) -> None:  # a "new release"
        return None

    monkeypatch.setattr(aiokafka.client.AIOKafkaClient, "_wait_on_metadata", _wait_on_metadata)
    problem = faust_seam.check()
    assert problem is not None
    assert "\n" not in problem
    assert "aiokafka.client:AIOKafkaClient._wait_on_metadata changed" in problem
    assert "faust-streaming 0.15.3" in problem and "aiokafka 0.14.0" in problem
    assert faust_seam.ALLOW_UNVERIFIED_ENV in problem


def test_a_mismatch_stops_install_unless_the_override_is_set() -> None:
    """install raises FaustSeamMismatch on a changed digest; the override variable lets it start."""
    pinned = faust_seam._pinned()
    digests = dict(pinned.digests)
    digests[GETMANY] = "0" * 64
    expected = Manifest(pinned.versions, digests)
    with pytest.raises(FaustSeamMismatch, match=r"Consumer\.getmany changed: expected sha256 0000"):
        faust_seam.install(environ={}, expected=expected)
    faust_seam.install(environ={faust_seam.ALLOW_UNVERIFIED_ENV: "1"}, expected=expected)


def test_another_version_with_the_same_sources_is_named() -> None:
    """A version change alone is reported with the installed and expected versions."""
    pinned = faust_seam._pinned()
    found = dataclasses.replace(
        faust_seam.current_manifest(pinned.digests),
        versions={**pinned.versions, "faust-streaming": "0.15.4"},
    )
    problem = faust_seam.check(pinned, found)
    assert problem is not None
    assert "faust-streaming 0.15.4 installed, the seam was checked against 0.15.3" in problem


def test_hooks_attach_once() -> None:
    """The live runtime's hooks are one typed object, attached once."""

    async def stable(_assigned: Any) -> None:
        return None

    app = SimpleNamespace()
    faust_seam.attach_hooks(app, LiveHooks(None, None, stable))
    assert isinstance(faust_seam.hooks_of(app), LiveHooks)
    with pytest.raises(RuntimeError, match="already attached"):
        faust_seam.attach_hooks(app, LiveHooks(None, None, stable))


# -- fix 5: getmany skips records of a partition that became inactive ------------


class _FetchingConsumer:
    """What getmany reads of faust's Consumer."""

    def __init__(self, records: dict[TP, list[Any]], active: set[TP]) -> None:
        self._records = records
        self._active = active
        self.should_stop = False
        self.flow_active = True
        self._buffered_partitions: set[TP] = set()
        self.scheduler = DefaultSchedulingStrategy()  # type: ignore[abstract]
        self.app = SimpleNamespace(
            consumer_generation_id=1,
            monitor=SimpleNamespace(track_tp_end_offset=lambda tp, hw: None),
        )
        self.log = SimpleNamespace(info=lambda *a: None, warning=lambda *a: None)
        self.seeks: list[tuple[TP, int]] = []

    async def _wait_next_records(self, timeout: float) -> Any:
        return self._records, self._active

    def _to_message(self, tp: TP, record: Any) -> Any:
        return (tp, record.offset)

    def highwater(self, tp: TP) -> int:
        return 100

    def assignment(self) -> set[TP]:
        return set(self._records)

    async def seek(self, tp: TP, offset: int) -> None:
        self.seeks.append((tp, offset))


def _run_getmany(fn: Any) -> tuple[list[Any], list[tuple[TP, int]]]:
    a, b = TP("events", 0), TP("events", 1)
    rec = [SimpleNamespace(offset=o) for o in range(3)]
    consumer = _FetchingConsumer({a: rec, b: rec}, {a, b})

    async def go() -> list[Any]:
        out = []
        async for tp, message in fn(consumer, 0.1):
            out.append(message)
            if tp == a:  # partition 1 is paused (recovery, full buffer) mid-batch
                consumer._active.discard(b)
        return out

    return asyncio.run(go()), consumer.seeks


def test_getmany_unpatched_drops_records_of_a_paused_partition_for_good() -> None:
    """faust skips partition 1's records after it is paused and never fetches them again."""
    yielded, seeks = _run_getmany(faust_seam.original(GETMANY))
    assert all(tp.partition == 0 for tp, _ in yielded)
    assert seeks == []  # the fetch position stays past them: a gap faust never commits past


def test_getmany_patched_seeks_a_paused_partition_back_to_its_first_skipped_record() -> None:
    """The patched getmany yields the same records and seeks partition 1 back to offset 0."""
    yielded, seeks = _run_getmany(patched(GETMANY))
    assert all(tp.partition == 0 for tp, _ in yielded)
    assert seeks == [(TP("events", 1), 0)]


def test_getmany_patched_hands_the_intake_topics_records_to_the_intake() -> None:
    """Records of the intake's topics go to its offer() or, when refused, accept(), in order."""
    taken: list[tuple[TP, int, int]] = []

    class Intake:
        topics = frozenset({"events"})

        def offer(self, consumer: Any, tp: TP, record: Any, generation: int) -> bool:
            if record.offset % 2:
                return False  # e.g. full: the fetcher must await accept()
            taken.append((tp, record.offset, generation))
            return True

        async def accept(self, consumer: Any, tp: TP, record: Any, generation: int) -> None:
            taken.append((tp, record.offset, generation))

    async def stable(_assigned: Any) -> None:
        return None

    a = TP("events", 0)
    consumer = _FetchingConsumer({a: [SimpleNamespace(offset=o) for o in range(3)]}, {a})
    faust_seam.attach_hooks(consumer.app, LiveHooks(None, Intake(), stable))

    async def go() -> list[Any]:
        return [m async for m in patched(GETMANY)(consumer, 0.1)]

    assert asyncio.run(go()) == []
    assert taken == [(a, 0, 1), (a, 1, 1), (a, 2, 1)]


# -- fix 4: _highwaters under transactions --------------------------------------


def _highwaters(fn: Any) -> Any:
    tp = TP("owner-state-changelog", 3)

    class AioConsumer:  # a changelog partition just taken over: never fetched
        def last_stable_offset(self, tp: TP) -> int | None:
            return None

        async def end_offsets(self, tps: list[TP]) -> dict[TP, int]:
            return dict.fromkeys(tps, 42)  # what ListOffsets answers (read_committed: LSO)

    aio = AioConsumer()
    thread = SimpleNamespace(
        _ensure_consumer=lambda: aio, consumer=SimpleNamespace(in_transaction=True)
    )
    return asyncio.run(fn(thread, [tp]))[tp]


def test_highwaters_unpatched_is_unknown_for_an_unfetched_partition_under_transactions() -> None:
    """faust reads aiokafka's cached LSO, unknown before a fetch: recovery would read nothing."""
    assert _highwaters(faust_seam.original(HIGHWATERS)) is None


def test_highwaters_patched_asks_the_broker() -> None:
    """The patched _highwaters returns the broker's end offset (LSO under read_committed)."""
    assert _highwaters(patched(HIGHWATERS)) == 42


# -- fetch wait ------------------------------------------------------------------


def _fetch_wait(fn: Any) -> int:
    import faust

    async def go() -> int:
        app = faust.App("seam-test", broker="kafka://127.0.0.1:1", web_enabled=False)
        thread = app.consumer._thread  # type: ignore[attr-defined]
        consumer = fn(thread, app.transport)  # builds the AIOKafkaConsumer, does not start it
        wait: int = consumer._fetch_max_wait_ms
        return wait

    return asyncio.run(go())


def test_worker_consumer_unpatched_waits_1500_ms_per_fetch() -> None:
    """faust builds the worker's consumer with fetch_max_wait_ms=1500."""
    assert _fetch_wait(faust_seam.original(WORKER_CONSUMER)) == 1500


def test_worker_consumer_patched_waits_at_most_fetch_max_wait_ms() -> None:
    """The patched builder sets the short fetch wait."""
    assert _fetch_wait(patched(WORKER_CONSUMER)) == faust_seam.FETCH_MAX_WAIT_MS


# -- concurrent commit -------------------------------------------------------------


def _commit_order(fn: Any) -> list[str]:
    steps: list[str] = []

    class Txp:
        def __init__(self, name: str) -> None:
            self.name = name

        async def _step(self, what: str) -> None:
            steps.append(f"{self.name}:{what}")
            await asyncio.sleep(0.001)  # a broker round trip

        async def send_offsets_to_transaction(self, offsets: Any, group: str) -> None:
            await self._step("offsets")

        async def commit_transaction(self) -> None:
            await self._step("commit")

        async def begin_transaction(self) -> None:
            await self._step("begin")

    async def go() -> None:
        producer = SimpleNamespace(
            _trn_locks=defaultdict(asyncio.Lock),
            _transaction_producers={"a": Txp("a"), "b": Txp("b")},
            log=SimpleNamespace(warning=lambda *a: None),
        )
        await fn(producer, {"a": {}, "b": {}}, "group")

    asyncio.run(go())
    return steps


def test_commit_transactions_unpatched_commits_partitions_one_after_the_other() -> None:
    """faust finishes partition a's offsets, commit and begin before b starts."""
    assert _commit_order(faust_seam.original(COMMIT)) == [
        "a:offsets",
        "a:commit",
        "a:begin",
        "b:offsets",
        "b:commit",
        "b:begin",
    ]


def test_commit_transactions_patched_commits_partitions_concurrently() -> None:
    """The patched commit runs the same steps per partition, interleaved."""
    steps = _commit_order(patched(COMMIT))
    assert steps[:2] == ["a:offsets", "b:offsets"]
    assert [s for s in steps if s.startswith("a")] == ["a:offsets", "a:commit", "a:begin"]
    assert [s for s in steps if s.startswith("b")] == ["b:offsets", "b:commit", "b:begin"]


def _commit_with_fenced_b(fn: Any) -> tuple[BaseException | None, list[str]]:
    import aiokafka.errors

    steps: list[str] = []

    class Txp:
        def __init__(self, name: str, fenced: bool) -> None:
            self.name = name
            self.fenced = fenced

        async def send_offsets_to_transaction(self, offsets: Any, group: str) -> None:
            if self.fenced:
                raise aiokafka.errors.ProducerFenced()
            steps.append(f"{self.name}:offsets")

        async def commit_transaction(self) -> None:
            steps.append(f"{self.name}:commit")

        async def begin_transaction(self) -> None:
            steps.append(f"{self.name}:begin")

    return asyncio.run(_commit_a_and_b(fn, Txp("a", False), Txp("b", True))), steps


async def _commit_a_and_b(fn: Any, a: Any, b: Any) -> BaseException | None:
    """What the commit ``fn`` raises for producer ``a`` (offsets of events
    partition 0) and ``b`` (partitions 1 and 3), if anything."""
    producer = SimpleNamespace(
        _trn_locks=defaultdict(asyncio.Lock),
        _transaction_producers={"a": a, "b": b},
        log=SimpleNamespace(warning=lambda *a: None),
    )
    offsets = {"a": {TP("events", 0): 5}, "b": {TP("events", 1): 7, TP("events", 3): 2}}
    try:
        await fn(producer, offsets, "group")
    except BaseException as exc:
        return exc
    return None


def test_commit_transactions_unpatched_raises_producer_fenced() -> None:
    """faust's commit raises aiokafka's ProducerFenced (its caller then crashes the app)."""
    exc, _steps = _commit_with_fenced_b(faust_seam.original(COMMIT))
    assert type(exc).__name__ == "ProducerFenced"


def test_commit_transactions_patched_names_the_fenced_partitions() -> None:
    """The patched commit completes the others and raises TransactionFenced
    naming the refused partitions (faust does not catch it)."""
    exc, steps = _commit_with_fenced_b(patched(COMMIT))
    assert isinstance(exc, faust_seam.TransactionFenced)
    assert exc.partitions == [1, 3]
    assert faust_seam.is_fencing(exc)
    assert steps == ["a:offsets", "a:commit", "a:begin"]


def test_the_gate_hands_a_fencing_to_on_fenced_and_then_commits_nothing() -> None:
    """A TransactionFenced from the commit goes to on_fenced (the commit
    returns False, no traceback); while blocked no commit runs at all."""
    calls: list[str] = []
    fenced: list[faust_seam.TransactionFenced] = []

    async def force_commit() -> bool:
        calls.append("commit")
        raise faust_seam.TransactionFenced([2], RuntimeError("refused"))

    async def go() -> list[bool]:
        consumer = SimpleNamespace(force_commit=force_commit)
        faust_seam.install_commit_gate(
            consumer, asyncio.Lock(), on_fenced=fenced.append, blocked=lambda: bool(fenced)
        )
        return [await consumer.force_commit(), await consumer.force_commit()]

    assert asyncio.run(go()) == [False, False]
    assert calls == ["commit"]
    assert [f.partitions for f in fenced] == [[2]]


def test_the_gate_tells_after_commit_whether_it_committed_and_how_long_it_took() -> None:
    """after_commit gets (done, seconds) for each commit that completed: the
    time under the gate, deferred records' flush included; a commit with
    nothing to commit is reported as not done."""
    results = iter([True, False])
    reported: list[tuple[bool, float]] = []

    async def flush() -> None:
        await asyncio.sleep(0.02)

    async def force_commit() -> bool:
        return next(results)

    async def go() -> None:
        consumer = SimpleNamespace(force_commit=force_commit)
        faust_seam.install_commit_gate(
            consumer,
            asyncio.Lock(),
            flush,
            after_commit=lambda done, seconds: reported.append((done, seconds)),
        )
        await consumer.force_commit()
        await consumer.force_commit()

    asyncio.run(go())
    assert [done for done, _ in reported] == [True, False]
    assert all(seconds >= 0.02 for _, seconds in reported)  # the flush is in it


async def _producer_whose_sender_died(tid: str) -> Any:
    """A real aiokafka transactional producer, in a transaction, whose sender
    routine then ends as it does when the broker dies under a commit (its
    coordinator look-up finds the connection closed): ``Sender._fail_all``
    moves it to its fatal state. Never connected."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaConnectionError, KafkaError

    txp = AIOKafkaProducer(bootstrap_servers="127.0.0.1:1", transactional_id=tid)
    txp._txn_manager.set_pid_and_epoch(1, 0)
    txp._txn_manager.begin_transaction()

    async def sender_routine() -> None:
        await asyncio.sleep(0.01)
        try:
            raise KafkaConnectionError("Connection at 127.0.0.1:1 closed")
        except KafkaConnectionError as exc:  # aiokafka's wrapping, sender.py
            raise KafkaError("Unexpected error during batch delivery") from exc

    task = asyncio.ensure_future(sender_routine())
    task.add_done_callback(txp._sender._fail_all)
    txp._sender._sender_task = task
    return txp


def _forget(txp: Any) -> None:
    """Retrieve the failed transaction's waiter and mark the never-started producer closed."""
    waiter = txp._txn_manager.wait_for_transaction_end()
    if waiter is not None and waiter.done():
        waiter.exception()
    txp._closed = True


def _commit_with_dead_sender_b(fn: Any) -> tuple[BaseException | None, list[str]]:
    steps: list[str] = []

    class Txp:
        _txn_manager = None

        async def send_offsets_to_transaction(self, offsets: Any, group: str) -> None:
            steps.append("a:offsets")

        async def commit_transaction(self) -> None:
            steps.append("a:commit")

        async def begin_transaction(self) -> None:
            steps.append("a:begin")

    async def go() -> BaseException | None:
        from aiokafka.structs import TopicPartition

        b = await _producer_whose_sender_died("b")
        real_send_offsets = b.send_offsets_to_transaction

        async def send_offsets(offsets: Any, group: str) -> None:
            # faust passes its TPs; aiokafka validates its own.
            await real_send_offsets(
                {TopicPartition(tp.topic, tp.partition): o for tp, o in offsets.items()}, group
            )

        b.send_offsets_to_transaction = send_offsets
        try:
            return await _commit_a_and_b(fn, Txp(), b)
        finally:
            _forget(b)

    return asyncio.run(go()), steps


def test_commit_transactions_unpatched_raises_a_dead_senders_error() -> None:
    """faust's commit raises aiokafka's KafkaError when a producer's sender died
    (its caller crashes the app and logs the chain's tracebacks)."""
    exc, _steps = _commit_with_dead_sender_b(faust_seam.original(COMMIT))
    assert type(exc).__name__ == "KafkaError"


def test_commit_transactions_patched_names_the_partitions_of_a_producer_that_failed() -> None:
    """A producer whose sender died mid-commit (not fenced) makes the patched
    commit raise ProducerFailed naming its partitions and the lost
    connection; the runtime handles it as a fencing (the gate's on_fenced)."""
    exc, steps = _commit_with_dead_sender_b(patched(COMMIT))
    assert isinstance(exc, faust_seam.ProducerFailed)
    assert exc.partitions == [1, 3]
    assert faust_seam.is_fencing(exc)
    assert faust_seam.describe_failure(exc.cause) == (
        "KafkaError: Unexpected error during batch delivery, "
        "from KafkaConnectionError: Connection at 127.0.0.1:1 closed"
    )
    assert steps == ["a:offsets", "a:commit", "a:begin"]


async def _append_one(txp: Any) -> BaseException | None:
    """What append_records raises for one record on ``txp`` (then forgotten)."""
    record = SimpleNamespace(topic="findings", key=b"k", value=b"v", headers=(), partition=0)
    try:
        await faust_seam.append_records(txp, [record], lambda fut: None)
    except BaseException as exc:
        return exc
    finally:
        _forget(txp)
    return None


def test_appending_to_a_producer_whose_sender_died_raises_producer_failed() -> None:
    """append_records on a producer its dead sender made fatal raises
    ProducerFailed with the sender's error (not 'fenced')."""

    async def go() -> BaseException | None:
        txp = await _producer_whose_sender_died("t")
        await asyncio.sleep(0.05)  # the sender routine ends
        return await _append_one(txp)

    exc = asyncio.run(go())
    assert isinstance(exc, faust_seam.ProducerFailed), repr(exc)
    assert "Connection at 127.0.0.1:1 closed" in faust_seam.describe_failure(exc.cause)


def test_appending_to_a_producer_the_broker_fenced_raises_transaction_fenced() -> None:
    """A producer made fatal by the broker's ProducerFenced (its sender still
    running) raises TransactionFenced, not ProducerFailed."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import ProducerFenced

    async def go() -> BaseException | None:
        txp = AIOKafkaProducer(bootstrap_servers="127.0.0.1:1", transactional_id="t")
        txp._txn_manager.set_pid_and_epoch(1, 0)
        txp._txn_manager.begin_transaction()
        txp._txn_manager.fatal_error(ProducerFenced())
        return await _append_one(txp)

    exc = asyncio.run(go())
    assert isinstance(exc, faust_seam.TransactionFenced), repr(exc)
    assert not isinstance(exc, faust_seam.ProducerFailed)


# -- fix 6: seek to committed offsets only once they are stable --------------------


def _seek_steps(fn: Any) -> list[str]:
    steps: list[str] = []

    async def stable(assigned: Any) -> None:
        steps.append(f"stable {sorted(assigned)}")

    async def faust_seek() -> dict[TP, int]:
        steps.append("faust seek")
        return {}

    consumer = SimpleNamespace(
        app=SimpleNamespace(),
        assignment=lambda: {TP("events", 0)},
        _thread=SimpleNamespace(seek_to_committed=faust_seek),
    )
    faust_seam.attach_hooks(consumer.app, LiveHooks(None, None, stable))
    asyncio.run(fn(consumer))
    return steps


def test_seek_to_committed_unpatched_reads_offsets_without_waiting_for_stability() -> None:
    """faust seeks at once (OffsetFetch v2 cannot ask for stable offsets)."""
    assert _seek_steps(faust_seam.original(SEEK)) == ["faust seek"]


def test_seek_to_committed_patched_waits_for_stable_offsets_first() -> None:
    """The patched seek awaits the runtime's stable-offsets check, then faust's seek."""
    steps = _seek_steps(patched(SEEK))
    assert steps == [f"stable {[TP('events', 0)]}", "faust seek"]


# -- fix 3: the commit gate ----------------------------------------------------------


def _commit_while_gate_held(gated: bool) -> list[str]:
    steps: list[str] = []

    async def force_commit() -> bool:
        steps.append("commit")
        return True

    async def go() -> None:
        consumer = SimpleNamespace(force_commit=force_commit)
        gate = asyncio.Lock()
        if gated:
            faust_seam.install_commit_gate(consumer, gate)
        async with gate:  # a batch is between its first send and its last ack
            task = asyncio.ensure_future(consumer.force_commit())
            await asyncio.sleep(0.01)
            steps.append("batch acked")
        await task

    asyncio.run(go())
    return steps


def test_commit_unpatched_runs_in_the_middle_of_a_batch() -> None:
    """faust's commit does not wait for a batch: it can split one."""
    assert _commit_while_gate_held(gated=False) == ["commit", "batch acked"]


def test_commit_gate_makes_the_commit_wait_for_the_whole_batch() -> None:
    """With the gate, the commit runs only after the batch is acked."""
    assert _commit_while_gate_held(gated=True) == ["batch acked", "commit"]


def test_only_the_seam_touches_private_attributes_of_other_objects() -> None:
    """Outside faust/seam.py, streams/live (both engines' packages too) reads no ``_private``
    attribute except its own (self)."""
    import ast
    from pathlib import Path

    live = Path(faust_seam.__file__).parent.parent
    found = []
    paths = sorted(live.rglob("*.py"))
    assert live / "rdkafka" / "engine.py" in paths  # the walk reaches into the packages
    for path in paths:
        if path.relative_to(live).as_posix() in ("faust/seam.py", "faust/manifest.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            name = None
            if isinstance(node, ast.Attribute):
                owner = node.value
                if not (isinstance(owner, ast.Name) and owner.id in ("self", "cls")):
                    name = node.attr
                # os._exit is public (the underscore only says "no clean-up").
                if isinstance(owner, ast.Name) and (owner.id, node.attr) == ("os", "_exit"):
                    name = None
            elif isinstance(node, ast.Call) and getattr(node.func, "id", None) in (
                "getattr",
                "setattr",
                "hasattr",
            ):
                arg = node.args[1] if len(node.args) > 1 else None
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    name = arg.value
            # librdkafka's local error codes (KafkaError._PARTITION_EOF) are public.
            if name and name.startswith("_") and not name.startswith("__") and not name.isupper():
                found.append(f"{path.relative_to(live)}:{node.lineno}: {name}")
    assert found == []


# -- fix 7: commit what was acked before faust drops the ack bookkeeping ---------

REVOKED = "faust.transport.consumer:Consumer.on_partitions_revoked"


def _revoke_steps(fn: Any) -> list[str]:
    """Run ``fn`` (faust's or the patched on_partitions_revoked) on a consumer
    whose partition 0 has offset 7 acked but not committed; the app's revoke
    handler commits what faust's bookkeeping still holds, as faust's does."""
    steps: list[str] = []
    tp = TP("events", 0)

    async def force_commit(start_new_transaction: bool = True) -> bool:
        steps.append(f"commit acked={sorted(consumer._acked.get(tp, []))}")
        return True

    async def wait_for_commit() -> bool:
        steps.append("wait for commit in flight")
        return False

    async def app_revoke_handler(revoked: Any) -> None:  # faust: wait_empty -> commit
        await force_commit()

    consumer = SimpleNamespace(
        app=SimpleNamespace(
            in_transaction=True,
            client_only=False,
            flow_control=SimpleNamespace(suspend=lambda: steps.append("flow suspended")),
            _start_span_from_rebalancing=lambda name: _NullSpan(),
        ),
        diag=SimpleNamespace(set_flag=lambda f: None, unset_flag=lambda f: None),
        _active_partitions={tp},
        _paused_partitions=set(),
        _gap={},
        _acked={tp: [7]},
        _acked_index={tp: {7}},
        _read_offset={tp: 8},
        _committed_offset={tp: 7},
        force_commit=force_commit,
        maybe_wait_for_commit_to_finish=wait_for_commit,
        _on_partitions_revoked=app_revoke_handler,
    )
    asyncio.run(fn(consumer, {tp}))
    return steps


class _NullSpan:
    """faust's rebalancing span, which the stand-in app does not trace."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def test_revoke_unpatched_commits_after_dropping_the_acked_offsets() -> None:
    """faust drops the acked offsets first: its revoke commit covers nothing
    that was acked since the last commit (those outputs stay in the open
    transaction and the events are processed again after the seek)."""
    assert _revoke_steps(faust_seam.original(REVOKED)) == ["commit acked=[]"]


def test_revoke_patched_commits_the_acked_offsets_first() -> None:
    """The patched revoke suspends the flow, waits for a commit in flight and
    commits the acked offsets before faust's bookkeeping goes."""
    assert _revoke_steps(patched(REVOKED)) == [
        "flow suspended",
        "wait for commit in flight",
        "commit acked=[7]",
        "commit acked=[]",
    ]


# -- the worker's log level --------------------------------------------------------


def _root_level_after_setup(quiet: bool) -> int:
    import logging

    import faust

    app = faust.App("seam-log-test", broker="kafka://127.0.0.1:1", autodiscover=False)
    worker = faust.Worker(app, loglevel="WARNING", quiet=True)
    if quiet:
        faust_seam.quiet_worker(worker)
    root = logging.Logger("seam-root")  # stands in for the root logger
    root.setLevel(logging.WARNING)
    root.addHandler(logging.NullHandler())
    worker.on_setup_root_logger(root, logging.WARNING)
    return root.level


def test_faust_sets_the_root_logger_to_debug_at_warning_and_quiet_worker_keeps_warning() -> None:
    """At warning level faust sets the root logger to DEBUG; quiet_worker keeps WARNING."""
    import logging

    assert _root_level_after_setup(quiet=False) == logging.DEBUG
    assert _root_level_after_setup(quiet=True) == logging.WARNING


def test_framework_logs_are_quiet_below_debug_and_recovery_stays() -> None:
    """At info, faust/mode/aiokafka pass only warnings (table recovery's lines
    excepted) and aiokafka's first coordinator-not-available errors read as
    INFO; at debug everything passes."""
    import logging

    names = [*faust_seam.FRAMEWORK_LOGGERS, faust_seam.RECOVERY_LOGGER, "faust.worker"]
    saved = {n: logging.getLogger(n).level for n in names}
    root = logging.getLogger()
    root_level = root.level
    coordinator = logging.getLogger("aiokafka.consumer.group_coordinator")
    filters = list(coordinator.filters)
    # A fresh filter (one installed earlier in this process has counted already).
    coordinator.filters[:] = [
        f for f in filters if not isinstance(f, faust_seam._TransientCoordinator)
    ]
    try:
        root.setLevel(logging.INFO)
        faust_seam.quiet_framework_logs("info")
        assert not logging.getLogger("faust.worker").isEnabledFor(logging.INFO)
        assert logging.getLogger("aiokafka.conn").isEnabledFor(logging.WARNING)
        assert logging.getLogger(faust_seam.RECOVERY_LOGGER).isEnabledFor(logging.INFO)

        def record(msg: str) -> logging.LogRecord:
            return coordinator.makeRecord(
                coordinator.name, logging.ERROR, __file__, 1,
                "Group Coordinator Request failed: %s", (msg,), None,
            )  # fmt: skip

        added = [f for f in coordinator.filters if f not in filters]
        (flt,) = [f for f in added if isinstance(f, faust_seam._TransientCoordinator)]
        transient = [record("[Error 15] GroupCoordinatorNotAvailableError") for _ in range(4)]
        kept = [flt.filter(r) for r in transient]
        assert kept == [False, False, False, True]  # the 4th keeps its ERROR
        assert [r.levelname for r in transient] == ["INFO", "INFO", "INFO", "ERROR"]
        other = record("[Error 7] RequestTimedOutError")
        assert flt.filter(other) and other.levelname == "ERROR"

        root.setLevel(logging.DEBUG)
        for n in faust_seam.FRAMEWORK_LOGGERS:
            logging.getLogger(n).setLevel(logging.NOTSET)
        faust_seam.quiet_framework_logs("debug")
        assert logging.getLogger("faust.worker").isEnabledFor(logging.DEBUG)
    finally:
        for n, level in saved.items():
            logging.getLogger(n).setLevel(level)
        root.setLevel(root_level)
        coordinator.filters[:] = filters


def _sender_error_lines(
    exc_factory: Any, logger: str = "aiokafka.producer.sender", message: str = ""
) -> str:
    """What a handler prints for ``logger`` (aiokafka's sender by default)
    logging ``exc_factory()`` as it does (``log.exception``), with the seam's
    log filters installed."""
    import io
    import logging

    names = [*faust_seam.FRAMEWORK_LOGGERS, faust_seam.RECOVERY_LOGGER]
    saved = {n: logging.getLogger(n).level for n in names}
    faust_seam.quiet_framework_logs("info")
    sender = logging.getLogger(logger)
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("[%(levelname)s] %(message)s"))
    sender.addHandler(handler)
    try:
        try:
            raise exc_factory()
        except Exception:
            sender.exception(message or "Unexpected error in sender routine")
    finally:
        sender.removeHandler(handler)
        for n, level in saved.items():  # the levels it set are process-wide
            logging.getLogger(n).setLevel(level)
    return out.getvalue()


def test_a_dead_brokers_sender_error_is_one_line_without_its_tracebacks() -> None:
    """aiokafka's 'Unexpected error in sender routine' for a coordinator look-up on a
    connection the dead broker reset (its real chain: ConnectionResetError ->
    KafkaConnectionError -> KafkaError) is one ERROR line naming the error."""
    from aiokafka.errors import KafkaConnectionError, KafkaError

    def raised() -> Exception:
        try:
            try:
                raise ConnectionResetError(104, "Connection reset by peer")
            except ConnectionResetError as reset:
                raise KafkaConnectionError("Connection at 127.0.0.1:1 closed") from reset
        except KafkaConnectionError as err:
            outer = KafkaError(repr(err))
            outer.__cause__ = err
            return outer

    text = _sender_error_lines(raised)
    assert "Traceback" not in text, text
    assert text.count("\n") == 1, text
    assert text.startswith("[ERROR] Unexpected error in sender routine: KafkaError: "), text
    assert "Connection at 127.0.0.1:1 closed" in text, text


def _dead_broker_chain() -> Exception:
    from aiokafka.errors import KafkaConnectionError, KafkaError

    try:
        try:
            raise KafkaConnectionError("Connection at 127.0.0.1:1 closed")
        except KafkaConnectionError as exc:
            raise KafkaError("Unexpected error during batch delivery") from exc
    except KafkaError as outer:
        return outer


@pytest.mark.parametrize(
    "logger", ["faust.transport.drivers.aiokafka", "faust.transport.consumer", "mode.services"]
)
def test_a_faust_service_crashed_by_a_lost_connection_logs_one_line(logger: str) -> None:
    """faust's services log what crashed them (mode's 'Crashed reason=%r', the
    consumer's 'Got exception') on their module's logger: for a lost
    connection that is one ERROR line too."""
    text = _sender_error_lines(_dead_broker_chain, logger, "Crashed reason=RuntimeError()")
    assert "Traceback" not in text, text
    assert text.count("\n") == 1, text
    assert "Connection at 127.0.0.1:1 closed" in text, text


def test_any_other_sender_error_keeps_its_traceback() -> None:
    """An exception with no lost connection in its chain (a bug) keeps its traceback."""
    text = _sender_error_lines(lambda: ValueError("a bug"))
    assert "Traceback" in text and "ValueError: a bug" in text, text


def test_a_lost_connection_record_formats_through_modes_formatter_as_one_line() -> None:
    """aiokafka's sender error on a dead broker, rewritten to one line by the seam's
    filter, formats through mode's own formatter (which wraps non-tuple args)."""
    import logging

    from aiokafka.errors import KafkaConnectionError, KafkaError
    from mode.utils.logging import ExtensionFormatter

    try:
        try:
            raise KafkaConnectionError("Connection at 127.0.0.1:1 closed")
        except KafkaConnectionError as lost:
            raise KafkaError(repr(lost)) from lost
    except KafkaError:
        import sys

        exc_info = sys.exc_info()
    record = logging.LogRecord(
        "aiokafka.producer.sender",
        logging.ERROR,
        __file__,
        1,
        "Unexpected error in sender routine",
        (),
        exc_info,
    )
    assert faust_seam._BrokerGoneTraceback().filter(record)
    text = ExtensionFormatter(fmt="%(message)s").format(record)
    assert text.startswith("Unexpected error in sender routine: ")
    assert "\n" not in text and "Traceback" not in text
