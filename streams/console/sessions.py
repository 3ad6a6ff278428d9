"""The console's login sessions and its login rate limit, both in memory
and both bounded.

A session is a random id (``secrets.token_urlsafe``) the server keeps with
its expiry; the cookie carries only the id. Logging out forgets the id, so
a copied cookie stops working at once, and a session ends by itself after
its time to live. The table holds at most ``max_sessions``: a login past it
forgets the session that expires first (the oldest login), so the bound
costs the oldest session, never memory. Ids are kept as their SHA-256, so
the table itself holds nothing a cookie could be forged from.

The rate limit is a token bucket per client address (``burst`` attempts at
once, then one per ``refill_s``). The table of buckets is bounded too
(``max_clients``, least recently seen forgotten first); behind a reverse
proxy every client has the proxy's address and shares one bucket.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

__all__ = [
    "DEFAULT_MAX_SESSIONS",
    "DEFAULT_SESSION_TTL_S",
    "LOGIN_BURST",
    "LOGIN_REFILL_S",
    "RateLimit",
    "Sessions",
]

#: A login lasts this long (12 hours: a working day, then log in again).
DEFAULT_SESSION_TTL_S = 12 * 3600.0
#: Sessions held at most (a login past it forgets the oldest).
DEFAULT_MAX_SESSIONS = 1024
#: Login attempts a client may make at once, then one per LOGIN_REFILL_S.
LOGIN_BURST = 5
LOGIN_REFILL_S = 12.0
#: Clients whose login attempts are remembered at most.
MAX_CLIENTS = 4096


def _digest(session_id: str) -> bytes:
    return hashlib.sha256(session_id.encode()).digest()


class Sessions:
    """Session ids with their expiry (monotonic seconds)."""

    def __init__(
        self,
        ttl_s: float = DEFAULT_SESSION_TTL_S,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if ttl_s <= 0 or max_sessions < 1:
            raise ValueError("a session needs a positive time to live and room for one")
        self.ttl_s = ttl_s
        self.max_sessions = max_sessions
        self._clock = clock
        self._lock = threading.Lock()
        # Insertion order is expiry order: every session lives ttl_s.
        self._expiry: OrderedDict[bytes, float] = OrderedDict()

    def __len__(self) -> int:
        return len(self._expiry)

    def create(self) -> str:
        """A new session id, valid for ``ttl_s``."""
        sid = secrets.token_urlsafe(32)
        now = self._clock()
        with self._lock:
            self._expire(now)
            while len(self._expiry) >= self.max_sessions:
                self._expiry.popitem(last=False)
            self._expiry[_digest(sid)] = now + self.ttl_s
        return sid

    def valid(self, sid: str) -> bool:
        # A dict lookup of a digest: the time it takes says nothing about
        # how much of the id was right.
        if not sid or len(sid) > 128:
            return False
        now = self._clock()
        with self._lock:
            until = self._expiry.get(_digest(sid))
            if until is None:
                return False
            if until <= now:
                del self._expiry[_digest(sid)]
                return False
            return True

    def revoke(self, sid: str) -> bool:
        """Forget the session (logout); whether it was held."""
        with self._lock:
            return self._expiry.pop(_digest(sid), None) is not None

    def _expire(self, now: float) -> None:
        while self._expiry:
            digest, until = next(iter(self._expiry.items()))
            if until > now:
                return
            del self._expiry[digest]


class RateLimit:
    """A token bucket per client: :meth:`take` is 0 when the attempt may go
    ahead, else the seconds until it may."""

    def __init__(
        self,
        burst: int = LOGIN_BURST,
        refill_s: float = LOGIN_REFILL_S,
        max_clients: int = MAX_CLIENTS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.burst = burst
        self.refill_s = refill_s
        self.max_clients = max_clients
        self._clock = clock
        self._lock = threading.Lock()
        #: client -> (tokens, when counted), least recently seen first.
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def take(self, client: str) -> float:
        now = self._clock()
        with self._lock:
            tokens, then = self._buckets.pop(client, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - then) / self.refill_s)
            wait = 0.0
            if tokens >= 1.0:
                tokens -= 1.0
            else:
                wait = (1.0 - tokens) * self.refill_s
            self._buckets[client] = (tokens, now)
            while len(self._buckets) > self.max_clients:
                self._buckets.popitem(last=False)
            return wait
