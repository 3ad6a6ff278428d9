"""The Host check (DNS rebinding) and the login's return path (open redirect,
header injection)."""

from __future__ import annotations

import pytest

from streams.console.guard import HostCheck, host_name, safe_next


@pytest.mark.parametrize(
    ("header", "name"),
    [
        ("127.0.0.1:8765", "127.0.0.1"),
        ("Console.Example.COM", "console.example.com"),
        ("[::1]:8765", "::1"),
        ("[::1]", "::1"),
        ("a:b:c", None),
        ("host:port", None),
        ("[::1]x", None),
        ("", None),
    ],
)
def test_host_name_strips_the_port(header: str, name: str | None) -> None:
    """The host part of a Host header, lowercased; malformed ones are None."""
    assert host_name(header) == name


def test_host_check_serves_ip_literals_localhost_and_allowed_names_only() -> None:
    """IP literals and localhost pass; a name passes only when allowed."""
    check = HostCheck(["console.example.com"])
    for ok in ("127.0.0.1:8765", "10.1.2.3", "[::1]:80", "localhost:8765", "CONSOLE.example.com"):
        assert check(ok), ok
    for bad in ("evil.example", "evil.example:8765", "127.0.0.1.evil.example", "", None):
        assert not check(bad), bad


@pytest.mark.parametrize(
    "target",
    [
        "//evil.example",
        "/\\evil.example",
        "/\\/evil.example",
        "/ok\r\nSet-Cookie: x=1",
        "/ok\nLocation: //evil",
        "https://evil.example/",
        "evil",
        "/a\\b",
        "/caf\u00e9",
        "/" + "a" * 5000,
        "",
    ],
)
def test_next_refuses_anything_but_a_local_path(target: str) -> None:
    """Another host, a backslash, CR/LF, non-ASCII or a huge value: back to /."""
    assert safe_next(target) == "/"


def test_next_keeps_a_local_path_with_its_query() -> None:
    """A page of the console comes back as it was."""
    assert safe_next("/w/a%2Fb?published=x") == "/w/a%2Fb?published=x"
    assert safe_next("/") == "/"
