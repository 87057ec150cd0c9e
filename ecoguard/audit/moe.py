"""Mixture-of-experts models are sized by all their parameters: every expert's weights sit in
GPU memory, although each token runs through only a few of them.

A name often states the active count (``Llama-4-Scout-17B-16E``: 17B active of 109B) or the
expert layout (``Mixtral-8x7B``: ~46.7B, the experts share attention), so the size parsed from
the name would be wrong or missing. Totals below are the model cards' published parameter
counts; a name that marks experts but is not listed gets no size (rules that need one stay
silent) rather than its active count.
"""

from __future__ import annotations

import re

# Folded name fragment -> total parameters (B), from the publishers' model cards.
MOE_TOTALS_B: dict[str, float] = {
    "llama-4-scout-17b-16e": 109.0,
    "llama-4-maverick-17b-128e": 400.0,
    "mixtral-8x7b": 46.7,
    "mixtral-8x22b": 140.6,
    "qwen1.5-moe-a2.7b": 14.3,
    "deepseek-v2-lite": 15.7,
    "deepseek-v3": 671.0,
    "deepseek-r1": 671.0,
    "phi-3.5-moe": 41.9,
    "dbrx": 132.0,
}

# Names that mark experts without stating the total: "17B-16E", "8x7B", "MoE-A2.7B".
_EXPERT_MARKS = re.compile(r"\d+(\.\d+)?b[-_]\d+e\b|\b\d+x\d+(\.\d+)?b\b|moe", re.IGNORECASE)
# ...unless the name states the total too: "Qwen3-30B-A3B", "57B-A14B", "OLMoE-1B-7B" (the
# last size in the name, which the size parser takes, is then the total).
_TOTAL_AND_ACTIVE = re.compile(
    r"\d+(\.\d+)?b[-_]a\d+(\.\d+)?[bm]\b|\d+(\.\d+)?b[-_]\d+(\.\d+)?b\b", re.IGNORECASE
)


def moe_total_b(name: str) -> tuple[float | None, bool]:
    """(total parameters in B or None, whether ``name`` is a mixture-of-experts name the
    caller's size may be wrong for). ``(None, True)``: an MoE whose total is not known."""
    folded = name.strip().lower().replace("_", "-")
    for fragment, total in MOE_TOTALS_B.items():
        if fragment in folded:
            return total, True
    if _TOTAL_AND_ACTIVE.search(folded):
        return None, False  # the size parsed from the name is the total
    if _EXPERT_MARKS.search(folded):
        return None, True
    return None, False
