"""estimate: the estimator's figures for a deployment, the optimized configuration beside
them, money in the asked currency."""

from __future__ import annotations

from ecoguard.advisor.estimates import (
    estimate_dict,
    run_estimate,
    run_rules,
)
from ecoguard.advisor.protocols.base import (
    AdvisorResult,
    cite,
    equivalents,
    money_for,
    use_for_batch_size,
)
from ecoguard.advisor.protocols.optimizing import optimize
from ecoguard.config import Settings
from ecoguard.deployment import Deployment
from ecoguard.errors import UsageError
from ecoguard.findings import Mood, weakest_tier


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
        equivalents=equivalents(cur_money.get("energy_kwh"), cur_money.get("co2_kg"), language),
        notes=notes,
        batching=advice,
    )
