"""The webhook's inputs: --webhook-header specs and URL redaction."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.findings import WebhookTarget
from streams.findings.webhook import MAX_HEADER_FILE, parse_header, redact_url


def test_redact_url_hides_userinfo_and_query_values_and_keeps_the_rest() -> None:
    """userinfo and each query value become ***; scheme, host, port and path stay."""
    url = "https://bot:s3cret@alerts.example:8443/hooks/in?api_key=K&team=ops&flag#frag"
    assert redact_url(url) == "https://***@alerts.example:8443/hooks/in?api_key=***&team=***&***"
    assert redact_url("http://h/hook") == "http://h/hook"


def test_a_header_value_comes_literally_from_a_file_or_from_the_environment(
    tmp_path: Path,
) -> None:
    """NAME: VALUE is literal; NAME=@FILE reads FILE (trailing newline dropped);
    NAME=env:VAR reads VAR."""
    secret = tmp_path / "token"
    secret.write_text("Bearer abc\n")
    assert parse_header("X-Source: fencewatch ") == ("X-Source", "fencewatch")
    assert parse_header(f"Authorization=@{secret}") == ("Authorization", "Bearer abc")
    assert parse_header("X-Api-Key=env:K", {"K": "k-1"}) == ("X-Api-Key", "k-1")


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("Authorization: Bearer abc", "Authorization=@FILE"),
        ("Cookie: s=1", "Cookie=@FILE"),
        ("X-Api-Key=env:MISSING", "'MISSING' is not set"),
        ("X-Api-Key=@/nonexistent/token", "cannot read /nonexistent/token"),
        ("X-Api-Key=literal", "must be @FILE or env:VAR"),
        ("Idempotency-Key: x", "set by the webhook itself"),
        ("Content-Length: 5", "set by the webhook itself"),
        ("Bad Name: x", "is not a header name"),
        ("X-Empty:", "the value is empty"),
        ("no separator", "NAME: VALUE"),
    ],
)
def test_a_bad_header_spec_is_one_line_naming_the_problem_not_the_value(
    spec: str, says: str
) -> None:
    """Each refused spec raises ValueError saying why; a secret value is never repeated."""
    with pytest.raises(ValueError, match=None) as refused:
        parse_header(spec, {})
    text = str(refused.value)
    assert says in text and "\n" not in text
    assert "Bearer abc" not in text and "s=1" not in text


def test_a_header_value_with_a_line_break_or_a_file_too_long_is_refused(tmp_path: Path) -> None:
    """A value that would split the request (CR/LF) and an oversized file are refused."""
    with pytest.raises(ValueError, match="characters a header cannot carry"):
        parse_header("X-Api-Key=env:K", {"K": "a\r\nHost: evil"})
    big = tmp_path / "big"
    big.write_bytes(b"x" * (MAX_HEADER_FILE + 1))
    with pytest.raises(ValueError, match="longer than"):
        parse_header(f"X-Api-Key=@{big}")


def test_url_credentials_and_an_authorization_header_together_are_refused() -> None:
    """Basic auth from the URL and an Authorization header: ambiguous, so refused."""
    with pytest.raises(ValueError, match="keep one"):
        WebhookTarget("http://u:p@127.0.0.1:9/hook", headers=[("Authorization", "Bearer x")])


def test_the_target_shows_its_url_redacted() -> None:
    """WebhookTarget.url (used in every message and dead letter) is the redacted URL."""
    target = WebhookTarget("http://u:p4ss@127.0.0.1:9/hook?token=T0K")
    try:
        assert target.url == "http://***@127.0.0.1:9/hook?token=***"
    finally:
        target.close()
