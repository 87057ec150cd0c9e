"""Rows out of a bench session: the local dataset (JSON lines, A's ReferenceRow schema with tier
``local``) and the upstream community submission CSV.

Both are written one cell at a time as cells finish, each write flushed and fsynced, so an
interrupted or crashed session keeps every finished cell.
"""

from __future__ import annotations

import csv
import json
import os
import re
from pathlib import Path
from typing import Any

from ecoguard.bench.loading import BNB_PRECISIONS, quantization_backend
from ecoguard.bench.runner import BenchResult, CellResult
from ecoguard.bench.stats import finite
from ecoguard.knowledge.records import ReferenceRow

LOCAL_SOURCE = "ecoguard bench (local dataset)"

# The upstream community submission format: the columns of
# ecocompute-ai/data/community_submission_template.csv, in its order.
COMMUNITY_COLUMNS: tuple[str, ...] = (
    "submission_id",
    "track",
    "submitter_name",
    "submitter_contact",
    "date_utc",
    "gpu_name",
    "gpu_architecture",
    "gpu_vram_gb",
    "gpu_tdp_w",
    "driver_version",
    "cuda_version",
    "python_version",
    "pytorch_version",
    "transformers_version",
    "bitsandbytes_version",
    "model_id",
    "model_parameters_b",
    "precision",
    "quantization_backend",
    "batch_size",
    "prompt_tokens",
    "generated_tokens",
    "warmup_runs",
    "measured_runs",
    "sampling_rate_hz",
    "energy_j_per_1k_tok_mean",
    "energy_j_per_1k_tok_std",
    "energy_cv_percent",
    "throughput_tok_s_mean",
    "throughput_tok_s_std",
    "avg_power_w_mean",
    "avg_power_w_std",
    "peak_power_w_mean",
    "notes",
    "raw_archive_path",
)
NA = "N/A"


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-") or "model"


def cell_note(cell: CellResult, result: BenchResult) -> str:
    info = result.info
    parts = []
    if info.simulated:
        parts.append(
            f"SIMULATED: {info.gpu_profile} profile power on this machine's timing, not a "
            "measurement of a GPU"
        )
    else:
        parts.append(f"measured with NVML on {info.gpu_name}")
    if info.idle_power_w is not None:
        parts.append(f"idle {info.idle_power_w:.1f} W before the runs (not subtracted)")
    if cell.peak_memory_gb is not None:
        what = "peak VRAM allocated" if cell.memory_kind == "vram" else "peak process RSS (CPU run)"
        parts.append(f"{what} {cell.peak_memory_gb:.3f} GB")
    if cell.summary is not None and cell.summary.unstable:
        parts.append(
            f"CV above the {cell.summary.cv_bound_pct:g}% bound: re-run with --cooldown-s or "
            "more --warmup"
        )
    prompts = "model tokenizer, fixed passage" if info.tokenizer else "random ids, fixed seed"
    parts.append(f"prompts: {prompts}; greedy, exactly the generation length (min_new_tokens)")
    return "; ".join(parts)


def build_row(cell: CellResult, result: BenchResult) -> ReferenceRow:
    """The cell as a ReferenceRow (tier ``local``). Energy includes idle power, as the study's
    end-to-end rows do; ``scope`` is therefore ``end_to_end``."""
    summary = cell.summary
    if summary is None:
        raise ValueError("only measured cells become rows")
    plan, info = result.plan, result.info
    gpu = info.gpu_profile or _slug(info.gpu_name)
    row_id = (
        f"local/{info.session}/{gpu}/{_slug(info.model_id.split('/')[-1])}/"
        f"{cell.precision}/bs{cell.batch_size}"
    )
    baseline_row = None
    if cell.baseline is not None and cell.baseline.row is not None:
        baseline_row = cell.baseline.row.id
    return ReferenceRow(
        id=row_id,
        gpu=gpu,
        model_id=info.model_id,
        params_b=(info.params or 0) / 1e9,
        precision=cell.precision,
        batch_size=cell.batch_size,
        prompt_tokens=plan.prompt_tokens,
        generation_tokens=plan.generation_tokens,
        throughput_tok_s=summary.throughput_tok_s.mean,
        throughput_std=summary.throughput_tok_s.std,
        power_w=summary.power_w.mean,
        power_std=summary.power_w.std,
        energy_j_per_1k=summary.energy_j_per_1k.mean,
        energy_j_per_1k_std=summary.energy_j_per_1k.std,
        energy_j_per_request=summary.energy_j_per_request.mean,
        n_runs=len(cell.samples),
        cv_pct=finite(summary.cv_pct),
        perplexity=None,
        software=info.software(),
        date=info.started_utc[:10],
        tier="local",
        source=LOCAL_SOURCE,
        note=cell_note(cell, result),
        model_key=info.model_key,
        scope="end_to_end",
        session=info.session,
        fp16_energy_j_per_1k=(
            cell.baseline.summary.energy_j_per_1k.mean
            if cell.baseline is not None and cell.baseline.summary is not None
            else None
        ),
        delta_vs_fp16_pct=finite(cell.delta_vs_fp16_pct),
        baseline_row=baseline_row,
        energy_j_per_request_std=summary.energy_j_per_request.std,
    )


