"""Energy, cost and CO2 for a Deployment, with the basis, the interval and the method of every
figure.

The figure comes from the ladder in :mod:`ecoguard.knowledge.ladder` over the rows organised by
:mod:`ecoguard.knowledge.evidence`: the configuration's own rows through one paired chain (FP16
at batch size 1 as the anchor, every change read from same-session pairs, summarised by the
median across sessions), else a derivation on the same GPU, else other GPUs' figures carried by
a factor fitted on the measured GPUs. Every estimate carries a p10-p90 interval that combines the
session-to-session spread of the rows used with the hold-out error of the method used
(``data/estimator_validation.json``, written by ``tools/validate_estimator.py``); its
``confidence`` is read from that same hold-out error, so it tracks error by construction.

``holdout="config"`` answers as if the rows of the asked configuration were absent,
``holdout="gpu"`` as if the asked GPU had no rows: the way ``ecoguard data --validate`` scores
the estimator, available to anyone who wants to see how a figure would look without its rows.

Per-request energy is J per 1k tokens x generation tokens / 1000 (the request's new tokens).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from functools import cache

from ecoguard._paths import data_dir
from ecoguard.config import Settings
from ecoguard.deployment import Deployment
from ecoguard.errors import UnknownGpuError, UnknownModelError, UsageError
from ecoguard.findings import Finding, Mood
from ecoguard.knowledge import tables
from ecoguard.knowledge.batch_curve import SWEEP_SOURCE_TAG
from ecoguard.knowledge.estimate_record import Estimate, Monthly, Range
from ecoguard.knowledge.evidence import TIER_ORDER
from ecoguard.knowledge.fitting import loglog
from ecoguard.knowledge.ladder import MAX_SIZE_EXTRAPOLATION, Basis, CurrentLadders, Ladder, Query
from ecoguard.knowledge.memory import (  # noqa: F401  (re-exported: the old home of these)
    DEFAULT_GENERATION_TOKENS,
    DEFAULT_PROMPT_TOKENS,
    KV_BYTES,
    NO_SIZE_METHOD,
    VRAM_OVERHEAD_FRACTION,
    VRAM_OVERHEAD_GB,
    MemoryNeed,
    memory_need,
    resolved_precision,
    usable_vram_gb,
)
from ecoguard.knowledge.records import GpuProfile, ModelInfo
from ecoguard.knowledge.served import Figures, as_fused_fp8, fused_fp8, on_all_cards
from ecoguard.knowledge.validation import band_for

__all__ = [
    "HOLDOUTS",
    "MAX_SIZE_EXTRAPOLATION",
    "SWEEP_SOURCE_TAG",
    "TIER_ORDER",
    "Estimate",
    "Monthly",
    "batch_energy_ratio",
    "batch_power_law",
    "estimate",
    "method_error",
]

HOLDOUTS = ("config", "gpu")
# The ladders over the rows estimates read now (shipped and local), each hold-out's kept.
_LADDERS = CurrentLadders(lambda: tables.reference_rows())


# --------------------------------------------------------------------------- hold-out error


@cache
def _validation_table() -> dict:
    """The per-method hold-out error table shipped in data/ (empty when absent)."""
    path = data_dir() / "estimator_validation.json"
    try:
        with path.open(encoding="utf-8") as handle:
            return json.load(handle).get("methods", {})
    except (OSError, ValueError):
        return {}


# Used when the table lacks a method: wide, so an unvalidated method never looks precise.
_UNVALIDATED = {
    "median_abs_error_pct": 40.0,
    "p90_abs_error_pct": 100.0,
    "residual_p10": -0.5,
    "residual_p90": 0.7,
}


def method_error(family: str) -> dict:
    """Hold-out error of one ladder method: n, median and p90 |error| %, residual p10/p90."""
    return _validation_table().get(family, _UNVALIDATED)


def _confidence(basis: Basis) -> str:
    if basis.family == "exact":
        fig = basis.figure
        width = (fig.high - fig.low) / fig.value
        return "high" if fig.tier in ("measured", "local") and width <= 0.3 else "medium"
    median = method_error(basis.family)["median_abs_error_pct"]
    if median <= 10:
        return "high"
    if median <= 25:
        return "medium"
    return "low"


def _interval(basis: Basis) -> Range:
    fig = basis.figure
    if basis.family == "exact":
        return fig.low, fig.high
    err = method_error(basis.family)
    down, up = band_for(
        math.log(fig.value / fig.low),
        math.log(fig.high / fig.value),
        err["residual_p10"],
        err["residual_p90"],
    )
    low, high = fig.value * math.exp(-down), fig.value * math.exp(up)
    if basis.envelope is not None:
        # The method's error does not carry a figure past what physics allows.
        low, high = max(low, basis.envelope[0]), min(high, basis.envelope[1])
    return min(low, fig.value), max(high, fig.value)


# --------------------------------------------------------------------------- batch scaling


def _sweep_points() -> list[tuple[int, float, float]]:
    """(batch size, J/1k, tok/s) of the measured A800 Mistral-7B pure-INT8 sweep."""
    pts = [
        (r.batch_size, r.energy_j_per_1k, r.throughput_tok_s)
        for r in tables.reference_rows()
        if f"/{SWEEP_SOURCE_TAG}" in r.id
        and r.batch_size
        and r.energy_j_per_1k
        and r.throughput_tok_s
    ]
    return sorted(pts)  # type: ignore[arg-type]


def batch_energy_ratio(from_bs: int, to_bs: int) -> tuple[float, float]:
    """(J/token ratio, throughput ratio) going from one batch size to another, read off the
    measured A800 sweep (one session) by log-log interpolation (held flat above BS 64)."""
    pts = _sweep_points()
    if not pts:
        raise LookupError("the A800 batch sweep rows are missing from the reference data")
    energy = [(float(b), e) for b, e, _ in pts]
    tput = [(float(b), t) for b, _, t in pts]
    return (
        loglog(energy, to_bs) / loglog(energy, from_bs),
        loglog(tput, to_bs) / loglog(tput, from_bs),
    )


def batch_power_law() -> tuple[float, float]:
    """Least-squares fit J/request = C x BS^-alpha over the sweep: returns (C, alpha)."""
    pts = [(math.log(b), math.log(e * 256 / 1000.0)) for b, e, _ in _sweep_points()]
    n = len(pts)
    mx = sum(x for x, _ in pts) / n
    my = sum(y for _, y in pts) / n
    slope = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
    return math.exp(my - slope * mx), -slope


def _why_no_basis(precision: str, params_b: float | None) -> str:
    """Why no estimate: the precision is not in the data, or the size is too far outside it."""
    rows = [r for r in tables.reference_rows() if r.precision == precision and r.params_b]
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


def _unregistered_key(model_id: str | None, params_b: float | None) -> str | None:
    """A model outside the registry that has rows of its own (a local bench row): matched by
    its id, else by its exact size."""
    full = _LADDERS().full.evidence
    if model_id and f"id:{model_id}" in full.params:
        return f"id:{model_id}"
    if params_b is not None:
        for key, size in sorted(full.params.items()):
            if key.startswith("id:") and abs(size - params_b) < 1e-6:
                return key
    return None


def _ladder_for(gpu: GpuProfile, model_key: str | None, params_b, precision, bs, holdout) -> Ladder:
    ladders = _LADDERS()
    if holdout is None:
        return ladders.full
    if holdout == "gpu":
        return ladders.get(hidden_gpus=(gpu.key,))
    full = ladders.full.evidence
    models = (
        [model_key]
        if model_key is not None and model_key in full.params
        else [m for m, size in full.params.items() if params_b is not None and size == params_b]
    )
    return ladders.get(hidden_configs=tuple((gpu.key, m, precision, bs) for m in models))


@dataclass(frozen=True, slots=True)
class _Subject:
    """What the deployment names, resolved against the reference tables."""

    gpu: GpuProfile | None
    model: ModelInfo | None
    model_key: str | None  # a registered model's id, or None
    params_b: float | None


@dataclass(frozen=True, slots=True)
class _Inputs:
    """The deployment's settings with defaults filled in, and what was assumed to fill them."""

    precision: str
    lookup_precision: str  # bf16 is read from fp16 rows
    batch_size: int
    generation_tokens: int
    prompt_tokens: int
    assumptions: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _Grid:
    """The region's electricity terms, with the settings' overrides applied."""

    region: str
    price_usd_per_kwh: float
    gco2_per_kwh: float
    pue: float
    requests: int

    def monthly(self, per_request_j: float | None, request_range: Range | None) -> Monthly:
        terms = Monthly(
            requests=self.requests,
            energy_kwh=None,
            cost_usd=None,
            co2_kg=None,
            region=self.region,
            price_usd_per_kwh=self.price_usd_per_kwh,
            gco2_per_kwh=self.gco2_per_kwh,
            pue=self.pue,
        )
        if per_request_j is None or request_range is None:
            return terms  # the grid's terms, with no figure to apply them to
        kwh_per_j = self.requests * self.pue / 3.6e6
        low, high = request_range[0] * kwh_per_j, request_range[1] * kwh_per_j
        energy_kwh = per_request_j * kwh_per_j
        return replace(
            terms,
            energy_kwh=energy_kwh,
            cost_usd=energy_kwh * self.price_usd_per_kwh,
            co2_kg=energy_kwh * self.gco2_per_kwh / 1000.0,
            energy_kwh_range=(low, high),
            cost_usd_range=(low * self.price_usd_per_kwh, high * self.price_usd_per_kwh),
            co2_kg_range=(low * self.gco2_per_kwh / 1000.0, high * self.gco2_per_kwh / 1000.0),
        )


