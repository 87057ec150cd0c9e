"""Part 3 of the GPU validation: measured here vs ecoguard's estimate vs the study's nearest GPU.

For every measured row: the estimator's prediction for this GPU and configuration (with its
p10-p90 interval, tier and method), made from the shipped reference data only (the script points
``ECOGUARD_LOCAL_DATA`` at an empty file so neither these rows nor the user's own local rows
answer for it), and the study's row for the same model, precision and batch size on the nearest
GPU the study measured. "Nearest": the same architecture, else the closest memory bandwidth
(decoding is bandwidth-bound). Then the traps: each precision's change against FP16 in the same
session, beside the same change on that study GPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ecoguard.deployment import Deployment, ModelSpec, QuantSpec
from ecoguard.errors import UsageError
from ecoguard.knowledge import GpuProfile, ReferenceRow, estimate, find_rows, resolve_model
from ecoguard.knowledge.tables import gpu_profiles

STUDY_TIERS = ("measured", "reported")


@dataclass(frozen=True)
class Line:
    """One measured row beside its prediction and the study's nearest row (JSON-ready)."""

    row_id: str
    shape: str
    precision: str
    batch_size: int
    compiled: bool
    measured_j_per_1k: float
    measured_cv_pct: float | None
    throughput_tok_s: float | None
    power_w: float | None
    delta_vs_fp16_pct: float | None
    predicted_j_per_1k: float | None
    predicted_range: tuple[float, float] | None
    predicted_tier: str
    predicted_method: str
    inside_interval: bool | None
    study_gpu: str | None
    study_row: str | None
    study_j_per_1k: float | None
    study_lengths: tuple[int | None, int | None] | None
    study_delta_vs_fp16_pct: float | None


def _model_spec(row: ReferenceRow) -> ModelSpec:
    if row.model_key:
        info = resolve_model(row.model_key)
        return ModelSpec(
            id=info.id,
            params_b=info.params_b,
            family=info.family,
            layers=info.layers,
            hidden_size=info.hidden_size,
            kv_heads=info.kv_heads,
            head_dim=info.head_dim,
            context_window=info.context_window,
        )
    return ModelSpec(params_b=row.params_b)


def predict(row: ReferenceRow, gpu: GpuProfile | None, compiled: bool) -> dict[str, Any]:
    """The estimator's figure for the row's configuration on ``gpu`` (None: GPU not in the table)."""
    if gpu is None:
        return {
            "value": None,
            "range": None,
            "tier": "none",
            "method": "GPU not in ecoguard's table",
        }
    deployment = Deployment(
        model=_model_spec(row),
        gpu=gpu.to_gpu_spec(),
        precision=row.precision,
        quant=QuantSpec(compiled=compiled),
        batch_size=row.batch_size,
        prompt_tokens=row.prompt_tokens,
        generation_tokens=row.generation_tokens,
    )
    try:
        result = estimate(deployment)
    except UsageError as exc:
        return {"value": None, "range": None, "tier": "none", "method": f"no estimate: {exc}"}
    value = result.energy_per_1k_tokens_j
    bounds = result.energy_per_1k_tokens_j_range
    method = result.method + (
        f" (carried from {', '.join(result.carried_from)})" if result.carried_from else ""
    )
    return {
        "value": value,
        "range": tuple(bounds) if bounds else None,
        "tier": result.tier,
        "method": method,
    }


def _distance(gpu: GpuProfile, other: GpuProfile) -> tuple[int, float]:
    same_arch = 0 if other.architecture == gpu.architecture else 1
    return same_arch, abs(math.log(other.mem_bandwidth_gbs / gpu.mem_bandwidth_gbs))


