"""The alert hooks' webhook: one ``POST`` per finding through libcurl (pycurl).

Why libcurl and not a parser of our own: a hand-written HTTP/1.1 reader
believed whatever a receiver sent (a 2^40 Content-Length, a chunk size of
``FFFFFFFFFF``, endless interim answers or trailers) and held or waited for
it. Why libcurl and not urllib3 or httpx: both bound one socket operation,
not an attempt (a receiver sending a byte a second, or interim answers for
ever, never trips them), and each costs ~150-250 CPU µs per request in the
interpreter (headers parsed by :mod:`email`, two writes per request), where
libcurl's ~30-40 µs keeps the follower within its CPU budget
(bench/findings_follow_cpu.py; docs/operate.md). libcurl gives, per attempt:

- **A total deadline** (``CURLOPT_TIMEOUT_MS``): connecting, sending and the
  whole answer end within ``timeout_s``, whatever the receiver sends.
- **A bounded answer.** The body goes to a callback that counts it and drops
  it; past ``max_body`` bytes it stops the transfer (the connection is
  closed). A 2xx whose body did not end there is not taken as delivered (the
  answer did not end), so a receiver that streams for ever is retried, then
  dead-lettered, never held in memory. Header lines and their total are
  bounded by libcurl (100 KiB a line, 300 KiB in all).
- Kept-alive connections: one per target for :meth:`WebhookTarget.send`,
  and one per request of the window (:meth:`WebhookTarget.start` and
  :meth:`WebhookTarget.finished`: up to ``concurrency`` first attempts in
  flight on libcurl's multi interface, driven by the lane's one thread, each
  easy handle used again as soon as its answer is in, its headers built once
  per target); a request on a dead reused connection is tried once more on
  a fresh one by libcurl; no
  redirects followed (a 3xx is a failed delivery: give the final URL); only
  http and https; TLS verified against the CAs Python's :mod:`ssl` uses
  (``SSL_CERT_FILE``/``SSL_CERT_DIR`` when set); no compressed answers asked for.
- **Proxies as the Python ecosystem reads them**: ``HTTP_PROXY``/
  ``HTTPS_PROXY``/``NO_PROXY`` through :func:`urllib.request.getproxies`, as
  requests and httpx do (libcurl's own reading of the environment differs: it
  skips an upper-case ``HTTP_PROXY``), handed to libcurl explicitly.
- **Credentials sent, never stored.** URL userinfo is sent as Basic auth;
  extra headers (``Authorization`` ...) may take their value from a file or
  an environment variable (:func:`parse_header`). Every message this module
  makes names the URL redacted (:func:`redact_url`: no userinfo, no query
  values), and a libcurl message has the URL's secrets and the header values
  masked before it is shown or stored.
"""

from __future__ import annotations

import base64
import math
import os
import re
import ssl
import time
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

import pycurl

from streams.errors import DeliveryFailed
from streams.findings.consumer import Delivery

__all__ = ["MAX_ANSWER_BODY", "WebhookTarget", "parse_header", "redact_url"]

#: After a wake-up with at least half the window in flight (a backlog being
#: drained), answers are left to gather this long before they are handled:
#: one pass then handles several, where each answer was a wake-up of its own
#: (bench/findings_follow_cpu.py: ~8 CPU µs less per finding with a window of
#: 32; docs/operate.md). At most this much later, and only under load.
LINGER_S = 0.002

#: Bytes of an answer's body read at most; the transfer stops past them (the
#: connection is closed). A webhook's answer carries nothing the follower uses.
MAX_ANSWER_BODY = 64 * 1024
#: A header value read from a file is at most this long (a token, not a file).
MAX_HEADER_FILE = 8 * 1024

# RFC 9110 field-name: a token.
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
#: Headers the webhook sets itself (or the client does): not overridable.
_RESERVED = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "content-type",
        "idempotency-key",
        "expect",
    }
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


