#!/usr/bin/env python3
"""Compile the EcoCompute reference material into ecoguard's shipped dataset.

Usage::

    python tools/build_reference.py [SOURCE_DIR] [--out DIR]

SOURCE_DIR defaults to ``$ECOGUARD_REFERENCE_DATA`` or the repository's ``data/upstream/`` (the
vendored copies of exactly the upstream files read here, with their provenance and licences in
``data/upstream/PROVENANCE.md``); ``--out`` defaults to the repository's ``data/``. The script writes
``reference_rows.json`` (one row per measured or reported configuration) and ``README.md``
(schema, units, counts, attribution, known disagreements). The hand-maintained knowledge tables
(``gpus.json``, ``models.json``, ``regions.json``, ``equivalents.json``) are not touched.

The output is deterministic: rows sorted by id, ids built from the configuration and source,
floats rounded to a fixed number of decimals, no timestamps. A test rebuilds into a temporary
folder and compares byte for byte with the committed files.

Tiers: ``measured`` = a row of a published raw or summary data file (it has a run count);
``reported`` = a figure printed only in the publisher's prose tables, or quoted by a data file
from a run whose own file was never published. The 560-row ``ecocompute_benchmark_dataset.json``
is formula-generated and never read.

Sizes: ``params_b`` is the model registry's (``data/models.json``) wherever the row's model is in
it, so a row and a query for the same model agree on its size (sources round, e.g. 7B for
Qwen2-7B's 7.62B).

Idle power: where a source subtracted idle power from its energies (its protocol says so and the
row's own power, throughput and energy confirm it), the idle energy is added back
(``E + idle_W x 1000 / throughput``) so every ``end_to_end`` row includes idle; rows that cannot
be corrected get scope ``idle_subtracted`` and never pair with idle-inclusive rows.
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
from dataclasses import asdict, replace
from pathlib import Path

from ecoguard.deployment import Deployment
from ecoguard.knowledge.memory import memory_need, usable_vram_gb
from ecoguard.knowledge.records import ReferenceRow
from ecoguard.knowledge.tables import gpu_profiles, model_registry

REPO_ROOT = Path(__file__).resolve().parent.parent
SCHEMA_VERSION = 1
UPSTREAM_DIR = REPO_ROOT / "data" / "upstream"
MODEL_REGISTRY = REPO_ROOT / "data" / "models.json"

# Source names as they appear in the files -> (registry key, the size the sources write, in
# billions). The registry's size replaces the written one for every model it lists.
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
# Two A800 perplexity files for Yi-1.5-9B int8_default that disagree (the first is the summary's).
YI9B_INT8_PPL_FILES = ("ppl_yi_1_5_9b_int8_default.json", "ppl_yi15_9b_int8_default.json")
# How the RTX 4090D sources state their energy formula (memo protocol, pure-INT8 metadata).
IDLE_SUBTRACTED_FORMULA = re.compile(r"\(\s*Average Power\s*-\s*Idle Power\s*\)", re.IGNORECASE)
# A recovered idle power this far from the GPU's stated idle means the row is not what we think.
STATED_IDLE_W = {"rtx4090d": 17.0}  # "Idle Power: ~17W" (EcoCompute hardware_profiles.md)
IDLE_TOLERANCE_W = 2.0


# The row schema is the package's own (ecoguard.knowledge.records.ReferenceRow). A source states
# what it has and new_row leaves the rest unstated: no std, run count, CV, perplexity, token
# counts or batch size unless given, and an id assigned later by assign_ids.
Row = ReferenceRow
_UNSTATED: dict[str, object] = {
    "id": "",
    "model_key": "",
    "batch_size": None,
    "prompt_tokens": None,
    "generation_tokens": None,
    "throughput_tok_s": None,
    "throughput_std": None,
    "power_w": None,
    "power_std": None,
    "energy_j_per_1k": None,
    "energy_j_per_1k_std": None,
    "energy_j_per_request": None,
    "n_runs": None,
    "cv_pct": None,
    "perplexity": None,
}


def new_row(**stated: object) -> Row:
    """A reference row from what a source states; every field it does not state is unstated."""
    return Row(**{**_UNSTATED, **stated})  # type: ignore[arg-type]


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
                new_row(
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
                    n_runs=int(rec["n_runs"]),
                    cv_pct=_cv(energy, energy_std),
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
            used, other = (
                json.loads((folder / name).read_text())["results"]["perplexity"]
                for name in YI9B_INT8_PPL_FILES
            )
            notes.append(
                f"perplexity conflict: {YI9B_INT8_PPL_FILES[0]} {used:g} (used, as in the "
                f"summary) vs {YI9B_INT8_PPL_FILES[1]} {other:g}"
            )
        notes.append(
            f"generated tokens per run {'/'.join(map(str, tokens))} (generation stopped at EOS)"
        )
        rel = f"ecocompute-ai/data/a800_results/{path.name}"
        out.append(
            new_row(
                gpu=gpu_key(data["gpu"]),
                model_id=_a800_model_id(key),
                model_key=key,
                params_b=params,
                precision=precision_key(data["config"]),
                batch_size=1,
                generation_tokens=tokens[0] if len(tokens) == 1 else None,
                throughput_tok_s=tput,
                throughput_std=tput_std,
                power_w=power,
                power_std=power_std,
                energy_j_per_1k=energy,
                energy_j_per_1k_std=energy_std,
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
                new_row(
                    gpu="a800",
                    model_id=model,
                    model_key=key,
                    params_b=params,
                    precision=precision_key(config),
                    batch_size=bs,
                    generation_tokens=128,
                    throughput_tok_s=num(vals["throughput_mean"]),
                    power_w=num(vals["power_mean"]),
                    energy_j_per_1k=num(vals["energy_per_1k"]),
                    n_runs=5,
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
    formula = data["measurement_protocol"]["energy_calculation"]
    if not IDLE_SUBTRACTED_FORMULA.search(formula):
        raise SystemExit(f"build_reference: {rel} no longer states idle subtraction: {formula!r}")
    out = []
    for mid, configs in data["results"].items():
        if mid not in models:
            continue
        key, params = model_key(models[mid])
        for config, vals in configs.items():
            precision = "fp16" if config == "fp16_baseline" else precision_key(config)
            energy, energy_std = num(vals["energy_per_1k"]), num(vals.get("energy_std"))
            note = "the file's protocol: energy = (average power - idle power) x 1000 / throughput"
            tier = "measured"
            if "source" in vals:
                # FP16 and default INT8 are copied from the 2026-02-12 study, whose raw file
                # (rtx4090d_clean.csv) was never published; the memo prints the same figures.
                tier = "reported"
                note += (
                    f"; file says: {vals['source']}; tier reported: a figure quoted from the "
                    "unpublished 2026-02-12 run (rtx4090d_clean.csv), identical to the memo's "
                    "prose row, not measured in this experiment"
                )
            out.append(
                new_row(
                    gpu="rtx4090d",
                    model_id=models[mid],
                    model_key=key,
                    params_b=params,
                    precision=precision,
                    batch_size=1,
                    generation_tokens=256,
                    throughput_tok_s=num(vals["throughput_mean"]),
                    throughput_std=num(vals.get("throughput_std")),
                    power_w=num(vals["power_mean"]),
                    power_std=num(vals.get("power_std")),
                    energy_j_per_1k=energy,
                    energy_j_per_1k_std=energy_std,
                    n_runs=10,
                    cv_pct=_cv(energy, energy_std),
                    software=software,
                    date=vals.get(
                        "test_date", "2026-02-12" if tier == "reported" else data["date"]
                    ),
                    tier=tier,
                    source=rel,
                    note=note,
                    scope="idle_subtracted",
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
            new_row(
                gpu="rtx4090d",
                model_id=rec["model_name"],
                model_key=key,
                params_b=params,
                precision=precision_key(rec["config"]),
                perplexity=num(rec["perplexity"]),
                software=f"torch {meta['software']['pytorch']}; transformers {meta['software']['transformers']}",
                date=meta["date"],
                tier="measured",
                source=rel,
                note=(
                    "perplexity on 50 WikiText-2 samples (max length 512); energy delta is "
                    "quoted from the Feb-12/13 4090D energy study, no energy measured here; "
                    "scope idle_subtracted: that study subtracted idle power and this file has "
                    "no throughput to add it back"
                ),
                scope="idle_subtracted",
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
            new_row(
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
            new_row(
                gpu=gpu_key(rec["gpu"]),
                model_id=rec["model"],
                model_key=key,
                params_b=float(rec["params_b"]),
                precision=precision_key(rec["precision"]),
                batch_size=1,
                energy_j_per_1k=energy,
                energy_j_per_1k_std=num(rec["energy_quant_std_j1k"]),
                n_runs=int(rec["n_runs"]),
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
            quant = new_row(
                gpu=gpu_key(rec["gpu"]),
                model_id=rec["model"],
                model_key=key,
                params_b=params,
                precision=quant_prec,
                batch_size=int(rec["batch_size"]),
                generation_tokens=gen,
                throughput_tok_s=num(rec["throughput_tok_s"]),
                power_w=num(rec["avg_power_w"]),
                energy_j_per_1k=energy,
                n_runs=iters,
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
            new_row(
                gpu=gpu_key(rec["gpu"]),
                model_id=rec["model"],
                model_key=key,
                params_b=float(rec["params_b"]),
                precision=precision_key(rec["precision"]),
                batch_size=int(rec["batch_size"]),
                generation_tokens=int(rec["max_new_tokens"]),
                throughput_tok_s=num(rec["throughput_tok_s"]),
                power_w=num(rec["avg_power_w"]),
                energy_j_per_1k=num(rec["energy_j_per_1k_tok"]),
                n_runs=int(rec["num_samples"]),
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
                new_row(
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
                new_row(
                    gpu="rtx_pro_6000",
                    model_id=rec["model"],
                    model_key=key,
                    params_b=params,
                    precision=precision_key(rec["precision"]),
                    batch_size=bs,
                    generation_tokens=int(rec["max_new_tokens"]),
                    throughput_tok_s=tps,
                    power_w=power,
                    energy_j_per_1k=power / tps * 1000.0,
                    n_runs=int(rec["decode_repeat"]),
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
    scope: str = "end_to_end",
) -> Row:
    key, params = model_key(model)
    return new_row(
        gpu=gpu,
        model_id=model,
        model_key=key,
        params_b=params,
        precision=precision,
        batch_size=batch_size,
        throughput_tok_s=throughput[0],
        throughput_std=throughput[1],
        power_w=power[0],
        power_std=power[1],
        energy_j_per_1k=energy[0],
        energy_j_per_1k_std=energy[1],
        energy_j_per_request=per_request,
        cv_pct=cv,
        software=software,
        date=date,
        tier="reported",
        source=source,
        note=note,
        session=session,
        delta_vs_fp16_pct=delta,
        scope=scope,
    )


# Why the v2.3 RTX 4090D rows count as idle-subtracted although that table prints no power.
V23_4090D_IDLE = (
    "its FP16 baselines for Yi-1.5-6B and Mistral-7B are the memo's idle-subtracted figures "
    "and its deltas are taken against them, so the table is on the idle-subtracted basis"
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
                        note="v2.3.0 prose, RTX 4090D NF4 table; " + V23_4090D_IDLE,
                        throughput=plus_minus(cells[3]),
                        energy=plus_minus(cells[4]),
                        delta=num(cells[5]),
                        session="nf4",
                        scope="idle_subtracted",
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
                        note="v2.3.0 prose, RTX 4090D INT8 table; " + V23_4090D_IDLE,
                        throughput=plus_minus(cells[2]),
                        energy=plus_minus(cells[3]),
                        delta=num(cells[4]),
                        session="int8",
                        scope="idle_subtracted",
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
    if not IDLE_SUBTRACTED_FORMULA.search(text):
        raise SystemExit(f"build_reference: {rel} no longer states idle subtraction")
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
                    note=(
                        "dataset memo prose table, RTX 4090D (raw rtx4090d_clean.csv never "
                        "published); the memo's protocol: energy = (average power - idle "
                        "power) x 1000 / throughput"
                    ),
                    throughput=plus_minus(cells[2]),
                    power=plus_minus(cells[3]),
                    energy=plus_minus(cells[4]),
                    delta=num(cells[5]),
                    cv=num(cells[6]),
                    date="2026-02-12",
                    scope="idle_subtracted",
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


def registry_sizes(path: Path = MODEL_REGISTRY) -> dict[str, float]:
    """Registry key -> parameter count (billions) from the hand-maintained model registry."""
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))["models"]
    except (OSError, ValueError, KeyError) as exc:
        raise SystemExit(f"build_reference: cannot read the model registry {path}: {exc}") from None
    return {entry["key"]: float(entry["params_b"]) for entry in entries}


def apply_registry_sizes(rows: list[Row], sizes: dict[str, float]) -> list[Row]:
    """One source of truth for a model's size: the registry's, where it lists the model."""
    return [replace(r, params_b=sizes[r.model_key]) if r.model_key in sizes else r for r in rows]


def _idle_key(row: Row) -> tuple:
    return (row.gpu, row.model_key, row.precision, row.energy_j_per_1k, row.throughput_tok_s)


def recovered_idle(rows: list[Row]) -> dict[tuple, tuple[float, str]]:
    """Idle power each idle-subtracted row's own figures imply (power - energy x throughput /
    1000), keyed by the figures it was printed with, with the id of the row it comes from.
    Stops the build when one is not near the GPU's stated idle power."""
    found: dict[tuple, tuple[float, str]] = {}
    for row in rows:
        if row.scope != "idle_subtracted" or None in (
            row.power_w,
            row.throughput_tok_s,
            row.energy_j_per_1k,
        ):
            continue
        idle = row.power_w - row.energy_j_per_1k * row.throughput_tok_s / 1000.0
        stated = STATED_IDLE_W.get(row.gpu)
        if stated is None or abs(idle - stated) > IDLE_TOLERANCE_W:
            raise SystemExit(
                f"build_reference: {row.id} implies {idle:.2f} W idle subtracted, not the stated "
                f"{stated} W: check the source before correcting it"
            )
        found.setdefault(_idle_key(row), (idle, row.id))
    return found