def nearest_study_row(row: ReferenceRow, gpu: GpuProfile | None) -> ReferenceRow | None:
    """The study's row for the row's model, precision and batch size on the nearest GPU it
    measured; among that GPU's rows, the one closest in prompt and generation lengths."""
    if not row.model_key or gpu is None:
        return None
    candidates = [
        r
        for r in find_rows(model=row.model_key, precision=row.precision, batch_size=row.batch_size)
        if r.tier in STUDY_TIERS and r.energy_j_per_1k and not getattr(r, "offloaded", False)
    ]
    profiles = gpu_profiles()
    candidates = [r for r in candidates if r.gpu in profiles]
    if not candidates:
        return None
    best_gpu = min({r.gpu for r in candidates}, key=lambda k: (_distance(gpu, profiles[k]), k))

    def length_gap(r: ReferenceRow) -> float:
        return abs((r.prompt_tokens or 0) - (row.prompt_tokens or 0)) + abs(
            (r.generation_tokens or 0) - (row.generation_tokens or 0)
        )

    return min((r for r in candidates if r.gpu == best_gpu), key=lambda r: (length_gap(r), r.id))


def study_delta(study: ReferenceRow) -> float | None:
    """The study row's change against FP16: its own paired figure, else against the FP16 row of
    the same GPU, model, batch size and lengths."""
    if study.precision == "fp16":
        return 0.0
    if study.delta_vs_fp16_pct is not None:
        return study.delta_vs_fp16_pct
    for base in find_rows(model=study.model_key, precision="fp16", batch_size=study.batch_size):
        if (
            base.gpu == study.gpu
            and base.tier in STUDY_TIERS
            and (base.prompt_tokens, base.generation_tokens)
            == (study.prompt_tokens, study.generation_tokens)
            and base.energy_j_per_1k
            and study.energy_j_per_1k
        ):
            return (study.energy_j_per_1k - base.energy_j_per_1k) / base.energy_j_per_1k * 100
    return None


def build_lines(records: list[dict[str, Any]], gpu: GpuProfile | None) -> list[Line]:
    """One Line per measured row (``records``: the JSON lines of rows.jsonl)."""
    lines = []
    for record in records:
        row = ReferenceRow(
            **{k: v for k, v in record.items() if k in ReferenceRow.__dataclass_fields__}
        )
        extra = record.get("gpu_validation", {})
        compiled = bool(extra.get("compiled"))
        prediction = predict(row, gpu, compiled)
        study = nearest_study_row(row, gpu)
        value, bounds = prediction["value"], prediction["range"]
        inside = None if bounds is None else bounds[0] <= (row.energy_j_per_1k or 0) <= bounds[1]
        lines.append(
            Line(
                row_id=row.id,
                shape=str(extra.get("shape", row.model_id)),
                precision=row.precision,
                batch_size=row.batch_size or 0,
                compiled=compiled,
                measured_j_per_1k=row.energy_j_per_1k or 0.0,
                measured_cv_pct=row.cv_pct,
                throughput_tok_s=row.throughput_tok_s,
                power_w=row.power_w,
                delta_vs_fp16_pct=row.delta_vs_fp16_pct,
                predicted_j_per_1k=value,
                predicted_range=bounds,
                predicted_tier=prediction["tier"],
                predicted_method=prediction["method"],
                inside_interval=inside,
                study_gpu=study.gpu if study else None,
                study_row=study.id if study else None,
                study_j_per_1k=study.energy_j_per_1k if study else None,
                study_lengths=(study.prompt_tokens, study.generation_tokens) if study else None,
                study_delta_vs_fp16_pct=study_delta(study) if study else None,
            )
        )
    return lines


def _num(value: float | None, digits: int = 1, suffix: str = "") -> str:
    return "-" if value is None else f"{value:,.{digits}f}{suffix}"


def _basis(line: Line) -> str:
    """The estimate's method, cut to its first clause (the JSON keeps it whole); a missing
    estimate keeps its reason."""
    method = line.predicted_method
    if line.predicted_tier == "none":
        return method if len(method) <= 120 else method[:117] + "..."
    return method.split(":")[0]


def _signed(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f}%"


