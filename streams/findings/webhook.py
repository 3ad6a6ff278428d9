"""The alert hooks' webhook: one ``POST`` per finding through urllib3.

Why urllib3 and not a parser of our own: a hand-written HTTP/1.1 reader
believed whatever a receiver sent (a 2^40 Content-Length, a chunk size of
``FFFFFFFFFF``, endless interim answers or trailers) and held or waited for
it. urllib3 (over :mod:`http.client`) bounds every line and the number of
header fields, reads a body as far as asked, reuses a kept-alive
connection, verifies TLS by default and speaks to proxies. What it does not
do, done here:

- **A deadline per attempt.** urllib3's timeouts bound one socket operation;
  a receiver that sends one byte a second, or interim answers for ever,
  never trips them. A watchdog thread shuts the socket of an attempt down
  when its deadline (``timeout_s`` from its start) passes: the blocked read
  ends at once, and the attempt fails as unanswered.
- **A bounded answer.** At most ``max_body`` bytes of the answer's body are
  read (not decoded); a longer one is not read on: the connection is closed.
  A 2xx whose body did not end within the bound is not taken as delivered
  (the answer did not end), so a receiver that streams for ever is retried,
  then dead-lettered, never waited on.
- **Credentials sent, never stored.** URL userinfo is sent as Basic auth;
  extra headers (``Authorization`` ...) may take their value from a file or
  an environment variable (:func:`parse_header`). Every message this module
  makes names the URL redacted (:func:`redact_url`): no userinfo, no query
  values.
- **Proxies as the ecosystem expects**: ``HTTP_PROXY``/``HTTPS_PROXY``/
  ``NO_PROXY`` from the environment (:func:`urllib.request.getproxies`, as
  requests and httpx read them). No redirect is followed (a 3xx is a failed
  delivery: point the URL at the final address).
"""

from __future__ import annotations

import contextlib
import http.client
import os
import re
import socket
import threading
import time
import urllib.parse
import urllib.request
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path

import urllib3
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import (
    ConnectTimeoutError,
    HTTPError,
    NameResolutionError,
    NewConnectionError,
    ProtocolError,
    ProxyError,
    ReadTimeoutError,
    SSLError,
)

from streams.errors import DeliveryFailed
from streams.findings.consumer import Delivery
from streams.findings.select import encode_finding

__all__ = ["MAX_ANSWER_BODY", "WebhookTarget", "parse_header", "redact_url"]

#: Bytes of an answer's body read at most; the rest is not read (the
#: connection is closed). A webhook's answer carries nothing the follower uses.
MAX_ANSWER_BODY = 64 * 1024
#: A header value read from a file is at most this long (a token, not a file).
MAX_HEADER_FILE = 8 * 1024
#: How often the watchdog looks, at the longest (its wait otherwise ends at
#: the nearest deadline).
_WATCH_S = 0.25

# RFC 9110 field-name: a token.
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
#: Headers the webhook sets itself (or the client does): not overridable.
_RESERVED = frozenset(
    {"host", "content-length", "transfer-encoding", "connection", "content-type", "idempotency-key"}
)
#: Headers whose value is a credential: never accepted literally on a command line.
_SECRET = frozenset({"authorization", "proxy-authorization", "cookie"})


