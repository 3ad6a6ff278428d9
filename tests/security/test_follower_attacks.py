"""A hostile webhook receiver against the real follower: ``fencewatch findings
--follow --webhook`` as a subprocess, reading findings from a real broker and
posting them to a small raw-socket server on 127.0.0.1 written here to
misbehave (issue 43). The follower's memory stays bounded, every endless
answer is given up within its attempts and dead-lettered, the process moves
on, and secrets in the URL or headers are sent but never written down."""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.findings.conftest import produce_findings, synthetic_findings

REPO = Path(__file__).resolve().parents[2]
#: The follower's peak resident memory against a receiver that sends without
#: end (it reached 7,610 MB in 25 s before issue 43; a follower is ~70 MB).
RSS_BOUND_MB = 200
#: Findings per test: few, so each test is seconds (attempts x --hook-timeout).
N = 3
#: A generous bound on waiting for the dead letters (the attempts take
#: N x 2 x 1 s on 4 lanes in parallel, ~2.5 s): not a timing assertion.
WAIT_S = 60.0

#: Behaviour of a hostile connection after it read a request: writes to the
#: socket until the client goes away (a send fails) or the test ends.
Behaviour = Callable[[socket.socket, threading.Event], None]


def _drip(conn: socket.socket, stop: threading.Event, head: bytes, piece: bytes) -> None:
    """``head``, then ``piece`` every 50 ms for ever."""
    conn.sendall(head)
    while not stop.wait(0.05):
        conn.sendall(piece)


def _flood(conn: socket.socket, stop: threading.Event, head: bytes) -> None:
    """``head``, then zeros as fast as the client takes them, for ever."""
    conn.sendall(head)
    block = bytes(1 << 16)
    while not stop.is_set():
        conn.sendall(block)


HUGE_LENGTH: Behaviour = lambda c, s: _flood(  # noqa: E731
    c, s, b"HTTP/1.1 200 OK\r\nContent-Length: 1099511627776\r\n\r\n"
)
HUGE_CHUNK: Behaviour = lambda c, s: _flood(  # noqa: E731
    c, s, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nFFFFFFFFFF\r\n"
)
ENDLESS: dict[str, Behaviour] = {
    "endless chunked body": lambda c, s: _drip(
        c, s, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", b"1\r\na\r\n"
    ),
    "endless body without a length": lambda c, s: _drip(c, s, b"HTTP/1.1 200 OK\r\n\r\n", b"a"),
    "endless 100 Continue": lambda c, s: _drip(c, s, b"", b"HTTP/1.1 100 Continue\r\n\r\n"),
    "endless trailers": lambda c, s: _drip(
        c, s, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n", b"X-Trailer: t\r\n"
    ),
    "1 byte/s": lambda c, s: _slow(c, s, b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"),
}


def _slow(conn: socket.socket, stop: threading.Event, answer: bytes) -> None:
    """A whole, valid answer, one byte a second (38 s for this one)."""
    for i in range(len(answer)):
        if stop.wait(1.0 if i else 0.0):
            return
        conn.sendall(answer[i : i + 1])
    stop.wait()


def _answer(status: int) -> Behaviour:
    def answer(conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(f"HTTP/1.1 {status} X\r\nContent-Length: 0\r\n\r\n".encode())

    return answer


class Hostile:
    """A raw HTTP server on 127.0.0.1: reads each request (head and
    Content-Length body) and hands the connection to ``behaviour``; records
    every request head. A behaviour that returns leaves the connection open
    for the next request (keep-alive)."""

    def __init__(self, behaviour: Behaviour) -> None:
        self.behaviour = behaviour
        self.heads: list[bytes] = []
        self.stop = threading.Event()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/hook"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        buf = b""
        with conn:
            try:
                while not self.stop.is_set():
                    while b"\r\n\r\n" not in buf:
                        chunk = conn.recv(65536)
                        if not chunk:
                            return
                        buf += chunk
                    head, _, buf = buf.partition(b"\r\n\r\n")
                    length = 0
                    for line in head.split(b"\r\n")[1:]:
                        name, _, value = line.partition(b":")
                        if name.strip().lower() == b"content-length":
                            length = int(value)
                    while len(buf) < length:
                        chunk = conn.recv(65536)
                        if not chunk:
                            return
                        buf += chunk
                    buf = buf[length:]
                    self.heads.append(head)
                    self.behaviour(conn, self.stop)
            except OSError:
                return  # the follower closed or reset the connection: as it should

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


@contextmanager
def hostile(behaviour: Behaviour) -> Iterator[Hostile]:
    server = Hostile(behaviour)
    try:
        yield server
    finally:
        server.close()


class Follower:
    """``fencewatch findings --follow --webhook`` as a subprocess, its
    output in files (never an unread pipe)."""

    def __init__(
        self,
        tmp: Path,
        bootstrap: str,
        topic: str,
        url: str,
        *extra: str,
        env: dict[str, str] | None = None,
    ) -> None:
        self.dead = tmp / "dead.jsonl"
        self.out, self.err = tmp / "out.txt", tmp / "err.txt"
        base_env = {k: v for k, v in os.environ.items() if not k.startswith("FENCEWATCH_")}
        with self.out.open("wb") as o, self.err.open("wb") as e:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "streams", "findings", "-f", "--bootstrap-servers",
                 bootstrap, "--topic", topic, "--webhook", url, "--hook-timeout", "1",
                 "--max-attempts", "2", "--dead-letter", str(self.dead), "--format", "jsonl",
                 *extra],
                cwd=REPO, env={**base_env, "PYTHONPATH": str(REPO), **(env or {})},
                stdout=o, stderr=e,
            )  # fmt: skip

    def letters(self) -> list[dict[str, object]]:
        if not self.dead.exists():
            return []
        return [json.loads(line) for line in self.dead.read_text().splitlines() if line.strip()]

    def wait_for_letters(self, n: int) -> list[dict[str, object]]:
        deadline = time.monotonic() + WAIT_S
        while len(got := self.letters()) < n:
            assert self.proc.poll() is None, f"exited {self.proc.returncode}: {self.stderr()}"
            assert time.monotonic() < deadline, (
                f"{len(got)} of {n} dead-lettered in {WAIT_S:.0f} s: {self.stderr()}"
            )
            time.sleep(0.05)
        return got

    def peak_rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        raise AssertionError("no VmHWM in /proc/PID/status")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(40)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()

    def stderr(self) -> str:
        return self.err.read_text()[-2000:]


