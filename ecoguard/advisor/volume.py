"""Volumes and rates as people write them: how much work a question describes.

One extractor, driven by three tables (``UNITS``: what is counted, ``PERIODS``: per what time,
``NUMBER_WORDS``: numbers written as words), reads every form the advisor accepts:

- numbers: ``1,000,000``, ``1M``, ``10k``, ``1.5 million``, ``one million``, ``half a million``,
  ``two hundred thousand``, ``100万``, ``1.5亿``, ``十万``, ``一万``, pinyin ``100 wan``/``2 yi``;
- what is counted: requests (calls, queries, messages, 次请求...), users (DAU, 日活, 用户),
  tokens, characters (``100万字``, ``100 wan zi``, ``1 million Chinese characters``), words;
- per what: second, minute, hour, day, week, month, year (``/s``, ``per minute``, ``daily``,
  ``每秒``, ``每天``, ``一个月``...), ``QPS``/``RPS``; none means a one-off volume;
- concurrency (``500 concurrent users``, ``并发 200``), which is not a volume.

Every conversion it makes is returned with its rule, in English and Chinese, so the answer can
show it. Pure, and linear in the input: patterns have bounded repeats and no nesting.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from ecoguard.advisor.conversions import Conversion
from ecoguard.advisor.numbers import (
    CN_NUMBER,
    NUMBER,
    SCALE,
    format_count,
    lazy_pattern,
    parse_chinese_number,
    parse_number,
    scale_factor,
)
from ecoguard.advisor.texts import BLANK, Text

# Conversion constants (stated in every answer that uses them).
REQUESTS_PER_USER = 5  # requests one user sends per period, when a question counts users
DAYS_PER_MONTH = 30
CHINESE_CHARS_PER_TOKEN = 2.0  # Qwen/Yi-style tokenizers, Chinese text: 100万字 ~ 500,000 tokens
ENGLISH_CHARS_PER_TOKEN = 4.0
WORDS_PER_TOKEN = 0.75  # English words per token
BYTES_PER_TOKEN = 4.0  # plain text: "1 GB of text" ~ 250M tokens

# Periods: how many fit in a 30-day month, and their Chinese names (the key is the English one).
PERIODS: dict[str, tuple[float, str]] = {
    "second": (86_400 * DAYS_PER_MONTH, "秒"),
    "minute": (1_440 * DAYS_PER_MONTH, "分钟"),
    "hour": (24 * DAYS_PER_MONTH, "小时"),
    "day": (DAYS_PER_MONTH, "天"),
    "week": (DAYS_PER_MONTH / 7, "周"),
    "month": (1, "月"),
    "year": (1 / 12, "年"),
}
_PERIOD_WORDS: tuple[tuple[str, str], ...] = (
    # (regex, period) — checked right after the unit ("per day") or just before the number ("每天").
    (r"seconds?\b|secs?\b|秒钟|秒", "second"),
    (r"minutes?\b|mins?\b|分钟", "minute"),
    (r"hours?\b|hrs?\b|小时|钟头", "hour"),
    (r"days?\b|天|日", "day"),
    (r"weeks?\b|wk\b|周|星期|礼拜", "week"),
    (r"months?\b|个月|月", "month"),
    (r"years?\b|yr\b|年", "year"),
)
_SLASH_ABBREVIATIONS = {"s": "second", "min": "minute", "h": "hour", "d": "day", "mo": "month"}
_ADVERBS: dict[str, str] = {
    "hourly": "hour",
    "daily": "day",
    "weekly": "week",
    "monthly": "month",
    "yearly": "year",
    "annually": "year",
}
# "per day", "a day", "/day", "每天", "一个月"; English words need a space after them.
_PER = r"(?:/\s*|(?:per|a|an|each|every)\s+|每个|一个|每\s*|一)"
_ADVERB = f"(?P<adv>{'|'.join(_ADVERBS)})"
_PERIOD_AFTER = lazy_pattern(
    rf"\s*(?:{_PER}(?:"
    + "|".join(f"(?P<p{i}>{rx})" for i, (rx, _p) in enumerate(_PERIOD_WORDS))
    + rf")|/\s*(?P<abbr>{'|'.join(_SLASH_ABBREVIATIONS)})\b|{_ADVERB}\b)",
    re.IGNORECASE,
)
_PERIOD_BEFORE = lazy_pattern(
    r"(?:(?:每|一)(?:个)?\s*(?P<zh>秒钟|秒|分钟|小时|天|日|周|星期|月|年)"
    rf"|(?:per|each|every|a)\s+(?P<en>{'|'.join(PERIODS)})|{_ADVERB})"
    r"[^\d零一二两三四五六七八九十百千万亿]{0,8}$",
    re.IGNORECASE,
)
# The Chinese words in _PERIOD_WORDS (every one _PERIOD_BEFORE reads) -> their period.
_ZH_PERIOD = {w: period for rx, period in _PERIOD_WORDS for w in rx.split("|") if not w.isascii()}

# What is counted. Longest alternatives first; each kind maps to how it turns into work.
UNITS: tuple[tuple[str, str], ...] = (
    (r"chinese\s+characters|chinese\s+chars|汉字|中文字|个字|ge\s+zi|字|zi\b", "chinese_chars"),
    (r"(?:english\s+)?characters|chars\b", "chars"),
    (r"(?:english\s+)?words|单词|个单词", "words"),
    (r"tokens?|toks?\b|个\s*token|词元", "tokens"),
    (
        r"(?:daily\s+active\s+users|daily\s+users|active\s+users|users?|dau\b|visitors?|customers?"
        r"|个用户|位用户|用户|人)",
        "users",
    ),
    (
        r"(?:api\s+)?(?:requests?|reqs?\b|calls?|queries|query|inferences?|generations?|"
        r"conversations?|messages?|prompts?(?!\s*(?:tokens?|length|len))|questions?|次请求|次调用|个请求|次推理|次对话|条消息|"
        r"条请求|个问题|次)",
        "requests",
    ),
)
_UNIT = lazy_pattern(
    r"\s*(?:" + "|".join(f"(?P<u{i}>{rx})" for i, (rx, _k) in enumerate(UNITS)) + ")",
    re.IGNORECASE,
)

# Number words, English and pinyin: normalised to digits before the grammar runs.
NUMBER_WORDS: dict[str, float] = {
    "zero": 0,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "thirteen": 13,
    "fourteen": 14,
    "fifteen": 15,
    "sixteen": 16,
    "seventeen": 17,
    "eighteen": 18,
    "nineteen": 19,
    "twenty": 20,
    "thirty": 30,
    "forty": 40,
    "fifty": 50,
    "sixty": 60,
    "seventy": 70,
    "eighty": 80,
    "ninety": 90,
}
_SCALE_WORDS = {"hundred": 100, "thousand": 1e3, "million": 1e6, "billion": 1e9}
# Bounds on a number written in words: "two hundred and fifty thousand" is 6 words; a run longer
# than this, or a value past a trillion, is not a quantity (and must not overflow).
MAX_NUMBER_WORDS = 12
MAX_WORD_NUMBER = 1e12
_WORD = re.compile(r"[a-z]+", re.IGNORECASE)
# Pinyin scale words after a number ("100 wan zi", "2 yi tokens", "3 qian"), longest first.
_PINYIN = lazy_pattern(
    rf"({NUMBER})\s*(qian\s*wan|bai\s*wan|wan|yi|qian)\b(?!\s*-?\s*\d)", re.IGNORECASE
)
_PINYIN_SCALE = {"qianwan": "千万", "baiwan": "百万", "wan": "万", "yi": "亿", "qian": "千"}

# A quantity: digits with an optional scale (numbers.SCALE), or Chinese numerals.
_QTY = lazy_pattern(rf"({NUMBER})({SCALE})|({CN_NUMBER})", re.IGNORECASE)

# Prefix forms: "QPS 100", "QPS of 100", "日活 10万", "DAU: 50k", "并发 200", "concurrency 64".
_PREFIX_FORMS: tuple[tuple[str, str], ...] = (
    (r"(?i)(?:qps|rps)\s*(?:of|is|=|:|：|为|是|约|达到|大约)?\s*$", "qps"),
    (
        r"(?i)(?:日活(?:跃)?(?:用户)?|dau|daily active users)\s*(?:of|is|=|:|：|为|是|约|有|大约)?\s*$",
        "dau",
    ),
    (
        r"(?i)(?:concurrency|concurrent users|并发(?:数|量|用户|用户数)?|同时在线(?:人数|用户)?)"
        r"\s*(?:of|is|=|:|：|为|是|约|有|大约|达到)?\s*$",
        "concurrency",
    ),
)
_PREFIX_KEYS = ("qps", "rps", "dau", "daily active", "日活", "concurren", "并发", "同时在线")
_SUFFIX_RATE = lazy_pattern(r"\s*(?:qps|rps|req/s|reqs/s|requests/s)\b", re.I)
_SUFFIX_CONCURRENCY = lazy_pattern(
    r"\s*(?:concurrent|simultaneous|parallel)\s+(?:users?|requests?|sessions?|streams?|connections?|chats?)"
    r"|\s*(?:个|路|人)?\s*(?:并发|同时在线)"
    r"|\s*(?:users?|people|requests?)\s+(?:at once|at the same time|simultaneously|concurrently|in parallel)",
    re.I,
)
_SUFFIX_DAU = lazy_pattern(r"\s*(?:日活|dau\b)", re.I)


class Quantity(NamedTuple):
    """One counted amount: ``kind`` (requests, users, tokens, chars, chinese_chars, words),
    ``count`` as written (scales applied), ``period`` (a key of PERIODS, None for a one-off)."""

    kind: str
    count: float
    period: str | None
    source: str


class Volume(NamedTuple):
    """What the question's volumes add up to (None: not stated)."""

    requests_per_month: int | None = None
    total_tokens: int | None = None  # tokens to generate
    tokens_period: str | None = None  # "month" when total_tokens recur monthly, None one-off
    concurrency: int | None = None
    quantities: tuple[Quantity, ...] = ()
    conversions: tuple[Conversion, ...] = ()