def redact_url(url: str) -> str:
    """``url`` as it may be shown or stored: userinfo replaced by ``***``,
    each query value by ``***`` (a parameter without ``=`` wholly), no
    fragment. Paths are kept (a token in a path is not recognised)."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rpartition("@")[2]
    params = []
    for param in parts.query.split("&") if parts.query else ():
        name, sep, _ = param.partition("=")
        params.append(f"{name}=***" if sep else "***")
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "&".join(params), ""))


def parse_header(spec: str, environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """One ``--webhook-header``: ``NAME: VALUE`` (the value as given),
    ``NAME=@FILE`` (the value is FILE's content, trailing whitespace
    stripped) or ``NAME=env:VAR`` (the value of environment variable VAR).
    A credential header (Authorization, Proxy-Authorization, Cookie) must use
    a file or the environment: a command line is visible to every user of
    the host (``ps``). Raises ValueError naming the problem, never the value."""
    colon, equals = spec.find(":"), spec.find("=")
    if colon < 0 and equals < 0:
        raise ValueError(
            f"--webhook-header wants NAME: VALUE, NAME=@FILE or NAME=env:VAR, got {spec[:40]!r}"
        )
    literal = equals < 0 or 0 <= colon < equals
    name, rest = (
        (spec[:colon], spec[colon + 1 :]) if literal else (spec[:equals], spec[equals + 1 :])
    )
    name = name.strip()
    if not _TOKEN.fullmatch(name):
        raise ValueError(f"--webhook-header: {name[:40]!r} is not a header name")
    lowered = name.lower()
    if lowered in _RESERVED:
        raise ValueError(f"--webhook-header: {name} is set by the webhook itself")
    if literal:
        if lowered in _SECRET:
            raise ValueError(
                f"--webhook-header: a {name} value is a secret: give it as {name}=@FILE or "
                f"{name}=env:VAR, not on the command line"
            )
        value = rest.strip()
    elif rest.startswith("@"):
        path = Path(rest[1:])
        try:
            with path.open("rb") as fh:
                raw = fh.read(MAX_HEADER_FILE + 1)
        except OSError as exc:
            raise ValueError(
                f"--webhook-header {name}: cannot read {path}: {exc.strerror or exc}"
            ) from None
        if len(raw) > MAX_HEADER_FILE:
            raise ValueError(
                f"--webhook-header {name}: {path} is longer than {MAX_HEADER_FILE} bytes"
            )
        try:
            value = raw.decode("latin-1").strip()
        except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes any byte
            raise ValueError(f"--webhook-header {name}: {path} is not text") from None
    elif rest.startswith("env:"):
        var = rest[4:]
        got = (os.environ if environ is None else environ).get(var)
        if got is None:
            raise ValueError(f"--webhook-header {name}: environment variable {var!r} is not set")
        value = got.strip()
    else:
        raise ValueError(
            f"--webhook-header {name}=...: the value must be @FILE or env:VAR "
            f"(a literal value is written {name}: VALUE)"
        )
    if not value:
        raise ValueError(f"--webhook-header {name}: the value is empty")
    if any((ord(c) < 0x20 and c != "\t") or ord(c) == 0x7F or ord(c) > 0xFF for c in value):
        raise ValueError(
            f"--webhook-header {name}: the value holds characters a header cannot carry"
        )
    return name, value


class _Attempt:
    """A target's attempt in progress: its deadline and the socket it uses.
    The lane arms and disarms it; the watchdog expires it. One lock, never
    contended but by the watchdog's look, so that an expiry never hits the
    socket of the next attempt."""

    __slots__ = ("__weakref__", "deadline", "expired", "lock", "opened", "sock")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.deadline: float | None = None
        self.expired = False
        self.sock: socket.socket | None = None
        #: Connections opened so far (to tell a reused one from a fresh one).
        self.opened = 0

    def arm(self, timeout_s: float) -> None:
        with self.lock:
            self.deadline = time.monotonic() + timeout_s
            self.expired = False

    def disarm(self) -> None:
        with self.lock:
            self.deadline = None

    def left(self) -> float:
        deadline = self.deadline
        return 0.001 if deadline is None else max(0.001, deadline - time.monotonic())

    def track(self, sock: socket.socket | None) -> None:
        with self.lock:
            self.sock = sock
            self.opened += 1
            if self.expired:  # connected after the deadline passed
                _shut(sock)

    def expire_if_due(self, now: float) -> float | None:
        """Ends the attempt if its deadline passed; else its deadline (None: idle)."""
        with self.lock:
            deadline = self.deadline
            if deadline is None or self.expired:
                return None
            if now < deadline:
                return deadline
            self.expired = True
            _shut(self.sock)
            return None


def _shut(sock: socket.socket | None) -> None:
    # shutdown(), not close(): the reading thread owns the descriptor (a close
    # could let the number be reused under it); shutdown ends its blocked read
    # with end-of-file. The plain socket's method, so that a TLS socket's
    # state is left to the thread using it.
    if sock is None:
        return
    with contextlib.suppress(OSError):  # closed or never connected: nothing to end
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


class _Watchdog:
    """One daemon thread for every webhook target of the process: expires
    the attempts whose deadline passed. It wakes at the nearest deadline, or
    every ``_WATCH_S`` when none is near (a new attempt's deadline is at
    least its timeout away)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._attempts: weakref.WeakSet[_Attempt] = weakref.WeakSet()
        self._thread: threading.Thread | None = None

    def watch(self, attempt: _Attempt) -> None:
        with self._lock:
            self._attempts.add(attempt)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="fencewatch-webhook-deadlines", daemon=True
                )
                self._thread.start()

    def forget(self, attempt: _Attempt) -> None:
        with self._lock:
            self._attempts.discard(attempt)

    def _run(self) -> None:
        while True:
            with self._lock:
                attempts = list(self._attempts)
            now = time.monotonic()
            nearest = now + _WATCH_S
            for attempt in attempts:
                deadline = attempt.expire_if_due(now)
                if deadline is not None and deadline < nearest:
                    nearest = deadline
            del attempts
            time.sleep(max(0.002, nearest - time.monotonic()))


