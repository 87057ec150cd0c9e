"""How far to trust the estimator: hold-out error and interval coverage, by method.

Two hold-outs, over every configuration with measured rows (tier ``measured``):

* ``config``: hide every row of that configuration (GPU, model, precision, batch size), and
  every pair whose baseline is among them, and ask for it;
* ``gpu``: hide every row of that configuration's GPU, and ask for it.

The truth is the hidden configuration's own figure (the median of its sessions). Error is
``estimate / truth - 1``. The residuals ``ln(truth / estimate)`` of each method (the ladder's
``family``) give the p10-p90 band every estimate of that method carries
(``data/estimator_validation.json``, written by ``tools/validate_estimator.py``), and the
method's confidence. Coverage is measured honestly: the band for a held-out point is built from
the residuals of the *other* points (of other GPUs for the gpu hold-out, of other models for
the config hold-out), never from its own.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass

from ecoguard.knowledge import tables
from ecoguard.knowledge.evidence import ConfigKey, Evidence, quantile
from ecoguard.knowledge.ladder import SHIPPED, Choices, Ladder, Query

MODES = ("config", "gpu")
SCHEMA_VERSION = 1


@dataclass(frozen=True, slots=True)
class Point:
    """One held-out configuration: what the estimator said and what was measured."""

    mode: str
    gpu: str
    model: str
    precision: str
    batch_size: int
    truth: float
    estimate: float | None
    family: str
    base_down: float  # the estimate's own band before the method's error is folded in
    base_up: float
    carried_from: tuple[str, ...] = ()

    @property
    def error(self) -> float | None:
        return None if self.estimate is None else self.estimate / self.truth - 1.0

    @property
    def residual(self) -> float | None:
        return None if self.estimate is None else math.log(self.truth / self.estimate)


def _shipped_rows():
    return tables._shipped_rows()


def measured_configs(rows=None) -> list[ConfigKey]:
    """Configurations whose best rows are measured (the ones the hold-outs are scored on)."""
    ev = Evidence(rows if rows is not None else _shipped_rows())
    out = []
    for key in ev.configs():
        fig = ev.direct(key)
        if fig is not None and fig.tier == "measured":
            out.append(key)
    return out


def holdout_points(mode: str, rows=None, choices: Choices = SHIPPED) -> list[Point]:
    """Run one hold-out over every measured configuration, with the ladder's ``choices``."""
    if mode not in MODES:
        raise ValueError(f"hold-out mode must be one of {', '.join(MODES)}, got {mode!r}")
    rows = rows if rows is not None else _shipped_rows()
    full = Evidence(rows)
    profiles = tables.gpu_profiles()
    points: list[Point] = []
    for key in measured_configs(rows):
        gpu, model, precision, bs = key
        truth = full.direct(key)
        assert truth is not None
        if mode == "config":
            ev = Evidence(rows, hidden_configs=frozenset((key,)))
        else:
            ev = Evidence(rows, hidden_gpus=frozenset((gpu,)))
        query = Query(profiles[gpu], model, full.params[model], precision, bs)
        basis = Ladder(ev, choices).resolve(query)
        if basis is None:
            points.append(Point(mode, gpu, model, precision, bs, truth.value, None, "none", 0, 0))
            continue
        fig = basis.figure
        points.append(
            Point(
                mode,
                gpu,
                model,
                precision,
                bs,
                truth.value,
                fig.value,
                basis.family,
                math.log(fig.value / fig.low),
                math.log(fig.high / fig.value),
                basis.carried_from,
            )
        )
    return points


def family_bands(points: list[Point]) -> dict[str, dict]:
    """Per method: n, median and p90 |error| (%), residual p10/p90 (log) for the bands."""
    out: dict[str, dict] = {}
    families = sorted({p.family for p in points if p.estimate is not None})
    for family in families:
        res = [p.residual for p in points if p.family == family and p.residual is not None]
        errs = [abs(p.error) * 100 for p in points if p.family == family and p.error is not None]
        out[family] = {
            "n": len(res),
            "median_abs_error_pct": round(statistics.median(errs), 1),
            "p90_abs_error_pct": round(quantile(errs, 0.9), 1),
            "residual_p10": round(quantile(res, 0.1), 4),
            "residual_p90": round(quantile(res, 0.9), 4),
        }
    return out


