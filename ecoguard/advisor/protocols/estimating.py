"""estimate: the estimator's figures for a deployment, the optimized configuration beside
them, money in the asked currency."""

from __future__ import annotations

from dataclasses import replace

from ecoguard.advisor.estimates import run_estimate, run_rules
from ecoguard.advisor.protocols.base import (
    AdvisorResult,
    Request,
    cited_result,
    equivalents,
    money_side_by_side,
)
from ecoguard.advisor.protocols.optimizing import optimize
from ecoguard.errors import UsageError
from ecoguard.findings import Finding, Mood, weakest_tier
from ecoguard.knowledge.estimator import Estimate


def estimate(request: Request) -> AdvisorResult:
    """The estimator's figures for the request's deployment, with the optimized configuration
    beside them (and optimize's batching advice and finding), priced as the question asks."""
    deployment, settings, language = request.deployment, request.settings, request.language
    if request.requests_per_month is None:
        request = replace(request, requests_per_month=settings.monthly_requests)
    current = run_estimate(deployment, settings, request.requests_per_month)
    optimized_result = _optimized(request)
    findings = _with_batching_finding(run_rules(deployment, settings), optimized_result)
    optimized = optimized_result.optimized if optimized_result else None
    priced = money_side_by_side(request.question, current, optimized)
    cur_money = priced["current"]
    return cited_result(
        [*current.rows, *(optimized.rows if optimized else ())],
        [*current.sources, *(optimized.sources if optimized else ())],
        protocol="estimate",
        mood=_mood(findings, current, optimized_result),
        language=language,
        deployment=deployment,
        findings=tuple(findings),
        recommendation=optimized_result.recommendation if optimized_result else None,
        rows=(),
        tier=weakest_tier([current.tier] + ([optimized.tier] if optimized else [])),
        current=current,
        optimized=optimized,
        money=priced,
        equivalents=equivalents(cur_money.get("energy_kwh"), cur_money.get("co2_kg"), language),
        notes=tuple(cur_money["notes"]),
        batching=optimized_result.batching if optimized_result is not None else None,
    )


def _optimized(request: Request) -> AdvisorResult | None:
    """optimize's answer for the deployment's use, or None without a model to optimize (a
    UsageError)."""
    try:
        return optimize(request)
    except UsageError:
        return None


def _with_batching_finding(
    findings: list[Finding], optimized: AdvisorResult | None
) -> list[Finding]:
    """The rules' findings plus optimize's batch-size-one finding when the rules have none."""
    if optimized is None or any(f.rule == "batch-size-one" for f in findings):
        return findings
    return [*findings, *[f for f in optimized.findings if f.rule == "batch-size-one"][:1]]


def _mood(findings: list[Finding], current: Estimate, optimized: AdvisorResult | None) -> Mood:
    """A trap or an overflow sets the mood, data or not; else gray without data, the worst
    finding, yellow when optimize found a better setup, or green."""
    if current.tier == "none" and not any(f.mood.rank >= Mood.ORANGE.rank for f in findings):
        return Mood.GRAY
    if findings:
        return Mood.worst(f.mood for f in findings)
    if optimized is not None and optimized.mood == Mood.YELLOW:
        return Mood.YELLOW
    return Mood.GREEN