def add_back_idle(rows: list[Row]) -> list[Row]:
    """Put the idle energy back into rows whose source subtracted it.

    A row is corrected when its own power, throughput and energy give the idle power, or when
    another idle-subtracted row printed exactly the same energy and throughput for the same
    configuration (a prose table repeating the memo). The stated energy and delta stay in
    ``energy_j_per_1k_stated`` and the note; the delta is recomputed on the corrected energies by
    ``link_baselines``. Rows that cannot be corrected keep scope ``idle_subtracted``."""
    idle_of = recovered_idle(rows)
    out = []
    for row in rows:
        if row.scope != "idle_subtracted":
            out.append(row)
            continue
        if row.power_w is not None and row.throughput_tok_s and row.energy_j_per_1k is not None:
            match = (row.power_w - row.energy_j_per_1k * row.throughput_tok_s / 1000.0, row.id)
        else:
            match = idle_of.get(_idle_key(row)) if row.throughput_tok_s else None
        if match is None:
            reason = (
                "no energy in this row"
                if row.energy_j_per_1k is None
                else "no power column and no identical row to recover the idle power from"
            )
            out.append(replace(row, note=row.note + f"; not corrected for idle ({reason})"))
            continue
        idle, origin = match
        stated = row.energy_j_per_1k
        energy = stated + idle * 1000.0 / row.throughput_tok_s
        note = (
            f"; idle {idle:.2f} W added back as {idle:.2f} x 1000 / {row.throughput_tok_s:g} tok/s "
            f"(stated {stated:g} J/1k"
            + (
                f", {row.delta_vs_fp16_pct:+.1f}% vs FP16 on the idle-subtracted basis"
                if row.delta_vs_fp16_pct is not None
                else ""
            )
            + ")"
            + ("" if origin == row.id else f"; idle recovered from the identical row {origin}")
        )
        out.append(
            replace(
                row,
                energy_j_per_1k=energy,
                energy_j_per_1k_stated=stated,
                idle_added_w=idle,
                scope="end_to_end",
                fp16_energy_j_per_1k=None,
                delta_vs_fp16_pct=None,
                note=row.note + note,
            )
        )
    return out


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
        if row.scope == "end_to_end" and base.scope != "end_to_end":
            raise SystemExit(
                f"build_reference: {row.id} ({row.scope}) would pair with {base.id} ({base.scope})"
            )
        fp16 = row.fp16_energy_j_per_1k
        if fp16 is None:
            # An uncorrected idle-subtracted row keeps its baseline on the same basis.
            fp16 = (
                base.energy_j_per_1k_stated
                if row.scope == "idle_subtracted" and base.energy_j_per_1k_stated is not None
                else base.energy_j_per_1k
            )
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


