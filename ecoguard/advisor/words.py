"""A question as words: where each word stands, so the name finders (models, GPUs, precisions,
regions) can look at a word and its neighbours, and the number readers can have the names
masked out.

Runs of ASCII word characters (with ``. - / + =`` kept inside names and code), or runs of Han
characters. One character class per alternative: linear in the text.
"""

from __future__ import annotations

import re

Word = tuple[int, int, str]  # (start, end, text as written)

_WORD = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-/+]*|[\u4e00-\u9fff]+")


def split_words(text: str) -> list[Word]:
    """Every word of ``text`` with its span; trailing ``. - / +`` are not part of a word."""
    out = []
    for m in _WORD.finditer(text):
        raw = m.group(0).rstrip(".-/+")
        if raw:
            out.append((m.start(), m.start() + len(raw), raw))
    return out


def following(words: list[Word], i: int) -> str:
    """The word after ``words[i]``, lower-cased; empty at the end."""
    return words[i + 1][2].lower() if i + 1 < len(words) else ""


def mask(text: str, spans: list[tuple[int, int]]) -> str:
    """``text`` with each span blanked out (same length, so positions still hold)."""
    chars = list(text)
    for start, end in spans:
        for i in range(start, end):
            chars[i] = " "
    return "".join(chars)
