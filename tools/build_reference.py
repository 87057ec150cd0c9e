#!/usr/bin/env python3
"""Compile the EcoCompute reference material into ecoguard's shipped dataset.

Usage::

    python tools/build_reference.py [SOURCE_DIR] [--out DIR]

SOURCE_DIR defaults to ``$ECOGUARD_REFERENCE_DATA`` or ``../shared/reference-data`` relative to the
repository root; ``--out`` defaults to the repository's ``data/``. The script writes
``reference_rows.json`` (one row per measured or reported configuration) and ``README.md``
(schema, units, counts, attribution, known disagreements). The hand-maintained knowledge tables
(``gpus.json``, ``models.json``, ``regions.json``, ``equivalents.json``) are not touched.

The output is deterministic: rows sorted by id, ids built from the configuration and source,
floats rounded to a fixed number of decimals, no timestamps. A test rebuilds into a temporary
folder and compares byte for byte with the committed files.

Tiers: ``measured`` = a row of a published raw or summary data file (it has a run count);
``reported`` = a figure printed only in the publisher's prose tables. The 560-row
``ecocompute_benchmark_dataset.json`` is formula-generated and never read.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import statistics
import sys
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
SCHEMA_VERSION = 1

# Source names as they appear in the files -> (registry key, parameter count in billions).
# The registry key groups instruct/base/revision variants of one architecture and size: their
# energy per token is the same to within measurement noise, and the sources themselves mix them
# (the A800 BS-1 study used Mistral-7B-v0.1, the batch sweep v0.2, the quick study v0.3).
MODEL_KEYS: dict[str, tuple[str, float]] = {
    "tinyllama-1.1b": ("tinyllama-1.1b", 1.1),
    "qwen2-0.5b": ("qwen2-0.5b", 0.5),
    "qwen2-1.5b": ("qwen2-1.5b", 1.5),
    "qwen2-7b": ("qwen2-7b", 7.0),
    "qwen2.5-0.5b": ("qwen2.5-0.5b", 0.5),
    "qwen2.5-1.5b": ("qwen2.5-1.5b", 1.5),
    "qwen2.5-3b": ("qwen2.5-3b", 3.0),
    "qwen2.5-7b": ("qwen2.5-7b", 7.0),
    "qwen2.5-14b": ("qwen2.5-14b", 14.0),
    "mistral-7b": ("mistral-7b", 7.0),
    "yi-1.5-6b": ("yi-1.5-6b", 6.0),
    "yi-1.5-9b": ("yi-1.5-9b", 9.0),
    "phi-3-mini": ("phi-3-mini", 3.8),
}

# GPU names in the sources -> ecoguard profile key.
GPU_KEYS: dict[str, str] = {
    "rtx 5090": "rtx5090",
    "nvidia geforce rtx 5090": "rtx5090",
    "rtx 4090d": "rtx4090d",
    "nvidia geforce rtx 4090d": "rtx4090d",
    "rtx 4090": "rtx4090",
    "nvidia geforce rtx 4090": "rtx4090",
    "a800": "a800",
    "a800-sxm4-80gb": "a800",
    "nvidia a800-sxm4-80gb": "a800",
    "t4": "tesla_t4",
    "tesla t4": "tesla_t4",
    "nvidia rtx pro 6000 blackwell server edition": "rtx_pro_6000",
}

PRECISION_KEYS: dict[str, str] = {
    "fp16": "fp16",
    "16": "fp16",
    "nf4": "nf4",
    "4": "nf4",
    "nf4_dq": "nf4_dq",
    "int8_default": "int8_mixed",
    "int8 default": "int8_mixed",
    "int8 (std)": "int8_mixed",
    "int8-mix": "int8_mixed",
    "int8": "int8_mixed",  # bitsandbytes LLM.int8() at its default threshold 6.0
    "int8_pure": "int8_pure",
    "int8 (pure)": "int8_pure",
    "int8-pure": "int8_pure",
    "int8 pure (t=0.0)": "int8_pure",
    "int8 pure": "int8_pure",
    "fp8": "fp8_weight_only",
    "fp8†": "fp8_weight_only",
    "fp8_dyn": "fp8_dynamic",
}

# Short tags that make row ids readable and stable; one per source file (or prose table).
SOURCE_TAGS: dict[str, str] = {
    "ecocompute-ai/data/rtx5090_benchmark_results.csv": "ecai-5090csv",
    "ecocompute-ai/data/t4_benchmark_results.csv": "ecai-t4csv",
    "ecocompute-ai/data/a800_results": "ecai-a800json",
    "ecocompute-ai/data/ppl_yi1.5_6b_wikitext2_20260224.csv": "ecai-ppl4090d",
    "ecocompute-dynamic-eval/metadata/a800_metadata.json": "dyn-a800meta",
    "ecocompute-dynamic-eval/metadata/pure_int8_metadata.json": "dyn-pureint8",
    "ecocompute-dynamic-eval/metadata/batch_size_experiment": "dyn-bssweep",
    "quant-energy/build/measured.csv": "qe-anchor",
    "quant-energy/data/rtx4090_paired_energy_quality_2026-08-19.csv": "qe-4090paired",
    "quant-energy/data/rtx4090_int8_repeats_2026-08-20.csv": "qe-4090rep",
    "quant-energy/data/rtx5090_bnb_2026-09-20.csv": "qe-5090bnb",
    "quant-energy/data/rtx5090_fp8_torchao_2026-09-20.csv": "qe-5090fp8",
    "quant-energy/data/rtx4090_bnb_2026-09-25.csv": "qe-4090bnb",
    "hongping-zh.github.io/blackwell_rtxpro6000_fp16_e2e": "gh-pro6000e2e",
    "hongping-zh.github.io/rtx_pro6000_phase_results": "gh-pro6000phase",
    "_unattributed-index/ecocompute-skill-v2.3/references/paradox_data.md": "v23-prose",
    "ecocompute-dynamic-eval/metadata/COMPLETE_DATASET_MEMO.md": "memo-prose",
    "ecocompute-dynamic-eval/skills/ecocompute/references/batch_size_guide.md": "bsguide-prose",
}

PRO6000_E2E = (
    "hongping-zh.github.io/data/blackwell_rtxpro6000_fp16_e2e_20260608_124459.tar.gz.extracted"
)
PRO6000_PHASE = (
    "hongping-zh.github.io/data/rtx_pro6000_phase_results_with_yi15_6b_20260603.tar.gz.extracted/"
    "phase_results_backup"
)
BS_SWEEP = "ecocompute-dynamic-eval/metadata/batch_size_experiment"
BS_SWEEP_RAW = BS_SWEEP + "/a800_mistral7b_pure_int8_batch_size_raw_20260215_131345.csv"
BS_SWEEP_META = BS_SWEEP + "/a800_mistral7b_pure_int8_batch_size_metadata_20260215_131345.json"
BS_SWEEP_SUMMARY = BS_SWEEP + "/a800_mistral7b_pure_int8_batch_size_summary_20260215_131345.csv"
EXCLUDED = "ecocompute-ai/ecocompute_benchmark_dataset.json"


@dataclass
class Row:
    """One configuration. Units: tok/s, W, J per 1000 generated tokens, J per request."""

    gpu: str
    model_id: str
    model_key: str
    params_b: float
    precision: str
    batch_size: int | None
    prompt_tokens: int | None
    generation_tokens: int | None
    throughput_tok_s: float | None
    throughput_std: float | None
    power_w: float | None
    power_std: float | None
    energy_j_per_1k: float | None
    energy_j_per_1k_std: float | None
    energy_j_per_request: float | None
    n_runs: int | None
    cv_pct: float | None
    perplexity: float | None
    software: str
    date: str
    tier: str
    source: str
    note: str
    scope: str = "end_to_end"
    session: str = ""
    fp16_energy_j_per_1k: float | None = None
    delta_vs_fp16_pct: float | None = None
    baseline_row: str | None = None
    energy_j_per_request_std: float | None = None
    id: str = field(default="")


def model_key(name: str) -> tuple[str, float]:
    """Registry key and size for a model name as a source writes it."""
    text = name.strip().lower().split("/")[-1]
    text = text.replace("_", "-")
    aliases = {
        "mistral-7b": "mistral-7b",
        "qwen25-14b": "qwen2.5-14b",
        "yi15-9b": "yi-1.5-9b",
        "yi-1-5-9b": "yi-1.5-9b",
    }
    if text in aliases:
        text = aliases[text]
    for key in sorted(MODEL_KEYS, key=len, reverse=True):
        if text.startswith(key):
            return MODEL_KEYS[key]
    raise SystemExit(f"build_reference: no model key for {name!r}; add it to MODEL_KEYS")


def gpu_key(name: str) -> str:
    try:
        return GPU_KEYS[name.strip().lower()]
    except KeyError:
        raise SystemExit(f"build_reference: no GPU key for {name!r}; add it to GPU_KEYS") from None


def precision_key(name: str) -> str:
    try:
        return PRECISION_KEYS[name.strip().lower().replace("*", "")]
    except KeyError:
        raise SystemExit(f"build_reference: unknown precision {name!r}") from None


def num(text: str | float | int | None) -> float | None:
    """A number from a table cell: ``4,716 ± 119`` -> 4716.0, ``—``/empty -> None."""
    if text is None:
        return None
    if isinstance(text, (int, float)):
        return float(text)
    cleaned = text.replace(",", "").replace("*", "").replace("−", "-").strip()
    match = re.match(r"^[+-]?\d+(?:\.\d+)?", cleaned)
    return float(match.group(0)) if match else None


def plus_minus(text: str) -> tuple[float | None, float | None]:
    """``34.72 ± 0.18`` -> (34.72, 0.18)."""
    parts = text.split("±")
    mean = num(parts[0])
    std = num(parts[1]) if len(parts) > 1 else None
    return mean, std


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-")


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def mean_std(values: list[float]) -> tuple[float, float | None]:
    mean = statistics.fmean(values)
    return mean, (statistics.stdev(values) if len(values) > 1 else None)


# --------------------------------------------------------------------------- measured sources


def rows_ecai_bs1_csv(src: Path) -> list[Row]:
    """RTX 5090 and T4 FP16/NF4 at BS 1 (10 runs; prompt 128, up to 512 new tokens)."""
    telemetry = json.loads((src / "ecocompute-ai/data/telemetry_config.json").read_text())
    config = telemetry["benchmark_config"]
    out = []
    for rel, gpu, platform in (
        ("ecocompute-ai/data/rtx5090_benchmark_results.csv", "rtx5090", "rtx5090"),
        ("ecocompute-ai/data/t4_benchmark_results.csv", "tesla_t4", "t4"),
    ):
        info = telemetry["platforms"][platform]
        software = (
            f"torch {info['pytorch_version']}; transformers {info['transformers_version']}; "
            f"bitsandbytes {info['bitsandbytes_version']}; driver {info['nvidia_driver_version']}; "
            f"CUDA {info['cuda_version']}"
        )
        for rec in read_csv(src / rel):
            key, params = model_key(rec["model"])
            energy = num(rec["energy_per_1k_tokens_mean"])
            energy_std = num(rec["energy_per_1k_tokens_std"])
            out.append(
                Row(
                    gpu=gpu,
                    model_id=rec["model"],
                    model_key=key,
                    params_b=params,
                    precision=precision_key(rec["config"]),
                    batch_size=int(config["batch_size"]),
                    prompt_tokens=int(config["prompt_tokens"]),
                    generation_tokens=int(config["max_new_tokens"]),
                    throughput_tok_s=num(rec["throughput_mean"]),
                    throughput_std=num(rec["throughput_std"]),
                    power_w=num(rec["power_mean"]),
                    power_std=num(rec["power_std"]),
                    energy_j_per_1k=energy,
                    energy_j_per_1k_std=energy_std,
                    energy_j_per_request=None,
                    n_runs=int(rec["n_runs"]),
                    cv_pct=_cv(energy, energy_std),
                    perplexity=None,
                    software=software,
                    date="",
                    tier="measured",
                    source=rel,
                    note=(
                        "generation_tokens is max_new_tokens from telemetry_config.json; "
                        f"idle {info['idle_power_watts']} W not subtracted"
                    ),
                    delta_vs_fp16_pct=num(rec["delta_energy_pct"])
                    if rec["config"] != "FP16"
                    else None,
                )
            )
    return out


def rows_a800_json(src: Path) -> list[Row]:
    """A800 BS 1: per-config JSON with 10 raw runs; mean/std recomputed from the raw runs and
    checked against the file's own summary and a800_summary.csv."""
    folder = src / "ecocompute-ai/data/a800_results"
    summary = {
        (model_key(r["model"])[0], r["config"]): r for r in read_csv(folder / "a800_summary.csv")
    }
    out = []
    for path in sorted(folder.glob("energy_*.json")):
        data = json.loads(path.read_text())
        raw = data["raw_runs"]
        key, params = model_key(Path(data["model"]).name)
        energy, energy_std = mean_std([r["energy_per_1k_tokens"] for r in raw])
        tput, tput_std = mean_std([r["throughput_tok_s"] for r in raw])
        power, power_std = mean_std([r["avg_power_w"] for r in raw])
        tokens = sorted({int(r["tokens"]) for r in raw})
        notes = []
        stated = data["results"]
        if abs(stated["energy_per_1k_tokens_mean"] - energy) > 0.01:
            notes.append(f"file states mean {stated['energy_per_1k_tokens_mean']} J/1k")
        summ = summary.get((key, data["config"]))
        ppl = None
        if summ is not None:
            ppl = num(summ["ppl"])
            if abs(num(summ["energy_j_1k"]) - energy) > 0.01:
                notes.append(f"a800_summary.csv gives {summ['energy_j_1k']} J/1k")
            else:
                notes.append("a800_summary.csv agrees")
        if key == "yi-1.5-9b" and data["config"] == "int8_default":
            notes.append(
                "perplexity conflict: ppl_yi_1_5_9b_int8_default.json 4.943 (used, as in the "
                "summary) vs ppl_yi15_9b_int8_default.json 5.77"
            )
        notes.append(
            f"generated tokens per run {'/'.join(map(str, tokens))} (generation stopped at EOS)"
        )
        rel = f"ecocompute-ai/data/a800_results/{path.name}"
        out.append(
            Row(
                gpu=gpu_key(data["gpu"]),
                model_id=_a800_model_id(key),
                model_key=key,
                params_b=params,
                precision=precision_key(data["config"]),
                batch_size=1,
                prompt_tokens=None,
                generation_tokens=tokens[0] if len(tokens) == 1 else None,
                throughput_tok_s=tput,
                throughput_std=tput_std,
                power_w=power,
                power_std=power_std,
                energy_j_per_1k=energy,
                energy_j_per_1k_std=energy_std,
                energy_j_per_request=None,
                n_runs=len(raw),
                cv_pct=_cv(energy, energy_std),
                perplexity=ppl,
                software="not recorded",
                date="",
                tier="measured",
                source=rel,
                note="; ".join(notes),
            )
        )
    return out


