"""The estimator's ladder: from the rows of the asked configuration down to another GPU.

Each rung returns a :class:`Basis` with a ``family`` (the method's name in the hold-out error
table, ``data/estimator_validation.json``) or None, and the first rung that answers wins:

``exact``           the configuration has rows: the paired chain of :mod:`.evidence`;
``batch``           the same model and precision at another batch size, carried by a batch
                    curve measured in one session (same model and GPU first, else the A800
                    Mistral-7B pure-INT8 sweep);
``paired-ratio``    FP16 of the same model on this GPU x the precision's paired change vs FP16,
                    interpolated over ln(params) between other models on this GPU;
``ratio-other-gpu`` the same, with the change read on other GPUs (none measured here);
``inverse-ratio``   FP16 from a measured quantized figure of the same model / that change;
``size``            log-log interpolation over model size between other models of this GPU and
                    precision (at most 2x beyond the sizes measured);
``size-ratio``      FP16 by size x the precision's paired change;
``cross-gpu``       every other measured GPU's own figure carried here by a factor fitted on
                    the GPU pairs that share configurations (leave-one-GPU-out validated).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from ecoguard.knowledge import tables
from ecoguard.knowledge.envelope import within_envelope
from ecoguard.knowledge.evidence import ConfigKey, Evidence, Figure, _weaker, session_of
from ecoguard.knowledge.fitting import lerp_log, loglog, lstsq2
from ecoguard.knowledge.records import GpuProfile, ReferenceRow

MAX_SIZE_EXTRAPOLATION = 2.0
SWEEP_SOURCE_TAG = "dyn-bssweep"


@dataclass(frozen=True, slots=True)
class Choices:
    """The ladder's design choices, each made by the hold-outs. ``tools/validate_estimator.py``
    scores every alternative (each flipped alone) and publishes them beside the shipped set in
    ``data/estimator_validation.json``; the picks were made on those same hold-outs, so the
    shipped figures are slightly optimistic (README says so).

    - ``carrier``: how figures are carried between GPUs. ``fitted``: factor =
      (TDP_target / TDP_ref) ** a x (BW_ref / BW_target) ** b, a and b least-squares fitted on
      every pair of measured GPUs sharing a configuration; ``tdp-bandwidth``: both exponents 1;
      ``identity``: J/token taken as equal.
    - ``size_before_inverse``: FP16 by size interpolation before FP16 from a quantized figure
      and its change. Off since offloaded rows left the fits (issue 30): the inverse ratio
      first scores 24.6% / 32.6% p90 (configuration / GPU hold-out) against 29.3% / 29.8%.
    - ``ratio_hold``: how far (x the nearest measured size) a precision's change is held.
    - ``ols_extrapolation``: beyond the measured sizes, a least-squares line over every size
      rather than the slope of the two nearest.
    - ``envelope``: carried figures checked against the physical envelope
      (:mod:`ecoguard.knowledge.envelope`) and brought inside it.
    """

    carrier: str = "fitted"
    size_before_inverse: bool = False
    ratio_hold: float = 2.5
    ols_extrapolation: bool = True
    envelope: bool = True


SHIPPED = Choices()
CARRIERS = ("fitted", "tdp-bandwidth", "identity")
# What the ladder uses; only the validation tool swaps it, to score the alternatives.
CHOICES = SHIPPED


@dataclass
class Basis:
    figure: Figure
    family: str
    method: str
    carried_from: tuple[str, ...] = ()
    power_w: float | None = None
    throughput_tok_s: float | None = None
    extra_rows: tuple[ReferenceRow, ...] = field(default_factory=tuple)
    # (low, high) J per 1k tokens of the physical envelope a carried figure was checked on.
    envelope: tuple[float, float] | None = None


@dataclass(frozen=True)
class Query:
    gpu: GpuProfile
    model_key: str | None
    params_b: float | None
    precision: str
    batch_size: int


# ------------------------------------------------------------------------------ ratios


def precision_ratio(
    ev: Evidence, gpu: str, precision: str, params_b: float, bs: int, exclude_model: str | None
) -> tuple[float, str, tuple[ReferenceRow, ...]] | None:
    """The paired change vs FP16 for ``precision`` at this size on ``gpu``: session-median
    ratios of other models, interpolated over ln(params) in log-ratio space."""
    for batch, tiers in (
        (b, t) for b in dict.fromkeys((bs, 1)) for t in (("measured", "local"), ("reported",))
    ):
        by_size: dict[float, list[float]] = {}
        rows: list[ReferenceRow] = []
        for model in sorted(ev.models_on(gpu)):
            if model == exclude_model:
                continue
            pairs = ev.precision_pairs((gpu, model, precision, batch))
            if not pairs or pairs[0].row.tier not in tiers:
                continue
            ratio, _, _, _ = ev.ratio_figure(pairs)
            by_size.setdefault(ev.params[model], []).append(math.log(ratio))
            rows.extend(p.row for p in pairs)
        points = sorted((s, statistics.fmean(v)) for s, v in by_size.items())
        value = lerp_log(points, params_b, CHOICES.ratio_hold, ols=CHOICES.ols_extrapolation)
        if value is not None:
            sizes = "/".join(f"{s:g}" for s, _ in points)
            desc = (
                f"{precision} vs FP16 {math.exp(value) * 100 - 100:+.1f}% on {gpu} at "
                f"{params_b:g} B (same-session pairs of {sizes} B models, BS {batch}, "
                "interpolated over ln(params))"
            )
            return math.exp(value), desc, tuple(rows)
    return None


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


# ------------------------------------------------------------------------------ same GPU


def on_gpu(ev: Evidence, q: Query, *, allow_size: bool = True) -> Basis | None:
    """The best same-GPU basis for the query (rungs exact .. size-ratio), memoised."""
    key = ("on_gpu", q, allow_size)
    if key not in ev._memo:
        ev._memo[key] = _on_gpu(ev, q, allow_size=allow_size)
    return ev._memo[key]


def _on_gpu(ev: Evidence, q: Query, *, allow_size: bool = True) -> Basis | None:
    g, m, p, bs = q.gpu.key, q.model_key, q.precision, q.batch_size
    if m is not None and ev.has((g, m, p, bs)):
        fig = ev.anchored((g, m, p, bs))
        assert fig is not None
        return Basis(
            fig, "exact", f"{fig.tier}: {fig.description}", (), fig.power_w, fig.throughput_tok_s
        )
    if m is not None:
        basis = _batch_rung(ev, q)
        if basis is not None:
            return basis
        basis = _paired_ratio_rung(ev, q)
        if basis is not None:
            return basis
        if p == "fp16" and not CHOICES.size_before_inverse:
            basis = _inverse_ratio_rung(ev, q)
            if basis is not None:
                return basis
    if not allow_size or q.params_b is None:
        return None
    basis = _size_rung(ev, q)
    if basis is not None:
        return basis
    if m is not None and p == "fp16" and CHOICES.size_before_inverse:
        basis = _inverse_ratio_rung(ev, q)
        if basis is not None:
            return basis
    if p != "fp16":
        fp16 = _size_rung(ev, Query(q.gpu, q.model_key, q.params_b, "fp16", bs))
        ratio = precision_ratio(ev, g, p, q.params_b, bs, None)
        if fp16 is not None and ratio is not None:
            value, desc, rows = ratio
            return Basis(
                fp16.figure.scaled(value, value, value),
                "size-ratio",
                f"FP16 {fp16.method} x {desc}",
                extra_rows=rows,
            )
    return None


def _batch_rung(ev: Evidence, q: Query) -> Basis | None:
    g, m, p, bs = q.gpu.key, q.model_key, q.precision, q.batch_size
    assert m is not None
    measured = sorted({b for (gg, mm, pp, b) in ev.by_config if (gg, mm, pp) == (g, m, p)})
    if not measured:
        return None
    src = min(measured, key=lambda b: (abs(math.log(b / bs)), b))
    base = ev.anchored((g, m, p, src))
    ratio = batch_ratio(ev, g, m, p, src, bs)
    if base is None or ratio is None:
        return None
    value, desc, rows = ratio
    # Nothing was measured at this batch size: the figure follows the paired chain (the
    # measured batch size's chained figure x the batch curve), as a comparison would.
    chained = base.paired_value / base.value
    fig = base.scaled(value * chained, value * chained, value * chained)
    return Basis(
        fig,
        "batch",
        f"{base.tier}: {base.description}; BS {src} -> {bs} x{value:.3f} by the {desc}",
        extra_rows=rows,
    )


def _paired_ratio_rung(ev: Evidence, q: Query) -> Basis | None:
    g, m, p, bs = q.gpu.key, q.model_key, q.precision, q.batch_size
    if p == "fp16" or m is None or q.params_b is None:
        return None
    fp16 = on_gpu(ev, Query(q.gpu, m, q.params_b, "fp16", bs), allow_size=False)
    if fp16 is None:
        return None
    ratio = precision_ratio(ev, g, p, q.params_b, bs, m)
    family = "paired-ratio"
    if ratio is None:
        ratio = _ratio_elsewhere(ev, q)
        family = "ratio-other-gpu"
    if ratio is None:
        return None
    value, desc, rows = ratio
    return Basis(
        fp16.figure.scaled(value, value, value),
        family,
        f"FP16 ({fp16.method}) x {desc}",
        extra_rows=(*fp16.extra_rows, *rows),
    )


def _ratio_elsewhere(ev: Evidence, q: Query):
    """The precision's change measured on other GPUs (same architecture first): the median of
    each GPU's same-model ratio, else its ratio interpolated over size."""
    assert q.params_b is not None
    profiles = tables.gpu_profiles()
    found: list[tuple[str, float, tuple[ReferenceRow, ...]]] = []
    for arch_first in (True, False):
        for gpu in sorted(ev.gpus()):
            if gpu == q.gpu.key or gpu not in profiles:
                continue
            if (profiles[gpu].architecture == q.gpu.architecture) != arch_first:
                continue
            pairs = ev.precision_pairs((gpu, q.model_key or "", q.precision, q.batch_size))
            if pairs:
                value = ev.ratio_figure(pairs)[0]
                found.append((gpu, value, tuple(p.row for p in pairs)))
                continue
            ratio = precision_ratio(ev, gpu, q.precision, q.params_b, q.batch_size, None)
            if ratio is not None:
                found.append((gpu, ratio[0], ratio[2]))
        if found:
            break
    if not found:
        return None
    value = math.exp(statistics.median(math.log(v) for _, v, _ in found))
    gpus = ", ".join(f"{g} {v * 100 - 100:+.1f}%" for g, v, _ in found)
    rows = tuple(r for _, _, rs in found for r in rs)
    return value, f"{q.precision} vs FP16 {value * 100 - 100:+.1f}% (median of {gpus})", rows


