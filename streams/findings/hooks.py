"""Alert hooks: hand each finding revision to a command or a webhook.

Sender threads ("lanes", one per target: one connection each) take
deliveries from bounded in-flight queues. A finding always goes to the same
lane (by its id), in order, so a receiver sees a finding's revisions in
increasing order; different findings travel in parallel, so one slow
request does not hold up the rest. Each delivery is tried up to
``RetryPolicy.max_attempts`` times with exponential backoff.
A delivery that still fails, or fails permanently (a 4xx answer other than
408/429), is appended to the dead-letter file (JSON Lines, fsync'ed) and
counts as handled. Only then is its position acknowledged to the consumer,
so a killed follower resends at most what was in flight or uncommitted.

Webhook: ``POST`` of the finding JSON with ``Content-Type: application/json``
and ``Idempotency-Key: <finding_id>/<revision>``; 2xx is success; 5xx, 408,
429 and connection errors/timeouts are retried. With ``pipeline`` > 1 a lane
sends the first attempts of what it has queued as pipelined HTTP/1.1
requests (at most one revision of a finding per pipeline, so a retried
failure is never overtaken by its finding's next revision; findings of one
lane may then arrive out of order), and stops pipelining to a server that
closes or stops answering part-way.

Command: ``/bin/sh -c CMD`` with the finding JSON on stdin and
``FENCEWATCH_FINDING_ID``, ``_REVISION``, ``_KIND``, ``_SEVERITY``,
``_WORKFLOW_KEY``, ``_PREVIOUS_REVISION`` (empty unless an update) and
``_IDEMPOTENCY_KEY`` in its environment; exit 0 is success, anything else
(or exceeding the timeout) is retried.
"""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import threading
import time
import urllib.parse
import zlib
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Protocol

import orjson

from streams.errors import DeliveryFailed, FencewatchError
from streams.findings.consumer import Delivery
from streams.findings.select import encode_finding

__all__ = [
    "DeadLetterFile",
    "DeliveryFailed",
    "ExecTarget",
    "HookSender",
    "HookTarget",
    "RetryPolicy",
    "WebhookTarget",
]


class HookTarget(Protocol):
    """Where findings go. ``send`` returns on success, raises DeliveryFailed."""

    def send(self, delivery: Delivery) -> None: ...


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_attempts: int = 5
    base_delay_s: float = 0.2
    max_delay_s: float = 10.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        if self.base_delay_s < 0 or self.max_delay_s < self.base_delay_s:
            raise ValueError("need 0 <= base delay <= max delay")

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        return float(min(self.max_delay_s, self.base_delay_s * 2 ** (attempt - 1)))


def _body(delivery: Delivery) -> bytes:
    return encode_finding(delivery.finding)


#: A response head (status line and headers) longer than this is refused.
_MAX_HEAD = 64 * 1024
#: Pipelined requests stop at about this many bytes per write: what is sent
#: before any answer is read must fit in the socket buffers, or a server that
#: stops reading while its answers are not read would stall both sides.
_PIPELINE_BYTES = 64 * 1024


class _BadResponse(Exception):
    """The server's answer is not HTTP/1.x as understood here."""


