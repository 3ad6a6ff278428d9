"""Evidence for docs/live.md, trap 1: with processing_guarantee="exactly_once",
a faust ``topic.send`` to a topic the app does not consume is NOT part of the
transaction.

A plain faust app (not ours) consumes one record and sends a derived record
with ``topic.send``; the commit interval is 60 s, so no transaction commits.
The worker is killed with SIGKILL; a read_committed consumer then still sees
the derived record, although the input offset was never committed (a restart
processes the input again and sends it a second time).

    .venv/bin/python bench/live_faust_bypass.py
"""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from live_support import bootstrap, create_topics

APP = """
import faust, sys
bs, tag, marker = sys.argv[1:4]
app = faust.App(tag, broker="kafka://" + bs, web_enabled=False,
                processing_guarantee="exactly_once", consumer_auto_offset_reset="earliest",
                broker_commit_interval=60.0, autodiscover=False)
raw = dict(key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw")
src = app.topic(tag + ".in", **raw)
out = app.topic(tag + ".out", **raw)

@app.agent(src)
async def a(stream):
    async for ev in stream.events():
        await out.send(key=ev.message.key, value=b"derived:" + ev.message.value)
        open(marker, "a").write("sent")

faust.Worker(app, loglevel="WARNING", quiet=True).execute_from_commandline()
"""


def main() -> int:
    from confluent_kafka import Consumer, Producer, TopicPartition

    bs = bootstrap()
    tag = f"bypass-{uuid.uuid4().hex[:8]}"
    create_topics(bs, [f"{tag}.in", f"{tag}.out"], 1)
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "app.py"
        script.write_text(APP)
        marker = Path(tmp) / "sent"
        proc = subprocess.Popen(
            [sys.executable, str(script), bs, tag, str(marker)],
            cwd=tmp,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(8)
        p = Producer({"bootstrap.servers": bs})
        p.produce(f"{tag}.in", b"hello", key=b"k")
        p.flush(10)
        deadline = time.monotonic() + 30
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        sent = marker.exists()
    c = Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": "probe",
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
        }
    )
    c.assign([TopicPartition(f"{tag}.out", 0, 0)])
    seen = []
    while True:
        m = c.poll(5)
        if m is None or (m.error() and m.error().code() == -191):  # _PARTITION_EOF
            break
        if not m.error():
            seen.append(m.value())
    committed = (
        Consumer({"bootstrap.servers": bs, "group.id": tag})
        .committed([TopicPartition(f"{tag}.in", 0)], timeout=10)[0]
        .offset
    )
    print(f"agent sent: {sent}; input offset committed: {committed} (<0: none)")
    print(f"read_committed consumer of {tag}.out sees: {seen}")
    print("=> the send bypassed the transaction" if seen and committed < 0 else "=> not shown")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
