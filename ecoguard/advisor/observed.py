"""Figures the user measured and reports (diagnose): throughput (``10 tok/s``, ``每秒只有 10 个
token``), board power (``300 W``; a TDP or power limit is not a measurement) and energy
(``12000 J/1k tokens``, ``0.5 J/token``, ``每个 token 500 毫焦``).
"""

from __future__ import annotations

import re
from typing import NamedTuple

from ecoguard.advisor.conversions import Conversion
from ecoguard.advisor.numbers import NUMBER, parse_number

_RE_THROUGHPUT = re.compile(
    rf"({NUMBER})\s*(?:tok/s|tokens?/s(?:ec)?|t/s|tps|tokens? per second|tok per second|"
    r"tokens?\s*每秒|个\s*token\s*每秒)",
    re.I,
)
_RE_THROUGHPUT_CN = re.compile(rf"每秒\s*(?:只有|仅)?\s*({NUMBER})\s*(?:个)?\s*tokens?", re.I)
_RE_POWER = re.compile(rf"({NUMBER})\s*(?:w|watts?|瓦)(?![a-z])", re.I)
_RE_ENERGY_1K = re.compile(
    rf"({NUMBER})\s*(?:j|joules?|焦耳?)\s*(?:/|per|每)\s*(?:1k|1,?000|千)\s*(?:tokens?|tok)?", re.I
)
_RE_ENERGY_TOKEN = re.compile(
    rf"({NUMBER})\s*(m?j|m?joules?|焦耳?)\s*(?:/|per|每)\s*(?:tokens?|tok)\b", re.I
)
_RE_ENERGY_TOKEN_CN = re.compile(rf"每\s*(?:个)?\s*tokens?\s*({NUMBER})\s*(毫焦|mj|焦耳?|j)", re.I)


class Observed(NamedTuple):
    """Figures the user measured (diagnose), named as the Question's fields."""

    observed_throughput_tok_s: float | None = None
    observed_power_w: float | None = None
    observed_energy_j_per_1k: float | None = None


def _energy(masked: str, conversions: list[Conversion]) -> tuple[float | None, tuple[int, int]]:
    """Joules per 1k tokens as stated, or from joules per token (the conversion appended), and
    where it was written (so its number is not read as a power too)."""
    m = _RE_ENERGY_1K.search(masked)
    if m:
        return parse_number(m.group(1)), m.span()
    m = _RE_ENERGY_TOKEN.search(masked) or _RE_ENERGY_TOKEN_CN.search(masked)
    if not m:
        return None, (0, 0)
    milli = m.group(2).lower().startswith("m") or m.group(2) == "毫焦"
    per_token = parse_number(m.group(1)) / (1000.0 if milli else 1.0)
    conversions.append(
        Conversion.of(
            "observed_energy_j_per_1k",
            m.group(0).strip(),
            per_token * 1000.0,
            "J per token x 1000 = J per 1k tokens",
            "每 token 焦耳 x 1000 = 每千 token 焦耳",
        )
    )
    return per_token * 1000.0, m.span()


def _power(masked: str, energy_span: tuple[int, int]) -> float | None:
    """The first power figure that is neither inside the energy figure nor a TDP or limit."""
    masked_lower = masked.lower()
    for m in _RE_POWER.finditer(masked):
        if energy_span[0] <= m.start() < energy_span[1]:
            continue
        before = masked_lower[max(0, m.start() - 20) : m.start()]
        if "tdp" in before or "limit" in before:
            continue
        return parse_number(m.group(1))
    return None


def observed(masked: str, conversions: list[Conversion]) -> Observed:
    """The measured figures in a question (model and GPU names masked)."""
    m = _RE_THROUGHPUT.search(masked) or _RE_THROUGHPUT_CN.search(masked)
    throughput = parse_number(m.group(1)) if m else None
    energy, energy_span = _energy(masked, conversions)
    return Observed(throughput, _power(masked, energy_span), energy)
