"""The volume and rate extractor: a table of forms, and property tests that a number written in
any accepted way (digits, separators, k/M, words, 万/亿, Chinese numerals, pinyin) round-trips
through every unit and period, in English and Chinese."""

from __future__ import annotations

import itertools
import random

import pytest

from ecoguard.advisor.volume import (
    CHINESE_CHARS_PER_TOKEN,
    ENGLISH_CHARS_PER_TOKEN,
    PERIODS,
    REQUESTS_PER_USER,
    WORDS_PER_TOKEN,
    extract_volume,
    words_to_digits,
)

# (text, requests per month, tokens, tokens recur monthly, concurrency)
TABLE: list[tuple[str, int | None, int | None, bool, int | None]] = [
    ("100 requests per second", 100 * 86_400 * 30, None, False, None),
    ("100 req/s", 100 * 86_400 * 30, None, False, None),
    ("200 QPS", 200 * 86_400 * 30, None, False, None),
    ("QPS of 200", 200 * 86_400 * 30, None, False, None),
    ("50 RPS", 50 * 86_400 * 30, None, False, None),
    ("200 queries per minute", 200 * 1_440 * 30, None, False, None),
    ("1000 requests per hour", 1000 * 24 * 30, None, False, None),
    ("100 requests per day", 3_000, None, False, None),
    ("5k requests a week", round(5000 * 30 / 7), None, False, None),
    ("1M requests/month", 1_000_000, None, False, None),
    ("12 million requests a year", 1_000_000, None, False, None),
    ("a million requests a month", 1_000_000, None, False, None),
    ("half a million requests", 500_000, None, False, None),
    ("two hundred and fifty thousand calls a month", 250_000, None, False, None),
    ("10,000 users/day", 10_000 * REQUESTS_PER_USER * 30, None, False, None),
    ("DAU 50k", 50_000 * REQUESTS_PER_USER * 30, None, False, None),
    ("1,000,000 tokens per day", None, 30_000_000, True, None),
    ("1 million Chinese characters", None, 500_000, False, None),
    ("100 wan zi", None, 500_000, False, None),
    ("3000 English words", None, 4_000, False, None),
    ("2 yi tokens", None, 200_000_000, False, None),
    ("500 concurrent users", None, None, False, 500),
    ("concurrency of 64", None, None, False, 64),
    ("20 tokens per second", None, None, False, None),  # a throughput, not a volume
    ("3000 prompt tokens", None, None, False, None),  # a length, not requests
    ("每秒 30 次请求", 30 * 86_400 * 30, None, False, None),
    ("每小时 1000 次请求", 720_000, None, False, None),
    ("每天一万用户", 10_000 * REQUESTS_PER_USER * 30, None, False, None),
    ("日活 10 万", 100_000 * REQUESTS_PER_USER * 30, None, False, None),
    ("每月 100 万次请求", 1_000_000, None, False, None),
    ("我们每周大约 2 万次调用", round(20_000 * 30 / 7), None, False, None),
    ("100万字", None, 500_000, False, None),
    ("十万字", None, 50_000, False, None),
    ("1 亿字", None, 50_000_000, False, None),
    ("10 万 token 每天", None, 3_000_000, True, None),
    ("并发 200", None, None, False, 200),
    ("500 人同时在线", None, None, False, 500),
]


@pytest.mark.parametrize(("text", "requests", "tokens", "monthly_tokens", "concurrency"), TABLE)
def test_table(text, requests, tokens, monthly_tokens, concurrency):
    zh = any("\u4e00" <= ch <= "\u9fff" for ch in text)
    volume = extract_volume(text, language="zh" if zh else "en")
    assert volume.requests_per_month == requests
    assert volume.total_tokens == tokens
    assert (volume.tokens_period == "month") is monthly_tokens
    assert volume.concurrency == concurrency


def test_every_conversion_is_stated():
    volume = extract_volume("100 requests per second")
    assert [c.rule.en for c in volume.conversions] == ["x 86,400 s a day x 30 days"]
    assert volume.conversions[0].rule.zh  # and in Chinese
    chars = extract_volume("1 million Chinese characters")
    assert "2 Chinese characters per token" in chars.conversions[0].rule.en


def test_two_different_volumes_are_a_contradiction():
    with pytest.raises(ValueError, match="requests"):
        extract_volume("1M requests a month and 5 requests per second")


def test_serving_hours_scale_sub_daily_rates():
    volume = extract_volume("10 requests per minute", hours_per_day=8)
    assert volume.requests_per_month == 10 * 60 * 8 * 30


# ---------------------------------------------------------------------------------------------
# Property tests: numbers round-trip through every writing, unit and period.

_EN_SMALL = {1: "one", 2: "two", 3: "three", 5: "five", 10: "ten", 20: "twenty", 50: "fifty"}
_CN_DIGIT = "零一二三四五六七八九"