def _a800_model_id(key: str) -> str:
    return {
        "mistral-7b": "mistralai/Mistral-7B-v0.1",
        "qwen2.5-14b": "Qwen/Qwen2.5-14B",
        "yi-1.5-9b": "01-ai/Yi-1.5-9B",
    }[key]


def rows_a800_meta(src: Path) -> list[Row]:
    """A800 quick study: Mistral-7B x fp16/int8_default/int8_pure x BS 1/4/8, n=5, 128 tokens."""
    rel = "ecocompute-dynamic-eval/metadata/a800_metadata.json"
    data = json.loads((src / rel).read_text())
    model = data["model_tested"]["huggingface_path"]
    key, params = model_key(model)
    out = []
    for bs_name, configs in data["results"].items():
        if not bs_name.startswith("batch_size_"):
            continue
        bs = int(bs_name.rsplit("_", 1)[1])
        for config, vals in configs.items():
            out.append(
                Row(
                    gpu="a800",
                    model_id=model,
                    model_key=key,
                    params_b=params,
                    precision=precision_key(config),
                    batch_size=bs,
                    prompt_tokens=None,
                    generation_tokens=128,
                    throughput_tok_s=num(vals["throughput_mean"]),
                    throughput_std=None,
                    power_w=num(vals["power_mean"]),
                    power_std=None,
                    energy_j_per_1k=num(vals["energy_per_1k"]),
                    energy_j_per_1k_std=None,
                    energy_j_per_request=None,
                    n_runs=5,
                    cv_pct=None,
                    perplexity=None,
                    software="torch 2.x, transformers 4.x, bitsandbytes 0.x (exact versions not recorded)",
                    date=data["date"],
                    tier="measured",
                    source=rel,
                    note=(
                        "quick study, 5 power samples per run; hardware block says A800 80GB "
                        "PCIe / 40GB / 250 W, inconsistent with the SXM4-80GB of the other A800 "
                        "files"
                    ),
                    delta_vs_fp16_pct=num(vals.get("vs_fp16_percent")),
                )
            )
    return out


