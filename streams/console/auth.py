"""Who may publish a verification through the console.

Only a console started with a token (``FENCEWATCH_SERVE_TOKEN``) accepts a
POST; without one it is read-only and every POST is refused (403). With
one, a POST carries either ``Authorization: Bearer <token>`` or the login
cookie (set by ``POST /login`` with the token; its value is an HMAC of the
token, never the token itself; ``HttpOnly; SameSite=Strict``). CSRF: a
request whose ``Origin`` names another site is refused (403), and a
cookie-authenticated POST must carry an ``Origin`` (browsers send one with
every POST), so another site can neither send the cookie (SameSite) nor
forge the origin.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from http.cookies import CookieError, SimpleCookie
from typing import TYPE_CHECKING, TypeAlias

__all__ = ["COOKIE", "Auth", "Decision", "Headers"]

#: Request headers: the server's message, or a plain mapping (tests).
if TYPE_CHECKING:
    from email.message import Message

    Headers: TypeAlias = Mapping[str, str] | Message[str, str]
else:
    Headers = Mapping

COOKIE = "fencewatch_console"
_SESSION_LABEL = b"fencewatch-console-session-v1"


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    code: int
    reason: str


class Auth:
    def __init__(self, token: str | None) -> None:
        self._token = token or None

    @property
    def enabled(self) -> bool:
        """Verification is possible (a token was given)."""
        return self._token is not None

    def session_value(self) -> str:
        assert self._token is not None
        return hmac.new(self._token.encode(), _SESSION_LABEL, hashlib.sha256).hexdigest()

    def token_matches(self, candidate: str) -> bool:
        return self._token is not None and hmac.compare_digest(
            candidate.encode(), self._token.encode()
        )

    def set_cookie(self) -> str:
        return f"{COOKIE}={self.session_value()}; HttpOnly; SameSite=Strict; Path=/"

    @staticmethod
    def clear_cookie() -> str:
        return f"{COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0"

    def has_session(self, headers: Headers) -> bool:
        if self._token is None:
            return False
        raw = headers.get("Cookie")
        if not raw:
            return False
        try:
            jar = SimpleCookie(raw)
        except CookieError:
            return False
        morsel = jar.get(COOKIE)
        return morsel is not None and hmac.compare_digest(
            morsel.value.encode(), self.session_value().encode()
        )

    @staticmethod
    def origin_ok(headers: Headers) -> bool | None:
        """True: the Origin is this console; False: another site; None: no Origin."""
        origin = headers.get("Origin")
        if origin is None:
            return None
        host = headers.get("Host")
        return host is not None and origin in (f"http://{host}", f"https://{host}")

    def check_post(self, headers: Headers) -> Decision:
        """May this POST publish?"""
        if self._token is None:
            return Decision(
                False,
                403,
                "this console is read-only: it was started without FENCEWATCH_SERVE_TOKEN",
            )
        origin = self.origin_ok(headers)
        if origin is False:
            return Decision(False, 403, "the request's Origin is not this console")
        bearer = headers.get("Authorization") or ""
        scheme, _, value = bearer.partition(" ")
        if scheme.lower() == "bearer" and value and self.token_matches(value.strip()):
            return Decision(True, 200, "bearer token")
        if self.has_session(headers):
            if origin is None:
                return Decision(False, 403, "a cookie-authenticated POST must carry an Origin")
            return Decision(True, 200, "login cookie")
        return Decision(
            False, 401, "log in with the console's token (or send it as a bearer token)"
        )
