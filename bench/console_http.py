"""The console's HTTP server (issue 43): per-request latency on one
kept-alive connection (the stdlib server waited ~43 ms per reply, headers
and body written apart), and N concurrent connections (default 1,000) each
asking once.

In process, no broker: a view of W workflows (default 1,000) and a replay
that is never called; the clients share the process (and its GIL) with the
server, so the figures are an upper bound. Prints the median, p99 and max of each route's
latency, and for the concurrent round how many were answered 200, the total
and the slowest. Usage:
    python bench/console_http.py [--requests N] [--concurrent N] [--workflows W]
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import time

from streams.console.auth import Auth
from streams.console.hosting import ConsoleServer
from streams.console.metrics import ConsoleMetrics
from streams.console.server import Console
from streams.console.timeline import Timeline
from streams.console.view import ConsoleView


def _no_replay(key: str) -> Timeline:
    raise RuntimeError("the bench never replays")


def _no_verify(key: str, effect: str, by: str, epoch: int, note: str | None) -> str:
    raise RuntimeError("the bench never verifies")


def _view(n: int) -> ConsoleView:
    view = ConsoleView()
    for i in range(n):
        key = f"tenant-{i % 97}/export/{i:06d}"
        view.put_status(
            key,
            {"workflow_key": key, "current_epoch": 1, "current_worker": "w", "open": []},
        )
    return view


def _keepalive(port: int, path: str, n: int) -> list[float]:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    out = []
    try:
        for _ in range(n):
            t = time.perf_counter()
            c.request("GET", path)
            r = c.getresponse()
            r.read()
            assert r.status == 200, r.status
            out.append(time.perf_counter() - t)
    finally:
        c.close()
    return sorted(out)


async def _one(port: int, path: str) -> tuple[int, float]:
    t = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode()
        )
        data = await reader.read()
    finally:
        writer.close()
    code = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1 ") else 0
    return code, time.perf_counter() - t


async def _concurrent(port: int, n: int) -> list[tuple[int, float]]:
    paths = ("/health", "/api/workflows")
    return await asyncio.gather(*(_one(port, paths[i % 2]) for i in range(n)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--requests", type=int, default=500)
    ap.add_argument("--concurrent", type=int, default=1000)
    ap.add_argument("--workflows", type=int, default=1000)
    a = ap.parse_args()
    console = Console(
        _view(a.workflows), Auth(None), ConsoleMetrics(), _no_replay, _no_verify, lambda: []
    )
    server = ConsoleServer(("127.0.0.1", 0), console)
    server.start()
    port = server.server_address[1]
    try:
        for path in ("/health", "/api/workflows", "/"):
            lat = _keepalive(port, path, a.requests)
            ms = [x * 1000 for x in lat]
            print(
                f"kept alive {path}: median {ms[len(ms) // 2]:.2f} ms, "
                f"p99 {ms[int(len(ms) * 0.99)]:.2f} ms, max {ms[-1]:.2f} ms ({len(ms)} requests)"
            )
        t = time.perf_counter()
        got = asyncio.run(_concurrent(port, a.concurrent))
        total = time.perf_counter() - t
        ok = sum(1 for code, _ in got if code == 200)
        slowest = max(s for _, s in got)
        print(
            f"{a.concurrent} concurrent: {ok} answered 200, all in {total:.2f} s, "
            f"slowest {slowest:.2f} s"
        )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