# Two rows of one configuration quote one run when their energies (as stated) agree to this
# many J per 1k tokens and their throughputs (where both give one) to this many tok/s.
SAME_RUN_ENERGY_J = 0.5
SAME_RUN_THROUGHPUT = 0.01


def _session_key(row: Row) -> str:
    """The session a row was measured in, as ``ecoguard.knowledge.evidence.session_of`` keys it."""
    return f"{row.source}#{row.session or '-'}"


def _same_run(a: Row, b: Row) -> bool:
    """Two rows of one configuration from two documents that print one run's figures. A file
    never quotes itself (its sessions are its own), and two data files dated differently are
    two runs however close their figures (RTX 5090 Qwen2-7B FP16: 4,980.7 and 4,980.4 J/1k)."""
    if a.source == b.source:
        return False
    if a.tier == b.tier == "measured" and a.date and b.date and a.date != b.date:
        return False
    ea = a.energy_j_per_1k_stated if a.energy_j_per_1k_stated is not None else a.energy_j_per_1k
    eb = b.energy_j_per_1k_stated if b.energy_j_per_1k_stated is not None else b.energy_j_per_1k
    if ea is None or eb is None or abs(ea - eb) > SAME_RUN_ENERGY_J:
        return False
    ta, tb = a.throughput_tok_s, b.throughput_tok_s
    return ta is None or tb is None or abs(ta - tb) <= SAME_RUN_THROUGHPUT


