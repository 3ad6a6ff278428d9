"""bench/otel_span_bench.py measures each span loop alone: no measurement runs
while the span processor still forwards another measurement's spans."""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path
from types import ModuleType

from opentelemetry.sdk.trace import TracerProvider

from streams.core.records import Event
from streams.integrations.otel import OwnershipSpanProcessor

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _bench() -> ModuleType:
    sys.path.insert(0, str(BENCH))  # the script imports its sibling `results`
    try:
        spec = importlib.util.spec_from_file_location(
            "bench_otel_span", BENCH / "otel_span_bench.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH))


class _Slow:
    """A publisher slower than span creation, so every evidence loop leaves a backlog."""

    def __init__(self) -> None:
        self.got: list[Event] = []

    def publish(self, event: Event) -> None:
        time.sleep(0.0005)
        self.got.append(event)


def test_no_measurement_starts_while_the_processor_still_forwards() -> None:
    """With a forwarder that lags behind the traced loop, every measurement (bare
    or with the processor, evidence or plain) starts with nothing queued; both
    orders of bare and processor occur; the lag is reported as backlog."""
    bench = _bench()
    publisher = _Slow()
    proc = OwnershipSpanProcessor(publisher, max_queue=1_000)
    bare, with_proc = TracerProvider(), TracerProvider()
    with_proc.add_span_processor(proc)
    started: list[tuple[str, bool, int]] = []

    def measure(provider: TracerProvider, n: int, evidence: bool) -> float:
        name = "proc" if provider is with_proc else "bare"
        started.append((name, evidence, proc.stats().queued))
        return float(bench._spans(provider, n, evidence))

    try:
        times, backlog = bench.timed_rounds(bare, with_proc, proc, 200, 2, measure)
    finally:
        with_proc.shutdown()
    assert [queued for *_, queued in started] == [0] * len(started)
    firsts = [started[i][0] for i in range(0, len(started), 2)]
    assert "bare" in firsts and "proc" in firsts
    assert sorted(times) == sorted({(s[0], s[1]) for s in started})
    assert len(backlog) == 2 and all(b > 0 for b in backlog)
    assert len(publisher.got) == 2 * 200 and proc.stats().dropped == 0