def _chinese(n: int) -> str:
    """10_000 * k (k < 10,000) in Chinese numerals: 三万, 一百二十万..."""
    k = n // 10_000
    out = ""
    for value, unit in ((1000, "千"), (100, "百"), (10, "十"), (1, "")):
        digit = (k // value) % 10
        if digit:
            out += _CN_DIGIT[digit] + unit
    return out + "万"


def _writings(n: int) -> list[tuple[str, str]]:
    """(language, text) for ``n`` in every form that can express it."""
    out = [("en", str(n)), ("en", f"{n:,}"), ("zh", str(n))]
    if n % 1000 == 0:
        out.append(("en", f"{n // 1000}k"))
        out.append(("en", f"{n // 1000} thousand"))
    if n % 1_000_000 == 0:
        out.append(("en", f"{n // 1_000_000}M"))
        out.append(("en", f"{n // 1_000_000} million"))
        if n // 1_000_000 in _EN_SMALL:
            out.append(("en", f"{_EN_SMALL[n // 1_000_000]} million"))
    if n % 10_000 == 0:
        out.append(("zh", f"{n // 10_000}万"))
        out.append(("zh", f"{n // 10_000} 万"))
        out.append(("en", f"{n // 10_000} wan"))
        if n < 100_000_000:
            out.append(("zh", _chinese(n)))
    if n % 100_000_000 == 0:
        out.append(("zh", f"{n // 100_000_000}亿"))
        out.append(("en", f"{n // 100_000_000} yi"))
    return out


_UNITS = {
    "en": {
        "requests": ("requests", 1.0),
        "users": ("users", float(REQUESTS_PER_USER)),
        "tokens": ("tokens", 1.0),
        "chinese_chars": ("Chinese characters", 1 / CHINESE_CHARS_PER_TOKEN),
        "chars": ("characters", 1 / ENGLISH_CHARS_PER_TOKEN),
        "words": ("words", 1 / WORDS_PER_TOKEN),
    },
    "zh": {
        "requests": ("次请求", 1.0),
        "users": ("用户", float(REQUESTS_PER_USER)),
        "tokens": ("个token", 1.0),
        "chinese_chars": ("字", 1 / CHINESE_CHARS_PER_TOKEN),
    },
}
_PERIODS = {
    "en": {
        None: "",
        "second": " per second",
        "minute": " per minute",
        "hour": " an hour",
        "day": " per day",
        "week": " a week",
        "month": " a month",
        "year": " per year",
    },
    "zh": {
        None: "",
        "second": "每秒",
        "minute": "每分钟",
        "hour": "每小时",
        "day": "每天",
        "week": "每周",
        "month": "每月",
        "year": "每年",
    },
}


def _cases(seed: int = 7, count: int = 600) -> list[tuple[str, str, str | None, int, str]]:
    rng = random.Random(seed)
    numbers = [1_000, 20_000, 250_000, 1_000_000, 3_000_000, 50_000_000, 200_000_000]
    cases = []
    for n in numbers:
        for (lang, written), (kind, _unit), period in itertools.product(
            _writings(n), _UNITS["en"].items(), _PERIODS["en"]
        ):
            units = _UNITS.get(lang, _UNITS["en"])
            if kind not in units or period not in _PERIODS[lang]:
                continue
            if kind in ("tokens", "chars", "chinese_chars", "words") and period == "second":
                continue  # tokens per second are a throughput
            cases.append((lang, written, period, n, kind))
    rng.shuffle(cases)
    return cases[:count]


@pytest.mark.parametrize(("lang", "written", "period", "n", "kind"), _cases())
def test_numbers_round_trip_through_units_and_periods(lang, written, period, n, kind):
    unit, per_item = _UNITS[lang][kind]
    if lang == "zh":
        text = f"{_PERIODS['zh'][period]}{written}{unit}"
    else:
        text = f"{written} {unit}{_PERIODS['en'][period]}"
    volume = extract_volume(text, language=lang)
    per_month = 1.0 if period is None else PERIODS[period][0]
    if kind in ("requests", "users"):
        users_period = period or "day"  # a user count without a period is per day
        factor = PERIODS[users_period][0] if kind == "users" else per_month
        assert volume.requests_per_month == round(n * per_item * factor), text
        assert volume.total_tokens is None, text
    else:
        assert volume.total_tokens == round(n * per_item * per_month), text
        assert volume.requests_per_month is None, text


def test_property_cases_cover_every_unit_period_and_language():
    cases = _cases()
    assert len(cases) >= 300
    assert {c[0] for c in cases} == {"en", "zh"}
    assert {c[4] for c in cases} == set(_UNITS["en"])
    assert {c[2] for c in cases} == set(_PERIODS["en"])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("one million", "1000000"),
        ("half a million", "500000"),
        ("a thousand", "1000"),
        ("twenty five thousand", "25000"),
        ("two hundred and fifty thousand", "250000"),
        ("100 wan", "100万"),
        ("3 qian", "3千"),
        ("often a tone", "often a tone"),  # words that merely contain number words stay
        ("Yi-6B", "Yi-6B"),  # the model family, not pinyin 亿
    ],
)
def test_words_to_digits(text, expected):
    assert words_to_digits(text) == expected


def test_long_runs_of_number_words_neither_overflow_nor_merge():
    # "one hundred" repeated used to multiply into infinity and crash the parser.
    text = words_to_digits("one hundred " * 400)
    assert "inf" not in text and len(text) < len("one hundred " * 400)
    assert words_to_digits("one billion billion") == "1000000000 billion"