def _quote_order(row: Row) -> tuple:
    """Which of several quotes of one run stands for it: measured before reported, a data file
    before prose, then the id."""
    return (row.tier != "measured", row.source.endswith(".md"), row.id)


def mark_quotes(rows: list[Row]) -> list[Row]:
    """A run quoted by several documents (the RTX 4090D FP16 Mistral-7B 6,260 J/1k appears in a
    metadata file, the memo and two v2.3 tables) is one session: every quote but the first (by
    :func:`_quote_order`) names the first's session in ``quotes``. Anchor copies (scope
    ``duplicate``) are counted apart and left as they are."""
    by_config: dict[tuple, list[Row]] = {}
    for row in rows:
        if row.scope != "duplicate" and row.energy_j_per_1k is not None:
            key = (row.gpu, row.model_key, row.precision, row.batch_size, row.scope)
            by_config.setdefault(key, []).append(row)
    quoted: dict[str, str] = {}
    for group in by_config.values():
        group.sort(key=_quote_order)
        for i, row in enumerate(group):
            if row.id in quoted:
                continue
            for other in group[i + 1 :]:
                if (
                    other.id not in quoted
                    and _session_key(other) != _session_key(row)
                    and _same_run(row, other)
                ):
                    quoted[other.id] = _session_key(row)
    return [replace(r, quotes=quoted[r.id]) if r.id in quoted else r for r in rows]


def mark_offloaded(rows: list[Row]) -> list[Row]:
    """Flag the rows whose configuration needs more memory than the GPU has, by the model the
    ``vram-overflow`` rule uses (``ecoguard.knowledge.memory``: weights + KV cache + overhead
    against the VRAM). A row's unstated prompt length counts as 0 tokens, so an assumption never
    causes a flag. Such a run offloaded weights to the CPU (T4 Qwen2-7B FP16: 2.9 tok/s)."""
    models, gpus = model_registry(), gpu_profiles()
    out = []
    for row in rows:
        model, gpu = models.get(row.model_key), gpus.get(row.gpu)
        if model is None or gpu is None:
            out.append(row)
            continue
        deployment = Deployment(
            model=model.to_model_spec(),
            gpu=gpu.to_gpu_spec(),
            precision=row.precision,
            batch_size=row.batch_size or 1,
        )
        need = memory_need(
            deployment,
            model,
            prompt_tokens=row.prompt_tokens or 0,
            generation_tokens=row.generation_tokens or 1,
        )
        over = need is not None and need.total_gb > usable_vram_gb(gpu.vram_gb)
        if over:
            assert need is not None
            note = (
                f"{row.note}; " if row.note else ""
            ) + f"offloaded: needs {need.total_gb:.1f} GB of the GPU's {gpu.vram_gb:g} GB"
            out.append(replace(row, offloaded=True, note=note))
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
    rows = apply_registry_sizes(rows, registry_sizes())
    rows = assign_ids(rows)
    rows = add_back_idle(rows)
    rows = mark_anchor_duplicates(rows)
    rows = link_baselines(rows)
    rows = mark_quotes(rows)
    rows = mark_offloaded(rows)
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


def _by_id(rows: list[Row]) -> dict[str, Row]:
    return {r.id: r for r in rows}