@pytest.fixture
def topic(kafka_bootstrap: str, unique_topic: Callable[..., str]) -> str:
    """A topic holding N findings (one revision each)."""
    name = unique_topic(3, prefix="findings")
    produce_findings(kafka_bootstrap, name, synthetic_findings(N, revisions=1))
    return name


@pytest.mark.parametrize(
    ("behaviour", "name"), [(HUGE_LENGTH, "2^40 Content-Length"), (HUGE_CHUNK, "chunk FFFFFFFFFF")]
)
def test_a_receiver_streaming_without_end_keeps_the_follower_under_the_rss_bound(
    kafka_bootstrap: str, topic: str, tmp_path: Path, behaviour: Behaviour, name: str
) -> None:
    """A 200 whose body never ends, sent as fast as taken: the follower's peak RSS stays
    under the bound, each finding is dead-lettered (its body passed the 64 KiB bound)."""
    with hostile(behaviour) as rx:
        follower = Follower(tmp_path, kafka_bootstrap, topic, rx.url)
        try:
            letters = follower.wait_for_letters(N)
            peak = follower.peak_rss_mb()
        finally:
            rc = follower.stop()
    assert peak < RSS_BOUND_MB, f"{name}: peak RSS {peak:.0f} MB"
    assert [x["attempts"] for x in letters] == [2] * N
    assert all("answered 200 but its body passed 64 KiB" in str(x["error"]) for x in letters)
    assert rc == 3  # nothing was delivered


