"""A large audit for the HTML report's size and rendering bounds: about
400,000 events in the shapes that made the page heavy (issue 23).

* 36,000 ordinary workflows of 10 events, one owner handing over to the
  next; one in 20 has its displaced owner attempt and commit its effect (a
  stale commit and a conflicting commit: 1,800 flagged workflows);
* 300 single-takeover workflows whose old owner commits after the new one
  (critical, 2 epochs, few findings);
* 5 long workflows of 7,000 events with 30 takeovers each (tens of
  findings over 31 epochs): the ones worth a timeline.
"""

from __future__ import annotations

from typing import Any

import orjson

from streams.core.detector import Detector, DetectorConfig
from streams.core.replay import Replay
from tests.strategies import takeover_workflow

__all__ = ["COMPLEX_KEYS", "N_EVENTS", "large_replay", "ordinary_workflow"]

COMPLEX_KEYS = tuple(f"complex-{i}/nightly" for i in range(5))
N_EVENTS = 36_000 * 10 + 300 * 7 + 5 * 7_000


def ordinary_workflow(k: int) -> list[dict[str, Any]]:
    """Ordinary workflow ``k``: 10 events, one handover; every 20th has a stale commit."""
    key = f"tenant-{k % 97}/export/{k}"
    stale = k % 20 == 7
    out: list[dict[str, Any]] = []

    def ev(t: str, epoch: int, effect: str | None = None) -> None:
        doc: dict[str, Any] = {
            "type": t,
            "workflow_key": key,
            "epoch": epoch,
            "worker_id": "w-a" if epoch == 1 else "w-b",
            "seq": len(out) + 1,
        }
        if effect is not None:
            doc["effect_key"] = effect
            doc["sink"] = "bucket"
        out.append(doc)

    ev("lease_acquired", 1)
    for _ in range(3):
        ev("progress", 1)
    ev("lease_acquired", 2)
    if stale:
        ev("effect_attempted", 1, f"effect-{k}")
        ev("effect_committed", 1, f"effect-{k}")
    while len(out) < 9:
        ev("progress", 2)
    ev("effect_committed", 2, f"effect-{k}")
    return out


def _single_takeover(k: int) -> list[dict[str, Any]]:
    key = f"critical-{k}/sync"
    docs = [
        ("lease_acquired", 1, "old", None),
        ("progress", 1, "old", None),
        ("lease_acquired", 2, "new", None),
        ("effect_committed", 2, "new", "push"),
        ("effect_committed", 1, "old", "push"),
        ("progress", 2, "new", None),
        ("progress", 2, "new", None),
    ]
    out = []
    for seq, (t, epoch, worker, effect) in enumerate(docs, 1):
        doc: dict[str, Any] = {
            "type": t, "workflow_key": key, "epoch": epoch, "worker_id": worker, "seq": seq,
        }  # fmt: skip
        if effect is not None:
            doc["effect_key"] = effect
            doc["sink"] = "crm"
        out.append(doc)
    return out


def large_replay() -> Replay:
    """The replay of the :data:`N_EVENTS` events above (a few seconds)."""
    replay = Replay(Detector(DetectorConfig(max_events_per_key=8_000)))
    offset = 0
    groups: list[list[dict[str, Any]]] = [ordinary_workflow(k) for k in range(36_000)]
    groups += [_single_takeover(k) for k in range(300)]
    groups += [takeover_workflow(key, n_events=7_000, takeovers=30) for key in COMPLEX_KEYS]
    for docs in groups:
        for doc in docs:
            offset += 1
            replay.feed(orjson.dumps(doc), offset=offset, source="large", line=offset)
    return replay
