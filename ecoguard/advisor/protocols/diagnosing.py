"""diagnose: reported figures against the expected ones, the matching trap, its evidence."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ecoguard.advisor.estimates import run_estimate, run_rules
from ecoguard.advisor.protocols.base import (
    AdvisorResult,
    Request,
    cited_result,
    figure,
    row_lookup,
    with_precision,
)
from ecoguard.advisor.texts import Text
from ecoguard.deployment import PRECISIONS, Deployment
from ecoguard.errors import UsageError
from ecoguard.findings import Finding, Mood
from ecoguard.knowledge import crossover
from ecoguard.knowledge.estimator import Estimate
from ecoguard.rules import RULES, evidence_row, explain

# The architectures whose crossover size a small-model-quant diagnosis shows.
_CROSSOVER_ARCHITECTURES = ("turing", "ampere", "ada", "blackwell")


@dataclass(frozen=True, slots=True)
class _Candidate:
    """A precision that might explain the observed figures: how far its expected figures lie
    from them (mean |log ratio|) and the estimate behind that."""

    precision: str
    distance: float
    estimate: Estimate


@dataclass(frozen=True, slots=True)
class _Expectation:
    """The deployment diagnosed (with the precision inferred when none was stated), what the
    estimator expects for it, the precisions tried, and a note when one was inferred."""

    deployment: Deployment
    expected: Estimate
    candidates: list[_Candidate]
    notes: list[str]


@dataclass(frozen=True, slots=True)
class _Verdict:
    mood: Mood
    recommendation: dict[str, Any] | None
    notes: list[str]


def diagnose(request: Request) -> AdvisorResult:
    """The question's observed figures against the ones expected for the request's deployment:
    which trap matches, with a confidence and the evidence rows. Without a stated precision, the
    precision whose expected figures lie nearest the observed ones is inferred (and said so)."""
    deployment, settings, question = request.deployment, request.settings, request.question
    language = request.language
    observed = {
        "throughput_tok_s": question.observed_throughput_tok_s,
        "power_w": question.observed_power_w,
        "energy_per_1k_tokens_j": question.observed_energy_j_per_1k,
    }
    has_observed = any(v is not None for v in observed.values())
    seen = _expectation(request, observed)
    dep, expected = seen.deployment, seen.expected
    comparisons = _comparisons(observed, expected)
    traps = [f for f in run_rules(dep, settings) if f.mood.rank >= Mood.YELLOW.rank]
    general = False
    if not traps and not has_observed and dep.model.params_b is None:
        # A general question ("why is 4-bit sometimes worse?"): the trap that precision is known
        # for, explained from its evidence rows rather than from this (model-less) deployment.
        traps = general_traps(dep.precision)
        general = bool(traps)
    gaps = [abs(c["gap_pct"]) for c in comparisons if c["gap_pct"] is not None]
    confidence = _confidence(traps, gaps, general, seen.candidates, deployment.precision)
    explained, explained_rows = _explained(traps, dep)
    evidence = [*expected.rows, *(r for f in traps for r in f.evidence)]
    verdict = _verdict(traps, expected, gaps, confidence, language)
    return cited_result(
        [*evidence, *explained_rows],
        expected.sources,
        protocol="diagnose",
        mood=verdict.mood,
        language=language,
        deployment=dep,
        findings=tuple(traps),
        recommendation=verdict.recommendation,
        rows=tuple(comparisons),
        tier=expected.tier,
        current=expected,
        notes=tuple(seen.notes + verdict.notes),
        extra={
            "confidence": confidence,
            "explained": explained,
            "crossovers": _crossovers(traps, dep),
            "candidates": [
                {"precision": c.precision, "distance": round(c.distance, 3)}
                for c in seen.candidates
            ],
        },
    )


def _expectation(request: Request, observed: dict[str, float | None]) -> _Expectation:
    """The deployment to diagnose and its expected figures. With figures observed for a known
    model, each precision (the stated one, else all) is ranked by how near its expectation lies;
    without a stated precision the nearest is taken, and said so."""
    deployment = request.deployment
    has_observed = any(v is not None for v in observed.values())
    candidates: list[_Candidate] = []
    notes: list[str] = []
    dep = deployment
    if has_observed and (deployment.model.params_b or deployment.model.id):
        candidates = _rank_precisions(request, observed)
        if candidates and deployment.precision is None:
            dep = with_precision(deployment, candidates[0].precision)
            notes.append(
                Text(
                    f"No precision stated; your figures sit nearest {candidates[0].precision}.",
                    f"未说明精度；你的数据最接近 {candidates[0].precision}。",
                ).get(request.language)
            )
    elif deployment.precision is None:
        dep = with_precision(deployment, "fp16")
    if candidates and (deployment.precision is None or candidates[0].precision == dep.precision):
        expected = candidates[0].estimate
    else:
        expected = run_estimate(dep, request.settings, request.requests_per_month)
    return _Expectation(dep, expected, candidates, notes)


def _rank_precisions(request: Request, observed: dict[str, float | None]) -> list[_Candidate]:
    """Each precision's distance from what the user sees (mean |log ratio|), nearest first."""
    candidates: list[_Candidate] = []
    deployment = request.deployment
    for precision in [deployment.precision] if deployment.precision else PRECISIONS:
        dep = with_precision(deployment, precision)
        est = run_estimate(dep, request.settings, request.requests_per_month)
        gaps = [
            abs(math.log(value / expected))
            for key, value in observed.items()
            if value and (expected := getattr(est, key))
        ]
        if gaps:
            candidates.append(_Candidate(precision, sum(gaps) / len(gaps), est))
    candidates.sort(key=lambda c: c.distance)
    return candidates


