"""`fencewatch migrate` argument errors: one line, exit 2, no broker contacted."""

from __future__ import annotations

import pytest

from streams.cli import main


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--partitions", "0"], "fencewatch migrate: --partitions must be >= 1, got 0"),
        (["--partitions", "4", "--timeout", "0"], "fencewatch migrate: --timeout must be positive"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(
    args: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad --partitions or --timeout is refused before any broker is contacted."""
    rc = main(["migrate", "--bootstrap-servers", "127.0.0.1:1", *args])
    assert rc == 2
    assert capsys.readouterr().err.strip().splitlines() == [line]
