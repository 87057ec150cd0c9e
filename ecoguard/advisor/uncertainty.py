"""Quantization under uncertainty: it changes outputs, so it is recommended only when its
saving holds across what the experiments span: the upper end of the quantized p10-p90 range
below the lower end of the unquantized one, or every same-session paired delta negative; else
the answer says why not (``uncertain_reason``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ecoguard.advisor.texts import Text
from ecoguard.knowledge.estimator import Estimate


def quantization_holds(quantized: Estimate, unquantized: Estimate) -> bool:
    """Whether a quantized configuration's saving holds beyond the experiments' spread: its
    p90 below the unquantized p10, or every same-session paired delta negative."""
    pairs = [delta for _, _, delta, _ in quantized.paired_deltas]
    if pairs and all(p < 0 for p in pairs):
        return True
    q_range = quantized.energy_per_1k_tokens_j_range
    u_range = unquantized.energy_per_1k_tokens_j_range
    if q_range and u_range:
        return bool(q_range[1] < u_range[0])
    if pairs:
        return False  # the sessions disagree and there is no range to settle it
    q, u = quantized.energy_per_1k_tokens_j, unquantized.energy_per_1k_tokens_j
    return q is not None and u is not None and q < u * 0.95


@dataclass(frozen=True, slots=True)
class Quote:
    """A configuration as ``uncertain_reason`` states it: its precision, batch size and the
    estimate behind it (J per 1k tokens, its range and same-session deltas)."""

    precision: str
    batch_size: int
    estimate: Estimate


def uncertain_reason(quantized: Quote, ref: Quote, language: str) -> str:
    """Why a lower quantized figure is not recommended: its range and paired deltas."""
    q_est, r_est = quantized.estimate, ref.estimate
    q_range = q_est.energy_per_1k_tokens_j_range or (None, None)
    r_range = r_est.energy_per_1k_tokens_j_range or (None, None)
    pair_text = ", ".join(f"{d:+.1f}%" for _, _, d, _ in q_est.paired_deltas)
    energy = q_est.energy_per_1k_tokens_j or 0.0

    def rng(bounds: tuple[float, float] | tuple[None, None]) -> str:
        return "-" if None in bounds else f"{bounds[0]:,.0f}-{bounds[1]:,.0f}"

    en = (
        f"{quantized.precision} BS{quantized.batch_size} looks lower "
        f"({energy:,.0f} J/1k, range {rng(q_range)}) but the saving "
        f"does not hold across the experiments ({ref.precision} range {rng(r_range)}"
        + (f"; same-session deltas vs FP16: {pair_text}" if pair_text else "")
        + "), and quantizing changes outputs: the unquantized configuration is recommended"
    )
    zh = (
        f"{quantized.precision} 批大小 {quantized.batch_size} 看起来更低"
        f"（{energy:,.0f} J/1k，区间 {rng(q_range)}），但在各次实验中"
        f"节能并不稳定（{ref.precision} 区间 {rng(r_range)}"
        + (f"；同一会话相对 FP16 的变化：{pair_text}" if pair_text else "")
        + "），而且量化会改变输出：推荐不量化的配置"
    )
    return Text(en, zh).get(language)