# ---------------------------------------------------------------------------------------------
# Numbers written as words


def words_to_digits(text: str) -> str:
    """``one million`` -> ``1000000``, ``half a million`` -> ``500000``, ``a thousand`` ->
    ``1000``, ``100 wan`` -> ``100万``; the text's length may change. Runs of number words are
    read as one number (``two hundred and fifty thousand``)."""
    lower = text.lower()
    if "wan" in lower or "yi" in lower or "qian" in lower:
        text = _PINYIN().sub(
            lambda m: m.group(1) + _PINYIN_SCALE[re.sub(r"\s+", "", m.group(2).lower())], text
        )
    out: list[str] = []
    pos = 0
    words = list(_WORD.finditer(text))
    i = 0
    while i < len(words):
        run_end, value = _number_run(text, words, i)
        if run_end == i or not 0 <= value <= MAX_WORD_NUMBER:
            i = max(run_end, i + 1)  # no number here, or not one anybody writes in words
            continue
        start, end = words[i].start(), words[run_end - 1].end()
        out.append(text[pos:start])
        out.append(format(value, "g") if value != int(value) else str(int(value)))
        pos = end
        i = run_end
    out.append(text[pos:])
    return "".join(out)


def _number_run(text: str, words: list[re.Match[str]], i: int) -> tuple[int, float]:
    """The end index (exclusive) of the number-word run starting at ``words[i]`` and its value;
    ``(i, 0)`` when none starts there. ``a``/``half a`` count only before a scale word."""
    total, current, seen_number = 0.0, 0.0, False
    j = i
    while j < len(words) and j - i < MAX_NUMBER_WORDS:
        word = words[j].group(0).lower()
        gap = text[words[j - 1].end() : words[j].start()] if j > i else ""
        if j > i and gap.strip(" -") != "":
            break
        if word == "and" and seen_number and j + 1 < len(words):
            j += 1
            continue
        if word in ("a", "an", "half") and j + 1 < len(words):
            nxt = words[j + 1].group(0).lower()
            if word == "half" and nxt in ("a", "an") and j + 2 < len(words):
                after = words[j + 2].group(0).lower()
                if after in _SCALE_WORDS and after != "hundred":
                    current, seen_number = 0.5, True
                    j += 2
                    continue
            if word in ("a", "an") and nxt in _SCALE_WORDS and not seen_number:
                current, seen_number = 1.0, True
                j += 1
                continue
            break
        if word in NUMBER_WORDS:
            current += NUMBER_WORDS[word]
            seen_number = True
        elif word in _SCALE_WORDS and seen_number:
            if word == "hundred" and current >= 100:
                break  # "one hundred one hundred" is two numbers, not 10,100
            if word == "hundred":
                current = (current or 1.0) * 100
            elif current == 0:
                break  # "one billion billion": a scale needs a number before it
            else:
                total += current * _SCALE_WORDS[word]
                current = 0.0
        else:
            break
        j += 1
    if not seen_number:
        return i, 0.0
    # A trailing "and" is not part of the number.
    while j > i and words[j - 1].group(0).lower() == "and":
        j -= 1
    return j, total + current


