"""The peer of ``bench/live_peer.py``: a quix-streams exactly-once application
that keeps the highest epoch seen per workflow key in its RocksDB state (a
changelog topic under the transaction, as quix-streams does by default).

Run by ``bench/live_peer.py`` with the interpreter of the venv it builds for
quix-streams (``peer_python``), never with fencewatch's: the two sets of
dependencies (confluent-kafka versions among them) never meet. Imports
nothing of fencewatch. Not a test, and not a ``make bench`` script itself.

    PYTHON bench/quix_peer.py BOOTSTRAP TOPIC GROUP TOTAL STATE_DIR OUT [COMMIT_INTERVAL]

Writes ``OUT`` once ``TOTAL`` events were processed: a JSON list of
``[monotonic time, events processed]`` samples, one every
:data:`SAMPLE_EVERY` events (the clock is system-wide, as the parent's).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

#: Events between two progress samples (the parent reads the 10 %-90 %
#: window off them; make bench's 1,000,000 events give 1,000 samples).
SAMPLE_EVERY = 1_000


def main(argv: list[str]) -> int:
    from quixstreams import Application

    bootstrap, topic, group, total_s, state_dir, out = argv[:6]
    interval = float(argv[6]) if len(argv) > 6 else 0.1
    total = int(total_s)
    app = Application(
        broker_address=bootstrap,
        consumer_group=group,
        auto_offset_reset="earliest",
        processing_guarantee="exactly-once",
        commit_interval=interval,
        state_dir=state_dir,
        loglevel="WARNING",
    )
    samples: list[list[float]] = [[time.monotonic(), 0]]
    count = 0

    def keep_max_epoch(value: dict[str, Any], state: Any) -> None:
        nonlocal count
        epoch = value["epoch"]
        if epoch > state.get("epoch", 0):
            state.set("epoch", epoch)
        count += 1
        if count % SAMPLE_EVERY == 0 or count == total:
            samples.append([time.monotonic(), count])
            if count >= total:
                app.stop()

    sdf = app.dataframe(app.topic(topic, value_deserializer="json"))
    sdf.update(keep_max_epoch, stateful=True)
    app.run()
    with open(out, "w") as fh:
        json.dump(samples, fh)
    return 0 if count >= total else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