def row_record(row: ReferenceRow, cell: CellResult, result: BenchResult) -> dict[str, Any]:
    """The JSON line: the row's fields, plus a ``bench`` object the knowledge loader ignores
    (per-run values, idle and peak figures, the protocol) so a row can be audited later."""
    plan, info = result.plan, result.info
    data = row.to_dict()
    data["bench"] = {
        "backend": info.backend,
        "figures": info.tier,
        "gpu_name": info.gpu_name,
        "device": info.device,
        "idle_power_w": info.idle_power_w,
        "peak_memory_gb": cell.peak_memory_gb,
        "memory_kind": cell.memory_kind,
        "peak_power_w": cell.summary.peak_power_w if cell.summary else None,
        "unstable": cell.summary.unstable if cell.summary else None,
        "cv_bound_pct": plan.cv_bound_pct,
        "warmup": plan.warmup,
        "cooldown_s": plan.cooldown_s,
        "sample_hz": info.sample_hz,
        "params": info.params,
        "runs": [s.to_dict() for s in cell.samples],
    }
    return data


def append_rows(path: Path, records: list[dict[str, Any]]) -> None:
    """Append JSON lines to the local dataset, creating its folder; flushed and fsynced."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record, sort_keys=True) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def community_row(row: ReferenceRow, cell: CellResult, result: BenchResult) -> dict[str, str]:
    """One line of the upstream community submission CSV. Submitter fields are left N/A for
    the person who shares it to fill in; simulated rows are marked so they cannot pass as
    measurements."""
    plan, info = result.plan, result.info
    summary = cell.summary
    assert summary is not None

    def num(value: float | None, digits: int = 3) -> str:
        value = finite(value)
        return NA if value is None else f"{value:.{digits}f}"

    return {
        "submission_id": row.id.replace("/", "-"),
        "track": "simulated-not-for-submission" if info.simulated else "main-benchmark-candidate",
        "submitter_name": NA,
        "submitter_contact": NA,
        "date_utc": row.date,
        "gpu_name": info.gpu_name,
        "gpu_architecture": info.gpu_architecture or NA,
        "gpu_vram_gb": num(info.gpu_vram_gb, 0) if info.gpu_vram_gb else NA,
        "gpu_tdp_w": num(info.gpu_tdp_w, 0) if info.gpu_tdp_w else NA,
        "driver_version": info.driver_version or NA,
        "cuda_version": info.cuda_version or NA,
        "python_version": info.python_version,
        "pytorch_version": info.versions.get("torch") or NA,
        "transformers_version": info.versions.get("transformers") or NA,
        "bitsandbytes_version": (
            info.versions.get("bitsandbytes") or NA if cell.precision in BNB_PRECISIONS else NA
        ),
        "model_id": info.model_id,
        "model_parameters_b": f"{row.params_b:.6g}",
        "precision": cell.precision,
        "quantization_backend": quantization_backend(cell.precision),
        "batch_size": str(cell.batch_size),
        "prompt_tokens": str(plan.prompt_tokens),
        "generated_tokens": str(plan.generation_tokens),
        "warmup_runs": str(plan.warmup),
        "measured_runs": str(len(cell.samples)),
        "sampling_rate_hz": f"{info.sample_hz:g}",
        "energy_j_per_1k_tok_mean": num(summary.energy_j_per_1k.mean),
        "energy_j_per_1k_tok_std": num(summary.energy_j_per_1k.std),
        "energy_cv_percent": num(summary.cv_pct, 2),
        "throughput_tok_s_mean": num(summary.throughput_tok_s.mean),
        "throughput_tok_s_std": num(summary.throughput_tok_s.std),
        "avg_power_w_mean": num(summary.power_w.mean),
        "avg_power_w_std": num(summary.power_w.std),
        "peak_power_w_mean": num(summary.peak_power_w),
        "notes": row.note,
        "raw_archive_path": NA,
    }


class CommunityCsv:
    """The ``--out`` file: header written when the session starts, one line per finished cell."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", encoding="utf-8", newline="") as handle:
            csv.DictWriter(handle, fieldnames=COMMUNITY_COLUMNS).writeheader()

    def append(self, line: dict[str, str]) -> None:
        with self.path.open("a", encoding="utf-8", newline="") as handle:
            csv.DictWriter(handle, fieldnames=COMMUNITY_COLUMNS).writerow(line)
            handle.flush()
            os.fsync(handle.fileno())