# ---------------------------------------------------------------------------------------------
# The grammar


def _quantity_value(match: re.Match[str]) -> float | None:
    if match.group(3):
        return parse_chinese_number(match.group(3))
    return parse_number(match.group(1)) * scale_factor(match.group(2))


def _glued_to_name(text: str, start: int) -> bool:
    """Digits glued to letters before them are part of a name ("Qwen2", "H100", "v0.2")."""
    if start == 0:
        return False
    before = text[start - 1]
    return (before.isascii() and before.isalpha()) or before in ".-_/"


def _period_after(text: str, end: int) -> tuple[str | None, int]:
    m = _PERIOD_AFTER().match(text, end)
    if not m:
        return None, end
    if m.group("adv"):
        return _ADVERBS[m.group("adv").lower()], m.end()
    if m.group("abbr"):
        return _SLASH_ABBREVIATIONS[m.group("abbr").lower()], m.end()
    return next(p for i, (_rx, p) in enumerate(_PERIOD_WORDS) if m.group(f"p{i}")), m.end()


def _period_before(text: str, start: int) -> str | None:
    m = _PERIOD_BEFORE().search(text[max(0, start - 24) : start])
    if not m:
        return None
    if m.group("zh"):
        return _ZH_PERIOD[m.group("zh")]
    if m.group("en"):
        return m.group("en").lower()
    return _ADVERBS[m.group("adv").lower()]


