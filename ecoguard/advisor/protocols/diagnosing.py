"""diagnose: reported figures against the expected ones, the matching trap, its evidence."""

from __future__ import annotations

import math
from typing import Any

from ecoguard.advisor.estimates import (
    estimate_dict,
    run_estimate,
    run_rules,
)
from ecoguard.advisor.protocols.base import (
    AdvisorResult,
    cite,
    figure,
    with_precision,
)
from ecoguard.advisor.texts import Text
from ecoguard.config import Settings
from ecoguard.deployment import PRECISIONS, Deployment
from ecoguard.faults import record_fault
from ecoguard.findings import Finding, Mood


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
                if value and (expected := figure(est, key))
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
        exp = figure(expected, key)
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
