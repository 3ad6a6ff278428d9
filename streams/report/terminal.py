"""Text that is safe to write to a terminal: the one helper every text
output runs event data through (the text report, the CLI's record lines and
its error lines that quote data).

Keys, worker ids, effect keys, sinks and free-form reasons are any string
SPEC §2 allows, so they may hold ESC (colours, a window-title change, a
cursor move), CR and LF (a line that overwrites or fakes another), BEL and
the rest. :func:`term_safe` writes every such character as a visible escape
instead: C0 (U+0000-U+001F), DEL and C1 (U+0080-U+009F) as ``\\n``, ``\\r``,
``\\t`` or ``\\xNN``; the Unicode line and paragraph separators and the
bidirectional embeddings, overrides and isolates (which reorder what a
terminal shows: "Trojan Source") as ``\\uNNNN``. Everything else, backslashes
included, is left as it is: a key that holds the four characters ``\\x1b``
prints the same as one holding ESC, and ``--format json`` tells them apart
(JSON output escapes control characters itself and is never passed here).
"""

from __future__ import annotations

from typing import Final

__all__ = ["term_safe"]

_NAMED = {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}
_TABLE: Final[dict[int, str]] = {
    c: _NAMED.get(c, f"\\x{c:02x}") for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))
}
_TABLE.update(
    {c: f"\\u{c:04x}" for c in (0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2066, 0x206A))}
)


def term_safe(text: str) -> str:
    """``text`` with every control character written as a visible escape
    (see the module's docstring); unchanged when it has none."""
    # str.translate is one C pass; on the plain text of a large report it
    # returns an equal string.
    return text.translate(_TABLE)