def _unit_at(text: str, end: int) -> tuple[str | None, int]:
    m = _UNIT().match(text, end)
    if not m:
        return None, end
    # "2 days" is not "2 d(ays)": a bare 字 needs no boundary, English words do.
    after = text[m.end() : m.end() + 1]
    if after and after.isascii() and after.isalnum() and m.group(0)[-1].isascii():
        return None, end
    return next(kind for i, (_rx, kind) in enumerate(UNITS) if m.group(f"u{i}")), m.end()


def find_quantities(text: str) -> tuple[list[Quantity], int | None]:
    """Every counted amount in ``text`` (already normalised by ``words_to_digits``) and the
    concurrency if stated. Tokens per second are a throughput, not a volume: skipped."""
    found: list[Quantity] = []
    concurrency: int | None = None
    for match in _QTY().finditer(text):
        start, end = match.span()
        if match.group(1) and _glued_to_name(text, start):
            continue
        value = _quantity_value(match)
        if value is None or value <= 0:
            continue
        source = match.group(0).strip()
        prefix = text[max(0, start - 32) : start]
        form = None
        if any(key in prefix.lower() for key in _PREFIX_KEYS):  # cheap gate before the regexes
            form = next((kind for rx, kind in _PREFIX_FORMS if re.search(rx, prefix)), None)
        if form == "concurrency" or _SUFFIX_CONCURRENCY().match(text, end):
            concurrency = int(value)
            continue
        if form == "qps" or _SUFFIX_RATE().match(text, end):
            found.append(Quantity("requests", value, "second", f"{source} QPS"))
            continue
        if form == "dau" or _SUFFIX_DAU().match(text, end):
            found.append(Quantity("users", value, "day", f"{source} DAU"))
            continue
        kind, unit_end = _unit_at(text, end)
        if kind is None:
            continue
        period, stop = _period_after(text, unit_end)
        if period is None:
            period = _period_before(text, start)
        if kind != "requests" and kind != "users" and period == "second":
            continue  # "20 tokens per second": a throughput (diagnose reads it)
        found.append(Quantity(kind, value, period, text[start:stop].strip()))
    return found, concurrency


# ---------------------------------------------------------------------------------------------
# From quantities to work


def _per_month_rule(period: str | None, hours_per_day: float | None) -> tuple[float, Text]:
    """How many of ``period`` fit in a month, and the rule."""
    if period is None or period == "month":
        return 1.0, BLANK
    if period in ("second", "minute", "hour") and hours_per_day is not None:
        per_hour = {"second": 3600, "minute": 60, "hour": 1}[period]
        lead = BLANK
        if per_hour > 1:
            lead = Text(f"x {per_hour:,} per hour ", f"x 每小时 {per_hour:,} ")
        return per_hour * hours_per_day * DAYS_PER_MONTH, Text(
            f"{lead.en}x {hours_per_day:g} h a day x {DAYS_PER_MONTH} days",
            f"{lead.zh}x 每天 {hours_per_day:g} 小时 x {DAYS_PER_MONTH} 天",
        )
    rules = {
        "second": Text("x 86,400 s a day x 30 days", "x 每天 86,400 秒 x 30 天"),
        "minute": Text("x 1,440 min a day x 30 days", "x 每天 1,440 分钟 x 30 天"),
        "hour": Text("x 24 h x 30 days", "x 24 小时 x 30 天"),
        "day": Text(f"x {DAYS_PER_MONTH} days per month", f"x 每月 {DAYS_PER_MONTH} 天"),
        "week": Text("x 30/7 weeks per month", "x 每月 30/7 周"),
        "year": Text("/ 12 months", "/ 12 个月"),
    }
    return PERIODS[period][0], rules[period]