def rows_pure_int8_meta(src: Path) -> list[Row]:
    """RTX 4090D pure-INT8 ablation (n=10, 256 tokens); FP16/INT8-default from the Feb-12 study."""
    rel = "ecocompute-dynamic-eval/metadata/pure_int8_metadata.json"
    data = json.loads((src / rel).read_text())
    sw = data["software"]
    software = (
        f"torch {sw['pytorch']['version']}; transformers {sw['transformers']['version']}; "
        f"bitsandbytes {sw['bitsandbytes']['version']}"
    )
    models = {m["model_id"]: m["huggingface_path"] for m in data["models_tested"]}
    out = []
    for mid, configs in data["results"].items():
        if mid not in models:
            continue
        key, params = model_key(models[mid])
        for config, vals in configs.items():
            precision = "fp16" if config == "fp16_baseline" else precision_key(config)
            energy, energy_std = num(vals["energy_per_1k"]), num(vals.get("energy_std"))
            note = (
                "energy = (average power - idle power) x time per the file's protocol; "
                "power_w is total board power"
            )
            if "source" in vals:
                note += f"; file says: {vals['source']}"
            out.append(
                Row(
                    gpu="rtx4090d",
                    model_id=models[mid],
                    model_key=key,
                    params_b=params,
                    precision=precision,
                    batch_size=1,
                    prompt_tokens=None,
                    generation_tokens=256,
                    throughput_tok_s=num(vals["throughput_mean"]),
                    throughput_std=num(vals.get("throughput_std")),
                    power_w=num(vals["power_mean"]),
                    power_std=num(vals.get("power_std")),
                    energy_j_per_1k=energy,
                    energy_j_per_1k_std=energy_std,
                    energy_j_per_request=None,
                    n_runs=10,
                    cv_pct=_cv(energy, energy_std),
                    perplexity=None,
                    software=software,
                    date=vals.get("test_date", data["date"]),
                    tier="measured",
                    source=rel,
                    note=note,
                    delta_vs_fp16_pct=num(vals.get("vs_fp16_percent")),
                )
            )
    return out


def rows_ppl_4090d(src: Path) -> list[Row]:
    """RTX 4090D Yi-1.5-6B perplexity study: only perplexity and the energy delta vs FP16."""
    rel = "ecocompute-ai/data/ppl_yi1.5_6b_wikitext2_20260224.csv"
    meta = json.loads((src / rel.replace(".csv", ".json")).read_text())
    out = []
    for rec in read_csv(src / rel):
        key, params = model_key(rec["model_name"])
        out.append(
            Row(
                gpu="rtx4090d",
                model_id=rec["model_name"],
                model_key=key,
                params_b=params,
                precision=precision_key(rec["config"]),
                batch_size=None,
                prompt_tokens=None,
                generation_tokens=None,
                throughput_tok_s=None,
                throughput_std=None,
                power_w=None,
                power_std=None,
                energy_j_per_1k=None,
                energy_j_per_1k_std=None,
                energy_j_per_request=None,
                n_runs=None,
                cv_pct=None,
                perplexity=num(rec["perplexity"]),
                software=f"torch {meta['software']['pytorch']}; transformers {meta['software']['transformers']}",
                date=meta["date"],
                tier="measured",
                source=rel,
                note=(
                    "perplexity on 50 WikiText-2 samples (max length 512); energy delta is "
                    "quoted from the Feb-12/13 4090D energy study, no energy measured here"
                ),
                delta_vs_fp16_pct=num(rec["energy_delta_vs_fp16_pct"])
                if rec["config"] != "fp16"
                else None,
            )
        )
    return out