#: libcurl's errors in our words (its own message is added, masked).
_CURL_ERRORS = {
    pycurl.E_OPERATION_TIMEDOUT: "timeout",
    pycurl.E_COULDNT_RESOLVE_HOST: "cannot resolve the host name",
    pycurl.E_COULDNT_RESOLVE_PROXY: "cannot resolve the proxy's host name",
    pycurl.E_COULDNT_CONNECT: "cannot connect",
    pycurl.E_SSL_CONNECT_ERROR: "TLS handshake failed",
    pycurl.E_PEER_FAILED_VERIFICATION: "TLS: the server's certificate is not trusted",
    pycurl.E_SSL_CACERT: "TLS: the server's certificate is not trusted",
    pycurl.E_GOT_NOTHING: "the server closed the connection without an answer",
    pycurl.E_SEND_ERROR: "connection broken while sending",
    pycurl.E_RECV_ERROR: "connection broken or not HTTP while receiving",
    pycurl.E_PARTIAL_FILE: "the answer was cut short",
    pycurl.E_UNSUPPORTED_PROTOCOL: "the answer is not HTTP/1.x",
    8: "the answer is not HTTP/1.x",  # CURLE_WEIRD_SERVER_REPLY
}


# Looked up once: the window sets and reads them per finding.
_HTTPHEADER = pycurl.HTTPHEADER
_POSTFIELDS = pycurl.POSTFIELDS
_RESPONSE_CODE = pycurl.RESPONSE_CODE


def _code(exc: pycurl.error) -> int:
    """libcurl's error number of ``exc`` (0 if it has none)."""
    first = exc.args[0] if exc.args else 0
    return first if isinstance(first, int) else 0


def _ca_paths() -> tuple[str | None, str | None]:
    """The CA file and directory Python's ssl verifies with (the environment's
    SSL_CERT_FILE/SSL_CERT_DIR first): a libcurl built elsewhere (pycurl's
    wheel) may look for them where this system has none."""
    paths = ssl.get_default_verify_paths()
    cafile = os.environ.get("SSL_CERT_FILE") or paths.cafile
    capath = os.environ.get("SSL_CERT_DIR") or paths.capath
    return (
        cafile if cafile and os.path.isfile(cafile) else None,
        capath if capath and os.path.isdir(capath) else None,
    )


def _proxy_for(scheme: str, host: str) -> str:
    """The environment's proxy for ``scheme`` (as urllib.request reads it),
    or "" (none) when there is none or NO_PROXY exempts ``host``."""
    proxies = urllib.request.getproxies()
    if scheme in proxies and not urllib.request.proxy_bypass(host):
        return proxies[scheme]
    return ""


class _Handle:
    """One libcurl easy handle of a target (one kept-alive connection), the
    delivery it carries, when its attempt started, and the count of the
    answer body it is reading."""

    __slots__ = ("curl", "delivery", "got", "headers", "max_body", "started")

    def __init__(self, target: WebhookTarget) -> None:
        self.curl = pycurl.Curl()
        self.got = 0
        self.max_body = target.max_body
        self.headers = target._headers
        self.delivery: Delivery | None = None
        self.started = 0.0
        target.setup(self.curl)
        self.curl.setopt(pycurl.WRITEFUNCTION, self._body)

    def _body(self, data: bytes) -> int | None:
        """libcurl's body callback: counted, dropped; 0 (stop) past the bound."""
        self.got += len(data)
        return 0 if self.got > self.max_body else None

    def load(self, key: str, delivery: Delivery) -> None:
        """Set up the request of ``delivery``: the headers built once per
        target, plus this request's Idempotency-Key."""
        curl = self.curl
        curl.setopt(pycurl.HTTPHEADER, [*self.headers, f"Idempotency-Key: {key}"])
        curl.setopt(pycurl.POSTFIELDS, delivery.body)  # encoded once (the jsonl line too)
        self.got = 0
        self.delivery = delivery

    def close(self) -> None:
        self.curl.close()