def _tokens_of(q: Quantity, language: str) -> tuple[float, Text]:
    if q.kind == "tokens":
        return q.count, BLANK
    if q.kind == "words":
        return q.count / WORDS_PER_TOKEN, Text(
            f"~{WORDS_PER_TOKEN} English words per token",
            f"约 {WORDS_PER_TOKEN} 个英文单词 = 1 token",
        )
    chinese = q.kind == "chinese_chars" or (q.kind == "chars" and language == "zh")
    per = CHINESE_CHARS_PER_TOKEN if chinese else ENGLISH_CHARS_PER_TOKEN
    return q.count / per, Text(
        f"~{per:g} {'Chinese' if chinese else 'English'} characters per token",
        f"约 {per:g} 个{'汉' if chinese else '英文'}字符 = 1 token",
    )


def extract_volume(
    text: str, *, language: str = "en", hours_per_day: float | None = None
) -> Volume:
    """The question's work: monthly requests, a token volume (one-off or monthly), concurrency.
    ``text`` is the question with model and GPU names masked. Raises ValueError listing the
    sources when two different request volumes are given."""
    normalised = words_to_digits(text)
    quantities, concurrency = find_quantities(normalised)
    conversions: list[Conversion] = []
    requests: list[tuple[int, str]] = []
    tokens: float | None = None
    tokens_period: str | None = None
    for q in quantities:
        users = q.kind == "users"
        period = (q.period or "day") if users else q.period  # users without a period: a day
        factor, rule = _per_month_rule(period, hours_per_day)
        if q.kind in ("requests", "users"):
            monthly = q.count * (REQUESTS_PER_USER if users else 1) * factor
            if users:
                n = format_count(q.count)
                rule = Text(
                    f"{n} users per {period} x {REQUESTS_PER_USER} requests per user {rule.en}".rstrip(),
                    f"每{PERIODS[period][1]} {n} 用户 x 每人 {REQUESTS_PER_USER} 次请求 {rule.zh}".rstrip(),
                )
            elif q.period is None:
                rule = Text("read as requests per month", "按每月请求数计")
            if rule.en and (
                q.kind == "users" or q.period not in (None, "month") or q.count >= 1000
            ):
                conversions.append(
                    Conversion.of("requests_per_month", q.source, monthly, rule.en, rule.zh)
                )
            requests.append((round(monthly), q.source))
        elif tokens is None:
            count, conv = _tokens_of(q, language)
            tokens = count * factor
            tokens_period = "month" if q.period is not None else None
            rule_en = " ".join(r for r in (conv.en, rule.en) if r)
            if rule_en:
                rule_zh = " ".join(r for r in (conv.zh, rule.zh) if r)
                conversions.append(
                    Conversion.of("total_tokens", q.source, tokens, rule_en, rule_zh)
                )
    if len({v for v, _ in requests}) > 1:
        raise ValueError("; ".join(src for _, src in requests))
    return Volume(
        requests_per_month=requests[0][0] if requests else None,
        total_tokens=round(tokens) if tokens is not None else None,
        tokens_period=tokens_period,
        concurrency=concurrency,
        quantities=tuple(quantities),
        conversions=tuple(conversions),
    )


_RE_BYTES = lazy_pattern(rf"({NUMBER})\s*(tb|gb|mb|kb)\b", re.I)
_BYTES = {"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12}


def text_bytes(masked: str, conversions: list[Conversion]) -> float | None:
    """``1 GB of text`` -> tokens (not ``80 GB of VRAM``), with the conversion appended."""
    lower = masked.lower()
    m = _RE_BYTES().search(masked) if any(u in lower for u in _BYTES) else None
    if not m:
        return None
    size_bytes = parse_number(m.group(1)) * _BYTES[m.group(2).lower()]
    after = masked[m.end() : m.end() + 20].lower()
    if "vram" in after or "memory" in after or "显存" in after:
        return None
    tokens = size_bytes / BYTES_PER_TOKEN
    conversions.append(
        Conversion.of(
            "total_tokens",
            m.group(0).strip(),
            tokens,
            f"~{BYTES_PER_TOKEN:g} bytes of text per token",
            f"约 {BYTES_PER_TOKEN:g} 字节文本 = 1 token",
        )
    )
    return tokens
