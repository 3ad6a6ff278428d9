"""Who may publish a verification through the console.

Only a console started with a token (``FENCEWATCH_SERVE_TOKEN``) accepts a
POST; without one it is read-only and every POST is refused (403). With
one, a POST carries either ``Authorization: Bearer <token>`` or the login
cookie (set by ``POST /login`` with the token; its value is a random session
id the server keeps (:mod:`.sessions`), which expires and which ``POST
/logout`` revokes, never the token; ``HttpOnly; SameSite=Strict``, and
``Secure`` when the request came over TLS or the console is behind a TLS
proxy: ``--behind-tls``). CSRF: a request whose ``Origin`` names another
site is refused (403), and a cookie-authenticated POST must carry an
``Origin`` (browsers send one with every POST), so another site can neither
send the cookie (SameSite) nor forge the origin.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from http.cookies import CookieError, SimpleCookie
from typing import TypeAlias

from streams.console.sessions import Sessions

__all__ = ["COOKIE", "Auth", "Decision", "Headers"]

#: Request headers, looked up by their usual spelling ("Cookie", "Origin"):
#: the server passes a case-insensitive mapping.
Headers: TypeAlias = Mapping[str, str]

COOKIE = "fencewatch_console"


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    code: int
    reason: str


class Auth:
    def __init__(self, token: str | None, sessions: Sessions | None = None) -> None:
        self._token = token or None
        self.sessions = sessions if sessions is not None else Sessions()

    @property
    def enabled(self) -> bool:
        """Verification is possible (a token was given)."""
        return self._token is not None

    def token_matches(self, candidate: str) -> bool:
        return self._token is not None and hmac.compare_digest(
            candidate.encode(), self._token.encode()
        )

    def login(self, candidate: str) -> str | None:
        """A new session id when ``candidate`` is the token, else None."""
        return self.sessions.create() if self.token_matches(candidate) else None

    def set_cookie(self, session_id: str, *, secure: bool = False) -> str:
        ttl = int(self.sessions.ttl_s)
        flags = "; Secure" if secure else ""
        return f"{COOKIE}={session_id}; HttpOnly; SameSite=Strict; Path=/; Max-Age={ttl}{flags}"

    @staticmethod
    def clear_cookie(*, secure: bool = False) -> str:
        flags = "; Secure" if secure else ""
        return f"{COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0{flags}"

    @staticmethod
    def session_id(headers: Headers) -> str | None:
        """The session id the request's cookie carries, if any."""
        raw = headers.get("Cookie")
        if not raw:
            return None
        try:
            jar = SimpleCookie(raw)
        except CookieError:
            return None
        morsel = jar.get(COOKIE)
        return morsel.value if morsel is not None and morsel.value else None

    def has_session(self, headers: Headers) -> bool:
        if self._token is None:
            return False
        sid = self.session_id(headers)
        return sid is not None and self.sessions.valid(sid)

    def logout(self, headers: Headers) -> bool:
        """Revoke the request's session; whether there was one."""
        sid = self.session_id(headers)
        return sid is not None and self.sessions.revoke(sid)

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
