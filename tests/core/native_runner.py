"""Run a replay over a JSON Lines corpus and print everything it decided, as
JSON: ``python native_runner.py CORPUS MAX_EVENTS_PER_KEY [--source]``.

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
        return importlib.util.spec_from_file_location(
            name, ROOT / (name.replace(".", "/") + ".py")
        )


def main() -> None:
    corpus, max_events = sys.argv[1], int(sys.argv[2])
    if "--source" in sys.argv[3:]:
        sys.meta_path.insert(0, _SourceFirst())
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
    json.dump(out, sys.stdout, sort_keys=True)


if __name__ == "__main__":
    main()