def _inverse_ratio_rung(ev: Evidence, q: Query) -> Basis | None:
    g, m, bs = q.gpu.key, q.model_key, q.batch_size
    if m is None or q.params_b is None:
        return None
    best: Basis | None = None
    for gg, mm, p, b in sorted(ev.by_config):
        if (gg, mm, b) != (g, m, bs) or p == "fp16":
            continue
        own = ev.direct((g, m, p, bs))
        ratio = precision_ratio(ev, g, p, q.params_b, bs, m)
        if own is None or ratio is None:
            continue
        value, desc, rows = ratio
        basis = Basis(
            own.scaled(1 / value, 1 / value, 1 / value),
            "inverse-ratio",
            f"{p} {own.tier} figure ({own.description}) / {desc}",
            extra_rows=rows,
        )
        if best is None or len(own.sessions) > len(best.figure.sessions):
            best = basis
    return best


def _size_rung(ev: Evidence, q: Query) -> Basis | None:
    g, p, bs = q.gpu.key, q.precision, q.batch_size
    assert q.params_b is not None
    for batch, tiers in (
        (b, t) for b in dict.fromkeys((bs, 1)) for t in (("measured", "local"), ("reported",))
    ):
        points: dict[float, Figure] = {}
        for model in sorted(ev.models_on(g)):
            if model == q.model_key or not ev.has((g, model, p, batch)):
                continue
            fig = ev.anchored((g, model, p, batch))
            size = ev.params[model]
            if fig is None or fig.tier not in tiers:
                continue
            if size not in points or len(fig.sessions) > len(points[size].sessions):
                points[size] = fig
        if len(points) < 2:
            continue
        sizes = sorted(points)
        log_pts = [(s, math.log(points[s].value)) for s in sizes]
        value = lerp_log(log_pts, q.params_b, MAX_SIZE_EXTRAPOLATION, ols=CHOICES.ols_extrapolation)
        if value is None:
            continue
        if (
            not sizes[0] <= q.params_b <= sizes[-1]
            and CHOICES.ols_extrapolation
            and len(sizes) >= 3
        ):
            kind, used = "least-squares extrapolation", tuple(sizes)
        elif not sizes[0] <= q.params_b <= sizes[-1]:
            # beyond the ends: follow the slope of the two nearest sizes, still within 2x
            a, b = (sizes[0], sizes[1]) if q.params_b < sizes[0] else (sizes[-2], sizes[-1])
            t = (math.log(q.params_b) - math.log(a)) / (math.log(b) - math.log(a))
            value = math.log(points[a].value) + t * (
                math.log(points[b].value) - math.log(points[a].value)
            )
            kind, used = "extrapolation", (a, b)
        else:
            below = max(s for s in sizes if s <= q.params_b)
            above = min(s for s in sizes if s >= q.params_b)
            kind, used = "interpolation", (below, above)
        figs = [points[s] for s in dict.fromkeys(used)]
        energy = math.exp(value)
        down = max(math.log(f.value / f.low) for f in figs)
        up = max(math.log(f.high / f.value) for f in figs)
        tier = "derived"
        rows = tuple(r for f in figs for r in f.rows)
        fig = Figure(
            energy,
            energy * math.exp(-down),
            energy * math.exp(up),
            tier,
            f"log-log {kind} over model size between {used[0]:g} B and {used[-1]:g} B "
            f"({' / '.join(f.tier for f in figs)}, same GPU and precision)",
            rows,
            tuple(s for f in figs for s in f.sessions),
        )
        basis = Basis(fig, "size", fig.description)
        if batch != bs:
            ratio = batch_ratio(ev, g, None, p, batch, bs)
            if ratio is None:
                continue
            value_r, desc, rrows = ratio
            basis = Basis(
                fig.scaled(value_r, value_r, value_r),
                "size",
                f"{fig.description}; BS {batch} -> {bs} x{value_r:.3f} by the {desc}",
                extra_rows=rrows,
            )
        return basis
    return None