def _check_arguments(requests_per_month: int | None, holdout: str | None) -> None:
    if requests_per_month is not None and requests_per_month < 0:
        raise UsageError(f"requests per month must be >= 0, got {requests_per_month!r}")
    if holdout is not None and holdout not in HOLDOUTS:
        raise UsageError(f"hold-out must be one of {', '.join(HOLDOUTS)}, got {holdout!r}")


def _resolve_subject(deployment: Deployment) -> _Subject:
    gpu: GpuProfile | None = None
    for name in (deployment.gpu.profile, deployment.gpu.name):
        if name:
            try:
                gpu = tables.resolve_gpu(name)
                break
            except UnknownGpuError:
                continue
    model: ModelInfo | None = None
    if deployment.model.id:
        try:
            model = tables.resolve_model(deployment.model.id)
        except UnknownModelError:
            model = None
    params_b = deployment.model.params_b
    if model is not None and params_b is None:
        params_b = model.params_b
    registered = model is not None and model.id in tables.model_registry()
    return _Subject(gpu, model, model.id if registered and model else None, params_b)


def _lookup_precision(deployment: Deployment) -> str:
    """The precision whose rows the figure reads: bf16 runs the same kernels and weight bytes
    as fp16 in these stacks; fused FP8 is priced from FP16 (ecoguard.knowledge.served)."""
    precision = resolved_precision(deployment)
    return "fp16" if precision == "bf16" or fused_fp8(deployment) else precision