def rows_bs_sweep(src: Path) -> list[Row]:
    """A800 Mistral-7B pure INT8, BS 1..64, 10 runs each: mean/std per BS from the raw CSV."""
    meta = json.loads((src / BS_SWEEP_META).read_text())
    key, params = model_key(meta["model"])
    by_bs: dict[int, list[dict[str, str]]] = {}
    for rec in read_csv(src / BS_SWEEP_RAW):
        by_bs.setdefault(int(rec["batch_size"]), []).append(rec)
    out = []
    for bs, recs in sorted(by_bs.items()):

        def col(name: str, recs: list[dict[str, str]] = recs) -> list[float]:
            return [float(r[name]) for r in recs]

        energy, energy_std = mean_std(col("energy_per_1k_tokens_j"))
        per_req, per_req_std = mean_std(col("energy_per_request_j"))
        tput, tput_std = mean_std(col("throughput_tok_s"))
        power, power_std = mean_std(col("avg_power_w"))
        out.append(
            Row(
                gpu=gpu_key(meta["gpu"]),
                model_id=meta["model"],
                model_key=key,
                params_b=params,
                precision="int8_pure",
                batch_size=bs,
                prompt_tokens=int(meta["input_length"]),
                generation_tokens=int(meta["output_length"]),
                throughput_tok_s=tput,
                throughput_std=tput_std,
                power_w=power,
                power_std=power_std,
                energy_j_per_1k=energy,
                energy_j_per_1k_std=energy_std,
                energy_j_per_request=per_req,
                energy_j_per_request_std=per_req_std,
                n_runs=len(recs),
                cv_pct=_cv(energy, energy_std),
                perplexity=None,
                software=f"torch {meta['pytorch_version']}; CUDA {meta['cuda_version']}; bitsandbytes llm_int8_threshold=0.0",
                date="2026-02-15",
                tier="measured",
                source=BS_SWEEP_RAW,
                note=(
                    "energy per request = batch energy / batch size, 256 new tokens per request; "
                    "mean/std of the 10 raw runs (matches the published summary CSV)"
                ),
            )
        )
    return out


def rows_qe_anchor(src: Path) -> list[Row]:
    """quant-energy build/measured.csv: 29 anchors (quantized energy with its FP16 baseline)."""
    rel = "quant-energy/build/measured.csv"
    out = []
    for idx, rec in enumerate(read_csv(src / rel), start=1):
        key, _ = model_key(rec["model"])
        energy = num(rec["energy_quant_j1k"])
        fp16 = num(rec["energy_fp16_j1k"])
        note = rec["note"] or ""
        out.append(
            Row(
                gpu=gpu_key(rec["gpu"]),
                model_id=rec["model"],
                model_key=key,
                params_b=float(rec["params_b"]),
                precision=precision_key(rec["precision"]),
                batch_size=1,
                prompt_tokens=None,
                generation_tokens=None,
                throughput_tok_s=None,
                throughput_std=None,
                power_w=None,
                power_std=None,
                energy_j_per_1k=energy,
                energy_j_per_1k_std=num(rec["energy_quant_std_j1k"]),
                energy_j_per_request=None,
                n_runs=int(rec["n_runs"]),
                cv_pct=None,
                perplexity=None,
                software="",
                date="",
                tier="measured",
                source=rel,
                note=f"anchor row {idx}" + (f"; {note}" if note else ""),
                session=f"r{idx:02d}",
                fp16_energy_j_per_1k=fp16,
                delta_vs_fp16_pct=_delta(energy, fp16),
            )
        )
    return out


def _qe_software(rec: dict[str, str]) -> str:
    parts = []
    for name in ("torch", "transformers", "bitsandbytes", "torchao"):
        if rec.get(name):
            parts.append(f"{name} {rec[name]}")
    if rec.get("nvidia_driver"):
        parts.append(f"driver {rec['nvidia_driver']}")
    return "; ".join(parts)


def rows_qe_paired(src: Path) -> list[Row]:
    """RTX 4090 (paired, repeats, 2-card) and RTX 5090 bnb: each quantized row carries its
    same-session FP16 baseline, emitted as its own fp16 row and linked."""
    out: list[Row] = []
    specs = (
        ("quant-energy/data/rtx4090_paired_energy_quality_2026-08-19.csv", None),
        ("quant-energy/data/rtx4090_int8_repeats_2026-08-20.csv", "replicate"),
        ("quant-energy/data/rtx5090_bnb_2026-09-20.csv", "session"),
        ("quant-energy/data/rtx4090_bnb_2026-09-25.csv", "session"),
    )
    for rel, session_col in specs:
        for rec in read_csv(src / rel):
            key, _ = model_key(rec["model"])
            params = float(rec["params_b"])
            session = ""
            if session_col == "replicate":
                session = f"rep{rec['replicate']}"
            elif session_col == "session":
                session = rec["session"]
                if rec.get("gpu_uuid_short"):
                    session += f"-{rec['gpu_uuid_short']}"
            energy_col = "energy_j_per_1k_tok"
            fp16_col = "fp16_energy_j_per_1k_tok" if "fp16_energy_j_per_1k_tok" in rec else None
            energy = num(rec[energy_col])
            fp16 = num(rec[fp16_col]) if fp16_col else None
            ppl = num(rec.get("perplexity") or rec.get("ppl"))
            fp16_ppl = num(rec.get("fp16_perplexity") or rec.get("fp16_ppl"))
            gen = int(rec.get("generated_tokens_per_iter") or rec.get("tokens_per_iteration"))
            iters = int(rec.get("decode_iterations") or rec.get("iterations"))
            software = _qe_software(rec)
            date = (rec.get("timestamp_utc") or "")[:10]
            quant_prec = precision_key(rec["precision"])
            note = (
                f"{iters} decode iterations of {gen} tokens, context {rec['context_length']}; "
                f"{rec.get('measurement_source', '')}; bitsandbytes INT8 is LLM.int8() at "
                "default threshold"
            )
            quant = Row(
                gpu=gpu_key(rec["gpu"]),
                model_id=rec["model"],
                model_key=key,
                params_b=params,
                precision=quant_prec,
                batch_size=int(rec["batch_size"]),
                prompt_tokens=None,
                generation_tokens=gen,
                throughput_tok_s=num(rec["throughput_tok_s"]),
                throughput_std=None,
                power_w=num(rec["avg_power_w"]),
                power_std=None,
                energy_j_per_1k=energy,
                energy_j_per_1k_std=None,
                energy_j_per_request=None,
                n_runs=iters,
                cv_pct=None,
                perplexity=ppl,
                software=software,
                date=date,
                tier="measured",
                source=rel,
                note=note,
                session=session,
                fp16_energy_j_per_1k=fp16,
                delta_vs_fp16_pct=num(rec.get("vs_fp16_energy_pct") or rec.get("vs_fp16_pct")),
            )
            out.append(quant)
            if fp16 is not None:
                out.append(
                    replace(
                        quant,
                        precision="fp16",
                        throughput_tok_s=None,
                        power_w=None,
                        energy_j_per_1k=fp16,
                        perplexity=fp16_ppl,
                        fp16_energy_j_per_1k=None,
                        delta_vs_fp16_pct=None,
                        note=f"same-session FP16 baseline of the {quant_prec} row; " + note,
                        session=(session + "-" if session else "") + f"base-{quant_prec}",
                    )
                )
    return out


