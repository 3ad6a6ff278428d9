"""A topic audit in 2 worker processes against 1, on the same topic, in one
run (issue 46 item 3: ``fencewatch audit --topic T --jobs N``).

Publishes N events (default 400,000: the audit bench's workflows of 10
events, keyed by workflow key) to a new topic of 4 partitions on
``KAFKA_BOOTSTRAP``, then times, alternately, R pairs of:

* 1 job:  the topic audit in this process (what ``--jobs 1`` runs), then the
  JSON report;
* 2 jobs: the same through :func:`streams.audit.shard.run_jobs` (two
  workers, forked as from the CLI: this process holds no Kafka client while
  they start; their results merged), then the JSON report.

Wall time (``time.perf_counter``), not CPU time: the point is two cores at
once; the start of the workers and the merge are in the 2-job time. The
ratio is the median of the per-pair ratios (1-job time over 2-job time), the
load average beside it (the machine is shared: a loaded host shrinks it).
Each pair's line also gives the CPU seconds (this process's, librdkafka's
threads included, and the workers'): on a loaded host they say what the
2-job run cost beside the 1-job one when the wall times cannot.
Usage:
    KAFKA_BOOTSTRAP=HOST:PORT python bench/audit_jobs.py [--events N] [--repeat R] [--json F]
"""
# make-bench: --repeat 3

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

from audit_bench import generate
from results import Figure, add_json_arg, emit

from streams import __version__
from streams.audit.files import batch_gc
from streams.audit.shard import _start_context, run_jobs
from streams.audit.topic import TopicAudit
from streams.core.detector import DetectorConfig
from streams.core.replay import Replay
from streams.kafka import TopicAdmin, TopicSpec
from streams.kafka.connection import KafkaConnection
from streams.report import render_json

PARTITIONS = 4


def publish(bootstrap: str, topic: str, path: Path) -> int:
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "compression.type": "lz4"}
    )
    n = 0
    with path.open("rb") as fh:
        for line in fh:
            key = orjson.loads(line)["workflow_key"].encode()
            while True:
                try:
                    producer.produce(topic, key=key, value=line.rstrip(b"\n"))
                    break
                except BufferError:
                    producer.poll(0.1)
            n += 1
    if producer.flush(120) != 0:
        raise RuntimeError("publish did not complete")
    return n


def cpu_s(who: int = resource.RUSAGE_SELF) -> float:
    """CPU seconds, user and system, of this process or its waited-for children."""
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def one_job(conn: KafkaConnection, topic: str) -> tuple[float, str, float]:
    """Wall seconds, the JSON report and this process's CPU seconds."""
    c0, t0 = cpu_s(), time.perf_counter()
    with batch_gc():
        audit = TopicAudit(conn, topic, replay=Replay()).run()
        text = render_json(audit.replay, source=audit.source(__version__))
    return time.perf_counter() - t0, text, cpu_s() - c0


def two_jobs(conn: KafkaConnection, topic: str) -> tuple[float, str, float, float]:
    """Wall seconds, the JSON report, this process's and the workers' CPU
    seconds (the pool's shutdown waits for them, so they are accounted)."""
    c0, w0, t0 = cpu_s(), cpu_s(resource.RUSAGE_CHILDREN), time.perf_counter()
    with batch_gc():
        audit = run_jobs(
            conn, topic, jobs=2, config=DetectorConfig(), max_event_bytes=Replay().max_event_bytes
        )
        text = render_json(audit.replay, source=audit.source(__version__))
    t = time.perf_counter() - t0
    return t, text, cpu_s() - c0, cpu_s(resource.RUSAGE_CHILDREN) - w0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=400_000)
    ap.add_argument("--repeat", type=int, default=3)
    add_json_arg(ap)
    args = ap.parse_args()
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP")
    if not bootstrap:
        print("set KAFKA_BOOTSTRAP", file=sys.stderr)
        return 2
    conn = KafkaConnection(bootstrap)
    topic = f"bench-audit-jobs-{uuid.uuid4().hex[:8]}"
    # The admin client is dropped at once (its threads joined), as the
    # producer is after the publish: run_jobs forks its workers only from a
    # process without other threads, as the CLI is.
    TopicAdmin(conn, timeout_s=30.0).ensure([TopicSpec(topic, PARTITIONS, -1, {})])
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "events.jsonl"
            generate(path, args.events)
            n = publish(bootstrap, topic, path)
        one_job(conn, topic)  # warm-up: imports, the broker's page cache
        start = _start_context().get_start_method()
        pairs: list[tuple[float, float]] = []
        load: list[float] = []
        for i in range(args.repeat):
            load.append(os.getloadavg()[0])
            t1, single, cpu1 = one_job(conn, topic)
            t2, merged, cpu2, workers = two_jobs(conn, topic)
            if single != merged:  # the point of the merge; a bench of a wrong one is void
                print("the 2-job report differs from the 1-job report", file=sys.stderr)
                return 1
            pairs.append((t1, t2))
            print(
                f"pair {i + 1}: 1 job {t1:.2f} s ({cpu1:.2f} CPU s), 2 jobs {t2:.2f} s "
                f"(parent {cpu2:.2f} + workers {workers:.2f} CPU s, {start}ed): "
                f"{t1 / t2:.2f}x, load average {load[-1]:.1f}",
                file=sys.stderr,
            )
        load.append(os.getloadavg()[0])
    finally:
        TopicAdmin(conn, timeout_s=30.0).delete([topic])
    t1 = statistics.median(a for a, _ in pairs)
    t2 = statistics.median(b for _, b in pairs)
    ratio = statistics.median(a / b for a, b in pairs)
    load_note = f"load average (1 min) {min(load):.1f}-{max(load):.1f} on {os.cpu_count()} cores"
    print(f"topic {topic}: {n:,} events over {PARTITIONS} partitions")
    print(f"1 job:  {n / t1:10,.0f} events/s  ({t1:.2f} s, median of {args.repeat})")
    print(f"2 jobs: {n / t2:10,.0f} events/s  ({t2:.2f} s, median of {args.repeat})")
    print(f"speed-up 2 jobs / 1: {ratio:.2f}x (median of pairs; target >= 1.5x); {load_note}")
    emit(
        args.json,
        [
            Figure(
                "topic audit throughput, 2 jobs",
                n / t2,
                "events/s",
                "the same audit in 1 job (one process), same topic and run",
                n / t1,
                "ratio >= 1.5",
                f"{n:,} events over {PARTITIONS} partitions, wall time incl. the workers' "
                f"start ({start}) and the merge, JSON report; median of {args.repeat} pairs; "
                f"{load_note}",
                runs=[n / b for _, b in pairs],
                limit_runs=[n / a for a, _ in pairs],
                paired_ratio=ratio,
            )
        ],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
