"""The estimator's answer: :class:`Estimate` (figures, ranges, basis) and :class:`Monthly`.

Plain frozen records with ``to_dict`` (the JSON every door prints); built only by
:func:`ecoguard.knowledge.estimator.estimate`, which re-exports both.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ecoguard.deployment import Deployment
from ecoguard.findings import Finding

Range = tuple[float, float]


@dataclass(frozen=True, slots=True)
class Monthly:
    """Monthly totals for ``requests`` requests: energy at the wall (PUE applied), USD, kg CO2,
    each with its p10-p90 range."""

    requests: int
    energy_kwh: float | None
    cost_usd: float | None
    co2_kg: float | None
    region: str = "us"
    price_usd_per_kwh: float | None = None
    gco2_per_kwh: float | None = None
    pue: float | None = None
    energy_kwh_range: Range | None = None
    cost_usd_range: Range | None = None
    co2_kg_range: Range | None = None


@dataclass(frozen=True, slots=True)
class Estimate:
    """Figures for one deployment and how they were obtained (``tier``, ``method``, ``rows``).

    ``energy_per_1k_tokens_j_range`` and ``energy_per_request_j_range`` are p10-p90 intervals;
    ``family`` names the ladder's method and ``holdout_error_pct`` its measured hold-out error
    (median and p90 |error| %, None for an exact match, whose interval is its sessions' spread);
    ``carried_from`` lists the GPUs an extrapolated figure was carried from."""

    energy_per_1k_tokens_j: float | None
    energy_per_request_j: float | None
    tokens_per_j: float | None
    power_w: float | None
    throughput_tok_s: float | None
    latency_s: float | None
    vram_gb: float | None
    monthly: Monthly
    tier: str
    method: str
    sources: tuple[str, ...]
    rows: tuple[str, ...]
    confidence: str
    deployment: Deployment
    assumptions: tuple[str, ...] = ()
    vram_method: str = ""
    energy_per_1k_tokens_j_range: Range | None = None
    energy_per_request_j_range: Range | None = None
    family: str = "none"
    holdout_error_pct: tuple[float, float] | None = None
    carried_from: tuple[str, ...] = ()
    holdout: str | None = None
    sessions: tuple[str, ...] = ()
    # (source, session, change % vs FP16, baseline: the FP16 row or session it was paired with)
    paired_deltas: tuple[tuple[str, str, float, str], ...] = ()
    # A measured configuration's own sessions: (session, J per 1k tokens), the figure's basis.
    measurements: tuple[tuple[str, float], ...] = ()
    # The figure on the paired chain (FP16 anchor x same-session changes): what a comparison
    # between two configurations (alerts, $ saved) reads; equal to the figure where no chain.
    paired_energy_per_1k_tokens_j: float | None = None
    paired_energy_per_request_j: float | None = None
    # The chain's links: (what changed, paired %, each session's %, own figures' % or None).
    paired_changes: tuple[tuple[str, float, tuple[float, ...], float | None], ...] = ()
    # Rows of this configuration that ran offloaded (id, J per 1k tokens, why): shown, not used.
    offloaded_rows: tuple[tuple[str, float | None, str], ...] = ()
    # Findings on the deployment itself (vram-overflow), on the figures the rule compares.
    findings: tuple[Finding, ...] = ()

    def to_dict(self) -> dict:
        """JSON-ready: the figures, their ranges, the basis, and the deployment as plain dicts."""
        monthly = {}
        for key, value in asdict(self.monthly).items():
            if isinstance(value, float):
                value = _r(value, 6)
            elif isinstance(value, (tuple, list)):
                value = [_r(v, 6) for v in value]
            monthly[key] = value
        return {
            "energy_per_request_j": _r(self.energy_per_request_j),
            "energy_per_request_j_range": _rr(self.energy_per_request_j_range),
            "energy_per_1k_tokens_j": _r(self.energy_per_1k_tokens_j),
            "energy_per_1k_tokens_j_range": _rr(self.energy_per_1k_tokens_j_range),
            "tokens_per_j": _r(self.tokens_per_j, 5),
            "power_w": _r(self.power_w),
            "throughput_tok_s": _r(self.throughput_tok_s),
            "latency_s": _r(self.latency_s),
            "vram_gb": _r(self.vram_gb),
            "vram_gb_per_card": _r(
                None if self.vram_gb is None else self.vram_gb / self.deployment.gpu_count
            ),
            "gpu_count": self.deployment.gpu_count,
            "vram_method": self.vram_method,
            "monthly": monthly,
            "tier": self.tier,
            "method": self.method,
            "family": self.family,
            "confidence": self.confidence,
            "holdout_error_pct": (
                None
                if self.holdout_error_pct is None
                else {"median": self.holdout_error_pct[0], "p90": self.holdout_error_pct[1]}
            ),
            "carried_from": list(self.carried_from),
            "holdout": self.holdout,
            "sources": list(self.sources),
            "rows": list(self.rows),
            "sessions": list(self.sessions),
            "paired_deltas": [
                {"source": src, "session": ses, "delta_pct": round(d, 1), "baseline": base}
                for src, ses, d, base in self.paired_deltas
            ],
            "measurements": [
                {"session": ses, "energy_per_1k_tokens_j": _r(v)} for ses, v in self.measurements
            ],
            "paired_energy_per_1k_tokens_j": _r(self.paired_energy_per_1k_tokens_j),
            "paired_energy_per_request_j": _r(self.paired_energy_per_request_j),
            "paired_changes": [
                {
                    "change": what,
                    "paired_pct": round(pct, 1),
                    "session_pcts": [round(v, 1) for v in each],
                    "own_figures_pct": None if own is None else round(own, 1),
                }
                for what, pct, each, own in self.paired_changes
            ],
            "offloaded_rows": [
                {"id": rid, "energy_per_1k_tokens_j": _r(value), "offloaded": why}
                for rid, value, why in self.offloaded_rows
            ],
            "findings": [f.to_dict() for f in self.findings],
            "assumptions": list(self.assumptions),
            "deployment": asdict(self.deployment),
        }


def _r(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def _rr(value: Range | None, digits: int = 3) -> list[float] | None:
    return None if value is None else [round(value[0], digits), round(value[1], digits)]


__all__ = ["Estimate", "Monthly", "Range"]
