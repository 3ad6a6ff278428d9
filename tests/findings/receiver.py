"""A real webhook receiver on 127.0.0.1 (http.server in a thread) for the
alert-hook tests and bench/findings_webhook.py: records every POST with its
Idempotency-Key, body and arrival time; can be told to fail some keys first."""

from __future__ import annotations

import json
import ssl
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


@dataclass
class Received:
    key: str
    body: dict[str, Any]
    at: float


@dataclass
class Receiver:
    url: str = ""
    posts: list[Received] = field(default_factory=list)
    #: idempotency key -> HTTP statuses to answer first, in order (then 200).
    fail_first: dict[str, list[int]] = field(default_factory=dict)
    #: Seconds each request takes (to stretch a stream for a kill mid-way).
    delay_s: float = 0.0
    #: Client connections open now (a sender that closes its own shows 0).
    open_connections: int = 0
    #: While true every POST is answered 503 (an outage of the receiver).
    down: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def keys(self) -> list[str]:
        with self.lock:
            return [p.key for p in self.posts]

    def count(self) -> int:
        with self.lock:
            return len(self.posts)

    def counts(self) -> Counter[str]:
        return Counter(self.keys())

    def wait_for(self, n: int, timeout: float = 60.0, *, sender: Any = None) -> None:
        """Until ``n`` posts arrived; fails at ``timeout``, or at once when
        ``sender`` (a Popen) has exited: nothing more would come."""
        deadline = time.monotonic() + timeout
        while self.count() < n:
            if sender is not None and sender.poll() is not None:
                raise AssertionError(
                    f"received {self.count()} of {n} posts; the sender exited ({sender.returncode})"
                )
            if time.monotonic() > deadline:
                raise AssertionError(f"received {self.count()} of {n} posts in {timeout} s")
            time.sleep(0.02)


@contextmanager
def webhook_receiver(tls: tuple[Path, Path] | None = None) -> Iterator[Receiver]:
    """The receiver; ``tls`` (certificate, key files): https with that certificate."""
    rx = Receiver()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as a production receiver

        def setup(self) -> None:
            super().setup()
            with rx.lock:
                rx.open_connections += 1

        def finish(self) -> None:
            with rx.lock:
                rx.open_connections -= 1
            super().finish()

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            key = self.headers.get("Idempotency-Key", "")
            if rx.delay_s:
                time.sleep(rx.delay_s)
            with rx.lock:
                plan = rx.fail_first.get(key)
                status = plan.pop(0) if plan else 503 if rx.down else 200
                if status == 200:
                    rx.posts.append(Received(key, json.loads(body), time.time()))
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_args: object) -> None:  # keep test output clean
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    scheme = "http"
    if tls is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*tls)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        scheme = "https"
    rx.url = f"{scheme}://127.0.0.1:{server.server_address[1]}/hook"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield rx
    finally:
        server.shutdown()
        server.server_close()
