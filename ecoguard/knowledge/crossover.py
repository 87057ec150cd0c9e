"""Crossover sizes: the model size above which NF4 or INT8 saves energy versus FP16.

Fitted from the measured rows that carry an energy change versus a paired FP16 baseline
(``delta_vs_fp16_pct``): an ordinary least-squares line of delta % against ln(params), solved
for delta = 0. The publisher's thresholds (Turing 3.4 B, Ada 4.2 B, Blackwell 5.2 B, for
4-bit) are kept beside the fit as ``reported``; they are not used in the fit.
"""

from __future__ import annotations

import math
from functools import cache

from ecoguard.errors import UsageError
from ecoguard.knowledge.records import Crossover

REPORTED_SOURCE = (
    "ecocompute-dynamic-eval/skills/ecocompute/SKILL.md (architecture-aware thresholds)"
)
# Published NF4 crossover thresholds, billions of parameters (the INT8 path has none published).
REPORTED_B: dict[tuple[str, str], float] = {
    ("turing", "nf4"): 3.4,
    ("ada", "nf4"): 4.2,
    ("blackwell", "nf4"): 5.2,
}
ARCHITECTURES = ("volta", "turing", "ampere", "ada", "hopper", "blackwell")
CROSSOVER_PRECISIONS = ("nf4", "nf4_dq", "int8_mixed", "int8_pure")


def crossover(architecture: str, precision: str) -> Crossover:
    """The fitted and the reported crossover for one architecture and precision."""
    from ecoguard.deployment import normalize_precision

    arch = architecture.strip().lower()
    if arch not in ARCHITECTURES:
        raise UsageError(
            f"unknown architecture {architecture!r}; accepted: {', '.join(ARCHITECTURES)}"
        )
    prec = normalize_precision(precision)
    if prec not in CROSSOVER_PRECISIONS:
        raise UsageError(
            f"crossover is defined for {', '.join(CROSSOVER_PRECISIONS)}, not {prec!r}"
        )
    return _crossover(arch, prec)


@cache
def _crossover(arch: str, prec: str) -> Crossover:
    from ecoguard.knowledge.tables import gpu_profiles, reference_rows

    arch_gpus = {k for k, p in gpu_profiles().items() if p.architecture == arch}
    points: list[tuple[float, float]] = []
    sources: set[str] = set()
    for row in reference_rows():
        if (
            row.gpu in arch_gpus
            and row.precision == prec
            and row.tier in ("measured", "local")
            and row.scope == "end_to_end"
            and row.delta_vs_fp16_pct is not None
            and (row.batch_size in (1, None))
        ):
            points.append((math.log(row.params_b), row.delta_vs_fp16_pct))
            sources.add(row.source)
    reported = REPORTED_B.get((arch, prec))
    if reported is not None:
        sources.add(REPORTED_SOURCE)
    fitted, method = _fit_root(points)
    return Crossover(
        architecture=arch,
        precision=prec,
        fitted_b=fitted,
        reported_b=reported,
        method=method,
        points=len(points),
        sources=tuple(sorted(sources)),
    )


def _fit_root(points: list[tuple[float, float]]) -> tuple[float | None, str]:
    """Least-squares delta% = a + b ln(N); root N = exp(-a/b) when the line falls through 0."""
    sizes = {round(x, 6) for x, _ in points}
    if len(points) < 3 or len(sizes) < 2:
        return None, f"too few measured points to fit ({len(points)} rows, {len(sizes)} sizes)"
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in points)
    slope = sxy / sxx
    intercept = mean_y - slope * mean_x
    desc = (
        f"OLS fit of delta% vs ln(params) over {n} measured rows "
        f"(delta = {intercept:.1f} {slope:+.1f} ln N)"
    )
    if slope >= 0:
        return None, desc + "; the saving does not grow with size, no crossover"
    root = math.exp(-intercept / slope)
    lo, hi = math.exp(min(sizes)), math.exp(max(sizes))
    if root > 4 * hi or root < lo / 4:
        return None, desc + f"; root {root:.3g} B is far outside the measured {lo:.2g}-{hi:.2g} B"
    return round(root, 2), desc + "; root where delta = 0"
