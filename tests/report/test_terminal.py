"""term_safe (streams/report/terminal.py): every control character in data
written as a visible escape, everything else left as it is."""

from __future__ import annotations

import unicodedata

from streams.report.terminal import term_safe

CONTROLS = [*map(chr, range(0x20)), "\x7f", *map(chr, range(0x80, 0xA0))]


def test_every_c0_del_and_c1_character_is_escaped() -> None:
    """No C0, DEL or C1 character survives; each becomes a backslash escape."""
    out = term_safe("".join(CONTROLS))
    assert not any(c in out for c in CONTROLS)
    assert out.count("\\") == len(CONTROLS)


def test_the_escapes_read_as_python_would_write_them() -> None:
    """ESC, BEL, CSI as \\xNN; LF, CR, TAB by name."""
    assert term_safe("a\x1b[31mb") == "a\\x1b[31mb"
    assert term_safe("\x1b]0;title\x07") == "\\x1b]0;title\\x07"
    assert term_safe("x\r\ny\t") == "x\\r\\ny\\t"
    assert term_safe("\x9b2J\x00\x7f") == "\\x9b2J\\x00\\x7f"


def test_line_separators_and_bidi_controls_are_escaped() -> None:
    """U+2028/2029 and the bidi embeddings, overrides and isolates become \\uNNNN."""
    for c in ("\u2028", "\u2029", "\u202a", "\u202e", "\u2066", "\u2069"):
        assert term_safe(f"a{c}b") == f"a\\u{ord(c):04x}b"


def test_printable_text_is_left_as_it_is() -> None:
    """Letters in any script, emoji, spaces, quotes and backslashes are unchanged."""
    text = "tenant/export 2026-07-26 «é» 日本語 🚀 'q' \"dq\" C:\\tmp \\x1b \u200f"
    assert term_safe(text) == text
    escaped = {0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2066, 0x206A)}
    kept = [chr(c) for c in range(0xA0, 0x3000) if c not in escaped]
    assert all(unicodedata.category(c) != "Cc" for c in kept)
    assert term_safe("".join(kept)) == "".join(kept)
