"""faust alone over the events topic, doing no processing and no sends: the
ceiling any faust-based worker can reach on this machine (a limit for
bench/live_throughput.py, run as a subprocess by it).

    FENCEWATCH_BOOTSTRAP_SERVERS=... FENCEWATCH_EVENTS_TOPIC=... \\
        .venv/bin/python bench/live_faust_floor.py MODE TOTAL OUT

MODE: ``events`` (``async for event in stream.events()``, faust acks) or
``take`` (``stream.take_events(1000, within=0.05)``). Same app settings as
the real worker (``streams.live.faust.app._app_config``), same processing
guarantee. Writes the rate (events/s between 10 % and 90 % of TOTAL) to
the file OUT and exits.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any


def main() -> int:
    import faust

    from streams.live.faust import seam as faust_seam
    from streams.live.faust.app import TABLE_NAME, _app_config, raw_topic
    from streams.live.prepare import ensure_topics
    from streams.live.settings import settings_from_env

    mode, total, out_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    settings = settings_from_env(os.environ)
    partitions, _topics = ensure_topics(settings)
    faust_seam.install()
    app = faust.App(settings.app_id + "-floor", **_app_config(settings, partitions))
    topic = raw_topic(app, settings.events_topic, partitions)
    # Unused, but like the real worker's (and faust's assignor needs a table
    # to put the input in a topic group under exactly-once).
    app.Table(TABLE_NAME, partitions=partitions, key_type=bytes, value_type=bytes)
    marks: dict[str, float] = {}
    n = 0

    def tick(k: int) -> None:
        if k >= total * 0.1 and "lo" not in marks:
            marks["lo"], marks["lo_n"] = time.monotonic(), k
        if k >= total * 0.9 and "hi" not in marks:
            marks["hi"], marks["hi_n"] = time.monotonic(), k
            rate = (marks["hi_n"] - marks["lo_n"]) / (marks["hi"] - marks["lo"])
            # faust's worker redirects stdout to its logger: write a file.
            with open(out_path, "w") as f:
                f.write(f"{rate:.0f}\n")
            os._exit(0)

    @app.agent(topic, name="floor")
    async def floor(stream: Any) -> None:
        nonlocal n
        if mode == "events":
            async for _event in stream.events():
                n += 1
                tick(n)
        else:
            async for batch in stream.take_events(1000, within=0.05):
                n += len(batch)
                tick(n)

    worker = faust.Worker(app, loglevel="WARNING", quiet=True)
    worker.execute_from_commandline()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