def _pct(value: float) -> str:
    return f"{value:+.1f}%"


def _pct_range(values: list[float]) -> str:
    low, high = _pct(min(values)), _pct(max(values))
    return low if low == high else f"{low} to {high}"


def _joules(value: float) -> str:
    return f"{value:,.0f}"


def _stated(row: Row) -> float:
    """The energy as the source printed it (before any idle correction)."""
    return (
        row.energy_j_per_1k_stated
        if row.energy_j_per_1k_stated is not None
        else row.energy_j_per_1k
    )


def _stated_delta(row: Row, rows: dict[str, Row]) -> float:
    """The change vs FP16 on the source's own basis (stated energies)."""
    base = rows[row.baseline_row]
    return (_stated(row) / _stated(base) - 1.0) * 100.0


def treatment_sections(rows: list[Row]) -> list[str]:
    """Which rows ecoguard re-tiered, corrected for idle power or kept apart, row by row."""
    quoted = sorted(r.id for r in rows if r.tier == "reported" and not r.source.endswith(".md"))
    corrected = sorted((r for r in rows if r.idle_added_w is not None), key=lambda r: r.id)
    kept_apart = sorted(r.id for r in rows if r.scope == "idle_subtracted")
    idles = [r.idle_added_w for r in corrected]
    lines = [
        "## Tiers, sizes and idle power: what ecoguard changed",
        "",
        f"* Tier `reported` although the row is in a data file ({len(quoted)} rows): "
        "`pure_int8_metadata.json` quotes its FP16 and default-INT8 figures from the unpublished",
        "  2026-02-12 run (`rtx4090d_clean.csv` was never published); the memo prints the same",
        "  figures as prose. " + ", ".join(f"`{i}`" for i in quoted) + ".",
        "* `params_b` is the registry's size (`models.json`) for every row whose model it lists",
        "  (all of them); the sources print rounded sizes (7B for Qwen2-7B's 7.62B).",
        "* Idle power. The RTX 4090D memo and `pure_int8_metadata.json` state energy = (average",
        "  power - idle power) x 1000 / throughput; every row of theirs with power, throughput and",
        "  energy confirms it (the idle power they imply is "
        f"{min(idles):.2f}-{max(idles):.2f} W). The v2.3 RTX 4090D tables",
        "  take their deltas against the memo's idle-subtracted FP16 baselines, and the Yi-1.5-6B",
        "  perplexity CSV quotes deltas from the same study, so they are on that basis too.",
        f"  * Corrected ({len(corrected)} rows, scope `end_to_end`): energy = stated + idle x 1000 /",
        "    throughput, with the row's own idle where it prints power, else the idle of the row",
        "    that printed the same energy and throughput; deltas recomputed on the corrected",
        "    energies (the note keeps the stated figures):",
    ]
    lines += [
        f"    `{r.id}` ({r.idle_added_w:.2f} W, {_joules(_stated(r))} -> "
        f"{_joules(r.energy_j_per_1k)} J/1k)"
        for r in corrected
    ]
    lines += [
        f"  * Kept apart ({len(kept_apart)} rows, scope `idle_subtracted`: no power column and no",
        "    identical row to recover the idle from, or no energy at all):",
        "    " + ", ".join(f"`{i}`" for i in kept_apart) + ".",
        "  * RTX PRO 6000 phase rows are decode-phase energies with the file's idle subtracted",
        "    (scope `decode_active`, not corrected: the phase split is their point).",
        "  * Every other row includes idle: where a row gives power, throughput and energy, energy",
        "    equals power x 1000 / throughput within "
        f"{_max_energy_mismatch_pct(rows):.1f}% (means of runs vs ratio of means).",
        *_quote_and_offload_lines(rows),
        "",
    ]
    return lines


def _study_count_lines(rows: list[Row], published: dict) -> list[str]:
    """How these rows relate to the study's own count ("360+ configurations ...")."""
    configs = {(r.gpu, r.model_key, r.precision, r.batch_size or 1) for r in rows}
    t4 = {c for c in configs if c[0] == "tesla_t4"}
    return [
        f"The study claims {published['claim']} (`{published['source']}`). These "
        f"{len(rows)} rows are {len(configs)} configurations (a row is one configuration as one",
        "file prints it); the study's Tesla T4 configurations are in no published data file "
        f"(here: {len(t4)}),",
        f"and its {published['formula_generated_rows']}-row formula-generated dataset is left "
        "out. `ecoguard data` (and `ecoguard.knowledge.data_counts()`) sets the counts side by side.",
        "",
    ]


def _quote_and_offload_lines(rows: list[Row]) -> list[str]:
    """The rows that quote another document's run, and the rows that ran offloaded."""
    quotes = sorted((r for r in rows if r.quotes), key=lambda r: r.id)
    offloaded = sorted((r for r in rows if r.offloaded), key=lambda r: r.id)
    by_session: dict[str, list[str]] = {}
    for r in quotes:
        by_session.setdefault(r.quotes, []).append(r.id)
    lines = [
        f"* One run, one session ({len(quotes)} rows, field `quotes`): a row that prints the same",
        "  configuration with the same figures as another document (energy within "
        f"{SAME_RUN_ENERGY_J:g} J/1k,",
        "  throughput where both give one) counts as that document's session, not a session of",
        "  its own. A file never quotes itself; two data files dated differently are two runs.",
    ]
    lines += [
        f"  * `{session}`: " + ", ".join(f"`{i}`" for i in ids)
        for session, ids in sorted(by_session.items())
    ]
    lines += [
        f"* Offloaded ({len(offloaded)} row{'s' if len(offloaded) != 1 else ''}, field "
        "`offloaded`): the configuration needs more than the GPU's memory by the",
        "  `vram-overflow` rule's model (`ecoguard.knowledge.memory`; an unstated prompt length",
        "  counts as 0 tokens), so the run offloaded weights to the CPU. Kept, shown with the",
        "  flag, and left out of every fit, ratio and carry:",
    ]
    lines += [f"  `{r.id}` ({r.note.rsplit('; ', 1)[-1]})" for r in offloaded]
    return lines


