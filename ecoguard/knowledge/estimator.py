"""Energy, cost and CO2 for a Deployment, with the basis of every figure.

The estimate climbs down a ladder and stops at the first rung that has data:

1. **exact** rows for this GPU, model, precision and batch size (tier of the rows: ``local`` >
   ``measured`` > ``reported``; several rows of the best tier are combined by an n_runs-weighted
   mean, and rows with the requested generation length are preferred when there are any);
2. **derived** on the same GPU: the same model at another batch size carried by the measured A800
   batch sweep (log-log interpolation of J/token vs batch size), or interpolation of J/token over
   ln(parameters) between measured sizes of the same GPU and precision, or the GPU's FP16 figure
   times the same-GPU measured change for this precision (delta % interpolated over ln(params));
3. **extrapolated** from another GPU (same architecture first, then the nearest memory
   bandwidth): energy per token x (TDP_target / TDP_ref) x (BW_ref / BW_target), i.e. decode
   throughput taken as proportional to memory bandwidth and power to the board limit;
4. **none**: nothing supports a figure, and all figures are None.

Per-request energy is J per 1k tokens x generation tokens / 1000 (the request's new tokens).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from itertools import pairwise

from ecoguard.config import Settings
from ecoguard.deployment import Deployment
from ecoguard.errors import UnknownGpuError, UnknownModelError
from ecoguard.knowledge.memory import (  # noqa: F401  (re-exported: the old home of these)
    DEFAULT_GENERATION_TOKENS,
    DEFAULT_PROMPT_TOKENS,
    KV_BYTES,
    NO_SIZE_METHOD,
    VRAM_OVERHEAD_FRACTION,
    VRAM_OVERHEAD_GB,
    memory_need,
    resolved_precision,
)
from ecoguard.knowledge.records import GpuProfile, ReferenceRow

TIER_ORDER = ("local", "measured", "reported")
SWEEP_SOURCE_TAG = "dyn-bssweep"


@dataclass(frozen=True, slots=True)
class Monthly:
    """Monthly totals for ``requests`` requests: energy at the wall (PUE applied), USD, kg CO2."""

    requests: int
    energy_kwh: float | None
    cost_usd: float | None
    co2_kg: float | None
    region: str = "us"
    price_usd_per_kwh: float | None = None
    gco2_per_kwh: float | None = None
    pue: float | None = None


@dataclass(frozen=True, slots=True)
class Estimate:
    """Figures for one deployment and how they were obtained (``tier``, ``method``, ``rows``)."""

    energy_per_1k_tokens_j: float | None
    energy_per_request_j: float | None
    tokens_per_j: float | None
    power_w: float | None
    throughput_tok_s: float | None
    latency_s: float | None
    vram_gb: float | None
    monthly: Monthly
    tier: str
    method: str
    sources: tuple[str, ...]
    rows: tuple[str, ...]
    confidence: str
    deployment: Deployment
    assumptions: tuple[str, ...] = ()
    vram_method: str = ""

    def to_dict(self) -> dict:
        """JSON-ready: the figures, the basis, and the deployment as plain dicts."""
        data = {
            "energy_per_request_j": _r(self.energy_per_request_j),
            "energy_per_1k_tokens_j": _r(self.energy_per_1k_tokens_j),
            "tokens_per_j": _r(self.tokens_per_j, 5),
            "power_w": _r(self.power_w),
            "throughput_tok_s": _r(self.throughput_tok_s),
            "latency_s": _r(self.latency_s),
            "vram_gb": _r(self.vram_gb),
            "vram_method": self.vram_method,
            "monthly": {
                k: (_r(v, 6) if isinstance(v, float) else v)
                for k, v in asdict(self.monthly).items()
            },
            "tier": self.tier,
            "method": self.method,
            "confidence": self.confidence,
            "sources": list(self.sources),
            "rows": list(self.rows),
            "assumptions": list(self.assumptions),
            "deployment": asdict(self.deployment),
        }
        return data


def _r(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


@dataclass
class _Basis:
    energy_j_per_1k: float
    power_w: float | None
    throughput_tok_s: float | None
    tier: str
    method: str
    rows: list[ReferenceRow] = field(default_factory=list)
    confidence: str = "medium"
    energy_j_per_request: float | None = None  # only when rows state it for this length


# --------------------------------------------------------------------------- row helpers


def _usable(rows: list[ReferenceRow] | tuple[ReferenceRow, ...]) -> list[ReferenceRow]:
    return [r for r in rows if r.scope == "end_to_end" and r.energy_j_per_1k is not None]


def _best_tier(rows: list[ReferenceRow]) -> list[ReferenceRow]:
    for tier in TIER_ORDER:
        chosen = [r for r in rows if r.tier == tier]
        if chosen:
            return chosen
    return []


def _wmean(pairs: list[tuple[float | None, float]]) -> float | None:
    pairs = [(v, w) for v, w in pairs if v is not None]
    if not pairs:
        return None
    total = sum(w for _, w in pairs)
    return sum(v * w for v, w in pairs) / total


def _combine(rows: list[ReferenceRow]) -> tuple[float, float | None, float | None, str]:
    """n_runs-weighted means of energy, power and throughput, with a sentence saying so."""
    weights = [float(r.n_runs or 1) for r in rows]
    energy = _wmean([(r.energy_j_per_1k, w) for r, w in zip(rows, weights, strict=True)])
    power = _wmean([(r.power_w, w) for r, w in zip(rows, weights, strict=True)])
    tput = _wmean([(r.throughput_tok_s, w) for r, w in zip(rows, weights, strict=True)])
    assert energy is not None
    if len(rows) == 1:
        desc = f"row {rows[0].id}"
    else:
        desc = f"n_runs-weighted mean of {len(rows)} {rows[0].tier} rows"
    return energy, power, tput, desc


def _spread_pct(rows: list[ReferenceRow]) -> float:
    values = [r.energy_j_per_1k for r in rows if r.energy_j_per_1k is not None]
    if len(values) < 2:
        return 0.0
    return (max(values) - min(values)) / min(values) * 100.0


def _rows_for(gpu: str, precision: str, batch_size: int | None = None) -> list[ReferenceRow]:
    from ecoguard.knowledge.tables import reference_rows

    return [
        r
        for r in _usable(reference_rows())
        if r.gpu == gpu
        and r.precision == precision
        and (batch_size is None or r.batch_size == batch_size)
    ]


def _model_match(row: ReferenceRow, model_key: str | None, params_b: float | None) -> bool:
    if model_key is not None:
        return row.model_key == model_key
    return params_b is not None and abs(row.params_b - params_b) < 1e-6


# --------------------------------------------------------------------------- batch scaling


def _sweep_points() -> list[tuple[int, float, float]]:
    """(batch size, J/1k, tok/s) of the measured A800 Mistral-7B pure-INT8 sweep."""
    from ecoguard.knowledge.tables import reference_rows

    pts = [
        (r.batch_size, r.energy_j_per_1k, r.throughput_tok_s)
        for r in reference_rows()
        if f"/{SWEEP_SOURCE_TAG}" in r.id
        and r.batch_size
        and r.energy_j_per_1k
        and r.throughput_tok_s
    ]
    return sorted(pts)  # type: ignore[arg-type]


def _loglog(points: list[tuple[float, float]], x: float) -> float:
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


def batch_energy_ratio(from_bs: int, to_bs: int) -> tuple[float, float]:
    """(J/token ratio, throughput ratio) going from one batch size to another, read off the
    measured A800 sweep by log-log interpolation (held flat above BS 64, the largest measured)."""
    pts = _sweep_points()
    if not pts:
        raise LookupError("the A800 batch sweep rows are missing from the reference data")
    energy = [(float(b), e) for b, e, _ in pts]
    tput = [(float(b), t) for b, _, t in pts]
    return (
        _loglog(energy, to_bs) / _loglog(energy, from_bs),
        _loglog(tput, to_bs) / _loglog(tput, from_bs),
    )


def batch_power_law() -> tuple[float, float]:
    """Least-squares fit J/request = C x BS^-alpha over the sweep means: returns (C, alpha)."""
    pts = [(math.log(b), math.log(e * 256 / 1000.0)) for b, e, _ in _sweep_points()]
    n = len(pts)
    mx = sum(x for x, _ in pts) / n
    my = sum(y for _, y in pts) / n
    slope = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
    return math.exp(my - slope * mx), -slope


def _scale_batch(basis: _Basis, from_bs: int, to_bs: int) -> _Basis:
    e_ratio, t_ratio = batch_energy_ratio(from_bs, to_bs)
    tput = basis.throughput_tok_s * t_ratio if basis.throughput_tok_s else None
    energy = basis.energy_j_per_1k * e_ratio
    power = energy * tput / 1000.0 if tput else None
    return _Basis(
        energy_j_per_1k=energy,
        power_w=power,
        throughput_tok_s=tput,
        tier="derived",
        method=(
            f"{basis.method}; scaled BS {from_bs} -> {to_bs} by the measured A800 Mistral-7B "
            f"pure-INT8 sweep (log-log interpolation, J/token x{e_ratio:.3f})"
        ),
        rows=basis.rows + _sweep_rows(),
        confidence="low" if basis.confidence == "low" else "medium",
    )


def _sweep_rows() -> list[ReferenceRow]:
    from ecoguard.knowledge.tables import reference_rows

    return [r for r in reference_rows() if f"/{SWEEP_SOURCE_TAG}" in r.id]


# --------------------------------------------------------------------------- ladder on one GPU


def _exact(gpu, model_key, params_b, precision, bs, gen, prompt) -> _Basis | None:
    cand = [r for r in _rows_for(gpu, precision, bs) if _model_match(r, model_key, params_b)]
    if not cand:
        return None
    if gen is not None:
        same_len = [r for r in cand if r.generation_tokens == gen]
        if same_len:
            cand = same_len
            if prompt is not None:
                same_prompt = [r for r in cand if r.prompt_tokens == prompt]
                cand = same_prompt or cand
    chosen = _best_tier(cand)
    energy, power, tput, desc = _combine(chosen)
    per_request = None
    if gen is not None and all(
        r.energy_j_per_request is not None and r.generation_tokens == gen for r in chosen
    ):
        per_request = _wmean([(r.energy_j_per_request, float(r.n_runs or 1)) for r in chosen])
    tier = chosen[0].tier
    spread = _spread_pct(chosen)
    confidence = "high" if tier in ("measured", "local") and spread <= 15 else "medium"
    method = f"exact {tier} match: {desc}"
    if spread > 0:
        method += f" (rows spread {spread:.0f}%)"
    return _Basis(energy, power, tput, tier, method, chosen, confidence, per_request)


MAX_SIZE_EXTRAPOLATION = 2.0


def _why_no_basis(precision: str, params_b: float | None) -> str:
    """Why no estimate: the precision is not in the data, or the size is too far outside it."""
    from ecoguard.knowledge.tables import reference_rows

    rows = [r for r in reference_rows() if r.precision == precision and r.params_b]
    if not rows:
        return f"the reference data has no {precision} rows"
    low, high = min(r.params_b for r in rows), max(r.params_b for r in rows)
    if (
        params_b is not None
        and not low / MAX_SIZE_EXTRAPOLATION <= params_b <= high * MAX_SIZE_EXTRAPOLATION
    ):
        return (
            f"{params_b:g}B is more than {MAX_SIZE_EXTRAPOLATION:g}x outside the {low:g}-{high:g}B "
            f"measured for {precision}; ecoguard does not extrapolate that far"
        )
    return f"no reference rows for {precision} on any GPU near this configuration"


def _interpolate_size(gpu, params_b, precision, bs) -> _Basis | None:
    """J/token, power and throughput over ln(params) between measured sizes on this GPU."""
    if params_b is None:
        return None
    by_model: dict[str, list[ReferenceRow]] = {}
    for r in _rows_for(gpu, precision, bs):
        by_model.setdefault(r.model_key, []).append(r)
    points = []
    for rows in by_model.values():
        chosen = _best_tier(rows)
        energy, power, tput, _ = _combine(chosen)
        points.append((chosen[0].params_b, energy, power, tput, chosen))
    # One point per size: the measured-tier point wins, then the larger sample.
    by_size: dict[float, tuple] = {}
    for p in points:
        current = by_size.get(p[0])
        rank = (TIER_ORDER.index(p[4][0].tier), -sum(r.n_runs or 1 for r in p[4]))
        if current is None or rank < (
            TIER_ORDER.index(current[4][0].tier),
            -sum(r.n_runs or 1 for r in current[4]),
        ):
            by_size[p[0]] = p
    pts = sorted(by_size.values())
    if len(pts) < 2:
        return None
    below = [p for p in pts if p[0] <= params_b]
    above = [p for p in pts if p[0] >= params_b]
    inside = bool(below) and bool(above)
    # A power law fitted between two sizes says little far outside them: extrapolate at most a
    # factor of MAX_SIZE_EXTRAPOLATION beyond the measured range, else let other methods answer.
    if not inside and not (
        pts[0][0] / MAX_SIZE_EXTRAPOLATION <= params_b <= pts[-1][0] * MAX_SIZE_EXTRAPOLATION
    ):
        return None
    if inside:
        a, b = below[-1], above[0]
    elif below:
        a, b = below[-2], below[-1]
    else:
        a, b = above[0], above[1]
    if a[0] == b[0]:
        chosen = a
        return _Basis(chosen[1], chosen[2], chosen[3], "derived", "same size", chosen[4], "medium")
    t = (math.log(params_b) - math.log(a[0])) / (math.log(b[0]) - math.log(a[0]))

    def lerp(y0: float | None, y1: float | None) -> float | None:
        if not y0 or not y1:
            return None
        return math.exp(math.log(y0) + t * (math.log(y1) - math.log(y0)))

    energy = lerp(a[1], b[1])
    assert energy is not None
    kind = "interpolation" if inside else "extrapolation"
    tiers = {r.tier for r in a[4] + b[4]}
    return _Basis(
        energy_j_per_1k=energy,
        power_w=lerp(a[2], b[2]),
        throughput_tok_s=lerp(a[3], b[3]),
        tier="derived",
        method=(
            f"log-log {kind} over model size between {a[0]:g} B and {b[0]:g} B "
            f"({'/'.join(sorted(tiers))} rows, same GPU and precision)"
        ),
        rows=a[4] + b[4],
        confidence="medium" if inside and "reported" not in tiers else "low",
    )


def _delta_for(
    gpu: str, params_b: float, precision: str
) -> tuple[float, list[ReferenceRow], str] | None:
    """Same-GPU change vs FP16 for this precision at this size, interpolated over ln(params)."""
    rows = [
        r
        for r in _rows_for(gpu, precision)
        if r.delta_vs_fp16_pct is not None and r.batch_size in (1, None)
    ]
    rows = _best_tier(rows)
    if not rows:
        return None
    by_size: dict[float, list[ReferenceRow]] = {}
    for r in rows:
        by_size.setdefault(r.params_b, []).append(r)
    pts = sorted(
        (size, sum(r.delta_vs_fp16_pct for r in rs) / len(rs), rs)  # type: ignore[misc]
        for size, rs in by_size.items()
    )
    # Same bound as the size interpolation: a delta measured at 0.5 B says little about 100 B.
    if not pts[0][0] / MAX_SIZE_EXTRAPOLATION <= params_b <= pts[-1][0] * MAX_SIZE_EXTRAPOLATION:
        return None
    if len(pts) == 1 or params_b <= pts[0][0]:
        s, d, rs = pts[0]
        return d, rs, f"delta {d:+.1f}% at {s:g} B (nearest measured size)"
    if params_b >= pts[-1][0]:
        s, d, rs = pts[-1]
        return d, rs, f"delta {d:+.1f}% at {s:g} B (nearest measured size)"
    for (s0, d0, r0), (s1, d1, r1) in pairwise(pts):
        if s0 <= params_b <= s1:
            t = (math.log(params_b) - math.log(s0)) / (math.log(s1) - math.log(s0))
            d = d0 + t * (d1 - d0)
            return (
                d,
                r0 + r1,
                f"delta {d:+.1f}% interpolated over ln(params) between {s0:g} and {s1:g} B",
            )
    return None


def _on_gpu(
    gpu, model_key, params_b, precision, bs, gen, prompt, *, allow_delta=True
) -> _Basis | None:
    basis = _exact(gpu, model_key, params_b, precision, bs, gen, prompt)
    if basis is not None:
        return basis
    # Same model, other batch size: carry it with the sweep (nearest measured batch size).
    same_model = [
        r
        for r in _rows_for(gpu, precision)
        if _model_match(r, model_key, params_b) and r.batch_size
    ]
    if same_model:
        src_bs = min({r.batch_size for r in same_model}, key=lambda b: abs(math.log(b / bs)))
        base = _exact(gpu, model_key, params_b, precision, src_bs, gen, prompt)
        if base is not None:
            return _scale_batch(base, src_bs, bs)
    basis = _interpolate_size(gpu, params_b, precision, bs)
    if basis is not None:
        return basis
    if bs != 1:
        base = _interpolate_size(gpu, params_b, precision, 1)
        if base is not None:
            return _scale_batch(base, 1, bs)
    if allow_delta and precision != "fp16" and params_b is not None:
        fp16 = _on_gpu(gpu, model_key, params_b, "fp16", bs, gen, prompt, allow_delta=False)
        delta = _delta_for(gpu, params_b, precision)
        if fp16 is not None and delta is not None:
            d, rows, desc = delta
            return _Basis(
                energy_j_per_1k=fp16.energy_j_per_1k * (1 + d / 100.0),
                power_w=None,
                throughput_tok_s=None,
                tier="derived",
                method=f"FP16 figure ({fp16.method}) x same-GPU {precision} change vs FP16: {desc}",
                rows=fp16.rows + rows,
                confidence="low",
            )
    return None


# --------------------------------------------------------------------------- public


def estimate(
    deployment: Deployment,
    *,
    settings: Settings | None = None,
    requests_per_month: int | None = None,
) -> Estimate:
    """Energy per token and per request, power, throughput, latency, VRAM and monthly kWh / USD /
    kg CO2 for ``deployment``, each with its tier, method, source files and row ids.

    Never raises for a deployment that lacks facts (the figures become None and the tier
    ``none``); raises UsageError for invalid values (negative batch size, unknown precision)."""
    from ecoguard.knowledge.tables import region as grid_for
    from ecoguard.knowledge.tables import resolve_gpu, resolve_model

    deployment.validate()
    settings = settings or Settings()
    if requests_per_month is not None and requests_per_month < 0:
        from ecoguard.errors import UsageError

        raise UsageError(f"requests per month must be >= 0, got {requests_per_month!r}")
    assumptions: list[str] = []

    gpu: GpuProfile | None = None
    for name in (deployment.gpu.profile, deployment.gpu.name):
        if name:
            try:
                gpu = resolve_gpu(name)
                break
            except UnknownGpuError:
                continue
    model = None
    params_b = deployment.model.params_b
    if deployment.model.id:
        try:
            model = resolve_model(deployment.model.id)
        except UnknownModelError:
            model = None
    model_key = None
    if model is not None:
        from ecoguard.knowledge.tables import model_registry

        if model.id in model_registry():
            model_key = model.id
        if params_b is None:
            params_b = model.params_b

    precision = resolved_precision(deployment)
    if deployment.precision is None:
        assumptions.append(f"precision not given; assumed {precision}")
    bs = deployment.batch_size or 1
    if deployment.batch_size is None:
        assumptions.append("batch size not given; assumed 1")
    gen = deployment.generation_tokens
    gen_used = gen or DEFAULT_GENERATION_TOKENS
    if gen is None:
        assumptions.append(
            f"generation length not given; assumed {DEFAULT_GENERATION_TOKENS} tokens"
        )
    prompt = deployment.prompt_tokens
    prompt_used = prompt if prompt is not None else DEFAULT_PROMPT_TOKENS

    if gpu is not None and precision == "bf16" and not gpu.bf16:
        assumptions.append(f"{gpu.key} ({gpu.architecture}) has no native bf16")
    # bf16 runs the same kernels and weight bytes as fp16 in these stacks: use fp16 rows.
    lookup_precision = "fp16" if precision == "bf16" else precision

    basis: _Basis | None = None
    why_none = ""
    if gpu is None:
        why_none = "no known GPU in the deployment"
    elif model_key is None and params_b is None:
        why_none = "model size unknown"
    elif precision in ("fp8_weight_only", "fp8_dynamic") and not gpu.fp8:
        why_none = f"{gpu.key} ({gpu.architecture}) has no FP8 support"
    else:
        basis = _on_gpu(gpu.key, model_key, params_b, lookup_precision, bs, gen, prompt)
        if basis is None:
            basis = _extrapolate(gpu, model_key, params_b, lookup_precision, bs, gen, prompt)
        if basis is None:
            why_none = _why_no_basis(lookup_precision, params_b)
        elif precision == "bf16":
            basis.method = "bf16 taken as fp16 (same weight bytes and kernels); " + basis.method
            if basis.tier in ("measured", "reported", "local"):
                basis.tier = "derived"

    # The same figure the vram-overflow rule judges (ecoguard.knowledge.memory).
    need = memory_need(deployment, model, prompt_tokens=prompt_used, generation_tokens=gen_used)
    vram_gb = need.total_gb if need is not None else None
    vram_method = need.method if need is not None else NO_SIZE_METHOD
    grid = grid_for(settings.region)
    price = (
        settings.price_usd_per_kwh
        if settings.price_usd_per_kwh is not None
        else grid.price_usd_per_kwh
    )
    intensity = (
        settings.grid_gco2_per_kwh if settings.grid_gco2_per_kwh is not None else grid.gco2_per_kwh
    )
    pue = settings.pue if settings.pue is not None else grid.pue
    n_requests = requests_per_month if requests_per_month is not None else settings.monthly_requests

    if basis is None:
        return Estimate(
            energy_per_1k_tokens_j=None,
            energy_per_request_j=None,
            tokens_per_j=None,
            power_w=None,
            throughput_tok_s=None,
            latency_s=None,
            vram_gb=vram_gb,
            monthly=Monthly(n_requests, None, None, None, grid.key, price, intensity, pue),
            tier="none",
            method=f"no estimate: {why_none}",
            sources=(),
            rows=(),
            confidence="none",
            deployment=deployment,
            assumptions=tuple(assumptions),
            vram_method=vram_method,
        )

    per_request = basis.energy_j_per_request
    if per_request is None:
        per_request = basis.energy_j_per_1k * gen_used / 1000.0
    latency = gen_used * bs / basis.throughput_tok_s if basis.throughput_tok_s else None
    energy_kwh = per_request * n_requests * pue / 3.6e6
    unique_rows = list(dict.fromkeys(r.id for r in basis.rows))
    sources = sorted({r.source for r in basis.rows})
    if gpu is not None and deployment.gpu.count > 1:
        assumptions.append("figures are for the reference single-GPU setup; multi-GPU not modelled")
    return Estimate(
        energy_per_1k_tokens_j=basis.energy_j_per_1k,
        energy_per_request_j=per_request,
        tokens_per_j=1000.0 / basis.energy_j_per_1k,
        power_w=basis.power_w,
        throughput_tok_s=basis.throughput_tok_s,
        latency_s=latency,
        vram_gb=vram_gb,
        monthly=Monthly(
            requests=n_requests,
            energy_kwh=energy_kwh,
            cost_usd=energy_kwh * price,
            co2_kg=energy_kwh * intensity / 1000.0,
            region=grid.key,
            price_usd_per_kwh=price,
            gco2_per_kwh=intensity,
            pue=pue,
        ),
        tier=basis.tier,
        method=basis.method,
        sources=tuple(sources),
        rows=tuple(unique_rows),
        confidence=basis.confidence,
        deployment=deployment,
        assumptions=tuple(assumptions),
        vram_method=vram_method,
    )


def _extrapolate(gpu: GpuProfile, model_key, params_b, precision, bs, gen, prompt) -> _Basis | None:
    from ecoguard.knowledge.tables import gpu_profiles, reference_rows

    with_rows = {r.gpu for r in _usable(reference_rows()) if r.precision in (precision, "fp16")}
    profiles = gpu_profiles()
    candidates = sorted(
        (profiles[k] for k in with_rows if k in profiles and k != gpu.key),
        key=lambda p: (
            p.architecture != gpu.architecture,
            abs(math.log(p.mem_bandwidth_gbs / gpu.mem_bandwidth_gbs)),
            p.key,
        ),
    )
    for ref in candidates:
        basis = _on_gpu(ref.key, model_key, params_b, precision, bs, gen, prompt)
        if basis is None:
            continue
        power_ratio = gpu.tdp_w / ref.tdp_w
        speed_ratio = gpu.mem_bandwidth_gbs / ref.mem_bandwidth_gbs
        factor = power_ratio / speed_ratio
        return _Basis(
            energy_j_per_1k=basis.energy_j_per_1k * factor,
            power_w=basis.power_w * power_ratio if basis.power_w else None,
            throughput_tok_s=basis.throughput_tok_s * speed_ratio
            if basis.throughput_tok_s
            else None,
            tier="extrapolated",
            method=(
                f"{ref.key} figure ({basis.tier}: {basis.method}) carried to {gpu.key} by "
                f"energy x (TDP {gpu.tdp_w:g}/{ref.tdp_w:g} W) x (bandwidth "
                f"{ref.mem_bandwidth_gbs:g}/{gpu.mem_bandwidth_gbs:g} GB/s) = x{factor:.3f}"
            ),
            rows=basis.rows,
            confidence="low",
        )
    return None
