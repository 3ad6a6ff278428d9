"""The live worker's /metrics server (no broker): each scrape refreshes the
lag gauge first, so a partition assigned a moment ago already has its series
(issue 9: fencewatch_consumer_lag omitted partitions with no lag yet)."""

from __future__ import annotations

import asyncio
import urllib.request

from streams.live.metrics import LiveMetrics, MetricsServer
from tests.support.worker import free_port


def test_each_scrape_reports_the_lag_of_every_partition_assigned_now() -> None:
    """Every partition assigned at a scrape has a lag series (0 until known); moved ones go."""
    metrics = LiveMetrics()
    assigned: list[dict[int, int | None]] = [{0: None, 1: None, 2: None}, {1: 4}]
    port = free_port()
    server = MetricsServer(
        metrics,
        lambda: {"ok": True},
        host="127.0.0.1",
        port=port,
        refresh=lambda: metrics.set_lag(assigned[0]),
    )

    def scrape() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            return str(answer.read().decode())

    async def main() -> tuple[str, str]:
        await server.start()
        try:
            first = await asyncio.to_thread(scrape)
            assigned.pop(0)  # a rebalance: partitions 0 and 2 moved away, 1 has lag 4
            second = await asyncio.to_thread(scrape)
            return first, second
        finally:
            await server.stop()

    first, second = asyncio.run(main())
    for p in (0, 1, 2):  # no lag known yet: exported as 0, but exported
        assert f'fencewatch_consumer_lag{{partition="{p}"}} 0.0' in first
    lag_lines = [
        line for line in second.splitlines() if line.startswith("fencewatch_consumer_lag{")
    ]
    assert lag_lines == ['fencewatch_consumer_lag{partition="1"} 4.0']
