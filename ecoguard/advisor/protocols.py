"""The advisor's protocols: optimize, compare, estimate, diagnose, audit.

Each is a library function that takes a Deployment (and plain options) and returns an
:class:`AdvisorResult` whose ``to_dict()`` is the JSON the CLI, MCP server and tests read. Every
figure comes from the knowledge estimator (``ecoguard.knowledge.estimator.estimate``) with its
tier; every judgement comes from the rules (``ecoguard.rules.evaluate``). Nothing here invents a
number: when the estimator has no basis, the cell says so (tier ``none``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ecoguard.advisor.estimates import (
    estimate_dict,
    knowledge_module,
    run_estimate,
    run_rules,
)
from ecoguard.advisor.serving import BatchingAdvice, batching_advice, batching_finding
from ecoguard.advisor.texts import Text
from ecoguard.advisor.uncertainty import quantization_holds
from ecoguard.config import Settings
from ecoguard.deployment import PRECISIONS, Deployment, GpuSpec, QuantSpec
from ecoguard.errors import UsageError
from ecoguard.faults import record_fault
from ecoguard.findings import TIER_STRENGTH, Finding, Mood, weakest_tier

# Batch sizes tried per use. Chat is interactive (one user waits on one stream); an API can
# coalesce concurrent requests; an offline batch job can fill the GPU. Reference rows stop at 64.
BATCH_SIZES_BY_USE: dict[str, tuple[int, ...]] = {
    "chat": (1,),
    "api": (1, 4, 8, 16),
    "batch": (1, 4, 8, 16, 32, 64),
}
# Two energies within this fraction are treated as a tie (the measured run-to-run spread of the
# reference rows is a few percent); ties go to the configuration that keeps FP16/BF16 outputs.
TIE_FRACTION = 0.05
UNQUANTIZED = ("fp16", "bf16", "fp32")
MAX_REFERENCE_BATCH = 64


def use_for_batch_size(batch_size: int | None) -> str:
    """The use assumed when a question states none: a served API (requests from many users,
    which the coalescing batcher can merge), or a batch job when the batch size is past what an
    API batches. Chat (one interactive user, batch size 1) is never assumed: it must be said."""
    return "api" if (batch_size or 1) <= max(BATCH_SIZES_BY_USE["api"]) else "batch"


@dataclass(frozen=True, slots=True)
class AdvisorResult:
    """What one protocol found. ``rows`` are the table rows shown (dicts of plain values, each
    figure with a tier); ``evidence`` are reference row ids behind the figures; ``current`` and
    ``optimized`` are estimator dicts side by side where a protocol has them."""

    protocol: str
    mood: Mood
    language: str = "en"
    deployment: Deployment | None = None
    findings: tuple[Finding, ...] = ()
    recommendation: dict[str, Any] | None = None
    rows: tuple[dict[str, Any], ...] = ()
    tier: str = "none"
    sources: tuple[str, ...] = ()
    evidence: tuple[str, ...] = ()
    current: dict[str, Any] | None = None
    optimized: dict[str, Any] | None = None
    money: dict[str, Any] | None = None
    equivalents: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    out_of_data: tuple[dict[str, str], ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)
    batching: BatchingAdvice | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "protocol": self.protocol,
            "mood": self.mood.value,
            "language": self.language,
            "findings": [f.to_dict() for f in self.findings],
            "recommendation": self.recommendation,
            "rows": [dict(r) for r in self.rows],
            "tier": self.tier,
            "sources": list(self.sources),
            "evidence": list(self.evidence),
            "current": self.current,
            "optimized": self.optimized,
            "money": self.money,
            "equivalents": list(self.equivalents),
            "notes": list(self.notes),
            "out_of_data": [dict(o) for o in self.out_of_data],
        }
        if self.deployment is not None:
            out["deployment"] = deployment_dict(self.deployment)
        if self.batching is not None:
            out["batching"] = self.batching.to_dict()
        out.update(self.extra)
        return out


def deployment_dict(deployment: Deployment) -> dict[str, Any]:
    return {
        "model": deployment.model.id,
        "params_b": deployment.model.params_b,
        "gpu": deployment.gpu.profile,
        "gpu_name": deployment.gpu.name,
        "architecture": deployment.gpu.architecture,
        "precision": deployment.precision,
        "batch_size": deployment.batch_size,
        "prompt_tokens": deployment.prompt_tokens,
        "generation_tokens": deployment.generation_tokens,
        "use": deployment.use,
    }


def with_precision(
    deployment: Deployment, precision: str, *, compiled: bool | None = None
) -> Deployment:
    """The deployment loaded at another precision, with the quantization record a loader would
    build for it (bitsandbytes for NF4/INT8, torchao for FP8)."""
    quant = QuantSpec()
    dtype: str | None = precision if precision in UNQUANTIZED else "fp16"
    if precision in ("nf4", "nf4_dq"):
        quant = QuantSpec(
            method="bitsandbytes",
            bits=4,
            quant_type="nf4",
            double_quant=precision == "nf4_dq",
            compute_dtype="fp16",
        )
    elif precision in ("int8_mixed", "int8_pure"):
        quant = QuantSpec(
            method="bitsandbytes",
            bits=8,
            quant_type="int8",
            int8_threshold=0.0 if precision == "int8_pure" else 6.0,
        )
    elif precision in ("fp8_weight_only", "fp8_dynamic"):
        quant = QuantSpec(
            method="torchao",
            bits=8,
            quant_type="float8_weight_only" if precision == "fp8_weight_only" else "float8_dynamic",
            compiled=compiled,
        )
        dtype = "bf16"
    return deployment.with_(precision=precision, quant=quant, dtype=dtype)


def _row_lookup() -> dict[str, Any]:
    try:
        return {row.id: row for row in knowledge_module().reference_rows()}
    except Exception as exc:
        record_fault("advisor.rows", exc)
        return {}


def cite(
    row_ids: Iterable[str], extra_sources: Iterable[str] = ()
) -> tuple[tuple[str, ...], dict[str, int]]:
    """Sources and a tier count for the reference rows actually used."""
    lookup = _row_lookup()
    sources: list[str] = []
    tiers: dict[str, int] = {}
    for row_id in dict.fromkeys(row_ids):
        row = lookup.get(row_id)
        if row is None:
            continue
        tiers[row.tier] = tiers.get(row.tier, 0) + 1
        if row.source not in sources:
            sources.append(row.source)
    for src in extra_sources:
        if src and src not in sources:
            sources.append(src)
    return tuple(sources), tiers


# The answer speaks the question's language; the knowledge table's labels are English.
_EQUIVALENT_LABELS_ZH = {
    "car_km": "公里（普通乘用车行驶里程）",
    "phone_charges": "次智能手机充满电",
    "led_hours": "小时（10 W LED 灯泡）",
}


def _equivalents(
    energy_kwh: float | None, co2_kg: float | None, language: str = "en"
) -> tuple[str, ...]:
    if not energy_kwh or co2_kg is None:
        return ()
    try:
        items = knowledge_module().equivalents(energy_kwh, co2_kg)
    except Exception as exc:
        record_fault("advisor.equivalents", exc)
        return ()
    out = []
    for item in items[:2]:
        value, label = getattr(item, "value", None), getattr(item, "label", None)
        if language == "zh":
            label = _EQUIVALENT_LABELS_ZH.get(getattr(item, "key", ""), label)
        if isinstance(value, (int, float)) and label:
            out.append(f"{value:,.1f} {label}" if value < 10 else f"{value:,.0f} {label}")
        else:
            out.append(str(item))
    return tuple(out)


def _monthly(est_dict: dict[str, Any]) -> dict[str, Any]:
    return est_dict.get("monthly") or {}


def _figure(est_dict: dict[str, Any], key: str) -> float | None:
    value = est_dict.get(key)
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


# ---------------------------------------------------------------------------------------------
# Money: $ per month (and CNY when a rate or a CNY price is given)


def money_for(
    est_dict: dict[str, Any],
    *,
    currency: str = "USD",
    cny_per_usd: float | None = None,
    price_per_kwh: float | None = None,
    price_currency: str | None = None,
    language: str = "en",
) -> dict[str, Any]:
    """Cost of the estimate's monthly volume in USD and, when it can be known, CNY."""
    monthly = _monthly(est_dict)
    kwh = monthly.get("energy_kwh")
    usd = monthly.get("cost_usd")
    cny: float | None = None
    notes: list[str] = []
    local: float | None = None
    if kwh is not None and price_per_kwh is not None and price_currency == "CNY":
        cny = kwh * price_per_kwh
        usd = cny / cny_per_usd if cny_per_usd else None
    elif kwh is not None and price_per_kwh is not None and price_currency not in (None, "USD"):
        # A price in another currency (EUR, GBP...): the cost in that currency, and no USD
        # figure, since no exchange rate is known.
        local, usd = kwh * price_per_kwh, None
        currency = price_currency
        notes.append(
            Text(
                f"Priced at {price_per_kwh:g} {price_currency}/kWh as given; no USD figure "
                "(no exchange rate).",
                f"按给出的 {price_per_kwh:g} {price_currency}/kWh 计价；没有汇率，不显示美元。",
            ).get(language)
        )
    elif usd is not None and cny_per_usd:
        cny = usd * cny_per_usd
    if currency == "CNY" and cny is None:
        notes.append(
            Text(
                "No exchange rate given, so costs are in USD; add e.g. 'rate 7.2' to see CNY.",
                "未给出汇率，费用以美元显示；加上如“汇率 7.2”即可换算成人民币。",
            ).get(language)
        )
    return {
        "requests": monthly.get("requests"),
        "energy_kwh": kwh,
        "energy_kwh_range": monthly.get("energy_kwh_range"),
        "cost_usd": usd,
        "cost_usd_range": monthly.get("cost_usd_range") if usd == monthly.get("cost_usd") else None,
        "co2_kg_range": monthly.get("co2_kg_range"),
        "cost_cny": cny,
        "cost_local": local,
        "co2_kg": monthly.get("co2_kg"),
        "currency": currency if (currency != "CNY" or cny is not None) else "USD",
        "cny_per_usd": cny_per_usd,
        "notes": notes,
    }


