"""What a trap costs: the estimator run on the deployment and on its fixed twin.

The rules never compute energy themselves. They describe the fixed configuration and ask the
knowledge estimator (``ecoguard.knowledge.estimator.estimate``) for both; the difference is the
finding's :class:`~ecoguard.findings.Impact`. When the estimator is missing, raises, or has no
basis for either side (tier ``none``), or both sides rest on the same rows with the same figure
(nothing measured tells them apart), the impact is ``None`` and the rule still fires.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ecoguard.config import Settings
from ecoguard.deployment import Deployment
from ecoguard.faults import record_fault
from ecoguard.findings import Impact, weakest_tier
from ecoguard.knowledge import estimator as knowledge_estimator


def weaker_tier(first: str, second: str) -> str:
    """The less certain of two data tiers (unknown tiers count as ``none``)."""
    return weakest_tier((first, second))


def _default_estimator() -> Callable[..., Any] | None:
    return knowledge_estimator.estimate  # read per call: a patched estimator is seen


# The estimator the rules ask, through a seam: tests put a fake here (or one that returns None,
# for "no estimator"). The knowledge tables load on the first estimate, not on import.
estimator_provider: Callable[[], Callable[..., Any] | None] = _default_estimator


def estimate_or_none(deployment: Deployment, settings: Settings) -> Any | None:
    """The estimator's answer for ``deployment``, or None when it has nothing or fails."""
    estimate = estimator_provider()
    if estimate is None:
        return None
    try:
        result = estimate(
            deployment, settings=settings, requests_per_month=settings.monthly_requests
        )
    except Exception as exc:  # an under-specified or odd deployment must not break a rule
        record_fault("rules.estimate", exc)
        return None
    if result is None or getattr(result, "tier", "none") == "none":
        return None
    return result


def impact_between(
    deployment: Deployment, fixed: Deployment, settings: Settings
) -> tuple[Impact | None, tuple[str, ...]]:
    """(impact, evidence row ids) of running ``deployment`` instead of ``fixed``.

    ``extra_energy_pct`` compares energy per request (J) on the paired chain (a measured
    configuration's same-session changes, not the ratio of two medians of different sessions);
    the monthly figures are at ``settings.monthly_requests`` and the region's price as the
    estimator applies it, on the same basis.
    """
    before = estimate_or_none(deployment, settings)
    after = estimate_or_none(fixed, settings)
    if before is None or after is None:
        return None, ()
    rows = tuple(dict.fromkeys((*before.rows, *after.rows)))
    before_j, before_scale = _paired(before)
    after_j, after_scale = _paired(after)
    if before_j is None or after_j is None or after_j <= 0:
        return None, rows
    if tuple(before.rows) == tuple(after.rows) and before_j == after_j:
        # Both sides read off the same rows (bf16 is estimated from fp16 rows): the data says
        # nothing about the difference, so a "+0 %" would be a made-up figure.
        return None, rows
    extra_pct = (before_j / after_j - 1.0) * 100.0
    extra_usd = extra_kwh = None
    before_m, after_m = getattr(before, "monthly", None), getattr(after, "monthly", None)
    if before_m is not None and after_m is not None:
        if before_m.cost_usd is not None and after_m.cost_usd is not None:
            extra_usd = before_m.cost_usd * before_scale - after_m.cost_usd * after_scale
        if before_m.energy_kwh is not None and after_m.energy_kwh is not None:
            extra_kwh = before_m.energy_kwh * before_scale - after_m.energy_kwh * after_scale
    sources = tuple(dict.fromkeys((*before.sources, *after.sources)))
    method = f"estimate(before) vs estimate(after): {before.method}; {after.method}"
    paired = _paired_changes(before, after)
    impact = Impact(
        extra_energy_pct=round(extra_pct, 1),
        extra_usd_per_month=None if extra_usd is None else round(extra_usd, 2),
        extra_kwh_per_month=None if extra_kwh is None else round(extra_kwh, 3),
        monthly_requests=settings.monthly_requests,
        tier=weaker_tier(before.tier, after.tier),
        sources=sources,
        method=method,
        paired_range_pct=(round(min(paired), 1), round(max(paired), 1)) if paired else None,
        paired_sessions=len(paired),
    )
    return impact, rows


def _paired(estimate: Any) -> tuple[float | None, float]:
    """(J per request on the paired chain, its ratio to the figure shown). A measured
    configuration shows its own sessions' median, but two configurations compare by their
    same-session changes (the chained figure), so alerts and $ follow the paired delta."""
    shown = estimate.energy_per_request_j
    paired = getattr(estimate, "paired_energy_per_request_j", None)
    if shown is None or paired is None or shown <= 0:
        return shown, 1.0
    return paired, paired / shown


def _paired_changes(before: Any, after: Any) -> list[float]:
    """The change before/after as measured inside each session that measured both: from the
    two estimates' same-session deltas vs FP16 (sessions in common), or, when the fixed side
    is the FP16 anchor itself, the before side's deltas. Empty when no session measured both."""
    if getattr(before, "family", None) != "exact" or getattr(after, "family", None) != "exact":
        return []
    # Keyed by the FP16 run each was paired with: two precisions paired with one FP16 run were
    # measured in the same session even when each has a file of its own.
    b = {base: d for _src, _ses, d, base in getattr(before, "paired_deltas", ())}
    a = {base: d for _src, _ses, d, base in getattr(after, "paired_deltas", ())}
    if not b:
        return []
    same_shape = (
        before.deployment.gpu.profile == after.deployment.gpu.profile
        and before.deployment.batch_size == after.deployment.batch_size
    )
    if not same_shape:
        return []
    if not a and (after.deployment.precision or "fp16") in ("fp16", "bf16"):
        return list(b.values())
    return [((1 + b[k] / 100.0) / (1 + a[k] / 100.0) - 1.0) * 100.0 for k in b if k in a]