def rows_qe_fp8(src: Path) -> list[Row]:
    """RTX 5090 torchao FP8 (eager): fp16 / fp8 weight-only / fp8 dynamic, 3 samples of 256."""
    rel = "quant-energy/data/rtx5090_fp8_torchao_2026-09-20.csv"
    out = []
    for rec in read_csv(src / rel):
        key, _ = model_key(rec["model"])
        note = (
            f"{rec['num_samples']} samples x {rec['max_new_tokens']} new tokens, torchao eager "
            f"(no torch.compile); idle {rec['idle_power_w']} W not subtracted; peak "
            f"{rec['peak_power_w']} W"
        )
        if rec["short_generation"]:
            note += f"; short generation: {rec['total_tokens']} tokens in total"
        out.append(
            Row(
                gpu=gpu_key(rec["gpu"]),
                model_id=rec["model"],
                model_key=key,
                params_b=float(rec["params_b"]),
                precision=precision_key(rec["precision"]),
                batch_size=int(rec["batch_size"]),
                prompt_tokens=None,
                generation_tokens=int(rec["max_new_tokens"]),
                throughput_tok_s=num(rec["throughput_tok_s"]),
                throughput_std=None,
                power_w=num(rec["avg_power_w"]),
                power_std=None,
                energy_j_per_1k=num(rec["energy_j_per_1k_tok"]),
                energy_j_per_1k_std=None,
                energy_j_per_request=None,
                n_runs=int(rec["num_samples"]),
                cv_pct=None,
                perplexity=None,
                software=f"torch {rec['torch']}; CUDA {rec['cuda']}"
                + (f"; torchao {rec['torchao']}" if rec["torchao"] else ""),
                date=rec["timestamp_utc"][:10],
                tier="measured",
                source=rel,
                note=note,
                delta_vs_fp16_pct=num(rec["vs_fp16_pct"]),
            )
        )
    return out


def rows_pro6000_e2e(src: Path) -> list[Row]:
    """RTX PRO 6000 Qwen2.5-3B FP16 BS 1, 256 and 512 tokens x 10 runs (and a 1-run smoke)."""
    out = []
    for sub in ("results", "smoke_results"):
        folder = src / PRO6000_E2E / sub
        meta = json.loads((folder / "metadata.json").read_text())
        runs: dict[int, list[dict[str, str]]] = {}
        for rec in read_csv(folder / "blackwell_rtxpro6000_fp16_e2e_runs.csv"):
            runs.setdefault(int(rec["max_new_tokens"]), []).append(rec)
        for tokens, recs in sorted(runs.items()):
            energy, energy_std = mean_std([float(r["energy_per_1k_tokens_j"]) for r in recs])
            tput, tput_std = mean_std([float(r["throughput_tok_s"]) for r in recs])
            power, power_std = mean_std([float(r["avg_power_w"]) for r in recs])
            per_req, per_req_std = mean_std([float(r["energy_j"]) / int(r["batch"]) for r in recs])
            key, params = model_key(Path(meta["model"]).name)
            out.append(
                Row(
                    gpu=gpu_key(meta["gpu_name"]),
                    model_id="Qwen/Qwen2.5-3B",
                    model_key=key,
                    params_b=params,
                    precision="fp16",
                    batch_size=int(recs[0]["batch"]),
                    prompt_tokens=int(recs[0]["prompt_tokens_per_sample"]),
                    generation_tokens=tokens,
                    throughput_tok_s=tput,
                    throughput_std=tput_std,
                    power_w=power,
                    power_std=power_std,
                    energy_j_per_1k=energy,
                    energy_j_per_1k_std=energy_std,
                    energy_j_per_request=per_req,
                    energy_j_per_request_std=per_req_std,
                    n_runs=len(recs),
                    cv_pct=_cv(energy, energy_std),
                    perplexity=None,
                    software=f"torch {meta['torch']}; CUDA runtime {meta['cuda_runtime']}",
                    date="2026-06-08",
                    tier="measured",
                    source=f"{PRO6000_E2E}/{sub}/blackwell_rtxpro6000_fp16_e2e_runs.csv",
                    note=("1-run smoke test" if sub == "smoke_results" else "end-to-end generate")
                    + "; mean/std of the per-run rows, idle not subtracted",
                    session="smoke" if sub == "smoke_results" else "",
                )
            )
    return out


def rows_pro6000_phase(src: Path) -> list[Row]:
    """RTX PRO 6000 decode-phase energy with idle (34.431 W) subtracted: scope decode_active.

    J per 1k tokens = decode active power / decode tokens per second x 1000. Not comparable with
    end-to-end rows (no prefill, no idle), so the estimator does not use them for totals."""
    folder = src / PRO6000_PHASE
    software = "torch 2.11.0+cu128; transformers 5.9.0; bitsandbytes 0.49.2; driver 580.82.09"
    out = []
    for path in sorted(folder.glob("*_phase_matrix.csv")):
        for rec in read_csv(path):
            key, params = model_key(rec["model"])
            tps = float(rec["decode_tokens_per_s"])
            power = float(rec["decode_active_power_w"])
            bs = int(rec["batch_size"])
            out.append(
                Row(
                    gpu="rtx_pro_6000",
                    model_id=rec["model"],
                    model_key=key,
                    params_b=params,
                    precision=precision_key(rec["precision"]),
                    batch_size=bs,
                    prompt_tokens=None,
                    generation_tokens=int(rec["max_new_tokens"]),
                    throughput_tok_s=tps,
                    throughput_std=None,
                    power_w=power,
                    power_std=None,
                    energy_j_per_1k=power / tps * 1000.0,
                    energy_j_per_1k_std=None,
                    energy_j_per_request=None,
                    n_runs=int(rec["decode_repeat"]),
                    cv_pct=None,
                    perplexity=None,
                    software=software,
                    date="2026-06-03",
                    tier="measured",
                    source=f"{PRO6000_PHASE}/{path.name}",
                    note=(
                        f"decode phase only, idle {rec['idle_power_w']} W subtracted, ~100 Hz "
                        f"sampling; prefill {float(rec['prefill_active_energy_j_per_call']):.3f} J "
                        "per call (active)"
                    ),
                    scope="decode_active",
                )
            )
    return out


# --------------------------------------------------------------------------- reported (prose)


def md_tables(text: str) -> list[tuple[str, list[str], list[list[str]]]]:
    """Markdown tables as (nearest heading above, header cells, body rows)."""
    tables = []
    heading = ""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        if (
            line.startswith("|")
            and i + 1 < len(lines)
            and re.match(r"^\|[\s\-:|]+\|$", lines[i + 1])
        ):
            header = [c.strip() for c in line.strip().strip("|").split("|")]
            body = []
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                body.append([c.strip() for c in lines[i].strip().strip("|").split("|")])
                i += 1
            tables.append((heading, header, body))
            continue
        i += 1
    return tables


def _reported(
    *,
    gpu: str,
    model: str,
    precision: str,
    source: str,
    note: str,
    batch_size: int | None = 1,
    throughput: tuple[float | None, float | None] = (None, None),
    power: tuple[float | None, float | None] = (None, None),
    energy: tuple[float | None, float | None] = (None, None),
    per_request: float | None = None,
    delta: float | None = None,
    cv: float | None = None,
    session: str = "",
    software: str = "",
    date: str = "",
) -> Row:
    key, params = model_key(model)
    return Row(
        gpu=gpu,
        model_id=model,
        model_key=key,
        params_b=params,
        precision=precision,
        batch_size=batch_size,
        prompt_tokens=None,
        generation_tokens=None,
        throughput_tok_s=throughput[0],
        throughput_std=throughput[1],
        power_w=power[0],
        power_std=power[1],
        energy_j_per_1k=energy[0],
        energy_j_per_1k_std=energy[1],
        energy_j_per_request=per_request,
        n_runs=None,
        cv_pct=cv,
        perplexity=None,
        software=software,
        date=date,
        tier="reported",
        source=source,
        note=note,
        session=session,
        delta_vs_fp16_pct=delta,
    )


