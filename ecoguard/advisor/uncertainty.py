"""Quantization under uncertainty: it changes outputs, so it is recommended only when its
saving holds across what the experiments span: the upper end of the quantized p10-p90 range
below the lower end of the unquantized one, or every same-session paired delta negative.
"""

from __future__ import annotations

from typing import Any


def quantization_holds(quantized: dict[str, Any], unquantized: dict[str, Any]) -> bool:
    """Whether a quantized configuration's saving holds beyond the experiments' spread: its
    p90 below the unquantized p10, or every same-session paired delta negative."""
    pairs = [
        p.get("delta_pct") for p in quantized.get("paired_deltas") or () if isinstance(p, dict)
    ]
    pairs = [p for p in pairs if isinstance(p, (int, float))]
    if pairs and all(p < 0 for p in pairs):
        return True
    q_range = quantized.get("energy_per_1k_tokens_j_range")
    u_range = unquantized.get("energy_per_1k_tokens_j_range")
    if q_range and u_range and None not in q_range and None not in u_range:
        return bool(q_range[1] < u_range[0])
    if pairs:
        return False  # the sessions disagree and there is no range to settle it
    q, u = quantized.get("energy_per_1k_tokens_j"), unquantized.get("energy_per_1k_tokens_j")
    return isinstance(q, (int, float)) and isinstance(u, (int, float)) and q < u * 0.95
