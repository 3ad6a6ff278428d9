"""The batch logic's cache of decoded states at its bound: a key decoded from
the table enters a full cache one time in ``ADMIT_DECODED_EVERY``; new keys
and hits always do (streams/core/batch.py)."""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from streams.core import Detector
from streams.core.batch import ADMIT_DECODED_EVERY, BatchCore

CAP = 10


@dataclass(frozen=True, slots=True)
class _Rec:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int | None


class _Worker:
    """A BatchCore over a dict table, one batch per call, counting the keys
    whose cached state was the table's value when their event came (hits)."""

    def __init__(self) -> None:
        self.core = BatchCore(Detector(), status=True, max_event_bytes=65_536, cache_keys=CAP)
        self.table: dict[bytes, bytes] = {}
        self.seq: dict[str, int] = {}
        self.offset = 0
        self.hits = 0

    def batch(self, keys: list[str]) -> None:
        recs = []
        for k in keys:
            seq = self.seq[k] = self.seq.get(k, 0) + 1
            kind = "lease_acquired" if seq == 1 else "progress"
            doc = {"type": kind, "workflow_key": k, "epoch": 1, "worker_id": "w", "seq": seq}
            key = k.encode()
            cached = self.core.cache.get(key)
            if cached is not None and cached[0] == self.table.get(key):
                self.hits += 1
            recs.append(_Rec("events", 0, self.offset, key, orjson.dumps(doc), 1_000))
            self.offset += 1
        out = self.core.run(recs, self.table.get)
        for key, _partition, value in out.states:
            self.table[key] = value
        assert len(self.core.cache) <= CAP


def test_a_cycle_of_keys_longer_than_the_cache_keeps_a_share_of_it_cached() -> None:
    """Keys coming back in a cycle three times the cache's size find some of
    their states cached (an LRU would evict each just before its use)."""
    w = _Worker()
    keys = [f"k{i:03d}" for i in range(3 * CAP)]
    for _ in range(6):
        for k in keys:
            w.batch([k])
    assert w.hits >= CAP


def test_new_keys_enter_a_full_cache_and_are_found_at_their_next_event() -> None:
    """A full cache still takes every new key: each one's second event, a few
    keys later, finds its state cached."""
    w = _Worker()
    w.batch([f"old{i}" for i in range(CAP)])
    new = [f"new{i}" for i in range(CAP // 2)]
    w.batch(new)
    w.hits = 0
    w.batch(new)
    assert w.hits == len(new)


def test_a_full_cache_moves_to_a_new_working_set_of_known_keys() -> None:
    """A working set of keys decoded from the table, smaller than the cache,
    is all cached after at most ADMIT_DECODED_EVERY misses per key."""
    w = _Worker()
    known = [f"known{i}" for i in range(CAP // 2)]
    w.batch(known)
    w.batch([f"other{i}" for i in range(CAP)])  # evicts every known key
    for _ in range(ADMIT_DECODED_EVERY + 1):
        w.batch(known)
    w.hits = 0
    w.batch(known)
    assert w.hits == len(known)
