"""compare: every precision for one model on one GPU; compare_across_models: one precision
across the models measured on a GPU."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ecoguard.advisor.estimates import run_estimate, run_rules
from ecoguard.advisor.protocols.base import (
    TIE_FRACTION,
    UNQUANTIZED,
    AdvisorResult,
    Request,
    cited_result,
    figure,
    with_precision,
)
from ecoguard.advisor.texts import Text
from ecoguard.advisor.uncertainty import Quote, quantization_holds, uncertain_reason
from ecoguard.config import Settings
from ecoguard.deployment import PRECISIONS, Deployment, GpuSpec
from ecoguard.errors import UsageError
from ecoguard.findings import Finding, Mood, weakest_tier
from ecoguard.knowledge import find_rows
from ecoguard.knowledge.estimator import Estimate


@dataclass(frozen=True, slots=True)
class _Verdict:
    """What a comparison concludes: its mood, the recommendation shown, the findings behind
    it and the notes that explain it."""

    mood: Mood
    recommendation: dict[str, Any] | None
    findings: list[Finding]
    notes: list[str]

    def fields(self) -> dict[str, Any]:
        """The verdict as the compare answer's fields."""
        return {
            "protocol": "compare",
            "mood": self.mood,
            "recommendation": self.recommendation,
            "findings": tuple(self.findings),
            "notes": tuple(self.notes),
        }


@dataclass(slots=True)
class PrecisionCell:
    """One precision's row: the estimate behind it, its change vs FP16 and its rank (None
    without an energy figure)."""

    precision: str
    estimate: Estimate
    delta_vs_fp16_pct: float | None
    rank: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """The row's JSON: the estimate's figures as its JSON rounds them."""
        est = self.estimate.to_dict()
        return {
            "precision": self.precision,
            **{k: figure(est, k) for k in ("throughput_tok_s", "energy_per_1k_tokens_j")},
            "energy_per_1k_tokens_j_range": est["energy_per_1k_tokens_j_range"],
            "delta_vs_fp16_pct": self.delta_vs_fp16_pct,
            "paired_deltas": est["paired_deltas"],
            **{k: figure(est, k) for k in ("tokens_per_j", "vram_gb", "latency_s", "power_w")},
            "cost_usd_per_month": est["monthly"]["cost_usd"],
            **{k: est[k] for k in ("tier", "method", "rows")},
            "rank": self.rank,
        }


def compare(request: Request, *, precisions: Sequence[str] | None = None) -> AdvisorResult:
    """Every precision (``precisions``, default all) for the request's model on its GPU:
    throughput, J/1k tokens, delta vs FP16, tokens/J, VRAM, latency, power, rank and tier per
    cell."""
    deployment, settings, language = request.deployment, request.settings, request.language
    requests_per_month = request.requests_per_month
    if deployment.model.params_b is None and deployment.model.id is None:
        raise UsageError("compare needs a model (an id like Qwen2.5-7B or a size like 7B)")
    base = run_estimate(with_precision(deployment, "fp16"), settings, requests_per_month)
    cells = []
    for precision in precisions or PRECISIONS:
        est = run_estimate(with_precision(deployment, precision), settings, requests_per_month)
        delta = _delta_pct(est.energy_per_1k_tokens_j, base.energy_per_1k_tokens_j)
        cells.append(PrecisionCell(precision, est, delta))
    ranked = sorted(
        (c for c in cells if c.estimate.energy_per_1k_tokens_j is not None),
        key=lambda c: c.estimate.energy_per_1k_tokens_j or 0.0,
    )
    for rank, cell in enumerate(ranked, start=1):
        cell.rank = rank
    known = [c for c in cells if c.estimate.tier != "none"]
    findings = run_rules(deployment, settings) if deployment.precision else []
    verdict = _precision_verdict(deployment, cells, ranked, known, findings, language)
    return cited_result(
        [row for c in cells for row in c.estimate.rows],
        [src for c in cells for src in c.estimate.sources],
        rows=tuple(cells),
        tier=weakest_tier(c.estimate.tier for c in known),
        language=language,
        deployment=deployment,
        extra={"baseline": "fp16"},
        **verdict.fields(),
    )


def _delta_pct(energy: float | None, base: float | None) -> float | None:
    return round((energy / base - 1.0) * 100.0, 1) if energy and base else None


def _precision_verdict(
    deployment: Deployment,
    cells: list[PrecisionCell],
    ranked: list[PrecisionCell],
    known: list[PrecisionCell],
    findings: list[Finding],
    language: str,
) -> _Verdict:
    """Gray without data, else the worst finding's mood (green without one). The lowest cell
    is recommended, unless it is quantized and its saving does not hold across the
    experiments: then the lowest unquantized one, with the reason stated."""
    mood = Mood.worst(f.mood for f in findings) if known else Mood.GRAY
    best = ranked[0] if ranked else None
    notes: list[str] = []
    fp16_cell = next((c for c in cells if c.precision == "fp16"), None)
    if (
        best is not None
        and best.precision not in UNQUANTIZED
        and fp16_cell is not None
        and fp16_cell.estimate.energy_per_1k_tokens_j is not None
        and not quantization_holds(best.estimate, fp16_cell.estimate)
    ):
        batch = deployment.batch_size or 1
        notes.append(
            uncertain_reason(
                Quote(best.precision, batch, best.estimate),
                Quote("fp16", batch, fp16_cell.estimate),
                language,
            )
        )
        unquantized = [c for c in ranked if c.precision in UNQUANTIZED]
        best = unquantized[0] if unquantized else best
    recommendation = None
    if best is not None:
        row = best.to_dict()
        recommendation = {
            key: row[key]
            for key in ("precision", "energy_per_1k_tokens_j", "energy_per_1k_tokens_j_range")
        }
        recommendation.update(delta_vs_fp16_pct=best.delta_vs_fp16_pct, tier=row["tier"])
    return _Verdict(mood, recommendation, findings, notes)


