"""Timeline replays for the HTTP server, bounded: at most ``concurrency``
replays of the events topic run at once (each in the gate's own threads),
a request for a key already being replayed waits for that replay instead of
starting another, and a result is served from a small cache for
``cache_s`` (a least-recently-used table bounded by entries and by the
bytes of its records). Past the concurrency bound :meth:`ReplayGate.get`
says so (None) at once: the server answers 503 with Retry-After rather than
queueing replays that each hold a Kafka consumer and its buffers.

Runs on the server's event loop (one thread): the counters need no lock.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from streams.console.timeline import Timeline

__all__ = ["ReplayGate", "timeline_bytes"]

#: What one kept record costs besides its value (the record object, its
#: event): a rough figure, so that a cache of tiny records is bounded too.
_RECORD_OVERHEAD = 512


def timeline_bytes(tl: Timeline) -> int:
    """What the cache counts for a timeline: its records' values plus overhead."""
    return sum(len(r.value or b"") + _RECORD_OVERHEAD for r in tl.read.records)


class ReplayGate:
    def __init__(
        self,
        replay: Callable[[str], Timeline],
        *,
        concurrency: int,
        cache_s: float,
        cache_entries: int,
        cache_bytes: int,
        on_replay: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._replay = replay
        self.concurrency = concurrency
        self._cache_s = cache_s
        self._cache_entries = cache_entries
        self._cache_bytes = cache_bytes
        self._on_replay = on_replay
        self._clock = clock
        self._pool = ThreadPoolExecutor(concurrency, thread_name_prefix="console-replay")
        self.running = 0
        self._inflight: dict[str, asyncio.Future[Timeline]] = {}
        #: key -> (when read, bytes, timeline), least recently used first.
        self._cache: OrderedDict[str, tuple[float, int, Timeline]] = OrderedDict()
        self._cached_bytes = 0

    async def get(self, key: str) -> Timeline | None:
        """The key's timeline (cached, joined or replayed); None: every replay
        slot is taken. Errors of the replay (FencewatchError) propagate."""
        now = self._clock()
        hit = self._cache.get(key)
        if hit is not None:
            if now - hit[0] <= self._cache_s:
                self._cache.move_to_end(key)
                return hit[2]
            self._drop(key)
        fut = self._inflight.get(key)
        if fut is None:
            if self.running >= self.concurrency:
                return None
            fut = self._start(key)
        # Shielded: a client that goes away does not cancel a replay others
        # may be waiting for, and its slot is released only when it ends.
        return await asyncio.shield(fut)

    def _start(self, key: str) -> asyncio.Future[Timeline]:
        loop = asyncio.get_running_loop()
        self.running += 1
        self._on_replay()
        fut = loop.run_in_executor(self._pool, self._replay, key)
        self._inflight[key] = fut

        def done(f: asyncio.Future[Timeline]) -> None:
            self.running -= 1
            self._inflight.pop(key, None)
            if not f.cancelled() and f.exception() is None:
                self._put(key, f.result())

        fut.add_done_callback(done)
        return fut

    def _put(self, key: str, tl: Timeline) -> None:
        size = timeline_bytes(tl)
        if size > self._cache_bytes:
            return
        self._drop(key)
        self._cache[key] = (self._clock(), size, tl)
        self._cached_bytes += size
        while len(self._cache) > self._cache_entries or self._cached_bytes > self._cache_bytes:
            self._drop(next(iter(self._cache)))

    def _drop(self, key: str) -> None:
        old = self._cache.pop(key, None)
        if old is not None:
            self._cached_bytes -= old[1]

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