def rows_v23_prose(src: Path) -> list[Row]:
    """The v2.3.0 skill's prose tables (RTX 5090 five precisions, earlier 5090 study, 4090D)."""
    rel = "_unattributed-index/ecocompute-skill-v2.3/references/paradox_data.md"
    text = (src / rel).read_text(encoding="utf-8")
    out: list[Row] = []
    for heading, _header, body in md_tables(text):
        if heading.startswith("RTX 5090 Five-Precision"):
            model = ""
            for cells in body:
                model = cells[0] or model
                prec = precision_key(cells[2])
                out.append(
                    _reported(
                        gpu="rtx5090",
                        model=model,
                        precision=prec,
                        source=rel,
                        note="v2.3.0 five-precision table (n=3 x 10 iterations)"
                        + (
                            "; FP8 via torchao nightly, eager fallback"
                            if prec.startswith("fp8")
                            else ""
                        ),
                        throughput=(num(cells[3]), None),
                        power=(num(cells[4]), None),
                        energy=(num(cells[5]), None),
                        delta=num(cells[6]),
                        software="PyTorch 2.12.0.dev20260315+cu128; torchao 0.17.0.dev20260316",
                        date="2026-03-18",
                    )
                )
        elif heading.startswith("RTX 5090 — FP16 vs NF4"):
            for cells in body:
                out.append(
                    _reported(
                        gpu="rtx5090",
                        model=cells[0],
                        precision=precision_key(cells[2]),
                        source=rel,
                        note="v2.3.0 prose, RTX 5090 earlier FP16/NF4 study",
                        throughput=plus_minus(cells[3]),
                        power=(num(cells[4]), None),
                        energy=(num(cells[5]), None),
                        delta=num(cells[6]),
                        session="earlier",
                    )
                )
        elif heading.startswith("RTX 4090D — NF4"):
            for cells in body:
                out.append(
                    _reported(
                        gpu="rtx4090d",
                        model=cells[0],
                        precision=precision_key(cells[2]),
                        source=rel,
                        note="v2.3.0 prose, RTX 4090D NF4 table",
                        throughput=plus_minus(cells[3]),
                        energy=plus_minus(cells[4]),
                        delta=num(cells[5]),
                        session="nf4",
                    )
                )
        elif heading.startswith("RTX 4090D — Default INT8"):
            for cells in body:
                if cells[0].strip("*").startswith("Average"):
                    continue
                out.append(
                    _reported(
                        gpu="rtx4090d",
                        model=cells[0].strip("*"),
                        precision=precision_key(cells[1]),
                        source=rel,
                        note="v2.3.0 prose, RTX 4090D INT8 table",
                        throughput=plus_minus(cells[2]),
                        energy=plus_minus(cells[3]),
                        delta=num(cells[4]),
                        session="int8",
                    )
                )
        elif heading.startswith("A800 — INT8 Overhead"):
            for cells in body:
                out.append(
                    _reported(
                        gpu="a800",
                        model=cells[0],
                        precision=precision_key(cells[2]),
                        batch_size=int(cells[1]),
                        source=rel,
                        note="v2.3.0 prose, A800 BS 1/4/8 table (same study as a800_metadata.json)",
                        throughput=(num(cells[3]), None),
                        energy=(num(cells[4]), None),
                        delta=num(cells[5]),
                    )
                )
    return out


def rows_memo_prose(src: Path) -> list[Row]:
    """COMPLETE_DATASET_MEMO.md: RTX 4090D Feb-12 table (FP16/NF4/INT8 std/INT8 pure)."""
    rel = "ecocompute-dynamic-eval/metadata/COMPLETE_DATASET_MEMO.md"
    text = (src / rel).read_text(encoding="utf-8")
    out = []
    for _heading, header, body in md_tables(text):
        if header[:2] != ["Model", "Config"] or not body or body[0][0] != "Yi-1.5-6B":
            continue
        for cells in body:
            out.append(
                _reported(
                    gpu="rtx4090d",
                    model=cells[0],
                    precision=precision_key(cells[1]),
                    source=rel,
                    note="dataset memo prose table, RTX 4090D (raw rtx4090d_clean.csv never published)",
                    throughput=plus_minus(cells[2]),
                    power=plus_minus(cells[3]),
                    energy=plus_minus(cells[4]),
                    delta=num(cells[5]),
                    cv=num(cells[6]),
                    date="2026-02-12",
                )
            )
    return out


def rows_bs_guide(src: Path) -> list[Row]:
    """batch_size_guide.md: A800 Mistral-7B pure INT8 BS 1-64 prose table."""
    rel = "ecocompute-dynamic-eval/skills/ecocompute/references/batch_size_guide.md"
    text = (src / rel).read_text(encoding="utf-8")
    out = []
    for _heading, header, body in md_tables(text):
        if not header or header[0] != "Batch Size":
            continue
        for cells in body:
            out.append(
                _reported(
                    gpu="a800",
                    model="Mistral-7B",
                    precision="int8_pure",
                    batch_size=int(cells[0]),
                    source=rel,
                    note=(
                        "prose table; its J/request and J/1k disagree with the raw sweep CSV "
                        "(BS 1: 14.16 J/request here vs 1768.3 measured)"
                    ),
                    throughput=(num(cells[1]), None),
                    energy=(num(cells[3]), None),
                    per_request=num(cells[2]),
                )
            )
    return out


# --------------------------------------------------------------------------- assembly


def _cv(mean: float | None, std: float | None) -> float | None:
    if mean is None or std is None or mean == 0:
        return None
    return std / mean * 100.0


def _delta(value: float | None, base: float | None) -> float | None:
    if value is None or base is None or base == 0:
        return None
    return (value / base - 1.0) * 100.0


def assign_ids(rows: list[Row]) -> list[Row]:
    """Stable, readable ids: gpu/model/precision/bsN/source-tag[/session][/gen tokens]."""
    out = []
    for row in rows:
        tag = _source_tag(row.source)
        parts = [row.gpu, row.model_key, row.precision, f"bs{row.batch_size or 'na'}", tag]
        if row.session:
            parts.append(slug(row.session))
        if tag in ("gh-pro6000e2e",) and row.generation_tokens:
            parts.append(f"gen{row.generation_tokens}")
        out.append(replace(row, id="/".join(parts)))
    ids = Counter(r.id for r in out)
    dupes = [i for i, n in ids.items() if n > 1]
    if dupes:
        raise SystemExit(f"build_reference: duplicate row ids: {dupes}")
    return out


def _source_tag(source: str) -> str:
    for prefix, tag in sorted(SOURCE_TAGS.items(), key=lambda kv: -len(kv[0])):
        if source.startswith(
            prefix.replace("hongping-zh.github.io/", "hongping-zh.github.io/data/")
        ):
            return tag
    raise SystemExit(f"build_reference: no source tag for {source!r}")


