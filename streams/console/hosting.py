"""Hypercorn hosting the console's ASGI application (:mod:`.server`) on its
own event loop, in one thread: the listening socket is bound at
construction (so a taken port is an OSError at once, as the CLI reports it)
and handed to Hypercorn by descriptor, with the console's limits
(:class:`~streams.console.limits.ServerLimits`) as Hypercorn's settings.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
from typing import Any, cast

from hypercorn.asyncio import serve
from hypercorn.config import Config

from streams.console.limits import ServerLimits
from streams.console.server import Console, ConsoleASGI

__all__ = ["SECURITY_HEADERS", "ConsoleServer"]

log = logging.getLogger(__name__)

#: On every response, Hypercorn's own error responses included.
SECURITY_HEADERS = [
    (b"cache-control", b"no-store"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
]
#: The event loop's repeated errors are logged once in this many seconds.
_LOOP_LOG_S = 10.0


class _Config(Config):
    def response_headers(self, protocol: str) -> list[tuple[bytes, bytes]]:
        # Hypercorn adds these to every response it writes, its own 400/431/
        # 500 included, which the application never sees.
        return [*super().response_headers(protocol), *SECURITY_HEADERS]


class ConsoleServer:
    """Binds and listens at construction (an OSError names a taken port);
    :meth:`serve_forever` serves in the calling thread until :meth:`stop`,
    :meth:`start` from a daemon thread."""

    def __init__(
        self, address: tuple[str, int], console: Console, limits: ServerLimits | None = None
    ) -> None:
        self.console = console
        self.limits = limits = limits or ServerLimits()
        host, port = address
        family, type_, proto, _, addr = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, type_, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(addr)
            sock.listen(limits.backlog)
        except OSError:
            sock.close()
            raise
        self._sock: socket.socket | None = sock
        self.server_address: tuple[str, int] = sock.getsockname()[:2]
        self._app = ConsoleASGI(console, limits)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._stop_requested = threading.Event()
        self._thread: threading.Thread | None = None
        #: message -> (when last logged, how many since) (the loop's thread only).
        self._loop_errors: dict[str, tuple[float, int]] = {}

    @property
    def url(self) -> str:
        host, port = self.server_address
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def _config(self, fd: int) -> Config:
        lim = self.limits
        config = _Config()
        config.bind = [f"fd://{fd}"]
        config.backlog = lim.backlog
        config.keep_alive_timeout = lim.idle_s
        config.read_timeout = lim.read_s
        config.h11_max_incomplete_size = lim.max_head_bytes
        config.include_server_header = False
        config.accesslog = None
        config.errorlog = logging.getLogger(__name__ + ".hypercorn")
        # The console's own bound on requests in progress answers 503 first.
        config.keep_alive_max_requests = 10_000
        config.graceful_timeout = 3.0
        return config

    def serve_forever(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        if self._sock is None:
            raise RuntimeError("the console server was stopped")
        self._loop = asyncio.get_running_loop()
        self._loop.set_exception_handler(self._loop_error)
        self._stopping = asyncio.Event()
        if self._stop_requested.is_set():
            self._stopping.set()
        # Hypercorn takes the listening socket by descriptor and closes it.
        fd = self._sock.detach()
        self._sock = None
        try:
            await serve(
                cast(Any, self._app), self._config(fd), shutdown_trigger=self._stopping.wait
            )
        finally:
            self._app.close()

    def _loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        # One line, not asyncio's traceback: the loop reports, e.g., an accept
        # that found no descriptor left (it pauses accepting for a second).
        # At most one line per message every _LOOP_LOG_S: asyncio retries the
        # accept once per connection waiting (up to the backlog) and reports
        # each. Once stopping, only at debug level: asyncio still runs those
        # retries after the listening socket is closed, and they fail.
        message = str(context.get("message", "error"))
        exc = context.get("exception")
        log.debug("console server: %s", context, exc_info=exc)
        if self._stopping is not None and self._stopping.is_set():
            return
        now = loop.time()
        last, quiet = self._loop_errors.get(message, (-_LOOP_LOG_S, 0))
        if now - last < _LOOP_LOG_S:
            self._loop_errors[message] = (last, quiet + 1)
            return
        more = f" ({quiet:,} more like it in the last {now - last:.0f} s)" if quiet else ""
        self._loop_errors[message] = (now, 0)
        log.warning("console server: %s%s%s", message, f": {exc}" if exc else "", more)

    def start(self) -> None:
        """Serve from a daemon thread (tests; the CLI serves in its own)."""
        self._thread = threading.Thread(target=self.serve_forever, name="console-http", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop_requested.set()
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                loop.call_soon_threadsafe(stopping.set)
        if self._thread is not None:
            self._thread.join(10)
        if self._sock is not None:
            self._sock.close()
            self._sock = None
            self._app.close()
