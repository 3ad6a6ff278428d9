"""The console server's limits, in one place (docs/operate.md lists them).

HTTP framing, header parsing and the connection timeouts are Hypercorn's
(h11 underneath); the request body, the request queue and the replays are
bounded by the console itself (:mod:`.server`, :mod:`.replays`).
"""

from __future__ import annotations

from dataclasses import dataclass

from streams.console.sessions import DEFAULT_MAX_SESSIONS, DEFAULT_SESSION_TTL_S

__all__ = ["ServerLimits"]


@dataclass(frozen=True, slots=True)
class ServerLimits:
    #: A connection that has not sent a whole request head this long after it
    #: opened, or after its last response, is closed (slow headers, idle
    #: keep-alive): Hypercorn's keep_alive_timeout.
    idle_s: float = 5.0
    #: A connection whose client sends nothing this long while its request is
    #: in progress is closed (Hypercorn's read_timeout): longer than a replay
    #: may take, so only a silent client trips it.
    read_s: int = 60
    #: A request body must arrive whole within this (else 408, closed).
    body_s: float = 10.0
    #: Request line plus headers, at most (past it: 431 or 400, closed).
    max_head_bytes: int = 16 * 1024
    #: A POST body, at most (past it: 413, closed, the body never read).
    max_body_bytes: int = 16 * 1024
    #: Connections the kernel queues before the console accepts them.
    backlog: int = 1024
    #: Threads that build replies (the view, the pages, a verification).
    workers: int = 8
    #: Requests in progress at once (queued for those threads or running);
    #: past it a request is answered 503 with Retry-After at once.
    max_requests: int = 4096
    #: Replays of the events topic running at once; past it a timeline is
    #: answered 503 with Retry-After (its page says the timeline is busy).
    replay_concurrency: int = 2
    #: A replay is read again after this; until then its result is served.
    replay_cache_s: float = 5.0
    #: Replays kept for that time, at most, by count and by their records' bytes.
    replay_cache_entries: int = 32
    replay_cache_bytes: int = 64 * 1024 * 1024
    #: A replay reading longer than this stops and says so.
    replay_s: float = 20.0
    #: Bytes of one replay's kept records at most (the oldest go first).
    replay_bytes: int = 16 * 1024 * 1024
    #: Set the cookie's Secure flag (served over TLS, or behind a TLS proxy).
    behind_tls: bool = False
    #: Host names served besides IP literals and localhost (guard.HostCheck).
    allowed_hosts: tuple[str, ...] = ()
    session_ttl_s: float = DEFAULT_SESSION_TTL_S
    max_sessions: int = DEFAULT_MAX_SESSIONS