def link_baselines(rows: list[Row]) -> list[Row]:
    """Point each non-FP16 row at its FP16 baseline from the same source (same GPU, model and
    batch size; the same-session baseline where the file pairs them), fill the FP16 energy, and
    compute the delta where the file did not state one."""
    fp16_rows = {
        (_source_tag(r.source), r.gpu, r.model_key, r.batch_size, r.session): r
        for r in rows
        if r.precision == "fp16" and r.scope != "duplicate"
    }
    out = []
    for row in rows:
        if row.precision == "fp16":
            out.append(row)
            continue
        tag = _source_tag(row.source)
        paired = f"{row.session}-base-{row.precision}" if row.session else f"base-{row.precision}"
        base = fp16_rows.get(
            (tag, row.gpu, row.model_key, row.batch_size, paired)
        ) or fp16_rows.get((tag, row.gpu, row.model_key, row.batch_size, row.session))
        if base is None:
            out.append(row)
            continue
        fp16 = row.fp16_energy_j_per_1k
        if fp16 is None:
            fp16 = base.energy_j_per_1k
        delta = row.delta_vs_fp16_pct
        if delta is None:
            delta = _delta(row.energy_j_per_1k, fp16)
        out.append(
            replace(row, baseline_row=base.id, fp16_energy_j_per_1k=fp16, delta_vs_fp16_pct=delta)
        )
    return out


def mark_anchor_duplicates(rows: list[Row]) -> list[Row]:
    """measured.csv anchors repeat rows of other files; say which, so nobody counts them twice."""
    out = []
    others = [r for r in rows if not r.source.startswith("quant-energy/build/")]
    for row in rows:
        if not row.source.startswith("quant-energy/build/") or row.energy_j_per_1k is None:
            out.append(row)
            continue
        same = [
            o
            for o in others
            if o.tier == "measured"
            and o.gpu == row.gpu
            and o.model_key == row.model_key
            and o.precision == row.precision
            and o.energy_j_per_1k is not None
            and abs(o.energy_j_per_1k - row.energy_j_per_1k) < 0.01
        ]
        if same:
            out.append(
                replace(row, note=row.note + f"; duplicates {same[0].id}", scope="duplicate")
            )
        else:
            out.append(row)
    return out


FLOAT_DIGITS = 4


def row_to_json(row: Row) -> dict:
    data = asdict(row)
    for key, value in data.items():
        if isinstance(value, float):
            if math.isnan(value):
                data[key] = None
            else:
                rounded = round(value, FLOAT_DIGITS)
                data[key] = rounded if rounded != 0 else 0.0
    return data


def collect(src: Path) -> list[Row]:
    rows: list[Row] = []
    for builder in (
        rows_ecai_bs1_csv,
        rows_a800_json,
        rows_a800_meta,
        rows_pure_int8_meta,
        rows_ppl_4090d,
        rows_bs_sweep,
        rows_qe_anchor,
        rows_qe_paired,
        rows_qe_fp8,
        rows_pro6000_e2e,
        rows_pro6000_phase,
        rows_v23_prose,
        rows_memo_prose,
        rows_bs_guide,
    ):
        rows.extend(builder(src))
    rows = assign_ids(rows)
    rows = mark_anchor_duplicates(rows)
    rows = link_baselines(rows)
    rows.sort(key=lambda r: r.id)
    return rows


def check_sweep_summary(src: Path, rows: list[Row]) -> list[str]:
    """Compare our per-BS means with the published summary CSV; return disagreements."""
    problems = []
    lines = (src / BS_SWEEP_SUMMARY).read_text().splitlines()[3:]
    by_bs = {r.batch_size: r for r in rows if r.source == BS_SWEEP_RAW}
    for line in lines:
        cells = line.split(",")
        bs, per_req = int(cells[0]), float(cells[7])
        ours = by_bs[bs].energy_j_per_request
        if ours is None or abs(round(ours, 2) - per_req) > 0.011:
            problems.append(f"BS {bs}: summary {per_req} J/request vs raw mean {ours}")
    return problems


def counts_table(rows: list[Row]) -> list[tuple[str, str, str, int]]:
    counter = Counter((r.gpu, r.precision, r.tier) for r in rows)
    return sorted((g, p, t, n) for (g, p, t), n in counter.items())


