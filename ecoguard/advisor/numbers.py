"""Numbers as people write them in questions: ``1,000,000``, ``1M``, ``1 million``, ``10k``,
``100万``, ``1.5亿``, ``十万``.

Pure functions, no regular expressions with nested quantifiers: every pattern here matches in
time linear in its input, so a 10 kB question cannot stall the parser.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache

# A plain number: thousands separators or a decimal part. Bounded repeats, and it may only start
# where no digit precedes it, so a 10,000-digit run costs one attempt, not 10,000 (a regex that
# starts inside every digit run and backtracks over it is quadratic).
NUMBER = r"(?<![\d.,])(?:\d{1,3}(?:,\d{3}){1,4}(?:\.\d{1,6})?|\d{1,12}(?:\.\d{1,6})?)(?!\d)"

# Word or character multipliers that may follow a number, and the pattern that reads them
# (longest first, so ``百万`` wins over ``百`` and ``million`` over ``m``).
_SCALES: dict[str, float] = {
    "thousand": 1e3,
    "million": 1e6,
    "billion": 1e9,
    "千万": 1e7,
    "百万": 1e6,
    "万": 1e4,
    "亿": 1e8,
    "千": 1e3,
    "mn": 1e6,
    "k": 1e3,
    "m": 1e6,
    "b": 1e9,
}
SCALE = r"(?:\s*(?:thousand|million|billion|千万|百万|万|亿|千)|(?:mn|k|m|b)(?![a-z]))?"

_CN_DIGITS = {
    "零": 0,
    "一": 1,
    "二": 2,
    "两": 2,
    "三": 3,
    "四": 4,
    "五": 5,
    "六": 6,
    "七": 7,
    "八": 8,
    "九": 9,
}
_CN_UNITS = {"十": 10, "百": 100, "千": 1000}
_CN_BIG = {"万": 10_000, "亿": 100_000_000}
CN_NUMBER = r"(?<![零一二两三四五六七八九十百千万亿])[零一二两三四五六七八九十百千万亿]{1,12}"


def lazy_pattern(source: str, flags: int = 0) -> Callable[[], re.Pattern[str]]:
    """A regular expression compiled on first use, then kept: ``_PRICE = lazy_pattern(...)``,
    used as ``_PRICE().search(text)``. Compiling every pattern at import cost each ``ecoguard
    advise`` process about 20 ms, most of it for patterns a given question never needs."""
    return cache(lambda: re.compile(source, flags))


def parse_number(text: str) -> float:
    """``"1,000,000"`` -> 1e6; ``"2.5"`` -> 2.5. Raises ValueError on anything else."""
    return float(text.replace(",", ""))


def scale_factor(text: str | None) -> float:
    """The multiplier of a scale word (``"million"`` -> 1e6, ``"万"`` -> 1e4); 1 when empty."""
    return _SCALES.get(text.strip().lower(), 1.0) if text else 1.0


def parse_chinese_number(text: str) -> float | None:
    """``"十万"`` -> 100000, ``"一百万"`` -> 1e6, ``"三千"`` -> 3000, ``"两"`` -> 2. None when the
    characters do not form a number (``"万"`` alone)."""
    if not text or all(ch in _CN_BIG for ch in text):
        return None
    total = 0.0
    section = 0.0  # value below the current 万/亿 group
    digit: float | None = None
    for ch in text:
        if ch in _CN_DIGITS:
            digit = float(_CN_DIGITS[ch])
        elif ch in _CN_UNITS:
            section += (digit if digit is not None else 1.0) * _CN_UNITS[ch]
            digit = None
        elif ch in _CN_BIG:
            section += digit or 0.0
            total = (total + section) * _CN_BIG[ch] if ch == "亿" else total + section * _CN_BIG[ch]
            section, digit = 0.0, None
        else:  # pragma: no cover - CN_NUMBER only admits the characters above
            return None
    return total + section + (digit or 0.0)


def first_group(match: re.Match[str]) -> str:
    """The first group that matched: a pattern with one number per alternative."""
    return next(g for g in match.groups() if g is not None)


def format_count(value: float) -> str:
    """``1500000`` -> ``"1,500,000"``; keeps one decimal for small non-integers."""
    if abs(value - round(value)) < 1e-9 or abs(value) >= 1000:
        return f"{round(value):,}"
    return f"{value:,.2f}".rstrip("0").rstrip(".")
