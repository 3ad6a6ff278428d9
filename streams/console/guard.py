"""Two checks on what a request names: the ``Host`` it was sent to, and the
page a login returns to (``next``).

Host: a page served under any name lets another site's name resolve to the
console (DNS rebinding) and read it as its own origin. The console answers
only a Host that is an IP address literal (a browser's origin is then the
address itself, which no other site can be), ``localhost``, or a name given
with ``--allowed-hosts``.

``next``: only a path of this console: it starts with one ``/``, and has
no second ``/`` or a ``\\`` right after it (``//evil``, ``/\\evil``: browsers
read both as another host), no backslash anywhere, nothing but printable
ASCII (a CR/LF would split the ``Location`` header) and no more than
:data:`MAX_NEXT` characters. Anything else returns to ``/``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

__all__ = ["MAX_NEXT", "HostCheck", "host_name", "safe_next"]

#: Longest ``next`` kept (a workflow link is at most 2 KiB, plus its query).
MAX_NEXT = 4096


def host_name(header: str) -> str | None:
    """The name or address of a Host header without its port, lowercased
    (None: not a host)."""
    h = header.strip().lower()
    if not h:
        return None
    if h.startswith("["):  # [v6]:port
        end = h.find("]")
        if end < 0:
            return None
        name, rest = h[1:end], h[end + 1 :]
        if rest and not (rest.startswith(":") and rest[1:].isdigit()):
            return None
        return name
    name, sep, port = h.rpartition(":")
    if not sep:
        return h
    if not port.isdigit() or ":" in name:
        return None
    return name


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class HostCheck:
    """Which Host headers the console answers."""

    def __init__(self, allowed: Iterable[str] = ()) -> None:
        self.allowed = frozenset({"localhost", *(a.strip().lower() for a in allowed if a)})

    def __call__(self, header: str | None) -> bool:
        if header is None:
            return False
        name = host_name(header)
        if name is None:
            return False
        return name in self.allowed or _is_ip(name)


def safe_next(target: str | None) -> str:
    """``target`` if it is a path of this console, else ``/``."""
    if not target or len(target) > MAX_NEXT or not target.startswith("/"):
        return "/"
    if target[1:2] in ("/", "\\"):
        return "/"
    # Printable ASCII only: a request target is percent-encoded, and a header
    # value past ASCII could not be written as the Location.
    if "\\" in target or any(not 0x21 <= ord(c) <= 0x7E for c in target):
        return "/"
    return target