def render_readme(rows: list[Row], src: Path) -> str:
    counts = counts_table(rows)
    tiers = Counter(r.tier for r in rows)
    scopes = Counter(r.scope for r in rows)
    sources = Counter(r.source for r in rows)
    sweep_problems = check_sweep_summary(src, rows)
    lines = [
        "# ecoguard reference data",
        "",
        "Compiled by `tools/build_reference.py` from `../shared/reference-data/` (a collected copy of",
        "the EcoCompute publications). Do not edit `reference_rows.json` or this file by hand: change",
        "the script and rebuild (`python tools/build_reference.py`). A test rebuilds both and compares.",
        "",
        "## Attribution and licences",
        "",
        "Figures come from **Hongping Zhang, EcoCompute (2026)**, Zenodo",
        "[10.5281/zenodo.19647290](https://doi.org/10.5281/zenodo.19647290), CC BY 4.0. Repositories",
        "and the licence each states (statements conflict in places; none checked by a lawyer):",
        "",
        "| repository | licence as stated |",
        "|---|---|",
        "| github.com/hongping-zh/ecocompute-ai | LICENSE file CC BY 4.0 (README badge and data/README say MIT) |",
        "| github.com/hongping-zh/ecocompute-dynamic-eval | MIT |",
        "| github.com/hongping-zh/quant-energy | no LICENSE file; data stated CC BY 4.0 |",
        "| github.com/hongping-zh/hongping-zh.github.io | MIT |",
        "| ecocompute skill v2.3.0 text (repository unknown, via a search index) | points at the CC BY 4.0 Zenodo data |",
        "",
        "ecoguard copies numbers, not prose or code: every row names its source file.",
        "",
        "## Files",
        "",
        "* `reference_rows.json`: `{schema_version, rows: [...]}`, one row per configuration and source.",
        "* `gpus.json`, `models.json`, `regions.json`, `equivalents.json`: hand-maintained knowledge",
        "  tables (GPU profiles with NVML aliases, model registry, grid price/intensity, real-world",
        "  equivalents); every entry names its source.",
        "",
        "## Row schema and units",
        "",
        "| field | meaning |",
        "|---|---|",
        "| `id` | stable id `gpu/model_key/precision/bsN/source-tag[/session]` |",
        "| `gpu` | ecoguard GPU profile key (`gpus.json`) |",
        "| `model_id`, `model_key`, `params_b` | model as the source names it; registry key; billions of parameters |",
        "| `precision` | `fp16`, `nf4`, `nf4_dq`, `int8_mixed` (bitsandbytes LLM.int8() default threshold 6.0), `int8_pure` (threshold 0.0), `fp8_weight_only`, `fp8_dynamic` (torchao) |",
        "| `batch_size`, `prompt_tokens`, `generation_tokens` | sequences per generate call; prompt and new tokens per sequence (null when the source does not say) |",
        "| `throughput_tok_s`, `throughput_std` | generated tokens per second over the whole batch (mean, std) |",
        "| `power_w`, `power_std` | average board power during generation, W |",
        "| `energy_j_per_1k`, `energy_j_per_1k_std` | joules per 1000 generated tokens |",
        "| `energy_j_per_request`, `energy_j_per_request_std` | joules per request (sequence), where the source gives it |",
        "| `n_runs`, `cv_pct` | runs (or iterations) behind the mean; coefficient of variation of energy, % |",
        "| `perplexity` | WikiText-2 perplexity where measured (setups differ per source) |",
        "| `fp16_energy_j_per_1k`, `delta_vs_fp16_pct`, `baseline_row` | the FP16 baseline the source pairs the row with (same session where the file has one) and the energy change vs it, % |",
        "| `software`, `date` | stack and date as recorded |",
        "| `tier` | `measured` (raw or summary data file with runs) or `reported` (publisher's prose table only) |",
        "| `scope` | `end_to_end` (generate call, idle not subtracted unless the note says so), `decode_active` (decode phase with idle subtracted: not comparable), `duplicate` (an anchor row repeating another file's row) |",
        "| `source`, `session`, `note` | file relative to reference-data; session/replicate; caveats |",
        "",
        f"## Counts ({len(rows)} rows: "
        + ", ".join(f"{n} {t}" for t, n in sorted(tiers.items()))
        + ")",
        "",
        "Scopes: " + ", ".join(f"{n} {s}" for s, n in sorted(scopes.items())) + ".",
        "",
        "| GPU | precision | tier | rows |",
        "|---|---|---|---|",
    ]
    lines += [f"| {g} | {p} | {t} | {n} |" for g, p, t, n in counts]
    lines += [
        "",
        "## Rows per source file",
        "",
        "| source | rows |",
        "|---|---|",
    ]
    lines += [f"| `{s}` | {n} |" for s, n in sorted(sources.items())]
    lines += [
        "",
        "## Excluded",
        "",
        f"* `{EXCLUDED}` (560 rows): its values follow an exact multiplicative formula",
        "  (throughput identical across GPUs, energy breakdown constant per precision), so it is",
        "  generated, not measured. It is never a reference.",
        "* Templates (`community_*`), JSON schemas, the mlcube illustrative/no-GPU examples (labelled",
        "  synthetic or interpolated), `curves.json` and `coverage_matrix` (fits and roll-ups of rows",
        "  already here), `gpus_addition.csv` (unverified spec values), `uncertainty_report` and",
        "  summary CSVs (roll-ups, used only to check our means).",
        "",
        "## Known disagreements (both rows kept; the estimator prefers measured)",
        "",
        "* A800 batch sweep: the prose `batch_size_guide.md` gives 14.16 J/request and 5,781 J/1k at",
        "  BS 1 (and 0.61 J/request at BS 64); the raw CSV gives 1768.3 J/request and 6907.4 J/1k at BS 1",
        "  and 75.89 J/request at BS 64. The relative drop (-95.7%) agrees; the absolute values do not",
        "  (the prose J/request looks divided by the token count and its BS 1 row is the Feb-13 quick",
        "  study's). Raw means recomputed here "
        + (
            "match the published summary CSV."
            if not sweep_problems
            else "differ from the summary: " + "; ".join(sweep_problems)
        ),
        "* A800 BS 1 pure INT8: 6528 J/1k (10 runs, up to 512 tokens, `energy_mistral_7b_int8_pure.json`)",
        "  vs 5781 J/1k (5 runs, 128 tokens, `a800_metadata.json`) vs 6907 J/1k (sweep, 256+256 tokens).",
        "* `a800_metadata.json` describes its GPU as A800 80GB PCIe with 40 GB and 250 W; every other",
        "  A800 file says A800-SXM4-80GB.",
        "* Yi-1.5-9B int8_default perplexity on A800: 4.943 (`ppl_yi_1_5_9b_int8_default.json`, used by",
        "  the summary) vs 5.77 (`ppl_yi15_9b_int8_default.json`).",
        "* RTX 4090D NF4: the memo table gives Yi-1.5-6B 19.23 tok/s, 3,292 J/1k (-30.2%) and Qwen2.5-7B",
        "  5,217 J/1k FP16; the v2.3 prose gives 36.42 tok/s, 3,333 J/1k (-29.3%) and 5,649 J/1k FP16.",
        "  Phi-3-mini FP16 is 3,003 J/1k (memo) vs 2,775 J/1k (v2.3); NF4 delta -8.1% vs +10.8%.",
        "* RTX 5090 Qwen2-1.5B NF4: 3,120.49 J/1k (CSV) vs 3,123 (v2.3 prose).",
        "* RTX 5090 NF4 at 7B: -11.4% (Jan study CSV, Qwen2-7B, 512 tokens) vs -31.4% to -32.3%",
        "  (Sep 2026 bnb sessions, Qwen2-7B, 10 x 256 tokens, bnb 0.50.2) vs -11.5% (v2.3 prose, Qwen2.5-7B).",
        "* RTX 4090 INT8 (LLM.int8()) vs FP16: +105.8% (paired 2026-08-19) vs +101.8..110.0% (repeats)",
        "  vs +49.5% (anchors, July 2026 mlcube); small models +300..595%. The FP16 baselines of one",
        "  size differ by up to 20% between sessions (Qwen2-0.5B 1182..1551 J/1k).",
        "* RTX 4090 Qwen2.5-3B NF4: -15.1% (paired 2026-08-19) vs +0.5..+3.5% (2026-09-25, two cards).",
        "* FP8 weight-only on RTX 5090: +158..+701% (v2.3, torchao 0.17 nightly) vs +187..+815%",
        "  (torchao 0.18.0, 2026-09-20). Both eager mode.",
        "* RTX 4090D pure-INT8 energies follow (power - idle) x time while power_w is total power;",
        "  RTX PRO 6000 phase rows subtract 34.431 W idle; all other rows include idle.",
        "",
    ]
    return "\n".join(lines)


def build(src: Path, out: Path) -> list[Row]:
    if not src.is_dir():
        raise SystemExit(f"build_reference: source folder {src} not found")
    rows = collect(src)
    out.mkdir(parents=True, exist_ok=True)
    payload = {
        "schema_version": SCHEMA_VERSION,
        "attribution": "Hongping Zhang, EcoCompute (2026), Zenodo 10.5281/zenodo.19647290, CC BY 4.0",
        "rows": [row_to_json(r) for r in rows],
    }
    text = json.dumps(payload, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    (out / "reference_rows.json").write_text(text, encoding="utf-8")
    (out / "README.md").write_text(render_readme(rows, src), encoding="utf-8")
    return rows


def default_source() -> Path:
    env = os.environ.get("ECOGUARD_REFERENCE_DATA")
    if env:
        return Path(env)
    return (REPO_ROOT / ".." / "shared" / "reference-data").resolve()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", nargs="?", type=Path, default=None, help="reference-data folder")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "data", help="output folder")
    args = parser.parse_args(argv)
    rows = build(args.source or default_source(), args.out)
    tiers = Counter(r.tier for r in rows)
    print(f"wrote {len(rows)} rows ({dict(sorted(tiers.items()))}) to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
