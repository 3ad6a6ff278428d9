"""The console's HTTP server: the standard library's ThreadingHTTPServer
(one thread per request; the view is shared under its lock).

Routes: ``/`` and ``/w/<key>`` (HTML), ``/api/workflows``, ``/api/w/<key>``
and ``/api/w/<key>/timeline`` (JSON), ``/metrics``, ``/health``; POST
``/login``, ``/logout``, ``/w/<key>/verify`` (a form) and ``/api/verify``
(JSON). Keys in paths are percent-encoded whole (``/`` too); a key too long
for a request line is named ``~<sha256 hex>``.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

import orjson

from streams.console.auth import Auth
from streams.console.metrics import CONTENT_TYPE_LATEST, ConsoleMetrics
from streams.console.pages import (
    VERIFIABLE,
    Chrome,
    index_page,
    message_page,
    workflow_href,
    workflow_page,
)
from streams.console.timeline import Timeline, draw
from streams.console.view import PAGE_SIZE, ConsoleView
from streams.core.findings import Finding
from streams.core.validate import InvalidEvent
from streams.errors import FencewatchError

__all__ = ["Console", "ConsoleServer"]

log = logging.getLogger(__name__)
_MAX_BODY = 16 * 1024


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


class _Handler(BaseHTTPRequestHandler):
    server: ConsoleServer
    protocol_version = "HTTP/1.1"

    # -- plumbing --------------------------------------------------------------

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("console %s " + format, self.address_string(), *args)

    def _send(
        self,
        code: int,
        body: bytes,
        ctype: str,
        route: str,
        *,
        nonce: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "same-origin")
        self.send_header("X-Frame-Options", "DENY")
        script = f"'nonce-{nonce}'" if nonce else "'none'"
        # Styles: inline (the timeline positions its marks with style
        # attributes, which a nonce would forbid); scripts: only the page's own.
        style = "'unsafe-inline'" if nonce else "'none'"
        self.send_header(
            "Content-Security-Policy",
            f"default-src 'none'; script-src {script}; style-src {style}; connect-src 'self'; "
            "img-src 'self' data:; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
        )
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.server.console.metrics.requests.labels(route=route, code=str(code)).inc()

    def _json(self, code: int, doc: Any, route: str, headers: dict[str, str] | None = None) -> None:
        self._send(code, orjson.dumps(doc), "application/json", route, headers=headers)

    def _html(self, code: int, page: str, route: str, nonce: str) -> None:
        self._send(code, page.encode(), "text/html; charset=utf-8", route, nonce=nonce)

    def _chrome(self, path: str) -> Chrome:
        auth = self.server.console.auth
        mode = (
            "read-only"
            if not auth.enabled
            else "verify"
            if auth.has_session(self.headers)
            else "login"
        )
        return Chrome(secrets.token_urlsafe(16), mode, tuple(self.server.console.errors()), path)

    def _key(self, raw: str) -> str | None:
        """The workflow key a path segment names (None: the view has no such digest)."""
        if raw.startswith("~"):
            digest = raw[1:]
            for k in self.server.console.view.all_keys():
                if hashlib.sha256(k.encode()).hexdigest() == digest:
                    return k
            return None
        return unquote(raw, errors="strict")

    # -- GET -------------------------------------------------------------------

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        try:
            self._get()
        except (UnicodeDecodeError, ValueError) as exc:
            self._json(400, {"error": f"bad request: {exc}"[:300]}, "bad")

    def _get(self) -> None:
        url = urlsplit(self.path)
        q = parse_qs(url.query, max_num_fields=20)
        path = url.path
        console = self.server.console
        if path == "/":
            chrome = self._chrome(self.path)
            page = index_page(
                chrome,
                prefix=q.get("prefix", [""])[0],
                severity=q.get("severity", [""])[0],
                page=_int(q.get("page", ["1"])[0]),
            )
            self._html(200, page, "index", chrome.nonce)
        elif path == "/api/workflows":
            self._json(200, self._list(q), "api_workflows")
        elif path.startswith("/api/w/"):
            rest = path[len("/api/w/") :]
            raw, _, tail = rest.partition("/")
            key = self._key(raw)
            data = console.view.workflow(key) if key is not None else None
            if key is None or (data is None and tail != "timeline"):
                self._json(404, {"error": "no such workflow"}, "api_workflow")
            elif tail == "timeline":
                self._json(200, self._timeline(key).to_dict(), "api_timeline")
            elif tail == "":
                self._json(200, data, "api_workflow")
            else:
                self._json(404, {"error": "no such route"}, "api_workflow")
        elif path.startswith("/w/"):
            self._workflow(path[len("/w/") :], q)
        elif path == "/metrics":
            view = console.view
            console.metrics.workflows.set(len(view))
            console.metrics.refused.set(view.refused)
            console.metrics.bytes.set(view.used_bytes())
            self._send(200, console.metrics.exposition(), CONTENT_TYPE_LATEST, "metrics")
        elif path == "/health":
            self._send(200, b"ok\n", "text/plain", "health")
        else:
            chrome = self._chrome("/")
            self._html(
                404, message_page(chrome, "Not found", "No such page."), "other", chrome.nonce
            )

    def _list(self, q: dict[str, list[str]]) -> dict[str, Any]:
        console = self.server.console
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
        }

    def _timeline(self, key: str) -> Timeline:
        self.server.console.metrics.replays.inc()
        return self.server.console.replay(key)

    def _workflow(self, raw: str, q: dict[str, list[str]]) -> None:
        console = self.server.console
        chrome = self._chrome(self.path)
        key = self._key(raw)
        data = console.view.workflow(key) if key is not None else None
        if key is None or data is None:
            text = (
                "The console holds no workflow with this key."
                if key is None
                else (f"The console holds no workflow {key!r}.")
            )
            self._html(
                404, message_page(chrome, "No such workflow", text), "workflow", chrome.nonce
            )
            return
        findings = _findings(data)
        cleared = {f["finding_id"] for f in (data["status"] or {}).get("cleared") or []}
        try:
            tl = self._timeline(key)
        except FencewatchError as exc:
            html, note = (
                "",
                f"<p class='banner err'>The events could not be read: {_esc(str(exc))}</p>",
            )
        else:
            html = draw(tl, findings, cleared)
            note = _timeline_note(tl)
        published = q.get("published", [None])[0]
        notice = (
            f"Published outcome_verified (event {published}). The finding shows as cleared once "
            "the processor has handled it (and only if the stale worker was fenced, SPEC §4)."
            if published
            else None
        )
        page = workflow_page(chrome, key, data, html, note, notice)
        self._html(200, page, "workflow", chrome.nonce)

    # -- POST ------------------------------------------------------------------

    def do_POST(self) -> None:
        try:
            self._post()
        except (UnicodeDecodeError, ValueError) as exc:
            self._json(400, {"error": f"bad request: {exc}"[:300]}, "bad")

    def _body(self) -> bytes:
        n = _int(self.headers.get("Content-Length") or "0", default=-1)
        if n < 0 or n > _MAX_BODY:
            raise ValueError(f"Content-Length must be 0..{_MAX_BODY}")
        return self.rfile.read(n)

    def _post(self) -> None:
        console = self.server.console
        path = urlsplit(self.path).path
        body = self._body()
        if path == "/login":
            self._login(body)
            return
        if path == "/logout":
            self._send(
                303,
                b"",
                "text/plain",
                "logout",
                headers={"Location": "/", "Set-Cookie": console.auth.clear_cookie()},
            )
            return
        decision = console.auth.check_post(self.headers)
        if not decision.allowed:
            console.metrics.verifications.labels(result="refused").inc()
            self._json(decision.code, {"error": decision.reason}, "verify")
            return
        if path == "/api/verify":
            doc = orjson.loads(body or b"{}")
            if not isinstance(doc, dict):
                raise ValueError("the body must be a JSON object")
            key = doc.get("workflow_key")
            fields = (key, doc.get("finding_id"), doc.get("by"), doc.get("note"))
            self._verify(*fields, form=False)
        elif path.startswith("/w/") and path.endswith("/verify"):
            form = parse_qs(body.decode(), max_num_fields=10)
            key = self._key(path[len("/w/") : -len("/verify")])
            self._verify(
                key,
                form.get("finding_id", [None])[0],
                form.get("by", [None])[0],
                form.get("note", [None])[0],
                form=True,
            )
        else:
            self._json(404, {"error": "no such route"}, "verify")

    def _login(self, body: bytes) -> None:
        auth = self.server.console.auth
        form = parse_qs(body.decode(), max_num_fields=10)
        target = form.get("next", ["/"])[0]
        if not target.startswith("/") or target.startswith("//"):
            target = "/"
        if not auth.enabled:
            self._json(403, {"error": "this console is read-only (no token)"}, "login")
        elif auth.origin_ok(self.headers) is False:
            self._json(403, {"error": "the request's Origin is not this console"}, "login")
        elif not auth.token_matches(form.get("token", [""])[0]):
            self._json(401, {"error": "wrong token"}, "login")
        else:
            self._send(
                303,
                b"",
                "text/plain",
                "login",
                headers={"Location": target, "Set-Cookie": auth.set_cookie()},
            )

    def _verify(self, key: object, fid: object, by: object, note: object, *, form: bool) -> None:
        console = self.server.console
        metrics = console.metrics
        if not isinstance(key, str) or not isinstance(fid, str):
            raise ValueError("workflow_key and finding_id are required")
        if not isinstance(by, str) or not by.strip():
            metrics.verifications.labels(result="refused").inc()
            self._json(
                400, {"error": "by: the name of the person who verified is required"}, "verify"
            )
            return
        if note is not None and not isinstance(note, str):
            raise ValueError("note must be a string")
        data = console.view.workflow(key)
        finding = _latest(data, fid) if data is not None else None
        if data is None or finding is None:
            self._json(404, {"error": "no such finding on this workflow"}, "verify")
            return
        if finding.get("kind") not in VERIFIABLE or not finding.get("effect_key"):
            self._json(
                400,
                {"error": "only stale_commit and conflicting_commit findings are verified here"},
                "verify",
            )
            return
        epoch = (data["status"] or {}).get("current_epoch")
        if not isinstance(epoch, int):
            self._json(409, {"error": "the workflow has no current epoch yet"}, "verify")
            return
        try:
            event_id = console.verify(
                key, str(finding["effect_key"]), by.strip(), epoch, note or None
            )
        except InvalidEvent as exc:
            metrics.verifications.labels(result="refused").inc()
            self._json(400, {"error": f"the event would be invalid: {exc}"}, "verify")
            return
        except FencewatchError as exc:
            metrics.verifications.labels(result="failed").inc()
            self._json(502, {"error": str(exc)}, "verify")
            return
        metrics.verifications.labels(result="published").inc()
        if form:
            where = f"{workflow_href(key)}?published={quote(event_id)}"
            self._send(303, b"", "text/plain", "verify", headers={"Location": where})
        else:
            self._json(200, {"published": event_id, "epoch": epoch}, "verify")


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
        parts.append(f" Only the last {tl.limit:,} events are shown ({r.matched:,} were read).")
    if r.scan_cut:
        parts.append(" Older records of the partition were not read (the scan bound).")
    cls = "banner partial" if r.truncated else "note muted"
    return f"<p class='{cls}' id='replay-note'>{_esc(''.join(parts))}</p>"


class ConsoleServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], console: Console) -> None:
        self.console = console
        super().__init__(address, _Handler)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> None:
        """Serve from a daemon thread (tests; the CLI serves in its own)."""
        self._thread = threading.Thread(target=self.serve_forever, name="console-http", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        if self._thread is not None:
            self._thread.join(10)
