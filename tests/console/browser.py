"""A live headless Chromium for the console's tests, driven over the DevTools
protocol on a pipe (``--remote-debugging-pipe``: JSON messages separated by
NUL on file descriptors 3 and 4, so no WebSocket client is needed). The
binary is the one the report's harness finds (tests/report/chromium.py).

Waiting is on the page's own events: :meth:`Browser.wait_for` evaluates a
promise in the page that resolves when a condition holds (checked on every
DOM mutation), so a test never sleeps to synchronise.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

from tests.report.chromium import chromium

__all__ = ["Browser", "BrowserError"]


def _wire(read_end: int, write_end: int) -> None:
    """In the child: its command pipe on fd 3 and reply pipe on fd 4 (moved
    above 9 first, in case either already sits on 3 or 4)."""
    import fcntl

    r = fcntl.fcntl(read_end, fcntl.F_DUPFD, 10)
    w = fcntl.fcntl(write_end, fcntl.F_DUPFD, 10)
    os.dup2(r, 3)
    os.dup2(w, 4)


class BrowserError(RuntimeError):
    """The browser answered with an error, or a page script threw."""


class Browser:
    def __init__(self, *, width: int = 1400, height: int = 1000) -> None:
        self._profile = tempfile.TemporaryDirectory(prefix="fw-console-chromium-")
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        # The child reads commands on fd 3 and writes replies on fd 4.
        self._proc = subprocess.Popen(
            [
                chromium(),
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-extensions",
                "--hide-scrollbars",
                f"--window-size={width},{height}",
                f"--user-data-dir={self._profile.name}",
                "--remote-debugging-pipe",
                "about:blank",
            ],
            pass_fds=(3, 4),
            preexec_fn=lambda: _wire(to_child_r, from_child_w),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_child_r)
        os.close(from_child_w)
        self._next_id = 0
        self._buf = b""
        self._lock = threading.Lock()
        self.console_errors: list[str] = []
        #: Events of the page seen since the last navigation began.
        self._events: list[str] = []
        target = self._call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self._session = self._call("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        self.call("Page.enable")
        self.call("Runtime.enable")
        self.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )

    # -- transport -------------------------------------------------------------

    def _send(self, msg: dict[str, Any]) -> int:
        self._next_id += 1
        msg["id"] = self._next_id
        os.write(self._to_child, json.dumps(msg).encode() + b"\0")
        return self._next_id

    def _read(self) -> dict[str, Any]:
        while b"\0" not in self._buf:
            chunk = os.read(self._from_child, 1 << 20)
            if not chunk:
                raise BrowserError("chromium closed the pipe")
            self._buf += chunk
        raw, _, self._buf = self._buf.partition(b"\0")
        doc: dict[str, Any] = json.loads(raw)
        return doc

    def _call(
        self, method: str, params: dict[str, Any] | None = None, session: str | None = None
    ) -> dict[str, Any]:
        with self._lock:
            msg: dict[str, Any] = {"method": method, "params": params or {}}
            if session:
                msg["sessionId"] = session
            want = self._send(msg)
            while True:
                doc = self._read()
                if doc.get("method") == "Runtime.exceptionThrown":
                    self.console_errors.append(json.dumps(doc["params"])[:500])
                if "method" in doc:
                    self._events.append(doc["method"])
                if doc.get("id") == want:
                    if "error" in doc:
                        raise BrowserError(f"{method}: {doc['error']}")
                    result: dict[str, Any] = doc.get("result", {})
                    return result

    def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return self._call(method, params, self._session)

    # -- pages -------------------------------------------------------------------

    def evaluate(self, expression: str, *, timeout_s: float = 30.0) -> Any:
        """The value of ``expression`` (awaited when it is a promise)."""
        r = self.call(
            "Runtime.evaluate",
            {
                "expression": expression,
                "awaitPromise": True,
                "returnByValue": True,
                "timeout": int(timeout_s * 1000),
            },
        )
        if "exceptionDetails" in r:
            raise BrowserError(json.dumps(r["exceptionDetails"])[:800])
        return r["result"].get("value")

    def goto(self, url: str) -> None:
        """Navigate and wait for the load event."""
        self.navigate_by(f"location.href = {json.dumps(url)}")

    def navigate_by(self, script: str) -> None:
        """Run ``script`` (a click, a form submission) and wait for the page
        it leads to to load."""
        self._events.clear()
        self.call("Runtime.evaluate", {"expression": script})
        with self._lock:
            while "Page.loadEventFired" not in self._events:
                doc = self._read()
                if "method" in doc:
                    self._events.append(doc["method"])

    def wait_for(self, condition: str, *, timeout_s: float = 30.0) -> Any:
        """Resolve when the JS ``condition`` is truthy (re-checked on each
        DOM mutation); its value. BrowserError when ``timeout_s`` passes."""
        expr = (
            "new Promise(function(resolve, reject){"
            f" function check(){{ var v = ({condition});"
            " if (v) { obs.disconnect(); resolve(v); } }"
            " var obs = new MutationObserver(check);"
            " obs.observe(document, {childList: true, subtree: true, characterData: true,"
            " attributes: true});"
            f" setTimeout(function(){{ obs.disconnect(); reject(new Error('timeout: ' +"
            f" {json.dumps(condition)})); }}, {int(timeout_s * 1000)});"
            " check(); })"
        )
        return self.evaluate(expr, timeout_s=timeout_s + 5)

    def screenshot(self, png: Path, *, full_height: int | None = None) -> None:
        params: dict[str, Any] = {"format": "png"}
        if full_height is not None:
            params["clip"] = {"x": 0, "y": 0, "width": 1400, "height": full_height, "scale": 1}
            params["captureBeyondViewport"] = True
        data = self.call("Page.captureScreenshot", params)["data"]
        png.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        with contextlib.suppress(BrowserError, OSError):
            self._call("Browser.close")
        try:
            self._proc.wait(15)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(5)
        os.close(self._to_child)
        os.close(self._from_child)
        self._profile.cleanup()
