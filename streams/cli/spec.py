"""``fencewatch spec [N]``: the specification every "SPEC §N" refers to.

Help texts, messages and the docs cite sections of docs/spec.md as
"SPEC §N" (the project's contract page, with its section numbers). An
installed fencewatch carries the file; ``fencewatch spec`` prints where it
is, ``fencewatch spec N`` (or ``§N``) prints section N.

Exit status: 0; 2 for a section that does not exist (one line listing those
that do) or a missing file.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

__all__ = ["register", "section"]

_HEADING = re.compile(r"^## (\d+)\. ", re.M)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "spec",
        help="print where the specification is, or its section N (SPEC §N)",
        description="The specification (docs/spec.md) that every 'SPEC §N' refers to: "
        "without N, its path; with N (or §N), that section.",
    )
    p.add_argument("section", nargs="?", metavar="N", help="a section number, e.g. 5 or §5")
    p.set_defaults(handler=_main)


def section(text: str, number: int) -> str | None:
    """Section ``number`` of the specification's ``text``, from its heading to
    the next one; None when there is no such section."""
    starts = [(int(m.group(1)), m.start()) for m in _HEADING.finditer(text)]
    for i, (n, start) in enumerate(starts):
        if n == number:
            end = starts[i + 1][1] if i + 1 < len(starts) else len(text)
            return text[start:end].rstrip() + "\n"
    return None


def _err(msg: str) -> int:
    print(f"fencewatch spec: {msg}", file=sys.stderr)
    return 2


def _main(args: argparse.Namespace) -> int:
    from streams.fixtures import specification

    try:
        path = specification()
    except FileNotFoundError as exc:
        return _err(str(exc))
    if args.section is None:
        print(path)
        return 0
    wanted = args.section.strip().removeprefix("SPEC").strip().removeprefix("§")
    text = path.read_text(encoding="utf-8")
    found = section(text, int(wanted)) if wanted.isdigit() else None
    if found is None:
        numbers = [int(m.group(1)) for m in _HEADING.finditer(text)]
        return _err(
            f"no section {args.section!r}: the sections are §{min(numbers)} to §{max(numbers)}"
        )
    sys.stdout.write(found)
    return 0
