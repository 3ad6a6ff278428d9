"""The bounds on timeline replays: the gate (concurrency, joining a running
replay, the cache and its byte bound), what the server answers when every
slot is taken, and the read itself (bytes kept, time)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest

from streams.console.replays import ReplayGate, timeline_bytes
from streams.console.timeline import Timeline
from streams.errors import BrokerError
from streams.kafka.connection import KafkaConnection
from streams.kafka.keyread import KeyRead, KeyRecord, read_key


def _timeline(n: int, size: int = 100) -> Timeline:
    records = tuple(KeyRecord(b"x" * size, 0, i, -1) for i in range(n))
    return Timeline([], KeyRead(records, n, (0,), False), 0, 2000)


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _gate(replay: Callable[[str], Timeline], clock: _Clock, **kw: int) -> ReplayGate:
    opts = {"concurrency": 2, "cache_entries": 8, "cache_bytes": 1 << 20, **kw}
    return ReplayGate(replay, cache_s=5.0, clock=clock, **opts)  # type: ignore[arg-type]


def test_past_the_concurrency_bound_the_gate_says_busy_and_joins_a_running_key() -> None:
    """Two keys replay; a third is refused (None); a second request for a running key waits
    for that replay instead of starting another."""
    release = threading.Event()
    calls: list[str] = []

    def replay(key: str) -> Timeline:
        calls.append(key)
        release.wait(30)
        return _timeline(1)

    gate = _gate(replay, _Clock())

    async def scenario() -> list[Timeline | None]:
        a = asyncio.ensure_future(gate.get("a"))
        b = asyncio.ensure_future(gate.get("b"))
        a2 = asyncio.ensure_future(gate.get("a"))
        await asyncio.sleep(0)
        busy = await gate.get("c")
        assert gate.running == 2
        release.set()
        return [busy, *await asyncio.gather(a, b, a2)]

    try:
        busy, a, b, a2 = asyncio.run(scenario())
    finally:
        gate.close()
    assert busy is None and a is not None and b is not None and a2 is a
    assert sorted(calls) == ["a", "b"] and gate.running == 0


def test_results_are_cached_for_a_while_and_the_cache_is_bounded_by_bytes() -> None:
    """A second request within cache_s is served without a replay; past the byte bound
    the least recently used result is dropped; after cache_s it is replayed again."""
    calls: list[str] = []

    def replay(key: str) -> Timeline:
        calls.append(key)
        return _timeline(10, 100)

    clock = _Clock()
    size = timeline_bytes(_timeline(10, 100))
    gate = _gate(replay, clock, cache_bytes=2 * size)

    async def scenario() -> None:
        for key in ("a", "a", "b", "a", "c", "b", "a"):
            assert await gate.get(key) is not None
        clock.now += 6
        await gate.get("a")

    try:
        asyncio.run(scenario())
    finally:
        gate.close()
    # a, (a cached), b, (a cached), c drops b (LRU), b again drops a, a again; then expired.
    assert calls == ["a", "b", "c", "b", "a", "a"]


def test_read_key_keeps_only_the_last_records_that_fit_max_bytes(
    kafka_bootstrap: str, unique_topic: Callable[..., str]
) -> None:
    """10 records of 100 bytes with max_bytes=350: the last three kept, all ten counted."""
    from confluent_kafka import Producer

    topic = unique_topic()
    p = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(10):
        p.produce(topic, bytes([48 + i]) * 100, key=b"k")
    assert p.flush(30) == 0
    conn = KafkaConnection(kafka_bootstrap)
    read = read_key(conn, topic, b"k", limit=100, scan=100, max_bytes=350)
    assert read.matched == 10 and read.truncated
    assert [r.value[:1] for r in read.records if r.value] == [b"7", b"8", b"9"]
    with pytest.raises(BrokerError, match="time bound") as info:
        read_key(conn, topic, b"k", limit=100, scan=100, max_seconds=0)
    assert info.value.code == "_TIMED_OUT"


def test_with_every_slot_taken_the_api_is_503_and_the_page_says_so() -> None:
    """Two replays hold both slots: a third key's timeline is 503 with Retry-After, its
    page is served without a timeline and says why; a key not held is 404 unreplayed."""
    import http.client
    import json

    from streams.console.auth import Auth
    from streams.console.hosting import ConsoleServer
    from streams.console.metrics import ConsoleMetrics
    from streams.console.server import Console
    from streams.console.view import ConsoleView

    release = threading.Event()
    asked: list[str] = []

    def replay(key: str) -> Timeline:
        asked.append(key)
        release.wait(30)
        return _timeline(1)

    view = ConsoleView()
    for key in ("k1", "k2", "k3"):
        view.put_status(key, {"workflow_key": key, "current_epoch": 1, "open": []})
    console = Console(view, Auth(None), ConsoleMetrics(), replay, lambda *a: "", lambda: [])
    server = ConsoleServer(("127.0.0.1", 0), console)
    server.start()
    port = server.server_address[1]

    def get(path: str) -> tuple[int, http.client.HTTPMessage, bytes]:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            c.request("GET", path)
            r = c.getresponse()
            return r.status, r.headers, r.read()
        finally:
            c.close()

    holders = [threading.Thread(target=get, args=(f"/api/w/{k}/timeline",)) for k in ("k1", "k2")]
    try:
        for t in holders:
            t.start()
        while len(asked) < 2:  # both replays running
            threading.Event().wait(0.05)
        status, headers, body = get("/api/w/k3/timeline")
        assert status == 503 and int(headers["Retry-After"]) > 0, body
        status, _, page = get("/w/k3")
        assert status == 200 and b"The timeline is not drawn" in page
        assert get("/api/w/nobody/timeline")[0] == 404
        release.set()
        for t in holders:
            t.join(30)
        status, _, body = get("/api/w/k3/timeline")
        assert status == 200 and json.loads(body)["kept"] == 1
        assert sorted(asked) == ["k1", "k2", "k3"]
    finally:
        release.set()
        server.stop()
