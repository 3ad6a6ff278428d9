"""The OpenTelemetry span processor's cost, against the same spans without it.

In one process and one run, against the real broker (``KAFKA_BOOTSTRAP``):

* **per-span overhead**: create and end ``--spans`` spans carrying the
  ``fencewatch.*`` attributes (evidence spans) on a tracer provider with no
  span processor (the limit: what the spans cost anyway) and on one with
  :class:`OwnershipSpanProcessor` forwarding them to Kafka; rounds alternate
  between the two and the medians are compared. The forwarding thread runs
  during the timed loop (it competes for the GIL, which is part of the cost);
  the queue is sized so nothing is dropped, and drops are reported.
  The same for plain spans (no ``fencewatch.event``: only the attribute check).
  Each measurement with the processor is drained (untimed) before the next
  one, so none pays for forwarding another's spans; what an evidence
  measurement left queued at its end is reported.
* **events per second forwarded**: a burst of finished evidence spans handed
  to ``on_end`` (recorded beforehand, so span creation is not in the figure),
  timed until the reporter's flush confirms every event, against the same
  number of events published straight through ``OwnershipReporter.publish``
  and flushed (the limit: the SDK's own producer path, which the processor
  adds span conversion and validation to).

Timings on a shared 2-core machine are noisy: read the ratios.
Usage: python bench/otel_span_bench.py [--spans N] [--rounds R] [--json FILE]
"""
# make-bench: --spans 5000 --rounds 7

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from results import Figure, add_json_arg, emit

from streams.core.records import Event, EventType
from streams.integrations.otel import OwnershipSpanProcessor
from streams.kafka import TopicAdmin, TopicSpec
from streams.kafka.connection import KafkaConnection
from streams.sdk import OwnershipReporter, ReporterSettings


def _attrs(i: int) -> dict[str, str | int]:
    return {
        "fencewatch.event": "progress",
        "fencewatch.workflow_key": f"bench/{i % 100}",
        "fencewatch.owner_epoch": 1,
        "fencewatch.worker_id": "bench",
    }


def _spans(provider: TracerProvider, n: int, evidence: bool) -> float:
    """Seconds to create and end ``n`` spans."""
    tracer = provider.get_tracer("bench")
    plain = {"step": 1}
    t0 = time.perf_counter()
    for i in range(n):
        with tracer.start_as_current_span("step", attributes=_attrs(i) if evidence else plain):
            pass
    return time.perf_counter() - t0


Measure = Callable[[TracerProvider, int, bool], float]


def timed_rounds(
    bare: TracerProvider,
    with_proc: TracerProvider,
    proc: OwnershipSpanProcessor,
    n: int,
    rounds: int,
    measure: Measure = _spans,
) -> tuple[dict[tuple[str, bool], list[float]], list[int]]:
    """Seconds per measurement of ``n`` spans, by (provider, evidence), and the
    spans still queued when each evidence measurement with the processor ended.

    Every measurement with the processor is drained (untimed) before the next
    one starts: no measurement pays for forwarding another one's spans (the
    bare plain spans used to run while the forwarder drained the evidence
    spans just before them). The bare/processor order alternates by round."""
    times: dict[tuple[str, bool], list[float]] = {}
    backlog: list[int] = []
    pair = (("bare", bare), ("proc", with_proc))
    for r in range(rounds):
        for evidence in (True, False):
            for name, provider in pair if r % 2 == 0 else pair[::-1]:
                times.setdefault((name, evidence), []).append(measure(provider, n, evidence))
                if name == "proc":
                    if evidence:
                        backlog.append(proc.stats().queued)
                    proc.force_flush(60_000)
    return times, backlog


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spans", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=7)
    add_json_arg(ap)
    args = ap.parse_args()
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP")
    if not bootstrap:
        print("set KAFKA_BOOTSTRAP", file=sys.stderr)
        return 2
    topic = f"bench-otel-{uuid.uuid4().hex[:8]}"
    admin = TopicAdmin(KafkaConnection(bootstrap), timeout_s=30.0)
    admin.ensure([TopicSpec(topic, 1, -1, {})])
    n = args.spans
    try:
        bare = TracerProvider()
        proc = OwnershipSpanProcessor.to_kafka(bootstrap, topic=topic, max_queue=n + 1)
        with_proc = TracerProvider()
        with_proc.add_span_processor(proc)
        _spans(bare, n // 10, True)  # warm up both paths
        _spans(with_proc, n // 10, True)
        proc.force_flush(60_000)

        times, backlog = timed_rounds(bare, with_proc, proc, n, args.rounds)

        # Forwarding rate: a burst, until Kafka acknowledged every event.
        rates_fw, rates_direct = [], []
        direct = OwnershipReporter(ReporterSettings(bootstrap, "bench", topic=topic))
        events = [
            Event(EventType.PROGRESS, f"bench/{i % 100}", 1, "bench", event_id=uuid.uuid4().hex)
            for i in range(n)
        ]
        recorder = InMemorySpanExporter()
        recording = TracerProvider()
        recording.add_span_processor(SimpleSpanProcessor(recorder))
        _spans(recording, n, True)
        finished = recorder.get_finished_spans()
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            for span in finished:
                proc.on_end(span)
            ok = proc.force_flush(60_000)
            rates_fw.append(n / (time.perf_counter() - t0))
            if not ok:
                print("force_flush timed out", file=sys.stderr)
                return 1
            t0 = time.perf_counter()
            for ev in events:
                direct.publish(ev)
            direct.flush(60)
            rates_direct.append(n / (time.perf_counter() - t0))
        direct.close()
        stats = proc.stats()
        with_proc.shutdown()
    finally:
        admin.delete([topic])

    figures = []
    for evidence, label in ((True, "evidence spans"), (False, "plain spans")):
        bare_us = statistics.median(times[("bare", evidence)]) / n * 1e6
        proc_us = statistics.median(times[("proc", evidence)]) / n * 1e6
        note = (
            f"median of {args.rounds} rounds of {n:,} spans; overhead "
            f"{proc_us - bare_us:+.2f} us/span; dropped {stats.dropped}, failed {stats.failed}"
        )
        if evidence:
            # Forwarded after the timed loop (drained untimed before the next one).
            note += f"; still queued at the loop's end: median {statistics.median(backlog):,.0f}"
        print(f"{label}: {bare_us:.2f} us/span bare, {proc_us:.2f} with the processor ({note})")
        figures.append(
            Figure(
                f"OTel span with OwnershipSpanProcessor, {label}",
                proc_us,
                "us/span",
                "the same spans, no span processor",
                bare_us,
                "ratio <= 3" if evidence else "ratio <= 1.3",
                note,
            )
        )
    fw, dr = statistics.median(rates_fw), statistics.median(rates_direct)
    note = (
        f"median of {args.rounds} bursts of {n:,}, on_end to Kafka acknowledgement; "
        f"forwarded {stats.forwarded:,} in total, dropped {stats.dropped}"
    )
    print(f"forwarded {fw:,.0f} events/s; direct publish {dr:,.0f} events/s ({note})")
    figures.append(
        Figure(
            "OTel span processor forwarding rate",
            fw,
            "events/s",
            "OwnershipReporter.publish of the same events",
            dr,
            "ratio >= 0.15",
            note,
        )
    )
    emit(args.json, figures)
    return 0 if stats.dropped == 0 and stats.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
