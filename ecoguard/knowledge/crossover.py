"""Crossover sizes: the model size above which NF4 or INT8 saves energy versus FP16.

Fitted from measured pairs: rows with their own end-to-end energy and a paired FP16 baseline
energy (``delta_vs_fp16_pct``), one point per pair (the same pair printed by two files counts
once; a row that only quotes a delta, with no energy of its own, is not a pair). An ordinary
least-squares line of delta % against ln(params) is solved for delta = 0. The root is
``fitted_b`` only inside the measured sizes; outside them it is kept as ``root_b`` and the
record says whether any measured pair saved energy at all, so nobody calls an extrapolation a
fitted crossover. The publisher's thresholds (Turing 3.4 B, Ada 4.2 B, Blackwell 5.2 B, for
4-bit) are kept beside the fit as ``reported``; they are not used in the fit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

from ecoguard.deployment import normalize_precision
from ecoguard.errors import UsageError
from ecoguard.knowledge.records import Crossover
from ecoguard.knowledge.tables import gpu_profiles, reference_rows

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
    arch_gpus = {k for k, p in gpu_profiles().items() if p.architecture == arch}
    points = fit_points(reference_rows(), arch_gpus, prec)
    sources = {source for _, _, source in points}
    reported = REPORTED_B.get((arch, prec))
    if reported is not None:
        sources.add(REPORTED_SOURCE)
    fit = _fit_root([(math.log(size), delta) for size, delta, _ in points])
    sizes = [size for size, _, _ in points]
    return Crossover(
        architecture=arch,
        precision=prec,
        fitted_b=fit.fitted_b,
        reported_b=reported,
        method=fit.method,
        points=len(points),
        sources=tuple(sorted(sources)),
        root_b=fit.root_b,
        measured_min_b=min(sizes) if sizes else None,
        measured_max_b=max(sizes) if sizes else None,
        saving_measured=any(delta < 0 for _, delta, _ in points),
    )


def fit_points(rows, gpus: set[str], precision: str) -> list[tuple[float, float, str]]:
    """(params_b, delta %, source) for each measured pair of ``precision`` on ``gpus`` at batch
    size 1: a row with its own end-to-end energy and its FP16 baseline's energy. The same pair
    printed by two files (same GPU, model, energies) is one point."""
    points: list[tuple[float, float, str]] = []
    seen: set[tuple] = set()
    for row in rows:
        if not (
            row.gpu in gpus
            and row.precision == precision
            and row.tier in ("measured", "local")
            and row.scope == "end_to_end"
            and row.batch_size in (1, None)
            and row.energy_j_per_1k is not None
            and row.fp16_energy_j_per_1k is not None
            and row.delta_vs_fp16_pct is not None
        ):
            continue
        pair = (
            row.gpu,
            row.model_key or row.model_id,
            round(row.energy_j_per_1k, 1),
            round(row.fp16_energy_j_per_1k, 1),
        )
        if pair in seen:
            continue
        seen.add(pair)
        points.append((row.params_b, row.delta_vs_fp16_pct, row.source))
    return points


@dataclass(frozen=True, slots=True)
class _Fit:
    fitted_b: float | None
    root_b: float | None
    method: str


def _fit_root(points: list[tuple[float, float]]) -> _Fit:
    """Least-squares delta% = a + b ln(N); root N = exp(-a/b) when the line falls through 0.
    The root counts as fitted only between the smallest and the largest measured size."""
    sizes = {round(x, 6) for x, _ in points}
    if len(points) < 3 or len(sizes) < 2:
        return _Fit(
            None, None, f"too few measured pairs to fit ({len(points)} pairs, {len(sizes)} sizes)"
        )
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in points)
    slope = sxy / sxx
    intercept = mean_y - slope * mean_x
    desc = (
        f"OLS fit of delta% vs ln(params) over {n} measured pairs "
        f"(delta = {intercept:.1f} {slope:+.1f} ln N)"
    )
    if slope >= 0:
        return _Fit(None, None, desc + "; the saving does not grow with size, no crossover")
    root = math.exp(-intercept / slope)
    lo, hi = math.exp(min(sizes)), math.exp(max(sizes))
    if root > hi:
        return _Fit(
            None,
            round(root, 2),
            desc + f"; the line reaches 0 only at {root:.3g} B, beyond the largest measured "
            f"size ({hi:.3g} B): no crossover observed",
        )
    if root < lo:
        return _Fit(
            None,
            round(root, 2),
            desc + f"; the line reaches 0 at {root:.3g} B, below the smallest measured size "
            f"({lo:.3g} B): no crossover observed",
        )
    return _Fit(round(root, 2), round(root, 2), desc + "; root where delta = 0")
