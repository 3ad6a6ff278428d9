#!/usr/bin/env python3
"""Ownership evidence from OpenTelemetry spans (needs the `otel` extra).

    python examples/otel_spans.py --otlp-out .run/traces.jsonl \
        [--bootstrap-servers 127.0.0.1:9092 --topic ownership.events]
    fencewatch audit --otlp .run/traces.jsonl
    fencewatch audit --topic ownership.events --bootstrap-servers 127.0.0.1:9092

An agent that already traces marks the spans that are ownership evidence with
`fencewatch.*` attributes. Here two workers share one workflow: beta takes
over at epoch 2 while alpha is stalled; alpha's late effect is refused by the
destination. The spans are written as OTLP/JSON lines (the collector's file
exporter format) and, with --bootstrap-servers, forwarded to Kafka as events
by `OwnershipSpanProcessor`. Both audits report the rejected stale attempt.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from fencewatch.integrations.otel import OtlpJsonFileExporter, OwnershipSpanProcessor

KEY = "tenant/otel-export/2026-07-26"


def fw(kind: str, epoch: int, worker: str, seq: int, effect: str | None = None) -> dict:
    attrs: dict[str, str | int] = {
        "fencewatch.event": kind,
        "fencewatch.workflow_key": KEY,
        "fencewatch.owner_epoch": epoch,
        "fencewatch.worker_id": worker,
        "fencewatch.seq": seq,  # from the lease store: the authoritative order
    }
    if effect is not None:
        attrs["fencewatch.effect_key"] = effect
        attrs["fencewatch.sink"] = "ledger"
    return attrs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--otlp-out", type=Path, required=True)
    ap.add_argument("--bootstrap-servers")
    ap.add_argument("--topic", default="ownership.events")
    args = ap.parse_args()

    provider = TracerProvider()
    args.otlp_out.parent.mkdir(parents=True, exist_ok=True)
    out = args.otlp_out.open("wb")
    provider.add_span_processor(SimpleSpanProcessor(OtlpJsonFileExporter(out)))
    forwarder = None
    if args.bootstrap_servers:
        forwarder = OwnershipSpanProcessor.to_kafka(args.bootstrap_servers, topic=args.topic)
        provider.add_span_processor(forwarder)
    tracer = provider.get_tracer("example-agent")

    story = [
        ("alpha: acquire", fw("lease_acquired", 1, "alpha", 1)),
        ("alpha: checkpoint", fw("progress", 1, "alpha", 2)),
        ("beta: acquire (alpha stalled past its lease)", fw("lease_acquired", 2, "beta", 3)),
        ("beta: publish index", fw("effect_attempted", 2, "beta", 4, "release-index")),
        ("beta: publish index ok", fw("effect_committed", 2, "beta", 5, "release-index")),
        ("alpha: publish index (late)", fw("effect_attempted", 1, "alpha", 6, "release-index")),
        ("alpha: refused by the fence", fw("effect_rejected", 1, "alpha", 7, "release-index")),
    ]
    with tracer.start_as_current_span("export run"):
        for name, attrs in story:
            with tracer.start_as_current_span(name, attributes=attrs):
                pass
    if forwarder is not None and not forwarder.force_flush(30_000):
        print(f"forwarding failed: {forwarder.stats()}", file=sys.stderr)
        return 2
    provider.shutdown()
    out.close()
    print(f"wrote {len(story) + 1} spans to {args.otlp_out}")
    if forwarder is not None:
        print(f"forwarded {forwarder.stats().forwarded} events to {args.topic}")
    print(f"now: fencewatch audit --otlp {args.otlp_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
