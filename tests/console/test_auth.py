"""Who may POST to the console: nobody without a token; with one, a bearer
token or a login session, and never from another origin; sessions expire,
logout revokes them, and the session table is bounded."""

from __future__ import annotations

from streams.console.auth import COOKIE, Auth
from streams.console.sessions import RateLimit, Sessions

TOKEN = "s3cret-token-0123456789"
HOST = {"Host": "127.0.0.1:8765"}
SAME = {**HOST, "Origin": "http://127.0.0.1:8765"}


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_without_a_token_every_post_is_refused_403() -> None:
    """Read-only console: 403 even with a bearer header."""
    d = Auth(None).check_post({**SAME, "Authorization": f"Bearer {TOKEN}"})
    assert (d.allowed, d.code) == (False, 403)


def test_bearer_token_allows_and_a_wrong_one_is_401() -> None:
    """The right bearer token passes (no Origin: a script); a wrong one is 401."""
    auth = Auth(TOKEN)
    assert auth.check_post({**HOST, "Authorization": f"Bearer {TOKEN}"}).allowed
    d = auth.check_post({**HOST, "Authorization": "Bearer nope"})
    assert (d.allowed, d.code) == (False, 401)
    assert auth.check_post(HOST).code == 401


def test_cookie_needs_a_matching_origin() -> None:
    """The login cookie passes with this console's Origin; another Origin or none is 403."""
    auth = Auth(TOKEN)
    sid = auth.login(TOKEN)
    assert sid is not None
    cookie = {"Cookie": f"{COOKIE}={sid}"}
    assert auth.check_post({**SAME, **cookie}).allowed
    assert auth.check_post({**HOST, **cookie}).code == 403
    evil = {**HOST, **cookie, "Origin": "http://evil.example"}
    assert auth.check_post(evil).code == 403
    # The bearer token from another origin is refused too.
    assert auth.check_post({**evil, "Authorization": f"Bearer {TOKEN}"}).code == 403


def test_cookie_is_samesite_httponly_and_not_the_token() -> None:
    """The Set-Cookie is SameSite=Strict, HttpOnly, expires, and does not carry the token."""
    auth = Auth(TOKEN)
    assert auth.login("wrong") is None
    sid = auth.login(TOKEN)
    assert sid is not None
    header = auth.set_cookie(sid)
    assert "SameSite=Strict" in header and "HttpOnly" in header and TOKEN not in header
    assert "Max-Age=43200" in header and "Secure" not in header
    assert auth.set_cookie(sid, secure=True).endswith("; Secure")
    forged = {**SAME, "Cookie": f"{COOKIE}={TOKEN}"}
    assert auth.check_post(forged).code == 401


def test_logout_revokes_the_session_and_sessions_expire() -> None:
    """A revoked or expired session id no longer authenticates."""
    clock = _Clock()
    auth = Auth(TOKEN, Sessions(ttl_s=60, clock=clock))
    first, second = auth.login(TOKEN), auth.login(TOKEN)
    assert first is not None and second is not None and first != second
    headers = {**SAME, "Cookie": f"{COOKIE}={first}"}
    assert auth.has_session(headers)
    assert auth.logout(headers)
    assert not auth.has_session(headers) and auth.check_post(headers).code == 401
    later = {**SAME, "Cookie": f"{COOKIE}={second}"}
    assert auth.has_session(later)
    clock.now += 61
    assert not auth.has_session(later)


def test_the_session_table_is_bounded_and_forgets_the_oldest() -> None:
    """Past max_sessions a login forgets the oldest session, never grows the table."""
    sessions = Sessions(max_sessions=3)
    ids = [sessions.create() for _ in range(5)]
    assert len(sessions) == 3
    assert [sessions.valid(i) for i in ids] == [False, False, True, True, True]


def test_login_rate_limit_is_per_client_and_refills() -> None:
    """A client gets a burst of attempts, then waits; another client is not affected."""
    clock = _Clock()
    limit = RateLimit(burst=3, refill_s=10, max_clients=2, clock=clock)
    assert [limit.take("a") for _ in range(3)] == [0, 0, 0]
    assert limit.take("a") > 0
    assert limit.take("b") == 0
    clock.now += 10
    assert limit.take("a") == 0 and limit.take("a") > 0