class WebhookTarget:
    """POST each finding to ``url`` (the sender is one thread per target).
    Each attempt ends within ``timeout_s``: connecting, sending and the
    whole answer. ``headers``: extra request headers (:func:`parse_header`).
    ``concurrency``: first attempts the window keeps in flight at once
    (:meth:`start`, :meth:`finished`), each on a kept-alive connection of
    its own (1: none; every request through :meth:`send`, on one
    connection)."""

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = 10.0,
        headers: Sequence[tuple[str, str]] = (),
        max_body: int = MAX_ANSWER_BODY,
        concurrency: int = 1,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
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
        if not 0 < timeout_s < math.inf:
            raise ValueError("the hook timeout must be a number of seconds more than 0")
        if max_body < 0:
            raise ValueError("max_body must be >= 0")
        #: The URL as shown in messages and dead letters (redacted).
        self.url = shown
        #: Requests the window has in flight at once (1: one at a time).
        self.concurrency = concurrency
        self.timeout_s = timeout_s
        self.max_body = max_body
        fields: dict[str, tuple[str, str]] = {
            "content-type": ("Content-Type", "application/json"),
            "user-agent": ("User-Agent", "fencewatch-findings"),
            # libcurl would ask for 100 Continue before a larger body: a round
            # trip for nothing (and one more answer a receiver could stretch).
            "expect": ("Expect", ""),
        }
        given: set[str] = set()
        for name, value in headers:
            low = name.lower()
            if low in given:
                raise ValueError(f"webhook header {name} is given twice")
            if low in _RESERVED:
                raise ValueError(f"webhook header {name} is set by the webhook itself")
            given.add(low)
            fields[low] = (name, value)  # a given User-Agent replaces ours
        #: Strings a libcurl message must not show (it may quote the request).
        self._secrets = [v for _, v in headers if v]
        if parts.username is not None:
            if "authorization" in given:
                raise ValueError(
                    "the webhook URL has credentials and an Authorization header is given: keep one"
                )
            user = urllib.parse.unquote(parts.username)
            password = urllib.parse.unquote(parts.password or "")
            basic = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
            fields["authorization"] = ("Authorization", f"Basic {basic}")
            self._secrets += [s for s in (parts.username, parts.password, basic) if s]
        if parts.query:
            self._secrets += [
                parts.query,
                *(v for _, v in urllib.parse.parse_qsl(parts.query) if v),
            ]
        self._secrets.sort(key=len, reverse=True)  # the longest first: none left half-masked
        self._headers = [
            f"{name}: {value}" if value else f"{name}:" for name, value in fields.values()
        ]
        netloc = parts.netloc.rpartition("@")[2]
        #: What is requested: the URL without its userinfo (sent as a header).
        self._url = urllib.parse.urlunsplit(
            (parts.scheme, netloc, parts.path or "/", parts.query, "")
        )
        self._proxy = _proxy_for(parts.scheme, parts.hostname)
        if self._proxy:  # libcurl sends a proxy's userinfo as its Basic auth
            try:
                proxied = urllib.parse.urlsplit(self._proxy)
                hidden = [proxied.username, proxied.password]
            except ValueError:
                hidden = []
            self._secrets += [h for h in hidden if h]
            self._secrets.sort(key=len, reverse=True)
        self._one = _Handle(self)
        #: The window's handles (made when first used), those free, those
        #: in flight, and the multi handle that drives them.
        self._group: list[_Handle] = []
        self._free: list[_Handle] = []
        self._running: dict[pycurl.Curl, _Handle] = {}
        self._multi: pycurl.CurlMulti | None = None

    def setup(self, c: pycurl.Curl) -> None:
        """The options every request of this target has."""
        c.setopt(pycurl.URL, self._url)
        c.setopt(pycurl.POST, 1)
        c.setopt(pycurl.PROTOCOLS, pycurl.PROTO_HTTP | pycurl.PROTO_HTTPS)
        c.setopt(pycurl.FOLLOWLOCATION, 0)
        c.setopt(pycurl.HTTP_VERSION, pycurl.CURL_HTTP_VERSION_1_1)
        # Threads: no signals for timeouts (libcurl's alarm() would hit the
        # process), and the deadline is the whole attempt.
        c.setopt(pycurl.NOSIGNAL, 1)
        timeout_ms = max(1, round(self.timeout_s * 1000))
        c.setopt(pycurl.TIMEOUT_MS, timeout_ms)
        c.setopt(pycurl.CONNECTTIMEOUT_MS, timeout_ms)
        c.setopt(pycurl.PROXY, self._proxy)  # "": none, whatever libcurl would read
        cafile, capath = _ca_paths()
        if cafile is not None:
            c.setopt(pycurl.CAINFO, cafile)
        if capath is not None:
            c.setopt(pycurl.CAPATH, capath)

    def close(self) -> None:
        """Close the kept-alive connections (another send opens one again)."""
        self._one.close()
        self._one = _Handle(self)
        if self._multi is not None:
            self.abandon()
            for handle in self._group:
                handle.close()
            self._multi.close()
        self._group, self._free, self._multi = [], [], None

    def _key(self, delivery: Delivery) -> str:
        key = delivery.idempotency_key
        if not key.isascii() or "\r" in key or "\n" in key:
            raise DeliveryFailed(
                f"finding id {delivery.finding.finding_id!r} cannot be an Idempotency-Key header",
                retriable=False,
            )
        return key

    def send(self, delivery: Delivery) -> None:
        """One attempt: returns once a 2xx answer was read whole within the
        deadline; raises DeliveryFailed (retriable for 5xx, 408, 429, no or
        an unfinished answer, a broken connection)."""
        handle = self._one
        handle.load(self._key(delivery), delivery)
        try:
            handle.curl.perform()
        except pycurl.error as exc:
            failed = self._outcome(handle, _code(exc), exc)
        else:
            failed = self._outcome(handle, 0, None)
        if failed is not None:
            raise failed

    # -- the window: first attempts kept in flight together -------------------
    #
    # Why a window and not groups: a group of requests waited for its slowest
    # answer before the next group started, and each group cost a thread's
    # sleep and wake-up for its last answers. The window starts a request on
    # a handle as soon as its previous one finished: one thread drives up to
    # ``concurrency`` requests on libcurl's multi interface, each handle
    # (and its kept-alive connection, in the multi handle's connection cache)
    # used again for the next request.

    @property
    def in_flight(self) -> int:
        """First attempts started and not finished yet."""
        return len(self._running)

    def start(self, delivery: Delivery) -> None:
        """Start the first attempt of ``delivery`` on a free handle (at most
        ``concurrency`` in flight: the caller keeps count with
        :attr:`in_flight`). Raises DeliveryFailed, not started, for a finding
        id that cannot be an Idempotency-Key header."""
        key = self._key(delivery)
        multi = self._multi if self._multi is not None else self._open_window()
        handle = self._free.pop()
        # _Handle.load, inline: once per finding on the window's thread.
        curl = handle.curl
        curl.setopt(_HTTPHEADER, [*handle.headers, f"Idempotency-Key: {key}"])
        curl.setopt(_POSTFIELDS, delivery.body)
        handle.got = 0
        handle.delivery = delivery
        handle.started = time.monotonic()
        multi.add_handle(curl)
        self._running[curl] = handle

    def _open_window(self) -> pycurl.CurlMulti:
        multi = pycurl.CurlMulti()
        self._multi = multi
        self._group = [_Handle(self) for _ in range(self.concurrency)]
        self._free = list(self._group)
        return multi

    def finished(self, wait_s: float) -> list[tuple[Delivery, DeliveryFailed | None, float]]:
        """The attempts that finished, each with its outcome (None: delivered)
        and when it started (time.monotonic()); waits up to ``wait_s`` for
        one when none has yet (each attempt still ends within the deadline:
        libcurl's timer bounds the wait)."""
        multi = self._multi
        if multi is None or not self._running:
            return []
        out = self._collect(multi)
        if not out and self._running and wait_s > 0:
            wanted_ms = multi.timeout()
            multi.select(wait_s if wanted_ms < 0 else min(wait_s, wanted_ms / 1000))
            if 2 * len(self._running) >= self.concurrency > 2:
                time.sleep(LINGER_S)
            out = self._collect(multi)
        return out

    def _collect(
        self, multi: pycurl.CurlMulti
    ) -> list[tuple[Delivery, DeliveryFailed | None, float]]:
        while multi.perform()[0] == pycurl.E_CALL_MULTI_PERFORM:
            pass
        out: list[tuple[Delivery, DeliveryFailed | None, float]] = []
        running, free = self._running, self._free
        while True:
            queued, done, errors = multi.info_read()
            for curl in done:
                handle = running.pop(curl)
                multi.remove_handle(curl)
                free.append(handle)
                assert handle.delivery is not None
                # A 2xx read whole, without a call to _outcome (per finding).
                status = curl.getinfo(_RESPONSE_CODE)
                outcome = None if 200 <= status < 300 else self._refused(int(status))
                out.append((handle.delivery, outcome, handle.started))
            for curl, code, message in errors:
                handle = running.pop(curl)
                multi.remove_handle(curl)
                free.append(handle)
                assert handle.delivery is not None
                failed = self._outcome(handle, code, pycurl.error(code, message))
                out.append((handle.delivery, failed, handle.started))
            if not queued:
                return out

    def abandon(self) -> None:
        """Stop the attempts in flight (they are neither delivered nor
        failed: the caller leaves them unacknowledged)."""
        if self._multi is not None:
            for curl, handle in self._running.items():
                self._multi.remove_handle(curl)
                self._free.append(handle)
        self._running.clear()

    def send_many(self, deliveries: Sequence[Delivery]) -> list[DeliveryFailed | None]:
        """The first attempt of up to ``concurrency`` deliveries at once (the
        window, waited out), each within the deadline. Returns the outcome of
        a prefix of ``deliveries`` (None: delivered; else the failed attempt),
        or [] when they are to go through :meth:`send` (concurrency 1, or one
        delivery). Requests sent together may arrive in any order."""
        if self.concurrency <= 1 or len(deliveries) <= 1:
            return []
        group = list(deliveries[: self.concurrency])
        outcomes: list[DeliveryFailed | None] = [None] * len(group)
        index = {id(d): i for i, d in enumerate(group)}
        try:
            for i, d in enumerate(group):
                try:
                    self.start(d)
                except DeliveryFailed as exc:
                    outcomes[i] = exc
            while self._running:
                for d, outcome, _ in self.finished(0.5):
                    outcomes[index[id(d)]] = outcome
        finally:
            self.abandon()  # only when interrupted: give the handles back
        return outcomes

    def _outcome(
        self, handle: _Handle, code: int, exc: pycurl.error | None
    ) -> DeliveryFailed | None:
        """What a finished transfer means: None (delivered) or the failure."""
        status = int(handle.curl.getinfo(pycurl.RESPONSE_CODE))
        if exc is None:
            return None if 200 <= status < 300 else self._refused(status)
        if code == pycurl.E_WRITE_ERROR and handle.got > self.max_body:
            unfinished = f"its body passed {self.max_body // 1024} KiB"
        else:
            unfinished = self._reason(exc)
        if 200 <= status < 300 or status == 0 or code == pycurl.E_OPERATION_TIMEDOUT:
            what = f"answered {status} but {unfinished}" if status else unfinished
            return DeliveryFailed(f"{self.url}: {what}", retriable=True)
        return self._refused(status)

    def _reason(self, exc: pycurl.error) -> str:
        code = _code(exc)
        if code == pycurl.E_OPERATION_TIMEDOUT:
            return f"no complete answer within {self.timeout_s:g} s"
        words = _CURL_ERRORS.get(code, f"curl error {code}")
        detail = str(exc.args[1]) if len(exc.args) > 1 else ""
        for secret in self._secrets:
            detail = detail.replace(secret, "***")
        return f"{words} ({detail[:200]})" if detail else words

    def _refused(self, status: int) -> DeliveryFailed:
        retriable = status >= 500 or status in (408, 429)
        note = " (redirects are not followed: give the final URL)" if 300 <= status < 400 else ""
        return DeliveryFailed(f"{self.url} answered {status}{note}", retriable=retriable)