def band_for(down: float, up: float, p10: float, p90: float) -> tuple[float, float]:
    """Log half-widths of an estimate's interval: its own band and the method's residual
    quantiles combined in quadrature (the residual p10 is negative when the method
    over-estimates, so it widens the lower side)."""
    lower = math.hypot(down, max(0.0, -p10))
    upper = math.hypot(up, max(0.0, p90))
    # A method that is biased keeps the interval on the side the truth lies.
    if p10 > 0:
        lower = max(0.0, lower - p10)
    if p90 < 0:
        upper = max(0.0, upper + p90)
    return lower, upper


def _coverage(points: list[Point], mode: str) -> list[tuple[bool, float]]:
    """(covered, width as a fraction of the estimate) per point, with each point's band
    calibrated on the others (other GPU for 'gpu', other model for 'config')."""
    out = []
    for p in points:
        if p.estimate is None:
            continue
        others = [
            o.residual
            for o in points
            if o.family == p.family
            and o.residual is not None
            and (o.gpu != p.gpu if mode == "gpu" else (o.gpu, o.model) != (p.gpu, p.model))
        ]
        if len(others) < 3:
            others = [o.residual for o in points if o.residual is not None and o is not p]
        if not others:  # a lone point: its band is its own, with no method error to add
            others = [0.0]
        lower, upper = band_for(
            p.base_down, p.base_up, quantile(others, 0.1), quantile(others, 0.9)
        )
        lo, hi = p.estimate * math.exp(-lower), p.estimate * math.exp(upper)
        out.append((lo <= p.truth <= hi, (hi - lo) / p.estimate))
    return out


def summary(points: list[Point], mode: str) -> dict:
    errs = [abs(p.error) * 100 for p in points if p.error is not None]
    cov = _coverage(points, mode)
    by_family = {}
    for family in sorted({p.family for p in points}):
        fam = [p for p in points if p.family == family]
        fam_errs = [abs(p.error) * 100 for p in fam if p.error is not None]
        fam_cov = _coverage(fam, mode) if fam_errs else []
        by_family[family] = {
            "n": len(fam),
            "median_abs_error_pct": round(statistics.median(fam_errs), 1) if fam_errs else None,
            "p90_abs_error_pct": round(quantile(fam_errs, 0.9), 1) if fam_errs else None,
            "coverage_pct": round(100 * sum(c for c, _ in fam_cov) / len(fam_cov), 1)
            if fam_cov
            else None,
        }
    return {
        "mode": mode,
        "configurations": len(points),
        "answered": len(errs),
        "median_abs_error_pct": round(statistics.median(errs), 1) if errs else None,
        "p90_abs_error_pct": round(quantile(errs, 0.9), 1) if errs else None,
        "coverage_pct": round(100 * sum(c for c, _ in cov) / len(cov), 1) if cov else None,
        "median_width_pct": round(100 * statistics.median(w for _, w in cov), 1) if cov else None,
        "by_method": by_family,
    }


def validate(rows=None) -> dict:
    """Both hold-outs: summaries, per-method bands and every point (the validation table)."""
    points = {mode: holdout_points(mode, rows) for mode in MODES}
    pooled = [p for mode in MODES for p in points[mode]]
    return {
        "schema_version": SCHEMA_VERSION,
        "summary": {mode: summary(points[mode], mode) for mode in MODES},
        "methods": family_bands(pooled),
        "points": {
            mode: [
                {**asdict(p), "error_pct": None if p.error is None else round(p.error * 100, 1)}
                for p in points[mode]
            ]
            for mode in MODES
        },
    }
