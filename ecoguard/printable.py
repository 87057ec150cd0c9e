"""Text from outside (file names, model names, labels) made safe to store, print and export.

A name can hold bytes that are not UTF-8 (``os.fsdecode`` turns them into surrogate escapes,
which make any UTF-8 writer fail: SQLite, a terminal, a scrape), newlines that forge a report
line, terminal escapes (colours, cursor moves) and bidi controls (which reorder what is shown).
Each function here fixes one of these per value, so one bad name costs only itself."""

from __future__ import annotations


def valid_utf8(text: str) -> str:
    """``text`` with undecodable bytes (``os.fsdecode``'s surrogate escapes) written as ``\\xff``
    text and any other lone surrogate (JSON's ``"\\ud800"``) as ``\\ud800``; text that encodes
    is returned unchanged (the same object)."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    try:  # only undecodable bytes: their bytes, shown as escapes where they do not decode
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a lone surrogate too: escape each character
        return "".join(_escaped(ch) for ch in text)


def _escaped(ch: str) -> str:
    code = ord(ch)
    if 0xDC80 <= code <= 0xDCFF:  # an undecodable byte, as surrogateescape carries it
        return f"\\x{code - 0xDC00:02x}"
    if 0xD800 <= code <= 0xDFFF:  # a lone surrogate: not Unicode text at all
        return f"\\u{code:04x}"
    return ch


def shown(text: str) -> str:
    """``text`` safe to print on one terminal line: every control, format (bidi), separator or
    undecodable character as a backslash escape; other text unchanged."""
    if text.isprintable():  # no control, format (bidi), separator or surrogate characters
        return text
    return "".join(
        ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii")
        for ch in valid_utf8(text)
    )
