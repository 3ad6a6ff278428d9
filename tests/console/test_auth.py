"""Who may POST to the console: nobody without a token; with one, a bearer
token or the login cookie, and never from another origin."""

from __future__ import annotations

from streams.console.auth import COOKIE, Auth

TOKEN = "s3cret-token-0123456789"
HOST = {"Host": "127.0.0.1:8765"}
SAME = {**HOST, "Origin": "http://127.0.0.1:8765"}


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
    cookie = {"Cookie": f"{COOKIE}={auth.session_value()}"}
    assert auth.check_post({**SAME, **cookie}).allowed
    assert auth.check_post({**HOST, **cookie}).code == 403
    evil = {**HOST, **cookie, "Origin": "http://evil.example"}
    assert auth.check_post(evil).code == 403
    # The bearer token from another origin is refused too.
    assert auth.check_post({**evil, "Authorization": f"Bearer {TOKEN}"}).code == 403


def test_cookie_is_samesite_httponly_and_not_the_token() -> None:
    """The Set-Cookie is SameSite=Strict and HttpOnly and does not carry the token."""
    header = Auth(TOKEN).set_cookie()
    assert "SameSite=Strict" in header and "HttpOnly" in header and TOKEN not in header
    forged = {**SAME, "Cookie": f"{COOKIE}={TOKEN}"}
    assert Auth(TOKEN).check_post(forged).code == 401