# ------------------------------------------------------------------------------ other GPUs


def gpu_exponents(ev: Evidence) -> tuple[float, float, int]:
    """(a, b, n pairs): least-squares exponents of TDP and bandwidth ratios that best explain
    the measured ratio between GPUs sharing a configuration (FP16 and every precision)."""
    if "exponents" in ev._memo:
        return ev._memo["exponents"]
    profiles = tables.gpu_profiles()
    by_rest: dict[tuple[str, str, int], dict[str, float]] = {}
    for key in ev.by_config:
        g, m, p, bs = key
        if g not in profiles:
            continue
        fig = ev.anchored(key)
        if fig is not None and fig.tier != "reported":
            by_rest.setdefault((m, p, bs), {})[g] = fig.value
    xs: list[tuple[float, float]] = []
    ys: list[float] = []
    for values in by_rest.values():
        gpus = sorted(values)
        for i, a in enumerate(gpus):
            for b in gpus[i + 1 :]:
                pa, pb = profiles[a], profiles[b]
                xs.append(
                    (
                        math.log(pa.tdp_w / pb.tdp_w),
                        math.log(pb.mem_bandwidth_gbs / pa.mem_bandwidth_gbs),
                    )
                )
                ys.append(math.log(values[a] / values[b]))
    result = lstsq2(xs, ys)
    ev._memo["exponents"] = result
    return result