# ---------------------------------------------------------------------------------------------
# compare


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
    base_energy = _figure(baseline_dict, "energy_per_1k_tokens_j")
    cells: list[dict[str, Any]] = []
    evidence: list[str] = []
    src: list[str] = []
    for precision in wanted:
        dep = with_precision(deployment, precision)
        est = estimate_dict(run_estimate(dep, settings, requests_per_month))
        energy = _figure(est, "energy_per_1k_tokens_j")
        row = {
            "precision": precision,
            "throughput_tok_s": _figure(est, "throughput_tok_s"),
            "energy_per_1k_tokens_j": energy,
            "energy_per_1k_tokens_j_range": est.get("energy_per_1k_tokens_j_range"),
            "delta_vs_fp16_pct": (
                round((energy / base_energy - 1.0) * 100.0, 1) if energy and base_energy else None
            ),
            "paired_deltas": list(est.get("paired_deltas") or ()),
            "tokens_per_j": _figure(est, "tokens_per_j"),
            "vram_gb": _figure(est, "vram_gb"),
            "latency_s": _figure(est, "latency_s"),
            "power_w": _figure(est, "power_w"),
            "cost_usd_per_month": _monthly(est).get("cost_usd"),
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
        notes.append(_uncertain_reason(lowest, ref, language))
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


# ---------------------------------------------------------------------------------------------
# optimize


def _blocking(findings: Iterable[Finding]) -> list[Finding]:
    """Findings that rule a candidate out: a trap (orange) or waste (red). batch-size-one is a
    serving pattern, not a property of the configuration, and is not counted here."""
    return [f for f in findings if f.mood.rank >= Mood.ORANGE.rank and f.rule != "batch-size-one"]


def optimize(
    deployment: Deployment,
    *,
    use: str | None = None,
    settings: Settings | None = None,
    requests_per_month: int | None = None,
    language: str = "en",
    precisions: Sequence[str] | None = None,
    batch_sizes: Sequence[int] | None = None,
    max_batch: int | None = None,
    serving: bool | None = None,
    concurrency: int | None = None,
    hours_per_day: float | None = None,
    usd: bool = True,
) -> AdvisorResult:
    """Recommended precision and batch size for a model on a GPU and a use (chat, api, batch).

    Every candidate (precision x batch size allowed by the use, plus the current batch size) is
    estimated; candidates the rules flag as traps, that do not fit in VRAM, or that have no data
    are dropped. A quantized candidate (outputs change) may win only when its saving holds across
    the experiments' spread (``serving.quantization_holds``). The lowest energy per 1k tokens
    wins, with near-ties (within 5%) going to FP16/BF16, then the stronger data tier, then a batch
    no smaller than the current one. ``max_batch``: a chat served to several users at once may
    batch them up to this size (the coalescing batcher). A batch smaller than the current one is
    recommended only with its cost and the reason stated. A served use (``serving``; default:
    an API) or a batch job gets batching advice (``result.batching``) and, when batching would
    save 5% or more, a ``batch-size-one`` finding."""
    settings = settings or Settings()
    use = use or deployment.use or use_for_batch_size(deployment.batch_size)
    if use not in BATCH_SIZES_BY_USE:
        raise UsageError(f"unknown use {use!r}; accepted: chat, api, batch")
    if deployment.model.params_b is None and deployment.model.id is None:
        raise UsageError("optimize needs a model (an id like Qwen2.5-3B or a size like 3B)")
    sizes = tuple(batch_sizes or BATCH_SIZES_BY_USE[use])
    if max_batch is not None and not batch_sizes:
        # A served deployment batches only as far as its requests overlap.
        grid = sorted(set(BATCH_SIZES_BY_USE["api"]) | {max_batch})
        sizes = tuple(b for b in grid if b <= max_batch)
    current_batch = deployment.batch_size or 1
    if not batch_sizes and current_batch not in sizes and current_batch <= MAX_REFERENCE_BATCH:
        sizes = tuple(sorted({*sizes, current_batch}))
    current_dep = deployment.with_(
        precision=deployment.precision or "fp16", batch_size=deployment.batch_size or 1, use=use
    )
    if deployment.precision is None:
        current_dep = with_precision(current_dep, "fp16")
    current_est = estimate_dict(run_estimate(current_dep, settings, requests_per_month))
    current_findings = run_rules(current_dep, settings)
    vram_limit = deployment.gpu.vram_gb
    candidates: list[dict[str, Any]] = []
    rejected: list[dict[str, Any]] = []
    for precision in precisions or PRECISIONS:
        for batch in sizes:
            dep = with_precision(current_dep, precision).with_(batch_size=batch)
            est = estimate_dict(run_estimate(dep, settings, requests_per_month))
            energy = _figure(est, "energy_per_1k_tokens_j")
            entry = {
                "precision": precision,
                "batch_size": batch,
                "energy_per_1k_tokens_j": energy,
                "throughput_tok_s": _figure(est, "throughput_tok_s"),
                "latency_s": _figure(est, "latency_s"),
                "vram_gb": _figure(est, "vram_gb"),
                "cost_usd_per_month": _monthly(est).get("cost_usd"),
                "tier": est.get("tier", "none"),
                "rows": list(est.get("rows") or ()),
                "sources": list(est.get("sources") or ()),
                "estimate": est,
            }
            if energy is None:
                continue  # nothing supports this cell; it is not a candidate
            blocking = _blocking(run_rules(dep, settings))
            vram = entry["vram_gb"]
            if blocking:
                entry["rejected_by"] = [f.rule for f in blocking]
                rejected.append(entry)
            elif vram_limit and vram and vram > vram_limit:
                entry["rejected_by"] = ["vram-overflow"]
                rejected.append(entry)
            else:
                candidates.append(entry)
    if not candidates:
        mood = Mood.GRAY
        return AdvisorResult(
            protocol="optimize",
            mood=mood,
            language=language,
            deployment=current_dep,
            findings=tuple(current_findings),
            current=current_est,
            rows=tuple(_public(c) for c in rejected),
            notes=(
                Text(
                    "No configuration of this model on this GPU has data that passes the rules.",
                    "该模型在此 GPU 上没有通过规则检查且有数据支撑的配置。",
                ).get(language),
            ),
            extra={"use": use},
        )
    # Quantizing changes outputs: it may win only when its saving holds across the range the
    # experiments span (the unquantized FP16 cell at the same batch size is the reference).
    fp16_at = {c["batch_size"]: c for c in candidates if c["precision"] == "fp16"}
    for cand in candidates:
        ref = fp16_at.get(cand["batch_size"])
        cand["holds"] = (
            cand["precision"] in UNQUANTIZED
            or ref is None
            or quantization_holds(cand["estimate"], ref["estimate"])
        )
    eligible = [c for c in candidates if c["holds"]] or candidates
    lowest = min(candidates, key=lambda c: c["energy_per_1k_tokens_j"])
    best_energy = min(c["energy_per_1k_tokens_j"] for c in eligible)
    near = [c for c in eligible if c["energy_per_1k_tokens_j"] <= best_energy * (1 + TIE_FRACTION)]
    chosen = min(
        near,
        key=lambda c: (
            0 if c["precision"] in UNQUANTIZED else 1,
            -TIER_STRENGTH.get(c["tier"], 0),
            c["batch_size"] < current_dep.batch_size,
            c["batch_size"],
            c["energy_per_1k_tokens_j"],
        ),
    )
    ranked = sorted(candidates, key=lambda c: c["energy_per_1k_tokens_j"])
    for rank, cand in enumerate(ranked, start=1):
        cand["rank"] = rank
    current_energy = _figure(current_est, "energy_per_1k_tokens_j")
    chosen_cost = chosen["cost_usd_per_month"]
    current_cost = _monthly(current_est).get("cost_usd")
    saving_pct = (
        round((1 - chosen["energy_per_1k_tokens_j"] / current_energy) * 100.0, 1)
        if current_energy
        else None
    )
    saving_usd = (
        round(current_cost - chosen_cost, 2)
        if current_cost is not None and chosen_cost is not None
        else None
    )
    n_cand, n_out = len(candidates), len(rejected)
    reasons = [
        Text(
            f"lowest energy per 1k tokens among {n_cand} {_plural(n_cand, 'candidate')} that "
            f"{'passes' if n_cand == 1 else 'pass'} the rules ({n_out} ruled out as "
            f"{_plural(n_out, 'trap')})",
            f"在 {n_cand} 个通过规则检查的候选中每千 token 能耗最低（{n_out} 个因陷阱被排除）",
        ).get(language)
    ]
    if lowest is not chosen and not lowest["holds"]:
        ref = fp16_at.get(lowest["batch_size"]) or chosen
        reasons.append(_uncertain_reason(lowest, ref, language))
    if chosen["energy_per_1k_tokens_j"] > best_energy:
        reasons.append(
            Text(
                "within 5% of the lowest, and keeps unquantized outputs",
                "与最低值相差不到 5%，且不改变模型输出（不量化）",
            ).get(language)
        )
    if chosen["batch_size"] < current_dep.batch_size and current_energy:
        cost_pct = (chosen["energy_per_1k_tokens_j"] / current_energy - 1.0) * 100.0
        why = _smaller_batch_why(current_dep, candidates, rejected, use, language)
        reasons.append(
            Text(
                f"batch size {chosen['batch_size']} is smaller than your current "
                f"{current_dep.batch_size}: it costs {cost_pct:+.1f}% energy per token "
                f"({chosen['energy_per_1k_tokens_j'] / current_energy:.1f}x); {why}",
                f"批大小 {chosen['batch_size']} 比你当前的 {current_dep.batch_size} 小："
                f"每 token 能耗 {cost_pct:+.1f}%（{chosen['energy_per_1k_tokens_j'] / current_energy:.1f} 倍）；{why}",
            ).get(language)
        )
    if use == "chat" and chosen["batch_size"] == 1 and max(sizes) == 1:
        reasons.append(
            Text(
                "chat is interactive and no concurrent users are stated: batch size 1",
                "聊天是交互式的，且没有说明并发用户：批大小 1",
            ).get(language)
        )
    recommendation = {
        "precision": chosen["precision"],
        "batch_size": chosen["batch_size"],
        "use": use,
        "energy_per_1k_tokens_j": chosen["energy_per_1k_tokens_j"],
        "throughput_tok_s": chosen["throughput_tok_s"],
        "cost_usd_per_month": chosen_cost,
        "saving_pct": saving_pct,
        "saving_usd_per_month": saving_usd,
        "tier": chosen["tier"],
        "changes_outputs": chosen["precision"] not in UNQUANTIZED,
        "energy_per_1k_tokens_j_range": chosen["estimate"].get("energy_per_1k_tokens_j_range"),
        "paired_deltas": list(chosen["estimate"].get("paired_deltas") or ()),
        "reasons": reasons,
    }
    if (
        chosen["precision"] == current_dep.precision
        and chosen["batch_size"] == current_dep.batch_size
    ):
        mood = Mood.GREEN
    elif current_findings:
        mood = Mood.worst(f.mood for f in current_findings)
    elif saving_pct is not None and saving_pct > TIE_FRACTION * 100:
        mood = Mood.YELLOW
    else:
        mood = Mood.GREEN
    advice = batching_advice(
        current_dep,
        settings=settings,
        requests_per_month=requests_per_month or settings.monthly_requests,
        use=use,
        serving=use == "api" if serving is None else serving,
        concurrency=concurrency,
        hours_per_day=hours_per_day,
        target_batch=chosen["batch_size"],
    )
    finding = batching_finding(advice, language, usd=usd)
    findings = tuple(current_findings)
    if finding is not None and not any(f.rule == finding.rule for f in findings):
        findings = (*findings, finding)
        mood = Mood.worst([mood, Mood.YELLOW])
    evidence = list(current_est.get("rows") or ()) + chosen["rows"]
    for cand in ranked[:6]:
        evidence.extend(cand["rows"])
    sources, _tiers = cite(evidence, list(current_est.get("sources") or ()) + chosen["sources"])
    money = _monthly(chosen["estimate"])
    return AdvisorResult(
        protocol="optimize",
        mood=mood,
        language=language,
        deployment=current_dep,
        findings=findings,
        recommendation=recommendation,
        rows=tuple(_public(c) for c in ranked),
        tier=weakest_tier((chosen["tier"], current_est.get("tier", "none"))),
        sources=sources,
        evidence=tuple(dict.fromkeys(evidence)),
        current=current_est,
        optimized=chosen["estimate"],
        equivalents=_equivalents(money.get("energy_kwh"), money.get("co2_kg"), language),
        extra={"use": use, "rejected": [_public(r) for r in rejected]},
        batching=advice,
    )


def _plural(count: int, word: str) -> str:
    return word if count == 1 else word + "s"


def _uncertain_reason(quantized: dict[str, Any], ref: dict[str, Any], language: str) -> str:
    """Why a lower quantized figure is not recommended: its range and paired deltas."""
    q_est, r_est = quantized["estimate"], ref["estimate"]
    q_range = q_est.get("energy_per_1k_tokens_j_range") or [None, None]
    r_range = r_est.get("energy_per_1k_tokens_j_range") or [None, None]
    pairs = [p["delta_pct"] for p in q_est.get("paired_deltas") or () if isinstance(p, dict)]
    pair_text = ", ".join(f"{p:+.1f}%" for p in pairs)

    def rng(bounds: list[Any]) -> str:
        return "-" if None in bounds else f"{bounds[0]:,.0f}-{bounds[1]:,.0f}"

    en = (
        f"{quantized['precision']} BS{quantized['batch_size']} looks lower "
        f"({quantized['energy_per_1k_tokens_j']:,.0f} J/1k, range {rng(q_range)}) but the saving "
        f"does not hold across the experiments ({ref['precision']} range {rng(r_range)}"
        + (f"; same-session deltas vs FP16: {pair_text}" if pairs else "")
        + "), and quantizing changes outputs: the unquantized configuration is recommended"
    )
    zh = (
        f"{quantized['precision']} 批大小 {quantized['batch_size']} 看起来更低"
        f"（{quantized['energy_per_1k_tokens_j']:,.0f} J/1k，区间 {rng(q_range)}），但在各次实验中"
        f"节能并不稳定（{ref['precision']} 区间 {rng(r_range)}"
        + (f"；同一会话相对 FP16 的变化：{pair_text}" if pairs else "")
        + "），而且量化会改变输出：推荐不量化的配置"
    )
    return Text(en, zh).get(language)


def _smaller_batch_why(
    current: Deployment,
    candidates: list[dict[str, Any]],
    rejected: list[dict[str, Any]],
    use: str,
    language: str,
) -> str:
    at_current = [r for r in rejected if r["batch_size"] == current.batch_size]
    if at_current:
        rules = sorted({rule for r in at_current for rule in r["rejected_by"]})
        return Text(
            f"at batch size {current.batch_size} every configuration is ruled out ({', '.join(rules)})",
            f"批大小 {current.batch_size} 下所有配置都被排除（{'、'.join(rules)}）",
        ).get(language)
    if not any(c["batch_size"] == current.batch_size for c in candidates):
        return Text(
            f"no reference data supports batch size {current.batch_size} for a {use} use",
            f"没有参考数据支撑 {use} 用途下的批大小 {current.batch_size}",
        ).get(language)
    return Text(
        "within 5% of the lowest energy, at a shorter wait per request",
        "与最低能耗相差不到 5%，且每次请求等待更短",
    ).get(language)


def _public(entry: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in entry.items() if k not in ("estimate", "sources")}


# ---------------------------------------------------------------------------------------------
# estimate (current vs optimized)


def estimate(
    deployment: Deployment,
    *,
    settings: Settings | None = None,
    requests_per_month: int | None = None,
    language: str = "en",
    currency: str = "USD",
    cny_per_usd: float | None = None,
    price_per_kwh: float | None = None,
    price_currency: str | None = None,
    max_batch: int | None = None,
    serving: bool | None = None,
    concurrency: int | None = None,
    hours_per_day: float | None = None,
) -> AdvisorResult:
    """The estimator's figures for the deployment, with the optimized configuration beside them
    (and optimize's batching advice and finding)."""
    settings = settings or Settings()
    requests = requests_per_month if requests_per_month is not None else settings.monthly_requests
    current = estimate_dict(run_estimate(deployment, settings, requests))
    findings = run_rules(deployment, settings)
    optimized_result: AdvisorResult | None = None
    if deployment.model.params_b is not None or deployment.model.id is not None:
        try:
            optimized_result = optimize(
                deployment,
                use=deployment.use or use_for_batch_size(deployment.batch_size),
                settings=settings,
                requests_per_month=requests,
                language=language,
                max_batch=max_batch,
                serving=serving,
                concurrency=concurrency,
                hours_per_day=hours_per_day,
                usd=price_currency in (None, "USD", "CNY"),
            )
        except UsageError:
            optimized_result = None
    advice = optimized_result.batching if optimized_result is not None else None
    batch_finding = next(
        (
            f
            for f in (optimized_result.findings if optimized_result else ())
            if f.rule == "batch-size-one"
        ),
        None,
    )
    if batch_finding is not None and not any(f.rule == "batch-size-one" for f in findings):
        findings = [*findings, batch_finding]
    optimized = optimized_result.optimized if optimized_result else None
    money_kwargs = {
        "currency": currency,
        "cny_per_usd": cny_per_usd,
        "price_per_kwh": price_per_kwh,
        "price_currency": price_currency,
        "language": language,
    }
    money = {"current": money_for(current, **money_kwargs)}
    if optimized:
        money["optimized"] = money_for(optimized, **money_kwargs)
        now, then = money["current"], money["optimized"]
        for key, saving in (
            ("cost_usd", "saving_usd"),
            ("cost_cny", "saving_cny"),
            ("cost_local", "saving_local"),
        ):
            if now[key] is not None and then[key] is not None:
                money[saving] = round(now[key] - then[key], 2)
    if findings and any(f.mood.rank >= Mood.ORANGE.rank for f in findings):
        mood = Mood.worst(f.mood for f in findings)  # a trap or an overflow, data or not
    elif current.get("tier", "none") == "none":
        mood = Mood.GRAY
    elif findings:
        mood = Mood.worst(f.mood for f in findings)
    elif optimized_result is not None and optimized_result.mood == Mood.YELLOW:
        mood = Mood.YELLOW
    else:
        mood = Mood.GREEN
    evidence = list(current.get("rows") or ()) + list((optimized or {}).get("rows") or ())
    sources, _tiers = cite(
        evidence, list(current.get("sources") or ()) + list((optimized or {}).get("sources") or ())
    )
    cur_money = money["current"]
    notes = tuple(cur_money["notes"])
    return AdvisorResult(
        protocol="estimate",
        mood=mood,
        language=language,
        deployment=deployment,
        findings=tuple(findings),
        recommendation=optimized_result.recommendation if optimized_result else None,
        rows=(),
        tier=weakest_tier(
            [current.get("tier", "none")] + ([optimized.get("tier", "none")] if optimized else [])
        ),
        sources=sources,
        evidence=tuple(dict.fromkeys(evidence)),
        current=current,
        optimized=optimized,
        money=money,
        equivalents=_equivalents(cur_money.get("energy_kwh"), cur_money.get("co2_kg"), language),
        notes=notes,
        batching=advice,
    )


# ---------------------------------------------------------------------------------------------
# diagnose


def _relative_gap(observed: float | None, expected: float | None) -> float | None:
    if observed is None or not expected:
        return None
    return observed / expected - 1.0


def diagnose(
    deployment: Deployment,
    *,
    observed_throughput_tok_s: float | None = None,
    observed_power_w: float | None = None,
    observed_energy_j_per_1k: float | None = None,
    settings: Settings | None = None,
    requests_per_month: int | None = None,
    language: str = "en",
) -> AdvisorResult:
    """Reported figures against the expected ones: which trap matches, with a confidence and the
    evidence rows. Without a stated precision, the precision whose expected figures lie nearest
    the observed ones is inferred (and said so)."""
    settings = settings or Settings()
    observed = {
        "throughput_tok_s": observed_throughput_tok_s,
        "power_w": observed_power_w,
        "energy_per_1k_tokens_j": observed_energy_j_per_1k,
    }
    has_observed = any(v is not None for v in observed.values())
    notes: list[str] = []
    candidates_tried: list[dict[str, Any]] = []
    dep = deployment
    if has_observed and (deployment.model.params_b or deployment.model.id):
        # How far each precision's expectation is from what the user sees (mean |log ratio|).
        for precision in [deployment.precision] if deployment.precision else PRECISIONS:
            est = estimate_dict(
                run_estimate(with_precision(deployment, precision), settings, requests_per_month)
            )
            gaps = [
                abs(math.log(value / expected))
                for key, value in observed.items()
                if value and (expected := _figure(est, key))
            ]
            if gaps:
                candidates_tried.append(
                    {"precision": precision, "distance": sum(gaps) / len(gaps), "estimate": est}
                )
        candidates_tried.sort(key=lambda c: c["distance"])
        if candidates_tried and deployment.precision is None:
            dep = with_precision(deployment, candidates_tried[0]["precision"])
            notes.append(
                Text(
                    f"No precision stated; your figures sit nearest {candidates_tried[0]['precision']}.",
                    f"未说明精度；你的数据最接近 {candidates_tried[0]['precision']}。",
                ).get(language)
            )
    elif deployment.precision is None:
        dep = with_precision(deployment, "fp16")
    expected = (
        candidates_tried[0]["estimate"]
        if candidates_tried
        and (deployment.precision is None or candidates_tried[0]["precision"] == dep.precision)
        else estimate_dict(run_estimate(dep, settings, requests_per_month))
    )
    comparisons = []
    for key, value in observed.items():
        if value is None:
            continue
        exp = _figure(expected, key)
        gap = _relative_gap(value, exp)
        comparisons.append(
            {
                "metric": key,
                "observed": value,
                "expected": exp,
                "gap_pct": round(gap * 100.0, 1) if gap is not None else None,
                "tier": expected.get("tier", "none"),
            }
        )
    findings = run_rules(dep, settings)
    traps = [f for f in findings if f.mood.rank >= Mood.YELLOW.rank]
    general = False
    if not traps and not has_observed and dep.model.params_b is None:
        # A general question ("why is 4-bit sometimes worse?"): the trap that precision is known
        # for, explained from its evidence rows rather than from this (model-less) deployment.
        traps = general_traps(dep.precision)
        general = bool(traps)
    gaps = [abs(c["gap_pct"]) for c in comparisons if c["gap_pct"] is not None]
    if traps:
        if not gaps:
            confidence = "medium"  # the configuration matches; no figure to confirm it
        elif max(gaps) <= 20:
            confidence = "high"
        elif max(gaps) <= 50:
            confidence = "medium"
        else:
            confidence = "low"
    else:
        confidence = "none"
    if general:
        confidence = "general"
    second = candidates_tried[1] if len(candidates_tried) > 1 else None
    if (
        confidence == "high"
        and second is not None
        and candidates_tried[0]["distance"] * 2 > second["distance"]
        and deployment.precision is None
    ):
        confidence = "medium"  # two precisions explain the figures almost equally well
    evidence: list[str] = list(expected.get("rows") or ())
    for f in traps:
        evidence.extend(f.evidence)
    explained: list[dict[str, Any]] = []
    for f in traps:
        try:
            from ecoguard.rules import explain

            info = explain(f.rule)
        except Exception as exc:
            record_fault("advisor.explain", exc)
            continue
        rows = info.get("evidence") or info.get("evidence_rows") or []
        for item in rows:
            row_id = item.get("id") if isinstance(item, dict) else item
            if isinstance(row_id, str):
                evidence.append(row_id)
        explained.append({"rule": f.rule, "why": info.get("why"), "evidence": rows})
    if traps:
        mood = Mood.worst(f.mood for f in traps)
        top = traps[0]
        recommendation = {
            "rule": top.rule,
            "confidence": confidence,
            "fix": top.fix,
            "fix_summary": top.fix_summary,
            "changes_outputs": top.changes_outputs,
        }
    elif expected.get("tier", "none") == "none":
        mood = Mood.GRAY
        recommendation = None
    else:
        mood = Mood.GREEN if not gaps or max(gaps) <= 25 else Mood.YELLOW
        recommendation = {"rule": None, "confidence": "none"}
        if gaps and max(gaps) > 25:
            notes.append(
                Text(
                    "No known trap matches, yet your figures are far from the reference: check the power limit, "
                    "clocks, thermals and what else runs on the GPU, then measure with `ecoguard bench`.",
                    "没有匹配的已知陷阱，但你的数据与参考值相差很大：请检查功耗上限、频率、温度以及 GPU 上的其他任务，"
                    "然后用 `ecoguard bench` 实测。",
                ).get(language)
            )
    crossovers: list[dict[str, Any]] = []
    if any(f.rule == "small-model-quant" for f in traps):
        from ecoguard.knowledge import crossover

        for arch in ("turing", "ampere", "ada", "blackwell"):
            try:
                cross = crossover(
                    arch,
                    dep.precision if dep.precision in ("nf4", "int8_mixed", "int8_pure") else "nf4",
                )
            except Exception as exc:
                record_fault("advisor.crossover", exc)
                continue
            if cross.fitted_b is None and cross.reported_b is None:
                continue  # neither a fitted nor a published crossover: nothing to show
            crossovers.append(
                {
                    "architecture": arch,
                    "precision": cross.precision,
                    "fitted_b": cross.fitted_b,
                    "fitted_tier": cross.fitted_tier,
                    "reported_b": cross.reported_b,
                    "reported_tier": cross.reported_tier,
                }
            )
    sources, _tiers = cite(evidence, expected.get("sources") or ())
    return AdvisorResult(
        protocol="diagnose",
        mood=mood,
        language=language,
        deployment=dep,
        findings=tuple(traps),
        recommendation=recommendation,
        rows=tuple(comparisons),
        tier=expected.get("tier", "none"),
        sources=sources,
        evidence=tuple(dict.fromkeys(evidence)),
        current=expected,
        notes=tuple(notes),
        extra={
            "confidence": confidence,
            "explained": explained,
            "crossovers": crossovers,
            "candidates": [
                {"precision": c["precision"], "distance": round(c["distance"], 3)}
                for c in candidates_tried
            ],
        },
    )


_GENERAL_RULE = {
    "nf4": "small-model-quant",
    "nf4_dq": "small-model-quant",
    "int8_mixed": "int8-mixed",
    "int8_pure": "small-model-quant",
    "fp8_weight_only": "fp8-eager",
    "fp8_dynamic": "fp8-eager",
}


def general_trap_rule(precision: str | None) -> str | None:
    """The trap a precision is known for whatever the model (``int8_mixed`` -> ``int8-mixed``)."""
    return _GENERAL_RULE.get(precision or "")


def general_traps(precision: str | None) -> list[Finding]:
    """The rule's own finding text for a precision asked about in general, from explain()."""
    rule = _GENERAL_RULE.get(precision or "")
    if rule is None:
        return []
    try:
        from ecoguard.rules import RULES, explain

        info = explain(rule)
        spec = RULES[rule]
    except Exception as exc:
        record_fault("advisor.general_trap", exc)
        return []
    mood = Mood.RED if rule == "fp8-eager" else Mood.ORANGE
    return [
        Finding(
            rule=rule,
            mood=mood,
            title=str(info.get("title") or getattr(spec, "title", rule)),
            message=str(info.get("what") or getattr(spec, "summary", "")),
            fix=str(info.get("fix") or ""),
            fix_summary="",
            changes_outputs=bool(getattr(spec, "changes_outputs", False)),
        )
    ]


# ---------------------------------------------------------------------------------------------
# audit


def audit(
    paths: Sequence[str],
    *,
    language: str = "en",
    code: str | None = None,
    gpu: str | None = None,
) -> AdvisorResult:
    """The code audit (``ecoguard.audit``): files by path, or code pasted into a question
    (``code``: audited as text with ``audit_source``, never run). Nothing to audit is gray."""
    try:
        from ecoguard.audit import audit_paths, audit_source
    except ImportError:
        return AdvisorResult(
            protocol="audit",
            mood=Mood.GRAY,
            language=language,
            notes=(
                Text(
                    "The code audit is not available in this build; nothing was scanned.",
                    "当前版本没有代码审计功能，未扫描任何文件。",
                ).get(language),
            ),
            extra={"paths": list(paths), "available": False},
        )
    if code:
        report = audit_source(code, "<question>", gpu=gpu, time_limit_s=2.0)
    elif paths:
        report = audit_paths(list(paths), gpu=gpu)
    else:
        return AdvisorResult(
            protocol="audit",
            mood=Mood.GRAY,
            language=language,
            notes=(
                Text(
                    "Nothing to audit: name a file (`ecoguard audit serve.py`) or paste the code "
                    "that loads and calls the model.",
                    "没有可审计的内容：写上文件名（`ecoguard audit serve.py`），或粘贴加载和调用模型的代码。",
                ).get(language),
            ),
            extra={"paths": [], "available": True},
        )
    findings = [f for f in report.findings if isinstance(f, Finding)]
    notes: list[str] = []
    unparsed = bool(report.problems) and not findings
    if unparsed:
        notes.append(
            Text(
                "The code did not parse as Python, so nothing in it was judged: "
                + "; ".join(getattr(p, "message", str(p)) for p in report.problems[:2]),
                "这段代码无法按 Python 解析，因此没有做任何判断："
                + "；".join(getattr(p, "message", str(p)) for p in report.problems[:2]),
            ).get(language)
        )
    if findings:
        mood = Mood.worst(f.mood for f in findings)
    else:
        mood = Mood.GRAY if unparsed else Mood.GREEN
    evidence = [row for f in findings for row in f.evidence]
    sources, _tiers = cite(evidence)
    payload = report.to_dict() if hasattr(report, "to_dict") else None
    return AdvisorResult(
        protocol="audit",
        mood=mood,
        language=language,
        findings=tuple(findings),
        tier=weakest_tier(f.impact.tier for f in findings if f.impact) if findings else "none",
        sources=sources,
        evidence=tuple(dict.fromkeys(evidence)),
        notes=tuple(notes),
        extra={
            "paths": list(paths) if not code else [],
            "code_lines": len(code.splitlines()) if code else 0,
            "available": True,
            "audit": payload,
        },
    )