_WATCHDOG = _Watchdog()
#: The attempt the calling (lane) thread is making: a connection opened
#: during it is tracked by it (urllib3 opens connections inside urlopen).
_current = threading.local()


def _tracked(conn: HTTPConnection) -> None:
    attempt: _Attempt | None = getattr(_current, "attempt", None)
    if attempt is not None:
        attempt.track(conn.sock)


class _TrackedHTTPConnection(HTTPConnection):
    def connect(self) -> None:
        super().connect()
        _tracked(self)


class _TrackedHTTPSConnection(HTTPSConnection):
    # The socket is known after the TLS handshake (wrapping replaces it):
    # the handshake itself is bounded per read by the connect timeout.
    def connect(self) -> None:
        super().connect()
        _tracked(self)


class _HTTPPool(HTTPConnectionPool):
    ConnectionCls = _TrackedHTTPConnection


class _HTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _TrackedHTTPSConnection


def _manager(scheme: str, host: str) -> urllib3.PoolManager:
    """A one-connection pool manager, through the environment's proxy for
    ``scheme`` unless NO_PROXY exempts ``host``."""
    kw = {"num_pools": 2, "maxsize": 1, "block": False, "retries": False}
    proxy = None
    proxies = urllib.request.getproxies()
    if scheme in proxies and not urllib.request.proxy_bypass(host):
        proxy = proxies[scheme]
    if proxy is None:
        pm = urllib3.PoolManager(**kw)  # type: ignore[arg-type]
    else:
        parts = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        headers = {}
        if parts.username is not None:
            user, password = parts.username, parts.password or ""
            auth = f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}"
            headers = urllib3.make_headers(proxy_basic_auth=auth)
        bare = urllib.parse.urlunsplit(
            (parts.scheme, parts.netloc.rpartition("@")[2], parts.path, "", "")
        )
        try:
            pm = urllib3.ProxyManager(bare, proxy_headers=headers, **kw)  # type: ignore[arg-type]
        except (ValueError, HTTPError) as exc:
            raise ValueError(
                f"the {scheme} proxy {redact_url(proxy)} is not usable: {exc}"
            ) from None
    pm.pool_classes_by_scheme = {"http": _HTTPPool, "https": _HTTPSPool}
    return pm