def markdown(lines: list[Line], gpu_name: str, tiny: bool) -> str:
    """The summary table, then the traps (change vs FP16 here and on the study's GPU)."""
    out = []
    if tiny:
        out.append(
            "**Tiny mode: fake NVML driver and CPU work. These figures prove the pipeline, "
            "they are not measurements of a GPU.**\n"
        )
    out += [
        f"Measured on {gpu_name} vs ecoguard's estimate for it (shipped reference data only) "
        "vs the study's nearest GPU. J per 1000 generated tokens.",
        "",
        "| shape | precision | batch | measured J/1k (CV) | tok/s | W | estimate J/1k [p10-p90] "
        "| in interval | estimate basis | study GPU | study J/1k (prompt+gen) |",
        "|" + "---|" * 11,
    ]
    for line in lines:
        precision = line.precision + (" compiled" if line.compiled else "")
        bounds = line.predicted_range
        interval = f" [{bounds[0]:,.0f}-{bounds[1]:,.0f}]" if bounds else ""
        inside = {None: "-", True: "yes", False: "no"}[line.inside_interval]
        lengths = ""
        if line.study_lengths:
            prompt, generated = (n if n is not None else "?" for n in line.study_lengths)
            lengths = f" ({prompt}+{generated})"
        out.append(
            f"| {line.shape} | {precision} | {line.batch_size} | "
            f"{_num(line.measured_j_per_1k)} ({_num(line.measured_cv_pct, 1, '%')}) | "
            f"{_num(line.throughput_tok_s)} | {_num(line.power_w)} | "
            f"{_num(line.predicted_j_per_1k, 0)}{interval} | {inside} | "
            f"{line.predicted_tier}: {_basis(line)} | "
            f"{line.study_gpu or '-'} | "
            f"{_num(line.study_j_per_1k, 0)}{lengths} |"
        )
    return "\n".join(out + _traps_table(lines) + _compiled_note(lines)) + "\n"


def _traps_table(lines: list[Line]) -> list[str]:
    traps = [
        line for line in lines if line.precision != "fp16" and line.delta_vs_fp16_pct is not None
    ]
    if not traps:
        return []
    out = [
        "",
        "The traps: change in J/1k against FP16 at the same batch size, same session here; "
        "on the study's GPU its own pairing.",
        "",
        "| shape | precision | batch | here vs FP16 | study vs FP16 | study GPU | same direction |",
        "|---|---|---|---|---|---|---|",
    ]
    for line in traps:
        here, there = line.delta_vs_fp16_pct, line.study_delta_vs_fp16_pct
        agree = "-" if here is None or there is None else ("yes" if here * there > 0 else "NO")
        out.append(
            f"| {line.shape} | {line.precision} | {line.batch_size} | {_signed(here)} | "
            f"{_signed(there)} | {line.study_gpu or '-'} | {agree} |"
        )
    return out


def compiled_changes(lines: list[Line]) -> list[tuple[Line, float | None, float | None]]:
    """Each compiled row with its change (%) against the eager row and the FP16 row of the same
    shape and batch size. Those were measured in other sessions of the same run."""

    def figure(shape: str, precision: str, batch: int) -> float | None:
        for line in lines:
            if (line.shape, line.precision, line.batch_size, line.compiled) == (
                shape,
                precision,
                batch,
                False,
            ):
                return line.measured_j_per_1k
        return None

    def change(value: float, base: float | None) -> float | None:
        return (value - base) / base * 100 if base else None

    out = []
    for line in lines:
        if line.compiled:
            eager = figure(line.shape, line.precision, line.batch_size)
            fp16 = figure(line.shape, "fp16", line.batch_size)
            out.append(
                (line, change(line.measured_j_per_1k, eager), change(line.measured_j_per_1k, fp16))
            )
    return out


def _compiled_note(lines: list[Line]) -> list[str]:
    out = []
    for line, vs_eager, vs_fp16 in compiled_changes(lines):
        out.append(
            f"\n{line.shape} {line.precision} compiled, batch {line.batch_size}: "
            f"{_signed(vs_eager)} J/1k against eager, {_signed(vs_fp16)} against FP16 "
            "(sessions of this run measured one after the other, not one session)."
        )
    return out


def to_json(lines: list[Line]) -> list[dict[str, Any]]:
    return [dict(vars(line)) for line in lines]