def _comparisons(observed: dict[str, float | None], expected: Estimate) -> list[dict[str, Any]]:
    """One row per observed figure: the expected one (as the estimate's JSON rounds it) beside
    it and the gap in percent."""
    figures, rows = expected.to_dict(), []
    for key, value in observed.items():
        if value is None:
            continue
        exp = figure(figures, key)
        rows.append(
            {
                "metric": key,
                "observed": value,
                "expected": exp,
                "gap_pct": round((value / exp - 1.0) * 100.0, 1) if exp else None,
                "tier": expected.tier,
            }
        )
    return rows


def _confidence(
    traps: list[Finding],
    gaps: list[float],
    general: bool,
    candidates: list[_Candidate],
    stated_precision: str | None,
) -> str:
    """How sure the match is: a trap whose figures sit within 20% is high, within 50% medium;
    a trap with no figure to confirm it is medium; a general question is ``general``."""
    if general:
        return "general"
    if not traps:
        return "none"
    if not gaps:
        return "medium"  # the configuration matches; no figure to confirm it
    if max(gaps) > 50:
        return "low"
    if max(gaps) > 20:
        return "medium"
    if (
        len(candidates) > 1
        and candidates[0].distance * 2 > candidates[1].distance
        and stated_precision is None
    ):
        return "medium"  # two precisions explain the figures almost equally well
    return "high"


# Evidence rows shown per trap at most (the rule's rows on the question's GPU come first).
_EVIDENCE_SHOWN = 12


def _explained(traps: list[Finding], dep: Deployment) -> tuple[list[dict[str, Any]], list[str]]:
    """Each trap's rule explained (why) with the rows behind it for THIS deployment: the
    finding's own rows on the question's GPU (its figures came from them), else the rule's rows
    on that GPU, else the rule's rows elsewhere (``on_gpu`` False: the answer says so); of those,
    the rows of the deployment's precision (and their FP16 baselines) when there are any."""
    explained: list[dict[str, Any]] = []
    row_ids: list[str] = []
    for f in traps:
        rows = _trap_rows(f, dep)
        on_gpu = any(r.gpu == dep.gpu.profile and r.precision != "fp16" for r in rows)
        shown = [_evidence_dict(r) for r in rows[:_EVIDENCE_SHOWN]]
        row_ids += [r["id"] for r in shown]
        explained.append(
            {"rule": f.rule, "why": explain(f.rule).get("why"), "evidence": shown, "on_gpu": on_gpu}
        )
    return explained, row_ids