class WebhookTarget:
    """POST each finding to ``url`` (the sender is one thread per target:
    one kept-alive connection). Each attempt ends within ``timeout_s``:
    connecting, sending and the whole answer. A failure on a reused
    connection is tried once more at once on a fresh one, within the same
    deadline (the server may have closed an idle connection; a repeat the
    receiver drops by the idempotency key). ``headers``: extra request
    headers (:func:`parse_header`)."""

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = 10.0,
        headers: Sequence[tuple[str, str]] = (),
        max_body: int = MAX_ANSWER_BODY,
    ) -> None:
        if not url.isascii() or any(c in url for c in "\r\n\t \x00"):
            raise ValueError(
                f"webhook URL has characters a request line cannot carry: {redact_url(url)!r}"
            )
        parts = urllib.parse.urlsplit(url)
        shown = redact_url(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"webhook URL must be http:// or https://HOST..., got {shown!r}")
        try:
            parts.port  # noqa: B018 - validates the port
        except ValueError:
            raise ValueError(f"webhook URL has a bad port: {shown!r}") from None
        if not timeout_s > 0:
            raise ValueError("the hook timeout must be > 0 seconds")
        if max_body < 0:
            raise ValueError("max_body must be >= 0")
        #: The URL as shown in messages and dead letters (redacted).
        self.url = shown
        self.timeout_s = timeout_s
        self.max_body = max_body
        base: dict[str, str] = {
            "Content-Type": "application/json",
            "User-Agent": "fencewatch-findings",
        }
        names: set[str] = set()
        for name, value in headers:
            low = name.lower()
            if low in names:
                raise ValueError(f"webhook header {name} is given twice")
            if low in _RESERVED:
                raise ValueError(f"webhook header {name} is set by the webhook itself")
            names.add(low)
            # A given User-Agent replaces ours.
            base = {k: v for k, v in base.items() if k.lower() != low}
            base[name] = value
        if parts.username is not None:
            if "authorization" in names:
                raise ValueError(
                    "the webhook URL has credentials and an Authorization header is given: keep one"
                )
            user = urllib.parse.unquote(parts.username)
            password = urllib.parse.unquote(parts.password or "")
            basic = urllib3.make_headers(basic_auth=f"{user}:{password}")["authorization"]
            base["Authorization"] = basic
        self._headers = base
        netloc = parts.netloc.rpartition("@")[2]
        #: What is requested: the URL without its userinfo (sent as a header).
        self._url = urllib.parse.urlunsplit(
            (parts.scheme, netloc, parts.path or "/", parts.query, "")
        )
        self._http = _manager(parts.scheme, parts.hostname)
        self._attempt = _Attempt()
        _WATCHDOG.watch(self._attempt)

    def close(self) -> None:
        """Close the kept-alive connection (another send opens one again)."""
        self._http.clear()

    def send(self, delivery: Delivery) -> None:
        """One attempt: returns once a 2xx answer was read whole within the
        deadline; raises DeliveryFailed (retriable for 5xx, 408, 429, no or
        an unfinished answer, a broken connection)."""
        key = delivery.idempotency_key
        if not key.isascii() or "\r" in key or "\n" in key:
            raise DeliveryFailed(
                f"finding id {delivery.finding.finding_id!r} cannot be an Idempotency-Key header",
                retriable=False,
            )
        body = encode_finding(delivery.finding)
        headers = {**self._headers, "Idempotency-Key": key}
        attempt = self._attempt
        attempt.arm(self.timeout_s)
        _current.attempt = attempt
        try:
            status, unfinished = self._post(body, headers, attempt)
        finally:
            _current.attempt = None
            attempt.disarm()
        if attempt.expired:
            # Whatever was read after the watchdog shut the socket down may
            # look like an ending (end-of-file ends a body without a length,
            # or trailers): the answer was cut, not finished.
            raise DeliveryFailed(
                f"{self.url}: no complete answer within {self.timeout_s:g} s", retriable=True
            )
        if 200 <= status < 300:
            if unfinished is None:
                return
            raise DeliveryFailed(f"{self.url} answered {status} but {unfinished}", retriable=True)
        raise self._refused(status)

    def _post(
        self, body: bytes, headers: dict[str, str], attempt: _Attempt
    ) -> tuple[int, str | None]:
        """(status, None when the answer was read whole, else why not)."""
        for tries in (1, 2):
            opened = attempt.opened
            left = attempt.left()
            try:
                r = self._http.urlopen(
                    "POST",
                    self._url,
                    body=body,
                    headers=headers,
                    redirect=False,
                    retries=False,
                    preload_content=False,
                    decode_content=False,
                    timeout=urllib3.Timeout(connect=left, read=left),
                )
            except (HTTPError, OSError, ValueError, http.client.HTTPException) as exc:
                reused = attempt.opened == opened
                if tries == 1 and reused and not attempt.expired and isinstance(exc, ProtocolError):
                    continue
                raise DeliveryFailed(f"{self.url}: {self._reason(exc)}", retriable=True) from None
            return r.status, self._read_answer(r)
        raise AssertionError("unreachable")  # pragma: no cover

    def _read_answer(self, r: urllib3.BaseHTTPResponse) -> str | None:
        """Read (and drop) the body, at most ``max_body`` bytes: None when it
        ended there, else why not. An answer not read whole closes the
        connection (never reused with part of an answer unread)."""
        got = 0
        why: str | None = f"its body passed {self.max_body // 1024} KiB"
        try:
            while got <= self.max_body:
                data = r.read(self.max_body + 1 - got, decode_content=False)
                if not data:
                    why = None
                    break
                got += len(data)
        except Exception as exc:  # any reading error: the answer did not end
            # (broken off, a line too long, the deadline; http.client lets a
            # negative chunk size through as a ValueError)
            why = f"its body did not end: {self._reason(exc)}"
        finally:
            if why is not None:
                r.close()
            r.release_conn()
        return why

    def _reason(self, exc: BaseException) -> str:
        """A short reason for a failed attempt: never the URL (urllib3's
        messages name the host and objects), never a header."""
        if self._attempt.expired or isinstance(
            exc, ReadTimeoutError | ConnectTimeoutError | TimeoutError
        ):
            return f"no complete answer within {self.timeout_s:g} s"
        if isinstance(exc, NameResolutionError):
            return "cannot resolve the host name"
        if isinstance(exc, SSLError):
            return f"TLS: {_inner(exc)}"
        if isinstance(exc, ProxyError):
            return f"proxy: {_inner(exc)}"
        if isinstance(exc, NewConnectionError):
            return f"cannot connect: {_inner(exc)}"
        if isinstance(exc, ProtocolError):
            return f"connection broken: {_inner(exc)}"
        if isinstance(exc, OSError):
            return exc.strerror or type(exc).__name__
        return type(exc).__name__

    def _refused(self, status: int) -> DeliveryFailed:
        retriable = status >= 500 or status in (408, 429)
        note = " (redirects are not followed: give the final URL)" if 300 <= status < 400 else ""
        return DeliveryFailed(f"{self.url} answered {status}{note}", retriable=retriable)


def _inner(exc: BaseException) -> str:
    """The innermost cause's own words (an OSError's strerror, an SSL
    error's reason), at most 200 characters, without object reprs."""
    seen = 0
    while seen < 5:
        seen += 1
        nxt: BaseException | None = None
        if isinstance(exc, HTTPError) and exc.args and isinstance(exc.args[-1], BaseException):
            nxt = exc.args[-1]
        nxt = nxt or exc.__cause__ or exc.__context__
        if nxt is None:
            break
        exc = nxt
    if isinstance(exc, OSError) and exc.strerror:
        text = exc.strerror
    elif isinstance(exc, OSError) and getattr(exc, "reason", None):
        text = str(getattr(exc, "reason", ""))
    else:
        text = str(exc) or type(exc).__name__
    text = re.sub(r"<[^>]*>", "", text).strip(" :")
    return text[:200] or type(exc).__name__
