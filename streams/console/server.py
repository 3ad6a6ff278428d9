"""The console's HTTP application: an ASGI application, served by
Hypercorn (h11) from :mod:`.hosting`.

Hypercorn does the HTTP/1.1 framing (Content-Length and chunked bodies,
refusing conflicting or malformed framing), bounds the request head
(:attr:`ServerLimits.max_head_bytes`) and closes a connection that sends no
whole request head within :attr:`ServerLimits.idle_s` of opening or of its
last response (slow headers, idle keep-alive). This application bounds the
body (size and time), the requests in progress, and the replays
(:mod:`.replays`); it checks the Host header (:mod:`.guard`) before
anything else. The blocking work (the view's lock, the pages, a
verification's publish) runs in a small thread pool, replays in the
replay gate's own threads, so neither can starve the other nor the loop.

Every response carries the security headers (the constant ones added by
the hosting to every response Hypercorn writes, its own errors included;
the Content-Security-Policy, which carries a per-page nonce, here); none
names the server or its version.

Routes: ``/`` and ``/w/<key>`` (HTML), ``/api/workflows``, ``/api/w/<key>``,
``/api/w/<key>/timeline`` and ``/api/processor`` (JSON), ``/metrics``,
``/health``; POST
``/login``, ``/logout``, ``/w/<key>/verify`` (a form) and ``/api/verify``
(JSON). Keys in paths are percent-encoded whole (``/`` too); a key too long
for a request line is named ``~<sha256 hex>``.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import re
import secrets
from collections.abc import Awaitable, Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any
from urllib.parse import parse_qs, quote, unquote

import orjson

from streams.console.auth import Auth
from streams.console.guard import HostCheck, safe_next
from streams.console.limits import ServerLimits
from streams.console.metrics import CONTENT_TYPE_LATEST, ConsoleMetrics
from streams.console.pages import (
    VERIFIABLE,
    Chrome,
    index_page,
    message_page,
    workflow_href,
    workflow_page,
)
from streams.console.processor import ProcessorWatch
from streams.console.replays import ReplayGate
from streams.console.sessions import RateLimit
from streams.console.timeline import Timeline, draw
from streams.console.view import MAX_HREF, PAGE_SIZE, ConsoleView
from streams.core.findings import Finding
from streams.core.validate import InvalidEvent
from streams.errors import FencewatchError

__all__ = ["Console", "ConsoleASGI"]

log = logging.getLogger(__name__)

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

#: Headers that decide who a request is: more than one of any is refused
#: rather than guessing which one the browser or a proxy meant.
_SINGLE = ("host", "origin", "cookie", "authorization", "content-type")
_HEX64 = re.compile(r"[0-9a-f]{64}")
#: A key shorter than this always has a link of its own (a character quotes
#: to at most 12: four UTF-8 bytes as %XX), so it cannot be a ``~`` name.
_MIN_HASHED_KEY = (MAX_HREF - len("/w/")) // 12


@dataclass
class Console:
    """What the handlers need: the view, the auth, the metrics, and the two
    Kafka actions (injected so the server holds no client of its own)."""

    view: ConsoleView
    auth: Auth
    metrics: ConsoleMetrics
    #: key -> the bounded replay of its events.
    replay: Callable[[str], Timeline]
    #: (workflow, effect, by, epoch, note) -> the published event's id.
    verify: Callable[[str, str, str, int, str | None], str]
    #: The followers' current errors (shown on every page).
    errors: Callable[[], list[str]]
    #: The processor's progress (None: not watched).
    processor: ProcessorWatch | None = None


class _Headers(Mapping[str, str]):
    """A request's headers by case-insensitive name (one value each)."""

    def __init__(self, items: dict[str, str]) -> None:
        self._items = items

    def __getitem__(self, name: str) -> str:
        return self._items[name.lower()]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


@dataclass(frozen=True, slots=True)
class _Request:
    method: str
    #: The path as sent (percent-encoded), and with its query (Chrome.path).
    path: str
    target: str
    query: dict[str, list[str]]
    headers: _Headers
    body: bytes
    client: str
    #: Over TLS, or behind a TLS proxy (--behind-tls): the cookie is Secure.
    secure: bool


