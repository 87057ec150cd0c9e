"""compare: every precision for one model on one GPU; compare_across_models: one precision
across the models measured on a GPU."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ecoguard.advisor.estimates import (
    estimate_dict,
    knowledge_module,
    run_estimate,
    run_rules,
)
from ecoguard.advisor.protocols.base import (
    TIE_FRACTION,
    UNQUANTIZED,
    AdvisorResult,
    cite,
    figure,
    monthly_of,
    uncertain_reason,
    with_precision,
)
from ecoguard.advisor.texts import Text
from ecoguard.advisor.uncertainty import quantization_holds
from ecoguard.config import Settings
from ecoguard.deployment import PRECISIONS, Deployment, GpuSpec
from ecoguard.errors import UsageError
from ecoguard.findings import Finding, Mood, weakest_tier


def compare(
    deployment: Deployment,
    *,
    settings: Settings | None = None,
    requests_per_month: int | None = None,
    precisions: Sequence[str] | None = None,
    language: str = "en",
) -> AdvisorResult:
    """Every precision for one model on one GPU: throughput, J/1k tokens, delta vs FP16,
    tokens/J, VRAM, latency, power, rank and tier per cell."""
    settings = settings or Settings()
    if deployment.model.params_b is None and deployment.model.id is None:
        raise UsageError("compare needs a model (an id like Qwen2.5-7B or a size like 7B)")
    wanted = list(precisions or PRECISIONS)
    baseline_dict = estimate_dict(
        run_estimate(with_precision(deployment, "fp16"), settings, requests_per_month)
    )
    base_energy = figure(baseline_dict, "energy_per_1k_tokens_j")
    cells: list[dict[str, Any]] = []
    evidence: list[str] = []
    src: list[str] = []
    for precision in wanted:
        dep = with_precision(deployment, precision)
        est = estimate_dict(run_estimate(dep, settings, requests_per_month))
        energy = figure(est, "energy_per_1k_tokens_j")
        row = {
            "precision": precision,
            "throughput_tok_s": figure(est, "throughput_tok_s"),
            "energy_per_1k_tokens_j": energy,
            "energy_per_1k_tokens_j_range": est.get("energy_per_1k_tokens_j_range"),
            "delta_vs_fp16_pct": (
                round((energy / base_energy - 1.0) * 100.0, 1) if energy and base_energy else None
            ),
            "paired_deltas": list(est.get("paired_deltas") or ()),
            "tokens_per_j": figure(est, "tokens_per_j"),
            "vram_gb": figure(est, "vram_gb"),
            "latency_s": figure(est, "latency_s"),
            "power_w": figure(est, "power_w"),
            "cost_usd_per_month": monthly_of(est).get("cost_usd"),
            "tier": est.get("tier", "none"),
            "method": est.get("method"),
            "rows": list(est.get("rows") or ()),
        }
        cells.append(row)
        evidence.extend(row["rows"])
        src.extend(est.get("sources") or ())
    ranked = sorted(
        (c for c in cells if c["energy_per_1k_tokens_j"] is not None),
        key=lambda c: c["energy_per_1k_tokens_j"],
    )
    for rank, cell in enumerate(ranked, start=1):
        cell["rank"] = rank
    for cell in cells:
        cell.setdefault("rank", None)
    known = [c for c in cells if c["tier"] != "none"]
    findings: list[Finding] = []
    if deployment.precision:
        findings = run_rules(deployment, settings)
    if not known:
        mood = Mood.GRAY
    elif findings:
        mood = Mood.worst(f.mood for f in findings)
    else:
        mood = Mood.GREEN
    best = ranked[0] if ranked else None
    recommendation = None
    notes: list[str] = []
    fp16_cell = next((c for c in cells if c["precision"] == "fp16"), None)
    if (
        best is not None
        and best["precision"] not in UNQUANTIZED
        and fp16_cell is not None
        and fp16_cell["energy_per_1k_tokens_j"] is not None
        and not quantization_holds(best, fp16_cell)
    ):
        lowest = {**best, "estimate": best, "batch_size": deployment.batch_size or 1}
        ref = {**fp16_cell, "estimate": fp16_cell, "batch_size": deployment.batch_size or 1}
        notes.append(uncertain_reason(lowest, ref, language))
        unquantized = [c for c in ranked if c["precision"] in UNQUANTIZED]
        best = unquantized[0] if unquantized else best
    if best is not None:
        recommendation = {
            "precision": best["precision"],
            "energy_per_1k_tokens_j": best["energy_per_1k_tokens_j"],
            "energy_per_1k_tokens_j_range": best.get("energy_per_1k_tokens_j_range"),
            "delta_vs_fp16_pct": best["delta_vs_fp16_pct"],
            "tier": best["tier"],
        }
    sources, _tiers = cite(evidence, src)
    return AdvisorResult(
        protocol="compare",
        mood=mood,
        language=language,
        deployment=deployment,
        findings=tuple(findings),
        recommendation=recommendation,
        rows=tuple(cells),
        tier=weakest_tier(c["tier"] for c in known),
        sources=sources,
        evidence=tuple(dict.fromkeys(evidence)),
        notes=tuple(notes),
        extra={"baseline": "fp16"},
    )


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
    knowledge = knowledge_module()
    wanted = [p for p in precisions if p != "fp16"]
    if not wanted:
        raise UsageError("name a precision to compare against FP16 (e.g. FP8, NF4, INT8)")
    rows_out: list[dict[str, Any]] = []
    evidence: list[str] = []
    for precision in wanted:
        for row in sorted(
            knowledge.find_rows(gpu=gpu_profile, precision=precision, batch_size=1),
            key=lambda r: (r.params_b or 0, r.model_id),
        ):
            fp16 = [
                r
                for r in knowledge.find_rows(
                    gpu=gpu_profile, model=row.model_id, precision="fp16", batch_size=1
                )
            ]
            same_source = [r for r in fp16 if r.source == row.source] or fp16
            base = same_source[0] if same_source else None
            delta = None
            if base is not None and base.energy_j_per_1k and row.energy_j_per_1k:
                delta = round((row.energy_j_per_1k / base.energy_j_per_1k - 1.0) * 100.0, 1)
            rows_out.append(
                {
                    "model": row.model_id,
                    "params_b": row.params_b,
                    "precision": row.precision,
                    "energy_per_1k_tokens_j": row.energy_j_per_1k,
                    "fp16_energy_per_1k_tokens_j": base.energy_j_per_1k if base else None,
                    "delta_vs_fp16_pct": delta,
                    "throughput_tok_s": row.throughput_tok_s,
                    "power_w": row.power_w,
                    "tier": row.tier if base is None else weakest_tier((row.tier, base.tier)),
                    "rows": [row.id] + ([base.id] if base else []),
                }
            )
            evidence.extend([row.id] + ([base.id] if base else []))
    deltas = [r["delta_vs_fp16_pct"] for r in rows_out if r["delta_vs_fp16_pct"] is not None]
    findings: list[Finding] = []
    notes: list[str] = []
    if not rows_out:
        mood = Mood.GRAY
        recommendation = None
    else:
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
            "models": len(rows_out),
        }
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
    sources, _tiers = cite(evidence)
    return AdvisorResult(
        protocol="compare",
        mood=mood,
        language=language,
        findings=tuple(findings),
        recommendation=recommendation,
        rows=tuple(rows_out),
        tier=weakest_tier(r["tier"] for r in rows_out),
        sources=sources,
        evidence=tuple(dict.fromkeys(evidence)),
        notes=tuple(notes),
        extra={"scope": "models", "gpu": gpu_profile},
    )