class _HttpConnection:
    """One HTTP/1.1 client connection, kept alive between requests: a request
    goes out in one write, the answer is read with the small parser below.

    Why not :mod:`http.client`: at 2,000 findings/s its per-request cost
    (~170 CPU µs: the headers and the body in two writes, so the receiver
    wakes twice, and the response headers parsed by :mod:`email`) made the
    follower spend a core on posting, on the host that also runs the worker;
    this costs ~20 µs (bench/findings_webhook.py, docs/operate.md)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buf = bytearray()

    def close(self) -> None:
        self.sock.close()

    def _fill(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionResetError("connection closed by the server")
        self._buf += chunk

    def _until(self, end_mark: bytes, what: str) -> bytes:
        """The buffered bytes up to ``end_mark`` (consumed with it), reading
        more as needed; ``what`` names them when they grow past the bound."""
        while (end := self._buf.find(end_mark)) < 0:
            if len(self._buf) > _MAX_HEAD:
                raise _BadResponse(f"{what} too long")
            self._fill()
        part = bytes(self._buf[:end])
        del self._buf[: end + len(end_mark)]
        return part

    def _head(self) -> bytes:
        return self._until(b"\r\n\r\n", "response head")

    def _line(self) -> bytes:
        return self._until(b"\r\n", "chunk header")

    def _skip(self, n: int) -> None:
        while len(self._buf) < n:
            self._fill()
        del self._buf[:n]

    def _skip_chunked(self) -> None:
        while True:
            digits = self._line().split(b";", 1)[0].strip()
            if not digits or digits.strip(b"0123456789abcdefABCDEF"):
                raise _BadResponse(f"bad chunk size {digits[:20]!r}")
            size = int(digits, 16)
            if size == 0:
                while self._line():  # trailer fields, up to the empty line
                    pass
                return
            self._skip(size + 2)  # the chunk and its CRLF

    def _skip_to_close(self) -> None:
        self._buf.clear()
        while self.sock.recv(65536):
            pass

    def exchange(self, request: bytes) -> tuple[int, bool]:
        """Send ``request``; read the answer. Returns (status, whether the
        server closes the connection after it)."""
        self.sock.sendall(request)
        return self.answer()

    def answer(self) -> tuple[int, bool]:
        """Read the next answer: (status, whether the server closes the
        connection after it)."""
        while True:
            lines = self._head().split(b"\r\n")
            status = lines[0].split(None, 2)
            if len(status) < 2 or not status[0].startswith(b"HTTP/1.") or not status[1].isdigit():
                raise _BadResponse(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
            code = int(status[1])
            fields: dict[bytes, bytes] = {}
            for line in lines[1:]:
                name, sep, value = line.partition(b":")
                if sep:
                    fields[name.strip().lower()] = value.strip().lower()
            if 100 <= code < 200:
                continue  # an interim answer (100 Continue): the final one follows
            tokens = {t.strip() for t in fields.get(b"connection", b"").split(b",")}
            close = b"close" in tokens or (status[0] == b"HTTP/1.0" and b"keep-alive" not in tokens)
            if code in (204, 304):
                return code, close
            if b"chunked" in fields.get(b"transfer-encoding", b""):
                self._skip_chunked()
            elif (length := fields.get(b"content-length")) is not None:
                if not length.isdigit():
                    raise _BadResponse(f"bad Content-Length {length[:20]!r}")
                self._skip(int(length))
            else:  # the body ends with the connection
                self._skip_to_close()
                close = True
            return code, close


class WebhookTarget:
    """POST each finding to ``url`` over one kept-alive connection (the
    sender is one thread), reopened after an error or when the server
    closes it. A failure on a reused connection is tried once more at once on
    a fresh one: the server may have closed an idle connection (a repeat the
    receiver drops by the idempotency key)."""

    def __init__(self, url: str, *, timeout_s: float = 10.0, pipeline: int = 1) -> None:
        if pipeline < 1:
            raise ValueError("pipeline must be >= 1")
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"webhook URL must be http:// or https://HOST..., got {url!r}")
        try:
            port = parts.port
        except ValueError:
            raise ValueError(f"webhook URL has a bad port: {url!r}") from None
        self.url = url
        self.timeout_s = timeout_s
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = port or (443 if self._https else 80)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        host = parts.netloc.rpartition("@")[2]  # as given, without credentials
        if not (target + host).isascii() or any(c in target + host for c in "\r\n "):
            raise ValueError(f"webhook URL has characters a request line cannot carry: {url!r}")
        #: What every request starts with; the per-finding headers follow.
        self._prefix = (
            f"POST {target} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            "User-Agent: fencewatch-findings\r\n"
        ).encode()
        self._conn: _HttpConnection | None = None
        #: Requests :meth:`send_many` sends before reading the answers (1:
        #: one at a time, the default: a retried failure is then never
        #: overtaken by a later finding); set to 1 once the server showed it
        #: does not take pipelined requests.
        self.pipeline = pipeline

    def _connection(self) -> tuple[_HttpConnection, bool]:
        if self._conn is not None:
            return self._conn, True
        sock = socket.create_connection((self._host, self._port), timeout=self.timeout_s)
        try:
            # The request is one write; nothing to gain from waiting to coalesce.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._https:
                sock = ssl.create_default_context().wrap_socket(sock, server_hostname=self._host)
        except BaseException:
            sock.close()
            raise
        self._conn = _HttpConnection(sock)
        return self._conn, False

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _request(self, delivery: Delivery) -> bytes:
        key = delivery.idempotency_key
        if not key.isascii() or "\r" in key or "\n" in key:
            raise DeliveryFailed(
                f"finding id {delivery.finding.finding_id!r} cannot be an Idempotency-Key header",
                retriable=False,
            )
        body = _body(delivery)
        return b"".join(
            (
                self._prefix,
                f"Idempotency-Key: {key}\r\nContent-Length: {len(body)}\r\n\r\n".encode(),
                body,
            )
        )

    def _failed(self, code: int) -> DeliveryFailed:
        retriable = code >= 500 or code in (408, 429)
        return DeliveryFailed(f"{self.url} answered {code}", retriable=retriable)

    def send_many(self, deliveries: Sequence[Delivery]) -> list[DeliveryFailed | None]:
        """The first attempt of several deliveries as pipelined HTTP/1.1
        requests: up to ``pipeline`` requests (and about 64 KiB) in one write,
        then their answers in order (one round trip and a few system calls
        for all, where one request at a time costs a round trip and two
        system calls each, on both sides). Returns the outcome of a prefix of
        ``deliveries`` (None: delivered; else the failed attempt); the rest
        were not answered and are for :meth:`send` (possibly on the server,
        so a receiver may see them twice: the idempotency key tells).

        A server that closes the connection part-way or stops answering
        (one that does not take pipelined requests) turns pipelining off for
        this target: every later delivery goes through :meth:`send`."""
        if self.pipeline <= 1 or len(deliveries) <= 1:
            return []
        outcomes: list[DeliveryFailed | None] = []
        requests: list[bytes] = []
        size = 0
        for d in deliveries[: self.pipeline]:
            try:
                request = self._request(d)
            except DeliveryFailed as exc:
                if requests:
                    break  # send what is built; this one through send()
                return [exc]
            requests.append(request)
            size += len(request)
            if size >= _PIPELINE_BYTES:
                break
        if len(requests) == 1:
            return []
        payload = b"".join(requests)
        for _ in range(2):  # once more on a fresh connection if a reused one died at once
            try:
                conn, reused = self._connection_or_fail()
            except DeliveryFailed as exc:
                return [exc]
            try:
                conn.sock.sendall(payload)
                while len(outcomes) < len(requests):
                    code, close = conn.answer()
                    outcomes.append(None if 200 <= code < 300 else self._failed(code))
                    if close:
                        self.close()
                        if len(outcomes) < len(requests):
                            self.pipeline = 1  # it answers one request per connection
                        return outcomes
                return outcomes
            except (OSError, ValueError, _BadResponse) as exc:  # reset, timeout, garbage
                self.close()
                if reused and not outcomes:
                    continue  # the server may have closed an idle connection
                # Sent, then answered part-way or not at all: perhaps a server
                # that does not take pipelined requests (one that closes
                # with requests unread resets the connection, which can lose
                # the answer it sent). Not pipelined to again.
                self.pipeline = 1
                if outcomes:
                    return outcomes
                reason = getattr(exc, "reason", None) or exc or type(exc).__name__
                return [DeliveryFailed(f"{self.url}: {reason}", retriable=True)]
        return outcomes

    def send(self, delivery: Delivery) -> None:
        request = self._request(delivery)
        while True:
            conn, reused = self._connection_or_fail()
            try:
                code, close = conn.exchange(request)
            except (OSError, ValueError, _BadResponse) as exc:  # reset, timeout, garbage
                self.close()
                if reused:
                    continue
                reason = getattr(exc, "reason", None) or exc or type(exc).__name__
                raise DeliveryFailed(f"{self.url}: {reason}", retriable=True) from None
            if close:
                self.close()
            if 200 <= code < 300:
                return
            raise self._failed(code)

    def _connection_or_fail(self) -> tuple[_HttpConnection, bool]:
        try:
            return self._connection()
        except OSError as exc:  # refused, unreachable, TLS handshake
            reason = getattr(exc, "reason", None) or exc or type(exc).__name__
            raise DeliveryFailed(f"{self.url}: {reason}", retriable=True) from None


class ExecTarget:
    """Run ``command`` through ``/bin/sh -c`` once per finding."""

    def __init__(self, command: str, *, timeout_s: float = 30.0) -> None:
        if not command.strip():
            raise ValueError("the --exec command is empty")
        self.command = command
        self.timeout_s = timeout_s

    @staticmethod
    def missing_program(command: str) -> str | None:
        """The program ``command`` runs first when the shell would not find it
        (``notify-send`` not installed), else None. Asked of ``/bin/sh`` itself
        (``command -v``), with this environment's PATH, so builtins and
        absolute paths count as the hook's shell counts them; a command that
        does not start with a plain word (a subshell, a redirection) is left
        to the shell. Checked at start: otherwise the first delivery only
        finds out after its retries, and says so in the dead letters."""
        import re
        import shlex

        try:
            words = shlex.split(command)
        except ValueError:  # unbalanced quotes: the shell's own error will say it
            return None
        while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0], re.S):
            words.pop(0)  # FOO=bar cmd: the program is cmd
        if not words or not re.fullmatch(r"[A-Za-z0-9_./+@:-]+", words[0]):
            return None
        found = subprocess.run(
            ["/bin/sh", "-c", 'command -v -- "$1" >/dev/null', "sh", words[0]],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        )
        return None if found.returncode == 0 else words[0]

    def send(self, delivery: Delivery) -> None:
        f = delivery.finding
        env = dict(os.environ)
        env.update(
            {
                "FENCEWATCH_FINDING_ID": f.finding_id,
                "FENCEWATCH_REVISION": str(f.revision),
                "FENCEWATCH_KIND": f.kind.value,
                "FENCEWATCH_SEVERITY": f.severity.value,
                "FENCEWATCH_WORKFLOW_KEY": f.workflow_key,
                "FENCEWATCH_PREVIOUS_REVISION": (
                    "" if delivery.previous_revision is None else str(delivery.previous_revision)
                ),
                "FENCEWATCH_IDEMPOTENCY_KEY": delivery.idempotency_key,
            }
        )
        try:
            done = subprocess.run(
                ["/bin/sh", "-c", self.command],
                input=_body(delivery),
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                timeout=self.timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise DeliveryFailed(
                f"command ran longer than {self.timeout_s:g} s", retriable=True
            ) from None
        except OSError as exc:
            raise DeliveryFailed(f"cannot run the command: {exc}", retriable=True) from None
        if done.returncode != 0:
            tail = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:]
            detail = f": {tail[0][:200]}" if tail else ""
            raise DeliveryFailed(f"command exited {done.returncode}{detail}", retriable=True)


class DeadLetterFile:
    """Appends undeliverable findings, one JSON object per line: ``finding``,
    ``idempotency_key``, ``attempts``, ``error``, ``failed_at``. Each line is
    fsync'ed before its position may be committed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh: IO[bytes] | None = None
        self._lock = threading.Lock()  # the lanes share one file

    def append(self, delivery: Delivery, *, attempts: int, error: str) -> None:
        with self._lock:
            self._append(delivery, attempts, error)

    def _append(self, delivery: Delivery, attempts: int, error: str) -> None:
        if self._fh is None:
            self._fh = open(self.path, "ab")  # noqa: SIM115 - closed in close()
        line = orjson.dumps(
            {
                "finding": delivery.finding.to_dict(),
                "idempotency_key": delivery.idempotency_key,
                "attempts": attempts,
                "error": error,
                "failed_at": datetime.now(UTC).isoformat(timespec="milliseconds"),
            }
        )
        self._fh.write(line + b"\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        with self._lock:
            if self._fh is not None:
                self._fh.close()
                self._fh = None


@dataclass(slots=True)
class HookStats:
    delivered: int = 0
    retries: int = 0
    dead_lettered: int = 0

    def __add__(self, other: HookStats) -> HookStats:
        return HookStats(
            self.delivered + other.delivered,
            self.retries + other.retries,
            self.dead_lettered + other.dead_lettered,
        )


class HookSender:
    """The sender threads and their bounded queues: one lane per target
    (``targets``: one, or several of the same kind, e.g. one
    :class:`WebhookTarget` per connection). ``done`` is called (on a sender
    thread, so it must be thread-safe, as :meth:`FindingsConsumer.ack` is)
    for each delivery once it was delivered or dead-lettered.

    The bound: each lane holds at most its share of ``max_in_flight``
    deliveries (queued or being tried); :meth:`submit_batch` blocks while a
    lane it has deliveries for is full, so a slow target holds up the reader,
    never grows memory. A batch is handed to a lane in one step (one lock and
    one wake-up, not one per finding), and a lane takes everything queued
    when it wakes."""

    def __init__(
        self,
        targets: HookTarget | Sequence[HookTarget],
        done: Callable[[Delivery], None],
        *,
        policy: RetryPolicy | None = None,
        dead_letters: DeadLetterFile,
        max_in_flight: int = 100,
    ) -> None:
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be >= 1")
        lanes = list(targets) if isinstance(targets, Sequence) else [targets]
        if not lanes:
            raise ValueError("at least one hook target is needed")
        self.policy = policy or RetryPolicy()
        self.dead_letters = dead_letters
        self._done = done
        self._abort = threading.Event()
        self._stop_now = threading.Event()
        self._failure: BaseException | None = None
        per_lane = max(1, max_in_flight // len(lanes))
        self._lanes = [_Lane(self, t, per_lane, i) for i, t in enumerate(lanes)]

    @property
    def stats(self) -> HookStats:
        total = HookStats()
        for lane in self._lanes:
            total = total + lane.stats
        return total

    @property
    def pending(self) -> int:
        """Deliveries queued or being tried (not yet delivered or dead-lettered)."""
        return sum(lane.count for lane in self._lanes)

    def submit(self, delivery: Delivery, *, stopping: Callable[[], bool] | None = None) -> bool:
        """:meth:`submit_batch` of one delivery."""
        return self.submit_batch([delivery], stopping=stopping)

    def submit_batch(
        self, deliveries: Sequence[Delivery], *, stopping: Callable[[], bool] | None = None
    ) -> bool:
        """Queue each delivery on its finding's lane, in order; blocks while
        a lane's share of ``max_in_flight`` is taken, unless ``stopping()``
        turns true (then returns False: the deliveries not queued yet are not
        acknowledged, so a restart sends them). Raises a sender's fatal error
        (a dead-letter file that cannot be written), if any."""
        self._raise_failure()
        lanes = self._lanes
        n = len(lanes)
        if n == 1:
            per_lane = [list(deliveries)]
        else:
            per_lane = [[] for _ in range(n)]
            for d in deliveries:
                per_lane[zlib.crc32(d.finding.finding_id.encode()) % n].append(d)
        for lane, items in zip(lanes, per_lane, strict=True):
            if items and not lane.put(items, stopping):
                return False
        return True

    def stop_now(self) -> None:
        """Give up the queued deliveries (they stay unacknowledged): a lane
        stops after its current attempt, and :meth:`close` returns at once
        without waiting for a lane still in an attempt. Safe from a signal
        handler (it takes no lock: a lane sees the flag within its idle wait)."""
        self._stop_now.set()
        self._abort.set()

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise FencewatchError(f"alert hook stopped: {self._failure}") from self._failure

    def close(self, *, drain_timeout_s: float = 30.0) -> None:
        """Let the queued deliveries finish (up to ``drain_timeout_s``), then
        stop and close the targets that have a ``close()`` (the webhook's
        connections); what is left is not acknowledged. Raises the fatal
        error, if any."""
        deadline = time.monotonic() + drain_timeout_s
        for lane in self._lanes:
            lane.finish()
        self._join(deadline)
        if not self._stop_now.is_set() and any(lane.thread.is_alive() for lane in self._lanes):
            self._abort.set()
            self._join(time.monotonic() + 5.0)
        for lane in self._lanes:
            if lane.thread.is_alive():  # stopped now, mid-attempt: its target is in use
                continue
            # A target with a connection (WebhookTarget) lets it go: a sender
            # closed in a long-running process must not hold a socket per lane.
            close = getattr(lane.target, "close", None)
            if callable(close):
                close()
        if self._stop_now.is_set():
            return  # a lane may still be appending a dead letter; the process ends
        self.dead_letters.close()
        self._raise_failure()

    def _join(self, deadline: float) -> None:
        # Waits in short slices, so that stop_now() (a second Ctrl-C) ends it.
        for lane in self._lanes:
            while lane.thread.is_alive() and not self._stop_now.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                lane.thread.join(min(0.1, remaining))


#: How long an idle lane waits before looking at the stop flags again
#: (stop_now() sets them from a signal handler, which must not take a lock).
_IDLE_CHECK_S = 0.2


class _Lane:
    """One sender thread, its target and its bounded queue."""

    def __init__(self, sender: HookSender, target: HookTarget, size: int, index: int) -> None:
        self.sender = sender
        self.target = target
        self.stats = HookStats()
        self.capacity = size
        #: Deliveries queued or being tried (at most ``capacity``).
        self.count = 0
        self._queue: deque[Delivery] = deque()
        self._finishing = False
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)
        self._room = threading.Condition(self._lock)
        #: A submitter waits for room (the lane wakes it as deliveries finish).
        self._waiting = False
        self.thread = threading.Thread(
            target=self._loop, name=f"fencewatch-hook-{index}", daemon=True
        )
        self.thread.start()

    def put(self, items: list[Delivery], stopping: Callable[[], bool] | None) -> bool:
        """Queue ``items`` in order, as many at a time as there is room for;
        False if ``stopping()`` turned true first (the rest not queued)."""
        sender = self.sender
        i, n = 0, len(items)
        with self._lock:
            while i < n:
                room = self.capacity - self.count
                if room > 0:
                    take = items[i : i + room]
                    self._queue.extend(take)
                    self.count += len(take)
                    i += len(take)
                    self._work.notify()
                    continue
                if (stopping is not None and stopping()) or sender._abort.is_set():
                    return False
                if sender._failure is not None:
                    break
                self._waiting = True
                self._room.wait(0.2)
                self._waiting = False
        sender._raise_failure()
        return True

    def finish(self) -> None:
        """End the thread once the queue is empty."""
        with self._lock:
            self._finishing = True
            self._work.notify()

    def _take(self) -> list[Delivery] | None:
        """Everything queued (waiting for some), or None when the lane ends."""
        sender = self.sender
        with self._lock:
            while not self._queue:
                if self._finishing or sender._abort.is_set():
                    return None
                self._work.wait(_IDLE_CHECK_S)
            batch = list(self._queue)
            self._queue.clear()
            return batch

    def _loop(self) -> None:
        sender = self.sender
        try:
            send_many = getattr(self.target, "send_many", None)
            while (batch := self._take()) is not None:
                if callable(send_many):
                    done = self._pipelined(batch, send_many)
                else:
                    done = all(self._one(item) for item in batch)
                if not done:
                    return  # aborted: the rest stays unacknowledged (a restart sends it)
        except BaseException as exc:  # reported to the polling thread by submit()/close()
            sender._failure = exc

    def _pipelined(
        self, batch: list[Delivery], send_many: Callable[[list[Delivery]], list[Any]]
    ) -> bool:
        """Deliver ``batch`` with first attempts pipelined (send_many) in
        groups that hold one revision of a finding at most: a failed one is
        retried after the group, so a later revision of it must not be in
        the group (the receiver would see the revisions out of order)."""
        abort = self.sender._abort
        i, n = 0, len(batch)
        while i < n:
            if abort.is_set():
                return False
            ids: set[str] = set()
            j = i
            while j < n and batch[j].finding.finding_id not in ids:
                ids.add(batch[j].finding.finding_id)
                j += 1
            group = batch[i:j]
            outcomes = send_many(group)
            if not outcomes:  # not pipelined: the first one on its own
                if not self._one(group[0]):
                    return False
                i += 1
                continue
            failed: list[tuple[Delivery, DeliveryFailed]] = []
            delivered: list[Delivery] = []
            for d, outcome in zip(group, outcomes, strict=False):
                if outcome is None:
                    delivered.append(d)
                else:
                    failed.append((d, outcome))
            self.stats.delivered += len(delivered)
            self._finished(*delivered)
            for d, exc in failed:
                if not self._deliver(d, exc):
                    return False
                self._finished(d)
            i += len(outcomes)
        return True

    def _one(self, delivery: Delivery) -> bool:
        if self.sender._abort.is_set() or not self._deliver(delivery):
            return False
        self._finished(delivery)
        return True

    def _finished(self, *deliveries: Delivery) -> None:
        """Delivered or dead-lettered: acknowledged, and their room freed
        (one lock and at most one wake-up for a pipeline's worth)."""
        done = self.sender._done
        for d in deliveries:
            done(d)
        if deliveries:
            with self._lock:
                self.count -= len(deliveries)
                if self._waiting:
                    self._room.notify()

    def _deliver(self, delivery: Delivery, failed: DeliveryFailed | None = None) -> bool:
        """True once delivered or dead-lettered; False when aborted (left
        unacknowledged, so it is sent again after a restart). ``failed``:
        the first attempt was made already (pipelined) and failed so."""
        sender = self.sender
        policy = sender.policy
        attempt = 0
        while True:
            attempt += 1
            try:
                if failed is not None:
                    exc, failed = failed, None
                    raise exc
                self.target.send(delivery)
                self.stats.delivered += 1
                return True
            except DeliveryFailed as exc:
                if not exc.retriable or attempt >= policy.max_attempts:
                    sender.dead_letters.append(delivery, attempts=attempt, error=str(exc))
                    self.stats.dead_lettered += 1
                    return True
                self.stats.retries += 1
                if sender._abort.wait(policy.delay(attempt)):
                    return False