def compare_across_models(
    gpu_profile: str,
    precisions: Sequence[str],
    *,
    language: str = "en",
    architecture: str | None = None,
) -> AdvisorResult:
    """A precision question without a model ("should I use FP8 on Blackwell?"): every model
    measured on that GPU at FP16 and at the asked precisions, straight from the reference rows
    (delta vs the FP16 row of the same source file when there is one)."""
    wanted = [p for p in precisions if p != "fp16"]
    if not wanted:
        raise UsageError("name a precision to compare against FP16 (e.g. FP8, NF4, INT8)")
    rows_out = [
        _model_row(gpu_profile, row)
        for precision in wanted
        for row in sorted(
            find_rows(gpu=gpu_profile, precision=precision, batch_size=1),
            key=lambda r: (r.params_b or 0, r.model_id),
        )
    ]
    verdict = _models_verdict(rows_out, wanted, gpu_profile, architecture, language)
    return cited_result(
        [row_id for row in rows_out for row_id in row["rows"]],
        rows=tuple(rows_out),
        tier=weakest_tier(r["tier"] for r in rows_out),
        language=language,
        extra={"scope": "models", "gpu": gpu_profile},
        **verdict.fields(),
    )


def _model_row(gpu_profile: str, row: Any) -> dict[str, Any]:
    """A measured row beside the FP16 row of the same model and GPU (from the same source file
    when there is one), with the change between them."""
    fp16 = find_rows(gpu=gpu_profile, model=row.model_id, precision="fp16", batch_size=1)
    same_source = [r for r in fp16 if r.source == row.source] or list(fp16)
    base = same_source[0] if same_source else None
    return {
        "model": row.model_id,
        "params_b": row.params_b,
        "precision": row.precision,
        "energy_per_1k_tokens_j": row.energy_j_per_1k,
        "fp16_energy_per_1k_tokens_j": base.energy_j_per_1k if base else None,
        "delta_vs_fp16_pct": _delta_pct(
            row.energy_j_per_1k, base.energy_j_per_1k if base else None
        ),
        "throughput_tok_s": row.throughput_tok_s,
        "power_w": row.power_w,
        "tier": row.tier if base is None else weakest_tier((row.tier, base.tier)),
        "rows": [row.id] + ([base.id] if base else []),
    }


def _models_verdict(
    rows: list[dict[str, Any]],
    wanted: list[str],
    gpu_profile: str,
    architecture: str | None,
    language: str,
) -> _Verdict:
    """Stay on FP16 when the precision cost more on every model (red past +50%), use it when it
    saved on every one, else it depends on size; FP8 rows carry the fp8-eager finding."""
    if not rows:
        return _Verdict(Mood.GRAY, None, [], [])
    deltas = [r["delta_vs_fp16_pct"] for r in rows if r["delta_vs_fp16_pct"] is not None]
    worse = sum(1 for d in deltas if d > TIE_FRACTION * 100)
    better = sum(1 for d in deltas if d < -TIE_FRACTION * 100)
    if deltas and worse == len(deltas):
        mood = Mood.RED if min(deltas) > 50 else Mood.ORANGE
        verdict = "stay-fp16"
    elif deltas and better == len(deltas):
        mood, verdict = Mood.GREEN, "use"
    else:
        mood, verdict = Mood.YELLOW, "depends-on-size"
    recommendation = {
        "verdict": verdict,
        "precisions": wanted,
        "delta_min_pct": min(deltas) if deltas else None,
        "delta_max_pct": max(deltas) if deltas else None,
        "models": len(rows),
    }
    findings: list[Finding] = []
    notes: list[str] = []
    if any(p in ("fp8_weight_only", "fp8_dynamic") for p in wanted):
        dep = with_precision(
            Deployment(gpu=GpuSpec(profile=gpu_profile, architecture=architecture)), wanted[0]
        )
        findings = [f for f in run_rules(dep, Settings()) if f.rule == "fp8-eager"]
        if findings:
            notes.append(
                Text(
                    "These FP8 rows ran torchao in eager mode; torch.compile is the untested way out (measure it with `ecoguard bench`).",
                    "这些 FP8 数据是 torchao 在 eager 模式下测的；torch.compile 可能改善，但没有数据，请用 `ecoguard bench` 自测。",
                ).get(language)
            )
    return _Verdict(mood, recommendation, findings, notes)