def _max_energy_mismatch_pct(rows: list[Row]) -> float:
    worst = 0.0
    for r in rows:
        if r.scope != "end_to_end" or None in (r.power_w, r.throughput_tok_s, r.energy_j_per_1k):
            continue
        implied = r.power_w * 1000.0 / r.throughput_tok_s
        worst = max(worst, abs(implied / r.energy_j_per_1k - 1.0) * 100.0)
    return worst


def fp16_baseline_spread(rows: list[Row], gpu: str) -> tuple[str, float, float, float]:
    """The model whose FP16 baselines on ``gpu`` differ most between sessions: (model key,
    lowest, highest J/1k, spread %). Baselines are the FP16 rows and the FP16 energies that
    quantized rows without an FP16 row of their own (the anchors) carry."""
    energies: dict[str, set[float]] = {}
    for r in rows:
        if r.gpu != gpu or r.scope != "end_to_end" or r.tier != "measured":
            continue
        if r.precision == "fp16" and r.energy_j_per_1k is not None:
            energies.setdefault(r.model_key, set()).add(round(r.energy_j_per_1k, 2))
        elif r.baseline_row is None and r.fp16_energy_j_per_1k is not None:
            energies.setdefault(r.model_key, set()).add(round(r.fp16_energy_j_per_1k, 2))
    key = max(energies, key=lambda k: max(energies[k]) / min(energies[k]))
    low, high = min(energies[key]), max(energies[key])
    return key, low, high, (high / low - 1.0) * 100.0


