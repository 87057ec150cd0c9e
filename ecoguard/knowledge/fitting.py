"""Curve fitting over (size, value) points: the numeric steps the ladder stands on.

Pure functions of their points: no reference rows, no design choices (callers pass those in).
"""

from __future__ import annotations

import math
import statistics
from itertools import pairwise


def lerp_log(
    points: list[tuple[float, float]], x: float, reach: float, *, ols: bool
) -> float | None:
    """Interpolate y over ln(x) (points sorted by x, x > 0); beyond the ends, within ``reach``
    times the nearest size, the least-squares line over every point (``ols``, with 3 points or
    more) or the nearest value; None further out."""
    if not points:
        return None
    lo, hi = points[0][0], points[-1][0]
    if not lo / reach <= x <= hi * reach:
        return None
    if (x < lo or x > hi) and ols and len(points) >= 3:
        return ols_line(points, x)
    if x <= lo:
        return points[0][1]
    if x >= hi:
        return points[-1][1]
    for (x0, y0), (x1, y1) in pairwise(points):
        if x0 <= x <= x1:
            if x1 == x0:
                return y0
            t = (math.log(x) - math.log(x0)) / (math.log(x1) - math.log(x0))
            return y0 + t * (y1 - y0)
    return None


def ols_line(points: list[tuple[float, float]], x: float) -> float:
    """y at x on the least-squares line of y over ln(size)."""
    xs = [math.log(p[0]) for p in points]
    ys = [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((v - mx) ** 2 for v in xs)
    slope = sum((a - mx) * (b - my) for a, b in zip(xs, ys, strict=True)) / sxx if sxx else 0.0
    return my + slope * (math.log(x) - mx)


def loglog(points: list[tuple[float, float]], x: float) -> float:
    """Piecewise-linear interpolation in log-log space, held flat beyond the ends."""
    if x <= points[0][0]:
        return points[0][1]
    if x >= points[-1][0]:
        return points[-1][1]
    for (x0, y0), (x1, y1) in pairwise(points):
        if x0 <= x <= x1:
            t = (math.log(x) - math.log(x0)) / (math.log(x1) - math.log(x0))
            return math.exp(math.log(y0) + t * (math.log(y1) - math.log(y0)))
    return points[-1][1]


def lstsq2(xs: list[tuple[float, float]], ys: list[float]) -> tuple[float, float, int]:
    """Least squares y = a x0 + b x1 (no intercept: the same GPU has ratio 1), ridge-damped
    towards (0, 0) so two GPUs sharing one configuration cannot produce wild exponents."""
    ridge = 0.5
    s00 = sum(x0 * x0 for x0, _ in xs) + ridge
    s11 = sum(x1 * x1 for _, x1 in xs) + ridge
    s01 = sum(x0 * x1 for x0, x1 in xs)
    t0 = sum(x0 * y for (x0, _), y in zip(xs, ys, strict=True))
    t1 = sum(x1 * y for (_, x1), y in zip(xs, ys, strict=True))
    det = s00 * s11 - s01 * s01
    a = (t0 * s11 - t1 * s01) / det
    b = (s00 * t1 - s01 * t0) / det
    return a, b, len(ys)