def carry_factor(ev: Evidence, target: GpuProfile, ref: GpuProfile) -> tuple[float, str]:
    """The factor that carries a J/token figure from ``ref`` to ``target``, and its formula."""
    tdp = target.tdp_w / ref.tdp_w
    bw = ref.mem_bandwidth_gbs / target.mem_bandwidth_gbs
    if CHOICES.carrier == "tdp-bandwidth":
        return tdp * bw, f"(TDP {target.tdp_w:g}/{ref.tdp_w:g} W) x (bandwidth ratio)"
    if CHOICES.carrier == "identity":
        return 1.0, "x1 (J/token taken as the same)"
    a, b, _pairs = gpu_exponents(ev)
    factor = tdp**a * bw**b
    return factor, (
        f"(TDP {target.tdp_w:g}/{ref.tdp_w:g} W)^{a:.2f} x (bandwidth "
        f"{ref.mem_bandwidth_gbs:g}/{target.mem_bandwidth_gbs:g} GB/s)^{b:.2f}"
    )


def cross_gpu(ev: Evidence, q: Query) -> Basis | None:
    """Every other measured GPU's own figure for the query, carried to the target GPU; the
    geometric median of the carried figures."""
    profiles = tables.gpu_profiles()
    carried: list[tuple[GpuProfile, Basis, float, str]] = []
    for key in sorted(ev.gpus()):
        if key == q.gpu.key or key not in profiles:
            continue
        ref = profiles[key]
        basis = on_gpu(ev, Query(ref, q.model_key, q.params_b, q.precision, q.batch_size))
        if basis is None:
            continue
        factor, formula = carry_factor(ev, q.gpu, ref)
        carried.append((ref, basis, factor, formula))
    if not carried:
        return None
    logs = sorted(math.log(b.figure.value * f) for _, b, f, _ in carried)
    center = math.exp(statistics.median(logs))
    # The band: the spread of the carried figures, never narrower than the inputs' own.
    lo = math.exp(min(logs))
    hi = math.exp(max(logs))
    down = max(
        math.log(center / lo),
        max(math.log(b.figure.value / b.figure.low) for _, b, _, _ in carried),
    )
    up = max(
        math.log(hi / center),
        max(math.log(b.figure.high / b.figure.value) for _, b, _, _ in carried),
    )
    tier = "extrapolated"
    rows = tuple(r for _, b, _, _ in carried for r in (*b.figure.rows, *b.extra_rows))
    parts = "; ".join(
        f"{ref.key} {b.figure.value:,.0f} J/1k ({b.family}) x{f:.3f}" for ref, b, f, _ in carried
    )
    fig = Figure(center, center * math.exp(-down), center * math.exp(up), tier, parts, rows)
    method = (
        f"carried to {q.gpu.key} from {len(carried)} measured GPU"
        f"{'s' if len(carried) != 1 else ''} (median): {parts}; factor = {_formula(ev)}"
    )
    tput = None
    ref0, basis0, _, _ = min(
        carried, key=lambda c: abs(math.log(c[0].mem_bandwidth_gbs / q.gpu.mem_bandwidth_gbs))
    )
    if basis0.throughput_tok_s:
        tput = basis0.throughput_tok_s * q.gpu.mem_bandwidth_gbs / ref0.mem_bandwidth_gbs
    bounds = None
    if CHOICES.envelope and q.params_b is not None:
        fig, tput, note, bounds = within_envelope(
            ev, q.gpu, q.model_key, q.params_b, q.precision, q.batch_size, fig, tput
        )
        method += note
    return Basis(
        fig,
        "cross-gpu",
        method,
        tuple(ref.key for ref, _, _, _ in carried),
        power_w=fig.value * tput / 1000.0 if tput else None,
        throughput_tok_s=tput,
        envelope=bounds,
    )


def _formula(ev: Evidence) -> str:
    if CHOICES.carrier == "tdp-bandwidth":
        return "(TDP_target/TDP_ref) x (BW_ref/BW_target)"
    if CHOICES.carrier == "identity":
        return "1 (J/token taken as equal across GPUs)"
    a, b, n = gpu_exponents(ev)
    return (
        f"(TDP_target/TDP_ref)^{a:.2f} x (BW_ref/BW_target)^{b:.2f}, exponents least-squares "
        f"fitted on {n} GPU pairs sharing a configuration"
    )


def resolve(ev: Evidence, q: Query) -> Basis | None:
    """The ladder: same GPU first, else other GPUs. Memoised per Evidence (a Basis is never
    mutated by its callers)."""
    key = ("resolve", q)
    if key in ev._memo:
        return ev._memo[key]
    basis = None
    if q.gpu.key in ev.gpus():
        basis = on_gpu(ev, q)
    if basis is None:
        basis = cross_gpu(ev, q)
    ev._memo[key] = basis
    return basis


def weaker(first: str, second: str) -> str:
    return _weaker(first, second)


def config_key(q: Query) -> ConfigKey | None:
    if q.model_key is None:
        return None
    return (q.gpu.key, q.model_key, q.precision, q.batch_size)
