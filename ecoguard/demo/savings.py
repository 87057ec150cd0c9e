"""What the demo's two fixes are worth per month, from the estimator over the reference data.

The fixes are chained from the trap configuration (int8 mixed, batch size 1), the ones this run
applied first, so what it saved and what is still available add up to the whole difference
between the trap and the fully fixed configuration.

These are reference figures, not measurements (the measured joules are the phases' and the
ledger's): the estimator the rules ask for a finding's impact (``rules.impact.impact_between``),
on the same fixed twins (``int8_pure``; a larger batch), with the tier combined as the rules
combine it. The demo does not copy the findings' :class:`~ecoguard.findings.Impact`: that figure
is rounded for display (0.1 %, cents, 0.001 kWh), has no CO2 or confidence, takes
``batch-size-one`` to ``max_batch_size`` rather than to the batch this run served, is None when
both sides rest on the same rows, and for a model outside the data (SmolLM2-135M) is None
altogether; here the steps must add up to ``before`` minus ``after`` exactly.
``tests/demo/test_demo_summary.py`` checks each step against ``impact_between`` for the same
pair of configurations.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from ecoguard.config import Settings
from ecoguard.demo.summary import EstimateFigures, MonthlySaving, Savings, SavingsItem
from ecoguard.deployment import Deployment, GpuSpec, ModelSpec
from ecoguard.knowledge import find_rows
from ecoguard.knowledge.estimator import estimate


@dataclass(frozen=True, slots=True)
class Fix:
    """One of the demo's fixes, as a change to a deployment."""

    rule: str
    change: str  # what it changes, in words; ``{batch}`` is the batch the demo served
    apply: Callable[[Deployment, int], Deployment]


FIXES: tuple[Fix, ...] = (
    Fix(
        "int8-mixed",
        "llm_int8_threshold 6.0 -> 0.0",
        lambda deployment, _batch: deployment.with_(precision="int8_pure"),
    ),
    Fix(
        "batch-size-one",
        "batch size 1 -> {batch}",
        lambda deployment, batch: deployment.with_(batch_size=batch),
    ),
)


def chain(
    deployment: Deployment, applied: dict[str, bool], batch: int
) -> list[tuple[Fix, Deployment]]:
    """(fix, the deployment with it) in order: the applied fixes first, each on the last."""
    steps = []
    current = deployment
    for fix in sorted(FIXES, key=lambda fix: not applied.get(fix.rule, False)):
        current = fix.apply(current, batch)
        steps.append((fix, current))
    return steps


def savings(
    settings: Settings, deployment: Deployment, applied: dict[str, bool], batch: int
) -> Savings:
    """Monthly energy, money and CO2 each fix saves for ``deployment``."""
    steps = chain(deployment, applied, batch)
    first = estimate(deployment, settings=settings)
    points = [EstimateFigures.of(first)]
    points += [EstimateFigures.of(estimate(fixed, settings=settings)) for _, fixed in steps]
    items = tuple(
        SavingsItem.between(
            fix.rule,
            fix.change.format(batch=batch),
            applied.get(fix.rule, False),
            points[index],
            points[index + 1],
        )
        for index, (fix, _) in enumerate(steps)
    )
    monthly = first.monthly
    return Savings(
        monthly_requests=monthly.requests,
        region=monthly.region,
        price_usd_per_kwh=monthly.price_usd_per_kwh,
        gco2_per_kwh=monthly.gco2_per_kwh,
        gpu=deployment.gpu.profile or deployment.gpu.name,
        model=deployment.model.id,
        params_b=deployment.model.params_b,
        prompt_tokens=deployment.prompt_tokens,
        generation_tokens=deployment.generation_tokens,
        before=points[0],
        after=points[-1],
        items=items,
        saved=MonthlySaving.total([i.saving for i in items if i.applied]),
        available=MonthlySaving.total([i.saving for i in items if not i.applied]),
    )


def nearest_measured(deployment: Deployment) -> Deployment | None:
    """The same deployment with the smallest model the reference data measured INT8 on for this
    GPU (else on the A800, whose rows cover both fixes), or None when there is none."""
    for profile in dict.fromkeys((deployment.gpu.profile, "a800")):
        if not profile:
            continue
        rows = [r for r in find_rows(gpu=profile, precision="int8_mixed") if r.params_b]
        if rows:
            smallest = min(rows, key=lambda r: r.params_b)
            return deployment.with_(
                model=ModelSpec(id=smallest.model_id, params_b=smallest.params_b),
                gpu=deployment.gpu
                if profile == deployment.gpu.profile
                else GpuSpec(profile=profile),
            )
    return None


def savings_with_basis(
    settings: Settings, deployment: Deployment, applied: dict[str, bool], batch: int
) -> Savings:
    """Savings for the served model when the reference data reaches it; otherwise for the nearest
    model it measured (a 135M model is far below the 7B rows), said plainly in ``basis``."""
    served = savings(settings, deployment, applied, batch)
    if served.before.tier != "none":
        return served
    nearest = nearest_measured(deployment)
    if nearest is None:
        return _replace_basis(served, "none: no reference data for this configuration")
    scaled = savings(settings, nearest, applied, batch)
    served_name = deployment.model.id or "the served model"
    basis = (
        f"{served_name} is outside the reference data's measured sizes, so these figures are for "
        f"{nearest.model.id} ({nearest.model.params_b:g}B), the smallest model measured in "
        f"INT8 on {nearest.gpu.profile}, with the same fixes"
    )
    return _replace_basis(scaled, basis, served_name)


def _replace_basis(found: Savings, basis: str, served_model: str | None = None) -> Savings:
    return replace(found, basis=basis, served_model=served_model)