def _trap_rows(finding: Finding, dep: Deployment) -> list[Any]:
    """The reference rows behind ``finding`` for ``dep`` (see ``_explained``), in data order.
    A row that quotes another document's run, or repeats another file's row, is that run once:
    it is not shown beside it as a second piece of evidence."""
    by_id = {k: r for k, r in row_lookup().items() if not r.quotes and r.scope != "duplicate"}
    gpu = dep.gpu.profile
    spec = RULES.get(finding.rule)
    ruled = [
        r
        for r in by_id.values()
        if r.tier in ("measured", "reported")
        and spec is not None
        and spec.evidence is not None
        and spec.evidence(r)
    ]
    own = [by_id[i] for i in dict.fromkeys(finding.evidence) if i in by_id]
    choices = [ruled, own]
    if gpu:
        choices = [[r for r in own if r.gpu == gpu], [r for r in ruled if r.gpu == gpu], *choices]
    # The first choice with a row of the trap itself (FP16 baselines alone show no trap).
    rows = next((c for c in choices if any(r.precision != "fp16" for r in c)), own)
    same = [r for r in rows if r.precision == dep.precision and r.precision != "fp16"]
    same = [r for r in same if r.model_key == dep.model.id] or same  # this model's, if any
    if same:
        # ... beside the FP16 baselines of the same GPU, model and batch size.
        keys = {(r.gpu, r.model_id, r.batch_size) for r in same}
        baselines = [r for r in (*rows, *own) if r.precision == "fp16"]
        rows = [
            *same,
            *{r.id: r for r in baselines if (r.gpu, r.model_id, r.batch_size) in keys}.values(),
        ]
    return rows


def _evidence_dict(row: Any) -> dict[str, Any]:
    """A reference row as a trap's evidence (the fields ``rules.explain`` gives, and the
    row's own published change vs FP16 when it has one)."""
    out = evidence_row(row)
    if row.delta_vs_fp16_pct is not None:
        out["delta_vs_fp16_pct"] = row.delta_vs_fp16_pct
    return out


def _verdict(
    traps: list[Finding],
    expected: Estimate,
    gaps: list[float],
    confidence: str,
    language: str,
) -> _Verdict:
    """The mood and recommendation: the worst trap and its fix; gray without data; else green,
    or yellow with a note when the figures are far from the reference and no trap explains it."""
    if traps:
        top = traps[0]
        recommendation = {
            "rule": top.rule,
            "confidence": confidence,
            "fix": top.fix,
            "fix_summary": top.fix_summary,
            "changes_outputs": top.changes_outputs,
        }
        return _Verdict(Mood.worst(f.mood for f in traps), recommendation, [])
    if expected.tier == "none":
        return _Verdict(Mood.GRAY, None, [])
    far = bool(gaps) and max(gaps) > 25
    notes = []
    if far:
        notes.append(
            Text(
                "No known trap matches, yet your figures are far from the reference: check the power limit, "
                "clocks, thermals and what else runs on the GPU, then measure with `ecoguard bench`.",
                "没有匹配的已知陷阱，但你的数据与参考值相差很大：请检查功耗上限、频率、温度以及 GPU 上的其他任务，"
                "然后用 `ecoguard bench` 实测。",
            ).get(language)
        )
    mood = Mood.YELLOW if far else Mood.GREEN
    return _Verdict(mood, {"rule": None, "confidence": "none"}, notes)


def _crossovers(traps: list[Finding], dep: Deployment) -> list[dict[str, Any]]:
    """For a small-model-quant trap: the size above which quantizing saves energy, per
    architecture, fitted and published (those with neither are left out)."""
    if not any(f.rule == "small-model-quant" for f in traps):
        return []
    precision = dep.precision if dep.precision in ("nf4", "int8_mixed", "int8_pure") else "nf4"
    out: list[dict[str, Any]] = []
    for arch in _CROSSOVER_ARCHITECTURES:
        try:
            cross = crossover(arch, precision)
        except UsageError:  # an architecture the crossover table does not cover
            continue
        if cross.fitted_b is None and cross.reported_b is None:
            continue  # neither a fitted nor a published crossover: nothing to show
        out.append(
            {
                "architecture": arch,
                "precision": cross.precision,
                "fitted_b": cross.fitted_b,
                "fitted_tier": cross.fitted_tier,
                "reported_b": cross.reported_b,
                "reported_tier": cross.reported_tier,
            }
        )
    return out


def general_trap_rule(precision: str | None) -> str | None:
    """The trap a precision is known for whatever the model (``int8_mixed`` -> ``int8-mixed``)."""
    return next((spec.id for spec in RULES.values() if precision in spec.known_for), None)


def general_traps(precision: str | None) -> list[Finding]:
    """The rule's own finding text (from ``RULES``) for a precision asked about in general."""
    spec = RULES.get(general_trap_rule(precision) or "")
    if spec is None:
        return []
    return [
        Finding(
            rule=spec.id,
            mood=spec.moods[0],
            title=spec.title,
            message=spec.summary,
            fix=spec.fix,
            fix_summary="",
            changes_outputs=spec.changes_outputs,
        )
    ]
