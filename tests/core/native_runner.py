"""Run a replay, and the live processor's batch logic, over a JSON Lines corpus
and print everything they decided, as JSON: ``python native_runner.py CORPUS
MAX_EVENTS_PER_KEY [--source]``.

``--source`` makes the modules that ``scripts/build-native`` compiles load from
their ``.py`` files even when compiled ones sit next to them, so a test can
run the interpreted and the compiled core side by side (tests/core/test_native.py).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

from streams._native import NATIVE_MODULES

ROOT = Path(__file__).resolve().parents[2]
COMPILED = NATIVE_MODULES


class _SourceFirst(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in COMPILED:
            return None
        return importlib.util.spec_from_file_location(name, ROOT / (name.replace(".", "/") + ".py"))


def main() -> None:
    corpus, max_events = sys.argv[1], int(sys.argv[2])
    if "--source" in sys.argv[3:]:
        sys.meta_path.insert(0, _SourceFirst())
    import streams.core.batch  # noqa: F401  (loaded here, from source or compiled)
    from streams.core.detector import Detector, DetectorConfig
    from streams.core.replay import Replay
    from streams.core.status import status_from_replay

    replay = Replay(Detector(DetectorConfig(max_events_per_key=max_events)))
    revisions: list[dict[str, Any]] = []
    offset = 0
    with open(corpus, "rb") as fh:
        for line in fh:
            offset += 1
            revisions.extend(f.to_dict() for f in replay.feed(line, offset=offset, source="c"))
    out = {
        "modules": {m: sys.modules[m].__file__ for m in COMPILED},
        "revisions": revisions,
        "latest": [f.to_dict() for f in replay.latest_findings()],
        "invalid": [i.to_dict() for i in replay.invalid],
        "summary": replay.summary(),
        "states": {k: s.to_bytes().decode() for k, s in sorted(replay.states.items())},
        "health": [h.to_dict() for h in replay.health()],
        "destinations": [d.to_dict() for d in replay.destinations()],
        # The status records as the live processor writes them (to_json), per key.
        "status": {
            k: st.to_json().decode()
            for k, st in status_from_replay(replay.states, replay.latest.values()).items()
        },
    }
    out["batch"] = _batch(corpus, max_events)
    json.dump(out, sys.stdout, sort_keys=True)


class _Record:
    """A consumed record (streams.core.batch.Consumed)."""

    def __init__(self, offset: int, key: bytes | None, value: bytes) -> None:
        self.topic = "events"
        self.partition = offset % 3
        self.offset = offset
        self.key = key
        self.value = value
        self.timestamp = 1_700_000_000_000 + offset


def _batch(corpus: str, max_events: int) -> dict[str, Any]:
    """The corpus through :class:`streams.core.batch.BatchCore` in batches of 7,
    status on, a small state cache, Kafka keys from the workflow keys."""
    from streams.core.batch import BatchCore, Rejection
    from streams.core.detector import Detector, DetectorConfig

    core = BatchCore(
        Detector(DetectorConfig(max_events_per_key=max_events)),
        status=True,
        max_event_bytes=64 * 1024,
        cache_keys=50,
    )
    records: list[_Record] = []
    with open(corpus, "rb") as fh:
        for offset, line in enumerate(fh):
            doc = _loads(line)
            key = doc.get("workflow_key") if isinstance(doc, dict) else None
            records.append(_Record(offset, key.encode() if isinstance(key, str) else None, line))
    store: dict[bytes, bytes] = {}
    outputs: list[Any] = []
    effects: list[Any] = []
    status: list[Any] = []
    for i in range(0, len(records), 7):
        res = core.run(records[i : i + 7], store.get)
        for partition, items in sorted(res.outputs.items()):
            for item in items:
                if isinstance(item, Rejection):
                    outputs.append([partition, item.record.offset, item.field, item.reason])
                else:
                    outputs.append([partition, item.to_dict()])
        for key, _partition, value in res.states:
            store[key] = value
        effects.append(sorted([*k, n] for k, n in res.stale_effects.items()))
        for p, docs in sorted(res.status.items()):
            status.extend([p, doc.key.decode(), doc.to_json().decode()] for doc in docs)
    return {
        "outputs": outputs,
        "effects": effects,
        "status": status,
        "store": {k.decode(): v.decode("utf-8", "replace") for k, v in sorted(store.items())},
    }


def _loads(line: bytes) -> Any:
    try:
        return json.loads(line)
    except ValueError:
        return None


if __name__ == "__main__":
    main()