def disagreement_section(rows: list[Row], src: Path, sweep_problems: list[str]) -> list[str]:
    """Where the sources disagree with each other, with every figure taken from the rows."""
    by_id = _by_id(rows)

    def row(ident: str) -> Row:
        return by_id[ident]

    def deltas(pred) -> list[float]:
        return [r.delta_vs_fp16_pct for r in rows if pred(r) and r.delta_vs_fp16_pct is not None]

    guide1 = row("a800/mistral-7b/int8_pure/bs1/bsguide-prose")
    guide64 = row("a800/mistral-7b/int8_pure/bs64/bsguide-prose")
    sweep1 = next(r for r in rows if r.source == BS_SWEEP_RAW and r.batch_size == 1)
    sweep64 = next(r for r in rows if r.source == BS_SWEEP_RAW and r.batch_size == 64)
    drop_raw = (sweep64.energy_j_per_request / sweep1.energy_j_per_request - 1.0) * 100.0
    drop_prose = (guide64.energy_j_per_request / guide1.energy_j_per_request - 1.0) * 100.0
    a800_json = row("a800/mistral-7b/int8_pure/bs1/ecai-a800json")
    a800_quick = row("a800/mistral-7b/int8_pure/bs1/dyn-a800meta")
    a800_hw = json.loads((src / "ecocompute-dynamic-eval/metadata/a800_metadata.json").read_text())
    a800_gpu = a800_hw["hardware"]["gpu"]
    ppl_used, ppl_other = (
        json.loads((src / "ecocompute-ai/data/a800_results" / name).read_text())["results"][
            "perplexity"
        ]
        for name in YI9B_INT8_PPL_FILES
    )
    memo_yi_nf4 = row("rtx4090d/yi-1.5-6b/nf4/bs1/memo-prose")
    v23_yi_nf4 = row("rtx4090d/yi-1.5-6b/nf4/bs1/v23-prose/nf4")
    memo_phi = row("rtx4090d/phi-3-mini/fp16/bs1/memo-prose")
    v23_phi = row("rtx4090d/phi-3-mini/fp16/bs1/v23-prose/nf4")
    memo_phi_nf4 = row("rtx4090d/phi-3-mini/nf4/bs1/memo-prose")
    v23_phi_nf4 = row("rtx4090d/phi-3-mini/nf4/bs1/v23-prose/nf4")
    memo_qwen = row("rtx4090d/qwen2.5-7b/fp16/bs1/memo-prose")
    v23_qwen = row("rtx4090d/qwen2.5-7b/fp16/bs1/v23-prose/nf4")
    csv_q15 = row("rtx5090/qwen2-1.5b/nf4/bs1/ecai-5090csv")
    v23_q15 = row("rtx5090/qwen2-1.5b/nf4/bs1/v23-prose/earlier")
    jan_7b = row("rtx5090/qwen2-7b/nf4/bs1/ecai-5090csv")
    v23_7b = row("rtx5090/qwen2.5-7b/nf4/bs1/v23-prose")
    sep_7b = deltas(
        lambda r: (
            r.source.endswith("rtx5090_bnb_2026-09-20.csv")
            and r.model_key == "qwen2-7b"
            and r.precision == "nf4"
        )
    )

    def int8_4090(tag: str, small: bool) -> list[float]:
        return deltas(
            lambda r: (
                r.gpu == "rtx4090"
                and r.precision == "int8_mixed"
                and f"/{tag}" in r.id
                and (r.model_key != "qwen2-7b") is small
            )
        )

    paired_7b = int8_4090("qe-4090paired", False)
    repeats_7b = int8_4090("qe-4090rep", False)
    anchor_7b = int8_4090("qe-anchor", False)
    small_int8 = int8_4090("qe-4090paired", True) + int8_4090("qe-4090rep", True)
    spread_key, spread_lo, spread_hi, spread_pct = fp16_baseline_spread(rows, "rtx4090")
    paired_3b = deltas(lambda r: r.id == "rtx4090/qwen2.5-3b/nf4/bs1/qe-4090paired")
    cards_3b = deltas(
        lambda r: r.source.endswith("rtx4090_bnb_2026-09-25.csv") and r.precision == "nf4"
    )
    fp8_v23 = deltas(lambda r: r.precision == "fp8_weight_only" and r.tier == "reported")
    fp8_qe = deltas(lambda r: r.precision == "fp8_weight_only" and r.tier == "measured")
    return [
        "## Known disagreements (both rows kept; the estimator prefers measured)",
        "",
        "* A800 batch sweep: the prose `batch_size_guide.md` gives "
        f"{guide1.energy_j_per_request:g} J/request and {_joules(guide1.energy_j_per_1k)} J/1k at",
        f"  BS 1 (and {guide64.energy_j_per_request:g} J/request at BS 64); the raw CSV gives "
        f"{sweep1.energy_j_per_request:.1f} J/request and {sweep1.energy_j_per_1k:.1f} J/1k at BS 1",
        f"  and {sweep64.energy_j_per_request:.2f} J/request at BS 64. The relative drop agrees "
        f"({_pct(drop_prose)} prose, {_pct(drop_raw)} raw); the absolute values do not",
        "  (the prose J/request looks divided by the token count and its BS 1 row is the Feb-13 quick",
        "  study's). Raw means recomputed here "
        + (
            "match the published summary CSV."
            if not sweep_problems
            else "differ from the summary: " + "; ".join(sweep_problems)
        ),
        f"* A800 BS 1 pure INT8: {a800_json.energy_j_per_1k:.0f} J/1k ({a800_json.n_runs} runs, up to "
        "512 tokens, `energy_mistral_7b_int8_pure.json`)",
        f"  vs {a800_quick.energy_j_per_1k:.0f} J/1k ({a800_quick.n_runs} runs, "
        f"{a800_quick.generation_tokens} tokens, `a800_metadata.json`) vs "
        f"{sweep1.energy_j_per_1k:.0f} J/1k (sweep, {sweep1.prompt_tokens}+"
        f"{sweep1.generation_tokens} tokens).",
        f"* `a800_metadata.json` describes its GPU as {a800_gpu['full_name']} with "
        f"{a800_gpu['vram']} and {a800_gpu['tdp']}; every other",
        "  A800 file says A800-SXM4-80GB.",
        f"* Yi-1.5-9B int8_default perplexity on A800: {ppl_used:g} (`{YI9B_INT8_PPL_FILES[0]}`, "
        "used by",
        f"  the summary) vs {ppl_other:g} (`{YI9B_INT8_PPL_FILES[1]}`).",
        "* RTX 4090D, as printed (idle subtracted): the memo gives Yi-1.5-6B NF4 "
        f"{memo_yi_nf4.throughput_tok_s:g} tok/s, {_joules(_stated(memo_yi_nf4))} J/1k "
        f"({_pct(_stated_delta(memo_yi_nf4, by_id))})",
        f"  and Qwen2.5-7B FP16 {_joules(_stated(memo_qwen))} J/1k; the v2.3 prose gives "
        f"{v23_yi_nf4.throughput_tok_s:g} tok/s, {_joules(_stated(v23_yi_nf4))} J/1k "
        f"({_pct(_stated_delta(v23_yi_nf4, by_id))}) and {_joules(_stated(v23_qwen))} J/1k.",
        f"  Phi-3-mini FP16 is {_joules(_stated(memo_phi))} J/1k (memo) vs "
        f"{_joules(_stated(v23_phi))} J/1k (v2.3); NF4 delta "
        f"{_pct(_stated_delta(memo_phi_nf4, by_id))} vs {_pct(_stated_delta(v23_phi_nf4, by_id))}.",
        f"* RTX 5090 Qwen2-1.5B NF4: {csv_q15.energy_j_per_1k:,.2f} J/1k (CSV) vs "
        f"{_joules(v23_q15.energy_j_per_1k)} (v2.3 prose).",
        f"* RTX 5090 NF4 at 7B: {_pct(jan_7b.delta_vs_fp16_pct)} (Jan study CSV, Qwen2-7B, "
        f"{jan_7b.generation_tokens} tokens) vs {_pct_range(sep_7b)}",
        "  (Sep 2026 bnb sessions, Qwen2-7B, 10 x 256 tokens, bnb 0.50.2) vs "
        f"{_pct(v23_7b.delta_vs_fp16_pct)} (v2.3 prose, Qwen2.5-7B).",
        f"* RTX 4090 INT8 (LLM.int8()) vs FP16 at Qwen2-7B: {_pct_range(paired_7b)} (paired "
        f"2026-08-19) vs {_pct_range(repeats_7b)} (repeats)",
        f"  vs {_pct_range(anchor_7b)} (anchors, July 2026 mlcube); the smaller models "
        f"{_pct_range(small_int8)} (paired and repeats).",
        f"  The FP16 baselines of one size differ by up to {spread_pct:.0f}% between sessions",
        f"  ({spread_key} {_joules(spread_lo)} to {_joules(spread_hi)} J/1k).",
        f"* RTX 4090 Qwen2.5-3B NF4: {_pct_range(paired_3b)} (paired 2026-08-19) vs "
        f"{_pct_range(cards_3b)} (2026-09-25, two cards).",
        f"* FP8 weight-only on RTX 5090: {_pct_range(fp8_v23)} (v2.3, torchao 0.17 nightly) vs "
        f"{_pct_range(fp8_qe)}",
        "  (torchao 0.18.0, 2026-09-20). Both eager mode.",
        "",
    ]