def _inputs(deployment: Deployment, subject: _Subject, holdout: str | None) -> _Inputs:
    assumptions: list[str] = []
    precision = resolved_precision(deployment)
    if deployment.precision is None:
        assumptions.append(f"precision not given; assumed {precision}")
    if deployment.batch_size is None:
        assumptions.append("batch size not given; assumed 1")
    if deployment.generation_tokens is None:
        assumptions.append(
            f"generation length not given; assumed {DEFAULT_GENERATION_TOKENS} tokens"
        )
    if subject.gpu is not None and precision == "bf16" and not subject.gpu.bf16:
        assumptions.append(f"{subject.gpu.key} ({subject.gpu.architecture}) has no native bf16")
    assumptions += [_holdout_note(deployment, subject, holdout)] if holdout and subject.gpu else []
    prompt = deployment.prompt_tokens
    return _Inputs(
        precision=precision,
        lookup_precision=_lookup_precision(deployment),
        batch_size=deployment.batch_size or 1,
        generation_tokens=deployment.generation_tokens or DEFAULT_GENERATION_TOKENS,
        prompt_tokens=prompt if prompt is not None else DEFAULT_PROMPT_TOKENS,
        assumptions=tuple(assumptions),
    )


def _holdout_note(deployment: Deployment, subject: _Subject, holdout: str) -> str:
    what = "configuration" if holdout == "config" else "GPU"
    key = subject.model_key or _unregistered_key(deployment.model.id, subject.params_b)
    precision = _lookup_precision(deployment)  # the rows _Inputs reads
    bs = deployment.batch_size or 1
    held = _ladder_for(subject.gpu, key, subject.params_b, precision, bs, holdout).evidence
    if len(held.by_config) < len(_LADDERS().full.evidence.by_config):
        return f"hold-out: answered as if the rows of this {what} were absent"
    return f"hold-out: this {what} has no rows in the reference data, none to hold out"