@dataclass(frozen=True, slots=True)
class _Reply:
    status: int
    body: bytes
    ctype: str
    route: str
    nonce: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    #: Close the connection after this reply (its request was not read whole).
    close: bool = False


def _json(
    status: int,
    doc: Any,
    route: str,
    headers: tuple[tuple[str, str], ...] = (),
    close: bool = False,
) -> _Reply:
    return _Reply(status, orjson.dumps(doc), "application/json", route, None, headers, close)


def _html(status: int, page: str, route: str, nonce: str) -> _Reply:
    return _Reply(status, page.encode(), "text/html; charset=utf-8", route, nonce)


def _csp(nonce: str | None) -> bytes:
    script = f"'nonce-{nonce}'" if nonce else "'none'"
    # Styles: inline (the timeline positions its marks with style attributes,
    # which a nonce would forbid); scripts: only the page's own.
    style = "'unsafe-inline'" if nonce else "'none'"
    return (
        f"default-src 'none'; script-src {script}; style-src {style}; connect-src 'self'; "
        "img-src 'self' data:; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ).encode()


class ConsoleASGI:
    """The console as an ASGI application (served by :mod:`.hosting`)."""

    def __init__(self, console: Console, limits: ServerLimits) -> None:
        self.console = console
        self.limits = limits
        self.hosts = HostCheck(limits.allowed_hosts)
        self.logins = RateLimit()
        self.pool = ThreadPoolExecutor(limits.workers, thread_name_prefix="console-http")
        self.gate = ReplayGate(
            console.replay,
            concurrency=limits.replay_concurrency,
            cache_s=limits.replay_cache_s,
            cache_entries=limits.replay_cache_entries,
            cache_bytes=limits.replay_cache_bytes,
            on_replay=console.metrics.replays.inc,
        )
        self.in_progress = 0

    def close(self) -> None:
        self.gate.close()
        self.pool.shutdown(wait=False, cancel_futures=True)

    # -- ASGI ------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            reply = await self._handle(scope, receive)
            await self._send(send, reply)
        # Anything else (a WebSocket): returning without accepting refuses it.

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            msg = await receive()
            if msg["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif msg["type"] == "lifespan.shutdown":
                self.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _send(self, send: Send, r: _Reply) -> None:
        headers = [
            (b"content-type", r.ctype.encode()),
            (b"content-length", str(len(r.body)).encode()),
            (b"content-security-policy", _csp(r.nonce)),
        ]
        headers += [(k.lower().encode(), v.encode("latin-1")) for k, v in r.headers]
        if r.close:
            headers.append((b"connection", b"close"))
        # One body message: Hypercorn writes the head and the body back to
        # back (asyncio sets TCP_NODELAY), no wait for a delayed ACK.
        await send({"type": "http.response.start", "status": r.status, "headers": headers})
        await send({"type": "http.response.body", "body": r.body})
        self.console.metrics.requests.labels(route=r.route, code=str(r.status)).inc()

    async def _handle(self, scope: Scope, receive: Receive) -> _Reply:
        if scope.get("http_version") not in ("1.0", "1.1"):
            # Hypercorn also speaks HTTP/2 in clear (prior knowledge, h2c
            # upgrade); the console's limits and tests are HTTP/1.1's, so an
            # HTTP/2 request is refused rather than served on another framing.
            return _json(505, {"error": "this console speaks HTTP/1.1 only"}, "bad")
        # h11 bounds a head still arriving; one that came whole in a single
        # read is measured here, so the bound holds either way.
        head = len(scope["raw_path"]) + len(scope["query_string"])
        head += sum(len(n) + len(v) + 4 for n, v in scope["headers"])
        if head > self.limits.max_head_bytes:
            return _json(431, {"error": "the request's headers are too large"}, "bad", close=True)
        seen: dict[str, str] = {}
        for raw_name, raw_value in scope["headers"]:
            name = raw_name.decode("latin-1").lower()
            if name in seen and name in _SINGLE:
                return _json(400, {"error": f"more than one {name} header"}, "bad", close=True)
            seen[name] = raw_value.decode("latin-1")
        headers = _Headers(seen)
        if not self.hosts(headers.get("Host")):
            return _json(
                400,
                {"error": "this console is not served under that Host name (--allowed-hosts)"},
                "host",
                close=True,
            )
        method = scope["method"]
        if method not in ("GET", "HEAD", "POST"):
            return _json(
                405, {"error": "method not allowed"}, "bad", (("Allow", "GET, HEAD, POST"),), True
            )
        chunked = "transfer-encoding" in headers
        length = int(headers.get("content-length") or 0)  # digits only: h11 checked
        if chunked and "content-length" in headers:
            # Framed by Transfer-Encoding (RFC 9112 6.3), but a proxy before us
            # may have read the Content-Length: refuse and close.
            return _json(
                400, {"error": "Content-Length and Transfer-Encoding together"}, "bad", close=True
            )
        if method != "POST" and (chunked or length):
            return _json(400, {"error": f"a {method} request carries no body"}, "bad", close=True)
        if self.in_progress >= self.limits.max_requests:
            return _json(
                503,
                {"error": "the console is busy (too many requests in progress)"},
                "busy",
                (("Retry-After", "1"),),
            )
        self.in_progress += 1
        try:
            body = b""
            if method == "POST":
                got = await self._body(receive, length)
                if isinstance(got, _Reply):
                    return got
                body = got
            raw_path = scope["raw_path"].decode("ascii")
            qs = scope["query_string"].decode("ascii")
            req = _Request(
                method,
                raw_path,
                raw_path + ("?" + qs if qs else ""),
                parse_qs(qs, max_num_fields=20),
                headers,
                body,
                (scope.get("client") or ("?", 0))[0],
                scope.get("scheme") == "https" or self.limits.behind_tls,
            )
            return await self._route(req)
        except (UnicodeDecodeError, ValueError) as exc:
            return _json(400, {"error": f"bad request: {exc}"[:300]}, "bad")
        finally:
            self.in_progress -= 1

    async def _body(self, receive: Receive, length: int) -> bytes | _Reply:
        limit = self.limits.max_body_bytes
        too_large = _json(
            413, {"error": f"the body must be at most {limit} bytes"}, "bad", close=True
        )
        if length > limit:
            return too_large  # never read: the connection closes after the reply
        chunks: list[bytes] = []
        size = 0

        async def read() -> bytes | _Reply:
            nonlocal size
            while True:
                msg = await receive()
                if msg["type"] == "http.disconnect":
                    return _json(400, {"error": "the client went away"}, "bad", close=True)
                chunk = msg.get("body", b"")
                size += len(chunk)
                if size > limit:
                    return too_large
                chunks.append(chunk)
                if not msg.get("more_body", False):
                    return b"".join(chunks)

        try:
            return await asyncio.wait_for(read(), self.limits.body_s)
        except TimeoutError:
            return _json(
                408,
                {"error": f"the body did not arrive within {self.limits.body_s:g} s"},
                "bad",
                close=True,
            )

    async def _run(self, fn: Callable[..., _Reply], *args: Any) -> _Reply:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool, partial(fn, *args))

    # -- routing ---------------------------------------------------------------

    async def _route(self, req: _Request) -> _Reply:
        if req.method == "POST":
            return await self._run(self._post, req)
        path = req.path
        if path.startswith("/api/w/"):
            raw, _, tail = path[len("/api/w/") :].partition("/")
            if tail == "timeline":
                return await self._api_timeline(raw)
            return await self._run(self._api_workflow, raw, tail)
        if path.startswith("/w/"):
            return await self._workflow(req, path[len("/w/") :])
        return await self._run(self._get, req)

    def _get(self, req: _Request) -> _Reply:
        console = self.console
        q = req.query
        path = req.path
        if path == "/":
            chrome = self._chrome(req, req.target)
            page = index_page(
                chrome,
                prefix=q.get("prefix", [""])[0],
                severity=q.get("severity", [""])[0],
                page=_int(q.get("page", ["1"])[0]),
                processor=self._processor_banner(),
            )
            return _html(200, page, "index", chrome.nonce)
        if path == "/api/workflows":
            return _json(200, self._list(q), "api_workflows")
        if path == "/api/processor":
            return _json(200, self._processor(), "api_processor")
        if path == "/metrics":
            view = console.view
            console.metrics.workflows.set(len(view))
            console.metrics.refused.set(view.refused)
            console.metrics.bytes.set(view.used_bytes())
            return _Reply(200, console.metrics.exposition(), CONTENT_TYPE_LATEST, "metrics")
        if path == "/health":
            return _Reply(200, b"ok\n", "text/plain", "health")
        if path == "/api" or path.startswith("/api/"):
            # An API client gets JSON, not the HTML page.
            return _json(404, {"error": "no such route"}, "other")
        chrome = self._chrome(req, "/")
        return _html(404, message_page(chrome, "Not found", "No such page."), "other", chrome.nonce)

    def _processor(self) -> dict[str, Any]:
        """The processor's progress as the last look saw it (``watched``
        false: the console does not watch it)."""
        watch = self.console.processor
        if watch is None:
            return {"watched": False}
        return {
            "watched": True,
            "group": watch.group,
            "stall_after_s": watch.stall_after,
            **watch.state.to_dict(),
        }

    def _processor_banner(self) -> dict[str, Any] | None:
        """What the list page's processor banner says (None: nothing)."""
        watch = self.console.processor
        if watch is None or watch.state.message is None:
            return None
        return {"message": watch.state.message, "stalled": watch.state.stalled}

    def _chrome(self, req: _Request, path: str) -> Chrome:
        auth = self.console.auth
        mode = (
            "read-only"
            if not auth.enabled
            else "verify"
            if auth.has_session(req.headers)
            else "login"
        )
        return Chrome(secrets.token_urlsafe(16), mode, tuple(self.console.errors()), path)

    def _key(self, raw: str) -> str:
        """The workflow key a path segment names. ``~<sha256>`` names only a
        key whose own link has that form (a long one), so it cannot alias a
        short key; any other segment is the key itself, percent-decoded."""
        if raw.startswith("~") and _HEX64.fullmatch(raw[1:]):
            digest = raw[1:]
            for k in self.console.view.all_keys():
                if (
                    len(k) >= _MIN_HASHED_KEY
                    and workflow_href(k) == "/w/" + raw
                    and hashlib.sha256(k.encode()).hexdigest() == digest
                ):
                    return k
        return unquote(raw, errors="strict")

    def _list(self, q: dict[str, list[str]]) -> dict[str, Any]:
        console = self.console
        view = console.view
        sev = q.get("severity", [""])[0] or None
        p = view.page(
            prefix=q.get("prefix", [""])[0], min_severity=sev, page=_int(q.get("page", ["1"])[0])
        )
        return {
            "workflows": p.rows,
            "total": p.total,
            "page": p.page,
            "pages": p.pages,
            "page_size": PAGE_SIZE,
            "version": p.version,
            "held": len(view),
            "refused": view.refused,
            "invalid_records": view.invalid,
            "read_only": not console.auth.enabled,
            "errors": console.errors(),
            "processor": self._processor_banner(),
        }

    def _api_workflow(self, raw: str, tail: str) -> _Reply:
        data = self.console.view.workflow(self._key(raw))
        if data is None:
            return _json(404, {"error": "no such workflow"}, "api_workflow")
        if tail != "":
            return _json(404, {"error": "no such route"}, "api_workflow")
        return _json(200, data, "api_workflow")

    def _held(self, raw: str) -> str | None:
        key = self._key(raw)
        return key if self.console.view.workflow(key) is not None else None

    async def _api_timeline(self, raw: str) -> _Reply:
        loop = asyncio.get_running_loop()
        key = await loop.run_in_executor(self.pool, self._held, raw)
        if key is None:
            # Only keys the console holds are replayed: any other would be a
            # free scan of the events topic for whoever asks.
            return _json(404, {"error": "no such workflow"}, "api_timeline")
        try:
            tl = await self.gate.get(key)
        except FencewatchError as exc:
            return _json(502, {"error": f"the events could not be read: {exc}"}, "api_timeline")
        if tl is None:
            return self._busy()
        return await self._run(lambda: _json(200, tl.to_dict(), "api_timeline"))

    def _busy(self) -> _Reply:
        self.console.metrics.replays_refused.inc()
        return _json(
            503,
            {
                "error": f"{self.gate.concurrency} timeline replays are running (the bound); "
                "try again shortly"
            },
            "api_timeline",
            (("Retry-After", "2"),),
        )

    async def _workflow(self, req: _Request, raw: str) -> _Reply:
        loop = asyncio.get_running_loop()
        chrome = self._chrome(req, req.target)
        key = await loop.run_in_executor(self.pool, self._held, raw)
        if key is None:
            return await self._run(self._no_workflow, chrome, raw)
        tl: Timeline | None = None
        problem: str | None = None
        try:
            tl = await self.gate.get(key)
        except FencewatchError as exc:
            problem = f"The events could not be read: {exc}"
        else:
            if tl is None:
                self.console.metrics.replays_refused.inc()
                problem = (
                    f"The timeline is not drawn: {self.gate.concurrency} replays of the events "
                    "topic are running (the console's bound). Reload in a few seconds."
                )
        return await self._run(self._workflow_page, req, chrome, key, tl, problem)

    def _no_workflow(self, chrome: Chrome, raw: str) -> _Reply:
        try:
            key: str | None = self._key(raw)
        except (UnicodeDecodeError, ValueError):
            key = None
        text = (
            "The console holds no workflow with this key."
            if key is None
            else f"The console holds no workflow {key!r}."
        )
        page = message_page(chrome, "No such workflow", text)
        return _html(404, page, "workflow", chrome.nonce)

    def _workflow_page(
        self, req: _Request, chrome: Chrome, key: str, tl: Timeline | None, problem: str | None
    ) -> _Reply:
        data = self.console.view.workflow(key)
        if data is None:  # dropped from the view while the replay ran
            return self._no_workflow(chrome, quote(key, safe=""))
        findings = _findings(data)
        cleared = {f["finding_id"] for f in (data["status"] or {}).get("cleared") or []}
        if tl is None:
            html, note = "", f"<p class='banner err'>{_esc(problem or '')}</p>"
        else:
            html, note = draw(tl, findings, cleared), _timeline_note(tl)
        published = req.query.get("published", [None])[0]
        notice = (
            f"Published outcome_verified (event {published}). The finding shows as cleared once "
            "the processor has handled it (and only if the stale worker was fenced, SPEC §4)."
            if published
            else None
        )
        page = workflow_page(chrome, key, data, html, note, notice)
        return _html(200, page, "workflow", chrome.nonce)

    # -- POST ------------------------------------------------------------------

    def _post(self, req: _Request) -> _Reply:
        console = self.console
        path = req.path
        if path == "/login":
            return self._login(req)
        if path == "/logout":
            return self._logout(req)
        decision = console.auth.check_post(req.headers)
        if not decision.allowed:
            console.metrics.verifications.labels(result="refused").inc()
            return _json(decision.code, {"error": decision.reason}, "verify")
        if path == "/api/verify":
            doc = orjson.loads(req.body or b"{}")
            if not isinstance(doc, dict):
                raise ValueError("the body must be a JSON object")
            key = doc.get("workflow_key")
            fields = (key, doc.get("finding_id"), doc.get("by"), doc.get("note"))
            return self._verify(*fields, form=False)
        if path.startswith("/w/") and path.endswith("/verify"):
            form = parse_qs(req.body.decode(), max_num_fields=10)
            return self._verify(
                self._key(path[len("/w/") : -len("/verify")]),
                form.get("finding_id", [None])[0],
                form.get("by", [None])[0],
                form.get("note", [None])[0],
                form=True,
            )
        return _json(404, {"error": "no such route"}, "verify")

    def _login(self, req: _Request) -> _Reply:
        auth = self.console.auth
        form = parse_qs(req.body.decode(), max_num_fields=10)
        target = safe_next(form.get("next", ["/"])[0])
        if not auth.enabled:
            return _json(403, {"error": "this console is read-only (no token)"}, "login")
        if auth.origin_ok(req.headers) is False:
            return _json(403, {"error": "the request's Origin is not this console"}, "login")
        wait = self.logins.take(req.client)
        if wait > 0:
            return _json(
                429,
                {"error": f"too many login attempts: try again in {math.ceil(wait)} s"},
                "login",
                (("Retry-After", str(math.ceil(wait))),),
            )
        session = auth.login(form.get("token", [""])[0])
        if session is None:
            return _json(401, {"error": "wrong token"}, "login")
        cookie = auth.set_cookie(session, secure=req.secure)
        return _Reply(
            303, b"", "text/plain", "login", None, (("Location", target), ("Set-Cookie", cookie))
        )

    def _logout(self, req: _Request) -> _Reply:
        auth = self.console.auth
        if auth.origin_ok(req.headers) is False:
            return _json(403, {"error": "the request's Origin is not this console"}, "logout")
        auth.logout(req.headers)
        cookie = auth.clear_cookie(secure=req.secure)
        return _Reply(
            303, b"", "text/plain", "logout", None, (("Location", "/"), ("Set-Cookie", cookie))
        )

    def _verify(self, key: object, fid: object, by: object, note: object, *, form: bool) -> _Reply:
        console = self.console
        metrics = console.metrics
        if not isinstance(key, str) or not isinstance(fid, str):
            raise ValueError("workflow_key and finding_id are required")
        if not isinstance(by, str) or not by.strip():
            metrics.verifications.labels(result="refused").inc()
            return _json(
                400, {"error": "by: the name of the person who verified is required"}, "verify"
            )
        if note is not None and not isinstance(note, str):
            raise ValueError("note must be a string")
        data = console.view.workflow(key)
        finding = _latest(data, fid) if data is not None else None
        if data is None or finding is None:
            return _json(404, {"error": "no such finding on this workflow"}, "verify")
        if finding.get("kind") not in VERIFIABLE or not finding.get("effect_key"):
            return _json(
                400,
                {"error": "only stale_commit and conflicting_commit findings are verified here"},
                "verify",
            )
        epoch = (data["status"] or {}).get("current_epoch")
        if not isinstance(epoch, int):
            return _json(409, {"error": "the workflow has no current epoch yet"}, "verify")
        try:
            event_id = console.verify(
                key, str(finding["effect_key"]), by.strip(), epoch, note or None
            )
        except InvalidEvent as exc:
            metrics.verifications.labels(result="refused").inc()
            return _json(400, {"error": f"the event would be invalid: {exc}"}, "verify")
        except FencewatchError as exc:
            metrics.verifications.labels(result="failed").inc()
            return _json(502, {"error": str(exc)}, "verify")
        metrics.verifications.labels(result="published").inc()
        if form:
            where = f"{workflow_href(key)}?published={quote(event_id)}"
            return _Reply(303, b"", "text/plain", "verify", None, (("Location", where),))
        return _json(200, {"published": event_id, "epoch": epoch}, "verify")


def _int(text: str, default: int = 1) -> int:
    try:
        return int(text)
    except ValueError:
        return default


def _esc(text: str) -> str:
    from html import escape

    return escape(text, quote=True)


def _latest(data: dict[str, Any], fid: str) -> dict[str, Any] | None:
    for f in data["findings"]:
        if f["finding_id"] == fid:
            revs: list[dict[str, Any]] = f["revisions"]
            return revs[-1]
    return None


def _findings(data: dict[str, Any]) -> list[Finding]:
    out = []
    for f in data["findings"]:
        try:
            out.append(Finding.from_dict(f["revisions"][-1]))
        except (KeyError, TypeError, ValueError):
            continue  # a trimmed record: listed below, not drawn
    return out


def _timeline_note(tl: Timeline) -> str:
    r = tl.read
    parts = [
        f"Replayed {len(r.records):,} of this workflow's events from partition"
        f"{'s' if len(r.partitions) > 1 else ''} {', '.join(map(str, r.partitions))} "
        "of the events topic."
    ]
    if r.matched > len(r.records):
        parts.append(
            f" Only the last {len(r.records):,} events are shown ({r.matched:,} were read)."
        )
    if r.scan_cut:
        parts.append(" Older records of the partition were not read (the scan bound).")
    cls = "banner partial" if r.truncated else "note muted"
    return f"<p class='{cls}' id='replay-note'>{_esc(''.join(parts))}</p>"
