"""Names and numbers as the sources write them, made ecoguard's: model, GPU and precision
keys, the row schema with what a source leaves unstated, number parsing and CSV reading."""

from __future__ import annotations

import csv
import re
import statistics
from pathlib import Path

from ecoguard.knowledge.records import ReferenceRow

REPO_ROOT = Path(__file__).resolve().parents[2]
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


def cv_pct_of(mean: float | None, std: float | None) -> float | None:
    """The coefficient of variation, %."""
    if mean is None or std is None or mean == 0:
        return None
    return std / mean * 100.0


def run_figures(
    energy: list[float],
    per_request: list[float] | None,
    throughput: list[float],
    power: list[float],
) -> dict[str, float | int | None]:
    """A row measured over several runs (one value per run in each list): the means and
    standard deviations of J per 1k tokens, J per request (``None``: not recorded), tok/s and W,
    the run count and the energy's coefficient of variation, as ``new_row`` keywords."""
    energy_mean, energy_std = mean_std(energy)
    per_req, per_req_std = mean_std(per_request) if per_request else (None, None)
    tput, tput_std = mean_std(throughput)
    watts, watts_std = mean_std(power)
    return {
        "throughput_tok_s": tput,
        "throughput_std": tput_std,
        "power_w": watts,
        "power_std": watts_std,
        "energy_j_per_1k": energy_mean,
        "energy_j_per_1k_std": energy_std,
        "energy_j_per_request": per_req,
        "energy_j_per_request_std": per_req_std,
        "n_runs": len(energy),
        "cv_pct": cv_pct_of(energy_mean, energy_std),
    }


def pct_change(value: float | None, base: float | None) -> float | None:
    """``value`` vs ``base``, % (None without both)."""
    if value is None or base is None or base == 0:
        return None
    return (value / base - 1.0) * 100.0