def render_readme(rows: list[Row], src: Path) -> str:
    counts = counts_table(rows)
    tiers = Counter(r.tier for r in rows)
    scopes = Counter(r.scope for r in rows)
    sources = Counter(r.source for r in rows)
    sweep_problems = check_sweep_summary(src, rows)
    lines = [
        "# ecoguard reference data",
        "",
        "Compiled by `tools/build_reference.py` from `data/upstream/` (byte-exact copies of the",
        "EcoCompute files the script reads; provenance, commits, checksums and licences in",
        "`data/upstream/PROVENANCE.md`). Do not edit `reference_rows.json` or this file by hand:",
        "change the script and rebuild (`python tools/build_reference.py`). A test rebuilds both and",
        "compares; `tests/knowledge/test_data_claims.py` recomputes the figures of the counts,",
        "changes and disagreements sections below from the rows.",
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
        "ecoguard's rows carry numbers, not prose or code: every row names its source file. The",
        "vendored source files under `upstream/` are redistributed unchanged under the licences",
        "above, for rebuilding only (the wheel does not ship them).",
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
        "| `model_id`, `model_key`, `params_b` | model as the source names it; registry key; billions of parameters from the registry (`models.json`), not the rounded size the source prints |",
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
        "| `tier` | `measured` (raw or summary data file with runs) or `reported` (publisher's prose table only, or a data file quoting a run whose own file was never published) |",
        "| `scope` | `end_to_end` (whole generate call, idle power included), `idle_subtracted` (the source subtracted idle power and the row cannot be corrected: never paired with `end_to_end` rows), `decode_active` (decode phase with idle subtracted: not comparable), `duplicate` (an anchor row repeating another file's row) |",
        "| `idle_added_w`, `energy_j_per_1k_stated` | set only where ecoguard added back idle power the source had subtracted: watts added, and the energy as printed (`energy_j_per_1k` = stated + idle_added_w x 1000 / throughput_tok_s) |",
        "| `source`, `session`, `note` | file relative to `data/upstream/`; session/replicate; caveats |",
        "| `offloaded`, `quotes` | the run needed more than the GPU's memory (kept out of every fit); the session whose run this row quotes |",
        "",
        f"## Counts ({len(rows)} rows: "
        + ", ".join(f"{n} {t}" for t, n in sorted(tiers.items()))
        + ")",
        "",
        "Scopes: " + ", ".join(f"{n} {s}" for s, n in sorted(scopes.items())) + ".",
        "",
        *_study_count_lines(rows, published_counts(src)),
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
        "  already here), `gpus_addition.csv` (unverified spec values), `uncertainty_report` and the",
        "  other summary CSVs (roll-ups). Of the summaries only `a800_summary.csv` (the A800",
        "  perplexities, and a check of our means) and the batch-sweep summary (a check) are read.",
        "",
        *treatment_sections(rows),
        *disagreement_section(rows, src, sweep_problems),
    ]
    return "\n".join(lines)


SKILL = "ecocompute-dynamic-eval/skills/ecocompute/SKILL.md"
STUDY_CLAIM = re.compile(
    r"(\d+)\+ configurations \((\d+) primary \+ (\d+) Tesla T4 \+ (\d+) supplementary\)"
)
# The formula-generated dataset (not vendored, never read): its row count as data/README says.
EXCLUDED_ROWS = 560


def published_counts(src: Path) -> dict:
    """The study's own counts as its skill text prints them ("360+ configurations (113 primary
    + 140 Tesla T4 + 107 supplementary)"), with the file and line quoted, and the row count of
    the formula-generated dataset ecoguard leaves out."""
    text = (src / SKILL).read_text(encoding="utf-8")
    match = STUDY_CLAIM.search(text)
    if match is None:
        raise SystemExit(f"build_reference: the study's count claim is missing from {SKILL}")
    total, primary, t4, supplementary = (int(g) for g in match.groups())
    return {
        "claim": match.group(0),
        "source": SKILL,
        "configurations_claimed": total,
        "primary": primary,
        "tesla_t4": t4,
        "supplementary": supplementary,
        "formula_generated_rows": EXCLUDED_ROWS,
        "formula_generated_source": EXCLUDED,
    }


def build(src: Path, out: Path) -> list[Row]:
    if not src.is_dir():
        raise SystemExit(f"build_reference: source folder {src} not found")
    rows = collect(src)
    out.mkdir(parents=True, exist_ok=True)
    payload = {
        "schema_version": SCHEMA_VERSION,
        "attribution": "Hongping Zhang, EcoCompute (2026), Zenodo 10.5281/zenodo.19647290, CC BY 4.0",
        "published": published_counts(src),
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
    return UPSTREAM_DIR


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
