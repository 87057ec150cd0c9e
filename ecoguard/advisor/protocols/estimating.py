"""estimate: the estimator's figures for a deployment, the optimized configuration beside
them, money in the asked currency."""

from __future__ import annotations

from typing import Any

from ecoguard.advisor.estimates import run_estimate, run_rules
from ecoguard.advisor.protocols.base import (
    AdvisorResult,
    Pricing,
    cited_result,
    equivalents,
    use_for_batch_size,
)
from ecoguard.advisor.protocols.optimizing import optimize
from ecoguard.config import Settings
from ecoguard.deployment import Deployment
from ecoguard.errors import UsageError
from ecoguard.findings import Finding, Mood, weakest_tier
from ecoguard.knowledge.estimator import Estimate


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
    lossless: bool = False,
) -> AdvisorResult:
    """The estimator's figures for the deployment, with the optimized configuration beside them
    (and optimize's batching advice and finding); ``lossless``: see ``optimize``."""
    settings = settings or Settings()
    requests = requests_per_month if requests_per_month is not None else settings.monthly_requests
    current = run_estimate(deployment, settings, requests)
    optimized_result = _optimized(
        deployment,
        settings=settings,
        requests_per_month=requests,
        language=language,
        max_batch=max_batch,
        serving=serving,
        concurrency=concurrency,
        hours_per_day=hours_per_day,
        usd=price_currency in (None, "USD", "CNY"),
        lossless=lossless,
    )
    findings = _with_batching_finding(run_rules(deployment, settings), optimized_result)
    optimized = optimized_result.optimized if optimized_result else None
    pricing = Pricing(currency, cny_per_usd, price_per_kwh, price_currency, language)
    money = _money_side_by_side(pricing, current, optimized)
    cur_money = money["current"]
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
        money=money,
        equivalents=equivalents(cur_money.get("energy_kwh"), cur_money.get("co2_kg"), language),
        notes=tuple(cur_money["notes"]),
        batching=optimized_result.batching if optimized_result is not None else None,
    )


def _optimized(deployment: Deployment, **options: Any) -> AdvisorResult | None:
    """optimize's answer for the deployment's use, or None without a model to optimize."""
    if deployment.model.params_b is None and deployment.model.id is None:
        return None
    try:
        return optimize(
            deployment, use=deployment.use or use_for_batch_size(deployment.batch_size), **options
        )
    except UsageError:
        return None


def _with_batching_finding(
    findings: list[Finding], optimized: AdvisorResult | None
) -> list[Finding]:
    """The rules' findings plus optimize's batch-size-one finding when the rules have none."""
    if optimized is None or any(f.rule == "batch-size-one" for f in findings):
        return findings
    return [*findings, *[f for f in optimized.findings if f.rule == "batch-size-one"][:1]]


def _money_side_by_side(
    pricing: Pricing, current: Estimate, optimized: Estimate | None
) -> dict[str, Any]:
    """The current configuration's money and, with an optimized one, its money and the saving
    in each currency both have."""
    money = {"current": pricing.money(current)}
    if not optimized:
        return money
    money["optimized"] = pricing.money(optimized)
    now, then = money["current"], money["optimized"]
    for key, saving in (
        ("cost_usd", "saving_usd"),
        ("cost_cny", "saving_cny"),
        ("cost_local", "saving_local"),
    ):
        if now[key] is not None and then[key] is not None:
            money[saving] = round(now[key] - then[key], 2)
    return money


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
