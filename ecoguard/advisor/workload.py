"""The shape of the work a question states: batch size (``batch size 8``, ``bs=16``, ``批大小
32``, ``8 prompts at a time``) and sequence lengths (``512 in / 256 out``, ``max_new_tokens=256``, ``4k context``).

Read from the question with model and GPU names masked, so ``Qwen2.5-7B`` is not a 7 and
``H100`` is not 100 of anything.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from ecoguard.advisor.conversions import Conversion
from ecoguard.advisor.coverage import REFERENCE_MAX_SEQUENCE
from ecoguard.advisor.numbers import NUMBER, first_group, lazy_pattern, parse_number
from ecoguard.errors import UsageError

# "batch size 8", "bs=16", "批大小为 32": the words before a batch size.
_BATCH_SAID = (
    r"(?:batch[\s_\-]?size|\bbs|batch|批大小|批量大小|批次大小|批处理大小|批量|批次)"
    r"\s*(?:=|:|：|of|is|为|是|设为|设成)?\s*"
)
_RE_BATCH = lazy_pattern(rf"{_BATCH_SAID}({NUMBER})", re.I)
_RE_CONTEXT = lazy_pattern(
    rf"(?:context(?:\s+length)?|sequence(?:\s+length)?|seq(?:uence)?[\s_]?len|max_length|上下文|序列长度)"
    rf"\s*(?:=|:|：|of|is|为)?\s*({NUMBER})\s*(k)?",
    re.I,
)
_RE_CONTEXT_AFTER = lazy_pattern(
    rf"({NUMBER})\s*(k)?\s*(?:-\s*)?(?:token\s+)?(?:context|上下文)", re.I
)
# "1024 tokens in" is a length; "1M tokens in a month" is a volume (a period follows).
_RE_IN = lazy_pattern(
    rf"({NUMBER})\s*(?:tokens?\s+(?:in\b(?!\s+(?:an?|one|each|every|per)\b)|input|prompt)"
    rf"|in\s*(?=/)|input\b(?!\s+at\b)|prompt\b(?!\s+at\b))"
    rf"|(?:prompt|input|输入)\s*(?:tokens?)?\s*(?:=|:|：|of)?\s*({NUMBER})",
    re.I,
)
_RE_OUT = lazy_pattern(
    rf"({NUMBER})\s*(?:tokens?\s+)?(?:out\b|output|generated)|(?:max_new_tokens|output|输出|生成)\s*(?:tokens?)?\s*(?:=|:|：|of)?\s*({NUMBER})",
    re.I,
)

# A number with a scale after it ("生成 100万字", "output 2M tokens") is a volume, not a length.
_SCALED = lazy_pattern(r"\s*(?:万|亿|千|百|thousand|million|billion|(?:k|m|mn|b)(?![a-z]))", re.I)


# A batch size as written, sign, fraction and exponent included, so "batch size -1", "0", "2.5"
# or "1e12" is refused rather than dropped or read as its leading digits (it was read as 1).
_RE_BATCH_WRITTEN = lazy_pattern(
    _BATCH_SAID + r"(-?\s*\d[\d,]*(?:\.\d+)?(?:e[+-]?\d+)?)(?![\d.])", re.I
)
MAX_BATCH_SIZE = 4096


def _check_batch_sizes(text: str) -> None:
    """Refuse a batch size that is not a whole number of sequences from 1 to MAX_BATCH_SIZE."""
    for match in _RE_BATCH_WRITTEN().finditer(text):
        written = match.group(1).strip()
        try:
            value = float(written.replace(",", "").replace(" ", ""))
        except ValueError:
            continue
        if not value.is_integer() or not 1 <= value <= MAX_BATCH_SIZE:
            raise UsageError(
                f"batch size {written} is not a whole number of sequences from 1 to "
                f"{MAX_BATCH_SIZE}; say e.g. 'batch size 8'"
            )


# "8 prompts at a time", "16 requests per call": the prompts one call takes, a batch size (and
# not a volume: the parser masks these before it reads volumes, as it does lengths).
_RE_PER_CALL = lazy_pattern(
    rf"({NUMBER})\s*(?:prompts?|requests?|queries|query|questions?|messages?|sequences?)\s+"
    r"(?:at a time|per (?:call|batch|generate call))\b",
    re.I,
)


def batch_sizes(masked: str, lower: str) -> tuple[tuple[int, ...], tuple[tuple[int, int], ...]]:
    """The batch sizes stated, smallest first, and where a size is stated as prompts per call.
    A size that is not a whole number from 1 to ``MAX_BATCH_SIZE`` is a usage error, and so are
    two sizes unless the question compares."""
    said: list[re.Match[str]] = []
    if "at a time" in lower or "per " in lower:
        said = list(_RE_PER_CALL().finditer(masked))
    spans = tuple(m.span() for m in said)
    values = (parse_number(m.group(1)) for m in said)
    per_call = {int(b) for b in values if b.is_integer() and 1 <= b <= MAX_BATCH_SIZE}
    if "batch" not in lower and "bs" not in lower and "批" not in lower and not per_call:
        return ((1,) if one_at_a_time(lower) else ()), spans
    _check_batch_sizes(masked)
    batches = {int(parse_number(first_group(b))) for b in _RE_BATCH().finditer(masked)}
    batches = {b for b in batches if b > 0} | per_call
    if len(batches) > 1 and "compare" not in lower:
        raise UsageError(
            f"contradiction: more than one batch size given ({', '.join(map(str, sorted(batches)))}); "
            "give one, or ask to compare"
        )
    if not batches and one_at_a_time(lower):
        return (1,), spans
    return tuple(sorted(batches)), spans


# Prompts sent one by one: batch size 1, stated in words.
_ONE_AT_A_TIME = (
    "one at a time",
    "prompt at a time",
    "request at a time",
    "one by one",
    "for loop",
    "in a loop",
    "sequentially",
    "逐条",
    "一条一条",
    "一个一个",
    "逐个",
    "循环",
)


def one_at_a_time(lower: str) -> bool:
    """The question says prompts go one at a time (``one prompt at a time``, ``in a for loop``,
    ``逐条``): batch size 1."""
    return any(w in lower for w in _ONE_AT_A_TIME)


class Lengths(NamedTuple):
    """Prompt and generated tokens as stated (None: not stated), and the longest sequence
    named (a context length, or prompt plus output), to check against the reference rows."""

    prompt_tokens: int | None
    generation_tokens: int | None
    longest: int
    # Where the prompt and output lengths were read, so the volume reader skips them
    # ("1024 tokens in" is a length, not 1,024 tokens of work).
    spans: tuple[tuple[int, int], ...] = ()


def _context_length(masked: str) -> int:
    """The longest context or sequence length stated (``8k`` is 8,192), 0 when none."""
    seq = 0
    lower = masked.lower()
    if not any(w in lower for w in ("context", "seq", "max_length", "上下文", "序列")):
        return seq
    for m in list(_RE_CONTEXT().finditer(masked)) + list(_RE_CONTEXT_AFTER().finditer(masked)):
        value = parse_number(m.group(1)) * (1000 if m.group(2) else 1)
        if value == 8 * 1000 and m.group(2):
            value = 8192
        seq = max(seq, int(value))
    return seq


def lengths(masked: str, conversions: list[Conversion]) -> Lengths:
    """Prompt and generated tokens (``512 in / 256 out``; a context length as the prompt, with
    its conversion appended to ``conversions``)."""
    ins = [m for m in _RE_IN().finditer(masked) if not _SCALED().match(masked, m.end())]
    outs = [m for m in _RE_OUT().finditer(masked) if not _SCALED().match(masked, m.end())]
    prompt = int(parse_number(first_group(ins[0]))) if ins else None
    generated = int(parse_number(first_group(outs[0]))) if outs else None
    spans = tuple(m.span() for m in ins + outs)
    seq = _context_length(masked)
    longest = max(seq, (prompt or 0) + (generated or 0))
    if seq and prompt is None and seq <= REFERENCE_MAX_SEQUENCE:
        prompt = seq
        conversions.append(
            Conversion.of(
                "prompt_tokens",
                f"{seq}",
                seq,
                "context length used as the prompt length",
                "上下文长度按提示词长度计",
            )
        )
    return Lengths(prompt, generated, longest, spans)