@pytest.mark.parametrize("name", list(ENDLESS))
def test_an_endless_answer_is_dead_lettered_within_the_attempts_and_the_follower_moves_on(
    kafka_bootstrap: str, topic: str, tmp_path: Path, name: str
) -> None:
    """Each endless answer (a trickle that never ends, or 1 byte/s) fails each attempt at
    --hook-timeout: every finding dead-lettered after 2 attempts, said on stderr once, and
    the process stops cleanly afterwards."""
    with hostile(ENDLESS[name]) as rx:
        follower = Follower(tmp_path, kafka_bootstrap, topic, rx.url)
        try:
            letters = follower.wait_for_letters(N)
        finally:
            rc = follower.stop()
        assert len(rx.heads) == 2 * N  # each attempt reached the receiver
    assert sorted(str(x["idempotency_key"]) for x in letters) == [f"f-{i:05d}/1" for i in range(N)]
    assert [x["attempts"] for x in letters] == [2] * N
    err = follower.err.read_text()
    assert err.count("webhook deliveries are failing") == 1, err
    assert "within 1 s" in err
    assert rc == 3


def test_url_credentials_are_sent_as_basic_auth_and_never_written_down(
    kafka_bootstrap: str, topic: str, tmp_path: Path
) -> None:
    """userinfo and an api_key query value: the receiver gets Basic auth and the query,
    the dead letters and the follower's output hold neither secret."""
    with hostile(_answer(503)) as rx:
        url = rx.url.replace("http://", "http://alerts:pa55-w0rd@") + "?api_key=K3Y-s3cret&x=1"
        follower = Follower(tmp_path, kafka_bootstrap, topic, url)
        try:
            follower.wait_for_letters(N)
        finally:
            follower.stop()
        heads = [h.decode() for h in rx.heads]
    basic = base64.b64encode(b"alerts:pa55-w0rd").decode()
    assert all(f"Authorization: Basic {basic}" in h.split("\r\n") for h in heads), heads[0]
    assert all(h.startswith("POST /hook?api_key=K3Y-s3cret&x=1 HTTP/1.1") for h in heads)
    written = follower.dead.read_text() + follower.err.read_text() + follower.out.read_text()
    for secret in ("pa55-w0rd", "K3Y-s3cret", basic):
        assert secret not in written
    assert "http://***@127.0.0.1" in follower.dead.read_text()
    assert "api_key=***&x=***" in follower.dead.read_text()


def test_headers_from_a_file_and_the_environment_arrive_and_are_not_shown(
    kafka_bootstrap: str, topic: str, tmp_path: Path
) -> None:
    """--webhook-header 'Authorization=@FILE' and 'X-Api-Key=env:VAR': each request
    carries both values; the follower delivers everything and prints neither."""
    secret_file = tmp_path / "auth"
    secret_file.write_text("Bearer t0ken-from-file\n")
    with hostile(_answer(200)) as rx:
        follower = Follower(
            tmp_path, kafka_bootstrap, topic, rx.url,
            "--webhook-header", f"Authorization=@{secret_file}",
            "--webhook-header", "X-Api-Key=env:HOOK_KEY",
            env={"HOOK_KEY": "k3y-from-env"},
        )  # fmt: skip
        try:
            deadline = time.monotonic() + WAIT_S
            while len(rx.heads) < N:
                assert follower.proc.poll() is None, follower.stderr()
                assert time.monotonic() < deadline, follower.stderr()
                time.sleep(0.05)
        finally:
            rc = follower.stop()
        heads = [h.decode().split("\r\n") for h in rx.heads]
    assert all("Authorization: Bearer t0ken-from-file" in h for h in heads)
    assert all("X-Api-Key: k3y-from-env" in h for h in heads)
    shown = follower.err.read_text() + follower.out.read_text()
    assert "t0ken" not in shown and "k3y" not in shown
    assert rc == 0 and not follower.dead.exists()


def test_a_literal_authorization_header_is_refused_in_one_line(
    kafka_bootstrap: str, topic: str, tmp_path: Path
) -> None:
    """--webhook-header 'Authorization: Bearer x' on the command line: exit 2, one line
    saying to use a file or the environment, nothing sent."""
    with hostile(_answer(200)) as rx:
        follower = Follower(
            tmp_path, kafka_bootstrap, topic, rx.url, "--webhook-header", "Authorization: Bearer x"
        )
        rc = follower.proc.wait(60)
        assert rx.heads == []
    err = follower.err.read_text().strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert "Authorization=@FILE" in err[0] and "Bearer x" not in err[0]
