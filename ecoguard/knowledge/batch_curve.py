"""J/token ratios between batch sizes, read from batch curves measured in one session: the same
model and GPU at another precision (FP16 first), else the A800 Mistral-7B pure-INT8 sweep."""

from __future__ import annotations

from ecoguard.knowledge.evidence import Evidence, session_of
from ecoguard.knowledge.fitting import loglog
from ecoguard.knowledge.records import ReferenceRow

SWEEP_SOURCE_TAG = "dyn-bssweep"


def _sweep_curve(ev: Evidence) -> list[tuple[float, float]]:
    pts = sorted(
        (float(r.batch_size), float(r.energy_j_per_1k))
        for rows in ev.by_config.values()
        for r in rows
        if f"/{SWEEP_SOURCE_TAG}" in r.id and r.batch_size and r.energy_j_per_1k
    )
    return pts


def batch_ratio(
    ev: Evidence, gpu: str, model: str | None, precision: str, from_bs: int, to_bs: int
) -> tuple[float, str, tuple[ReferenceRow, ...]] | None:
    """J/token ratio from one batch size to another, from a curve measured in one session:
    the same model and GPU at another precision first (FP16 first), else the A800 sweep."""
    if model is not None:
        for other in (
            "fp16",
            *sorted(p for (g, m, p, _) in ev.by_config if g == gpu and m == model),
        ):
            if other == precision:
                continue
            curve = _same_session_curve(ev, gpu, model, other)
            if curve and _covers(curve, from_bs) and _covers(curve, to_bs):
                pts = [(float(b), v) for b, v, _ in curve]
                ratio = loglog(pts, to_bs) / loglog(pts, from_bs)
                rows = tuple(r for _, _, r in curve)
                return ratio, f"batch curve of {model} {other} on {gpu} (one session)", rows
    sweep = _sweep_curve(ev)
    if len(sweep) >= 2:
        ratio = loglog(sweep, to_bs) / loglog(sweep, from_bs)
        rows = tuple(
            r for rows in ev.by_config.values() for r in rows if f"/{SWEEP_SOURCE_TAG}" in r.id
        )
        return ratio, "A800 Mistral-7B pure-INT8 batch sweep (one session, log-log)", rows
    return None


def _covers(curve, bs: int) -> bool:
    sizes = [b for b, _, _ in curve]
    return min(sizes) <= bs <= max(sizes) or bs in sizes


def _same_session_curve(ev: Evidence, gpu: str, model: str, precision: str):
    """(bs, J/1k, row) of the session that measured the most batch sizes of this config."""
    sessions: dict[str, dict[int, ReferenceRow]] = {}
    for (g, m, p, bs), rows in ev.by_config.items():
        if (g, m, p) != (gpu, model, precision):
            continue
        for row in rows:
            if row.tier == "reported":
                continue
            sessions.setdefault(session_of(row), {})[bs] = row
    best = max(sessions.values(), key=len, default={})
    if len(best) < 2:
        return []
    return sorted((bs, r.energy_j_per_1k, r) for bs, r in best.items())