# Architectures no engine's fused FP8 runs on (W8A8 needs Ada/Hopper, Marlin FP8 Ampere).
_NO_FUSED_FP8 = frozenset({"volta", "turing"})


def _find_basis(
    deployment: Deployment, subject: _Subject, inputs: _Inputs, holdout: str | None
) -> tuple[Basis | None, str]:
    """The ladder's basis for the figure, or None and why there is none."""
    gpu, params_b, precision = subject.gpu, subject.params_b, inputs.lookup_precision
    if gpu is None:
        return None, "no known GPU in the deployment"
    if subject.model_key is None and params_b is None:
        return None, "model size unknown"
    if precision in ("fp8_weight_only", "fp8_dynamic") and not gpu.fp8:
        return None, f"{gpu.key} ({gpu.architecture}) has no FP8 support"
    if fused_fp8(deployment) and gpu.architecture in _NO_FUSED_FP8:
        return None, f"{gpu.key} ({gpu.architecture}) runs no FP8 kernels (Ampere or newer)"
    model_key = subject.model_key or _unregistered_key(deployment.model.id, params_b)
    ladder = _ladder_for(gpu, model_key, params_b, precision, inputs.batch_size, holdout)
    if model_key is not None and params_b is not None and model_key in ladder.evidence.params:
        # The rows' size for a model they measured: the same model is not extrapolated.
        params_b = ladder.evidence.params[model_key]
    basis = ladder.resolve(Query(gpu, model_key, params_b, precision, inputs.batch_size))
    return basis, "" if basis is not None else _why_no_basis(precision, params_b)


def _grid(settings: Settings, requests_per_month: int | None) -> _Grid:
    grid = tables.region(settings.region)

    def chosen(override: float | None, default: float) -> float:
        return override if override is not None else default

    return _Grid(
        region=grid.key,
        price_usd_per_kwh=chosen(settings.price_usd_per_kwh, grid.price_usd_per_kwh),
        gco2_per_kwh=chosen(settings.grid_gco2_per_kwh, grid.gco2_per_kwh),
        pue=chosen(settings.pue, grid.pue),
        requests=(
            requests_per_month if requests_per_month is not None else settings.monthly_requests
        ),
    )


def _tier_and_method(basis: Basis, precision: str) -> tuple[str, str]:
    tier, method = basis.figure.tier, basis.method
    if basis.family != "exact":
        tier = "extrapolated" if basis.family == "cross-gpu" else "derived"
    if precision == "bf16":
        method = "bf16 taken as fp16 (same weight bytes and kernels); " + method
        if tier in TIER_ORDER:
            tier = "derived"
    return tier, method


# --------------------------------------------------------------------------- public


def estimate(
    deployment: Deployment,
    *,
    settings: Settings | None = None,
    requests_per_month: int | None = None,
    holdout: str | None = None,
) -> Estimate:
    """Energy per token and per request (with p10-p90 ranges), power, throughput, latency, VRAM
    and monthly kWh / USD / kg CO2 for ``deployment``, each with its tier, method, source files
    and row ids. ``holdout`` ("config" or "gpu") answers as if those rows were absent.

    Never raises for a deployment that lacks facts (the figures become None and the tier
    ``none``); raises UsageError for invalid values (negative batch size, unknown precision,
    unknown hold-out)."""
    deployment.validate()
    settings = settings or Settings()
    _check_arguments(requests_per_month, holdout)
    subject = _resolve_subject(deployment)
    inputs = _inputs(deployment, subject, holdout)
    basis, why_none = _find_basis(deployment, subject, inputs, holdout)
    # The same figure the vram-overflow rule judges (ecoguard.knowledge.memory).
    need = memory_need(
        deployment,
        subject.model,
        prompt_tokens=inputs.prompt_tokens,
        generation_tokens=inputs.generation_tokens,
    )
    vram = (need.total_gb, need.method) if need is not None else (None, NO_SIZE_METHOD)
    grid = _grid(settings, requests_per_month)
    memory = {
        "offloaded_rows": _offloaded_rows(subject, inputs, deployment),
        "findings": _vram_findings(deployment, subject, need),
    }
    if basis is None:
        return Estimate(
            **memory,
            energy_per_1k_tokens_j=None,
            energy_per_request_j=None,
            tokens_per_j=None,
            power_w=None,
            throughput_tok_s=None,
            latency_s=None,
            vram_gb=vram[0],
            monthly=grid.monthly(None, None),
            tier="none",
            method=f"no estimate: {why_none}",
            sources=(),
            rows=(),
            confidence="none",
            deployment=deployment,
            assumptions=inputs.assumptions,
            vram_method=vram[1],
            holdout=holdout,
        )
    assert subject.gpu is not None  # a basis is only found for a known GPU
    estimated = _estimate_from(basis, deployment, inputs, grid, vram, holdout, subject.gpu)
    return replace(estimated, **memory)


def _offloaded_rows(
    subject: _Subject, inputs: _Inputs, deployment: Deployment
) -> tuple[tuple[str, float | None, str], ...]:
    """Rows of the asked configuration that ran offloaded: shown with their flag, never used."""
    if subject.gpu is None or subject.model_key is None or fused_fp8(deployment):
        return ()
    config = (subject.gpu.key, subject.model_key, inputs.lookup_precision, inputs.batch_size)
    return tuple(
        (r.id, r.energy_j_per_1k, r.note.rsplit("; ", 1)[-1])
        for r in tables.reference_rows()
        if r.offloaded and (r.gpu, r.model_key, r.precision, r.batch_size or 1) == config
    )


def _vram_findings(deployment: Deployment, subject: _Subject, need: MemoryNeed | None):
    """The ``vram-overflow`` verdict on the same figures the rule compares (the need of
    :mod:`ecoguard.knowledge.memory` against ``usable_vram_gb``), as a Finding in the answer."""
    vram_gb = deployment.gpu.vram_gb or (subject.gpu.vram_gb if subject.gpu else None)
    if need is None or vram_gb is None:
        return ()
    count = max(deployment.gpu.count, 1)
    usable = usable_vram_gb(vram_gb, count)
    if need.total_gb <= usable:
        return ()
    gpus = f"{count} x {vram_gb:g} GB" if count > 1 else f"{vram_gb:g} GB"
    return (
        Finding(
            rule="vram-overflow",
            mood=Mood.RED,
            title="VRAM overflow",
            message=(
                f"needs ~{need.total_gb:.2f} GB of VRAM ({need.method}) but the GPU memory is "
                f"{gpus}: weights are offloaded to the CPU (or the load fails); the energy "
                "figures are for the model held in GPU memory, and an offloaded run uses more"
            ),
            fix="quantize the weights (4/8-bit), shrink batch or context, or use more GPU memory",
            details=(
                ("vram_need_gb", round(need.total_gb, 3)),
                ("usable_vram_gb", round(usable, 3)),
                ("vram_method", need.method),
            ),
        ),
    )


def _figures(basis: Basis, deployment: Deployment, inputs: _Inputs, gpu: GpuProfile) -> Figures:
    """The ladder's figures, then how the deployment is served moves them: fused FP8 read from
    FP16, all cards' power (ecoguard.knowledge.served)."""
    low_1k, high_1k = _interval(basis)
    power, tput = _power_and_throughput(basis.figure.value, basis.power_w, basis.throughput_tok_s)
    tier, method = _tier_and_method(basis, inputs.precision)
    figures = Figures(
        basis.figure.value, low_1k, high_1k, power, tput, tier, method, _confidence(basis)
    )
    if fused_fp8(deployment):
        figures = as_fused_fp8(figures, deployment.engine)
    return on_all_cards(figures, gpu, deployment.gpu_count)


def _estimate_from(
    basis: Basis,
    deployment: Deployment,
    inputs: _Inputs,
    grid: _Grid,
    vram: tuple[float | None, str],
    holdout: str | None,
    gpu: GpuProfile,
) -> Estimate:
    fig, gen = basis.figure, inputs.generation_tokens
    figures = _figures(basis, deployment, inputs, gpu)
    energy_1k, low_1k, high_1k = figures.energy_1k, figures.low, figures.high
    per_request = energy_1k * gen / 1000.0
    request_range = (low_1k * gen / 1000.0, high_1k * gen / 1000.0)
    tput = figures.throughput_tok_s
    rows = (*fig.rows, *basis.extra_rows)
    err = None
    if basis.family != "exact":
        e = method_error(basis.family)
        err = (e["median_abs_error_pct"], e["p90_abs_error_pct"])
    # A figure a serving method moved is no longer the median of its sessions.
    exact = basis.family == "exact" and not (fused_fp8(deployment) or deployment.gpu_count > 1)
    paired = (fig.paired_value if basis.family == "exact" else fig.value) * figures.factor
    return Estimate(
        energy_per_1k_tokens_j=energy_1k,
        energy_per_request_j=per_request,
        tokens_per_j=1000.0 / energy_1k,
        power_w=figures.power_w,
        throughput_tok_s=tput,
        latency_s=gen * inputs.batch_size / tput if tput else None,
        vram_gb=vram[0],
        monthly=grid.monthly(per_request, request_range),
        tier=figures.tier,
        method=figures.method,
        sources=tuple(sorted({r.source for r in rows})),
        rows=tuple(dict.fromkeys(r.id for r in rows)),
        confidence=figures.confidence,
        deployment=deployment,
        assumptions=inputs.assumptions,
        vram_method=vram[1],
        energy_per_1k_tokens_j_range=(low_1k, high_1k),
        energy_per_request_j_range=request_range,
        family=basis.family,
        holdout_error_pct=err,
        carried_from=basis.carried_from,
        holdout=holdout,
        sessions=fig.sessions,
        paired_deltas=(
            tuple((src, ses, (r - 1.0) * 100.0, base) for src, ses, r, base in fig.pairs)
            if exact
            else ()
        ),
        measurements=fig.measurements if exact else (),
        paired_energy_per_1k_tokens_j=paired,
        paired_energy_per_request_j=paired * gen / 1000.0,
        paired_changes=(
            tuple((s.what, s.paired_pct, s.session_pcts, s.absolute_pct) for s in fig.steps)
            if exact
            else ()
        ),
    )


def _power_and_throughput(
    energy_1k: float, power_w: float | None, tput: float | None
) -> tuple[float | None, float | None]:
    """Power and throughput on the figure's own basis, so power x 1000 / throughput equals
    the energy shown: the basis's throughput with the power the energy implies, else the
    basis's power with the throughput it implies."""
    if tput:
        return energy_1k * tput / 1000.0, tput
    if power_w:
        return power_w, power_w * 1000.0 / energy_1k
    return None, None
