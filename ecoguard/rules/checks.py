"""One small pure function per energy trap: ``check(deployment, context) -> Finding | None``.

A check reads only the Deployment record (and the measured J/token in its context, for
``reference-deviation``); it never imports torch or transformers. A fact it needs but does not
have means silence, not a guess. Impact figures come from the estimator on the deployment and
on the configuration the fix would produce (see ``ecoguard.rules.impact``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ecoguard import knowledge
from ecoguard.config import Settings
from ecoguard.deployment import (
    FP8_PRECISIONS,
    QUANTIZED_PRECISIONS,
    Deployment,
    QuantSpec,
)
from ecoguard.faults import record_fault
from ecoguard.findings import Finding, Mood
from ecoguard.knowledge.memory import MemoryNeed, lookup_model, memory_need, usable_vram_gb
from ecoguard.rules.impact import estimate_or_none, impact_between
from ecoguard.rules.table import BS1_SUSTAINED_CALLS, PUBLISHED_SMALL_MODEL_BOUND_B, ROWS

# ``reference-deviation``: live J/token this many times the reference (or below its inverse).
DEVIATION_RATIO = 1.5
SEVERE_DEVIATION_RATIO = 3.0


# Architectures without native bf16 tensor cores (bf16 arrived with Ampere, sm_80).
_PRE_AMPERE = frozenset({"kepler", "maxwell", "pascal", "volta", "turing"})

_NIGHTLY = re.compile(r"(\.dev\d*|dev\d{6,}|\+git|nightly)", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class RuleContext:
    """What a check may read besides the deployment. ``measured_j_per_token`` is a live figure
    (J per generated token) from the meter, used only by ``reference-deviation``."""

    settings: Settings = field(default_factory=Settings)
    measured_j_per_token: float | None = None


@dataclass(frozen=True, slots=True)
class SmallModelThreshold:
    """The size (B params) below which quantizing costs energy, and how it is known.

    ``no-saving-measured``: no measured pair on the architecture saved energy, so there is no
    crossover to cite; ``size_b`` is then the largest measured size, up to which (inclusive) the
    penalty was observed, and ``root_b`` the size where the fitted line would reach zero (an
    extrapolation beyond the measured sizes, never called a fitted crossover)."""

    size_b: float
    basis: str  # "fitted" | "no-saving-measured" | "reported" | "published-bound"
    reported_b: float | None = None
    sources: tuple[str, ...] = ()
    measured_min_b: float | None = None
    root_b: float | None = None

    def applies_to(self, params_b: float) -> bool:
        """Whether a model of ``params_b`` is on the costly side of this threshold."""
        if self.basis == "no-saving-measured":
            return params_b <= self.size_b
        return params_b < self.size_b


def small_model_threshold(architecture: str | None, precision: str | None) -> SmallModelThreshold:
    """Crossover size for ``precision`` on ``architecture`` from the knowledge tables: the fitted
    crossover when the measured pairs cross inside the measured sizes; else, when no measured
    pair saved energy, the largest measured size (penalty observed up to there); else the
    reported crossover; else the published ~3B bound."""
    if architecture:
        try:
            found = knowledge.crossover(architecture, precision or "nf4")
        except Exception as exc:  # tables missing, or an architecture they do not cover
            record_fault("rules.crossover", exc)
            found = None
        if found is not None:
            sources = tuple(getattr(found, "sources", ()) or ())
            if found.fitted_b is not None:
                return SmallModelThreshold(found.fitted_b, "fitted", found.reported_b, sources)
            if found.points and found.measured_max_b is not None and not found.saving_measured:
                return SmallModelThreshold(
                    found.measured_max_b,
                    "no-saving-measured",
                    found.reported_b,
                    sources,
                    measured_min_b=found.measured_min_b,
                    root_b=found.root_b,
                )
            if found.reported_b is not None:
                return SmallModelThreshold(found.reported_b, "reported", found.reported_b, sources)
    return SmallModelThreshold(PUBLISHED_SMALL_MODEL_BOUND_B, "published-bound")


def unquantized_dtype(deployment: Deployment) -> str | None:
    """The half-precision dtype to load instead of a quantized format: bf16 on Ampere and newer,
    fp16 on older GPUs, None (the framework default, fp32 on CPU) when no GPU is known."""
    gpu = deployment.gpu
    if gpu.architecture is None and gpu.compute_capability is None and gpu.profile is None:
        return None
    return "fp16" if _pre_ampere(deployment) else "bf16"


def _pre_ampere(deployment: Deployment) -> bool:
    gpu = deployment.gpu
    if gpu.compute_capability is not None:
        return tuple(gpu.compute_capability) < (8, 0)
    return (gpu.architecture or "").lower() in _PRE_AMPERE


def _unquantized(deployment: Deployment) -> Deployment:
    dtype = unquantized_dtype(deployment) or "fp16"
    return deployment.with_(precision=dtype, dtype=dtype, quant=QuantSpec())


def format_size(params_b: float) -> str:
    """``7B``, ``1.5B``, ``107M``: a parameter count for people."""
    return f"{params_b:.3g}B" if params_b >= 0.1 else f"{params_b * 1000:.3g}M"


def _name(deployment: Deployment) -> str:
    return deployment.model.id or (
        f"a {format_size(deployment.model.params_b)} model"
        if deployment.model.params_b
        else "this model"
    )


def _torch_dtype_code(dtype: str | None) -> str:
    return {"bf16": "torch.bfloat16", "fp16": "torch.float16"}.get(dtype or "", "torch.float32")


def _priced(
    rule_id: str, deployment: Deployment, fixed: Deployment, ctx: RuleContext, **parts: Any
) -> Finding:
    """A finding of ``rule_id`` whose impact is what running ``fixed`` instead would save (the
    estimator on both), with the reference rows behind it as evidence."""
    impact, rows = impact_between(deployment, fixed, ctx.settings)
    return ROWS[rule_id].finding(impact=impact, evidence=rows, **parts)


def check_int8_mixed(deployment: Deployment, ctx: RuleContext) -> Finding | None:
    """bitsandbytes 8-bit with the default outlier threshold (6.0) runs the mixed-precision
    decomposition on every matmul, which is what makes LLM.int8() slower than FP16."""
    quant = deployment.quant
    is_bnb8 = quant.method == "bitsandbytes" and quant.bits == 8
    if deployment.precision != "int8_mixed" and not is_bnb8:
        return None
    if quant.int8_threshold is not None and quant.int8_threshold == 0.0:
        return None
    fixed = deployment.with_(
        precision="int8_pure",
        quant=QuantSpec(
            method="bitsandbytes",
            bits=8,
            quant_type="int8",
            int8_threshold=0.0,
            pre_quantized=quant.pre_quantized,
        ),
    )
    threshold = 6.0 if quant.int8_threshold is None else quant.int8_threshold
    return _priced(
        "int8-mixed",
        deployment,
        fixed,
        ctx,
        mood=Mood.ORANGE,
        message=(
            f"bitsandbytes 8-bit with llm_int8_threshold={threshold:g} splits every matmul into an "
            "fp16 outlier part and an int8 part, so it burns more energy per token than plain FP16."
        ),
        fix="BitsAndBytesConfig(load_in_8bit=True, llm_int8_threshold=0.0)",
        fix_summary="set llm_int8_threshold=0.0 (pure INT8 matmuls)",
        details=(("int8_threshold", threshold),),
    )


def check_small_model_quant(deployment: Deployment, ctx: RuleContext) -> Finding | None:
    """4-bit/8-bit weights on a model below the architecture's crossover size: dequantization
    overhead outweighs the saved memory traffic, so quantizing costs energy."""
    if deployment.precision not in QUANTIZED_PRECISIONS or deployment.model.params_b is None:
        return None
    threshold = small_model_threshold(deployment.gpu.architecture, deployment.precision)
    if not threshold.applies_to(deployment.model.params_b):
        return None
    dtype = unquantized_dtype(deployment)
    fixed = _unquantized(deployment)
    dtype_note = (
        f"dtype={_torch_dtype_code(dtype)}"
        if dtype
        else "the default dtype (fp32 on CPU; use torch.float16/bfloat16 on a GPU)"
    )
    return _priced(
        "small-model-quant",
        deployment,
        fixed,
        ctx,
        mood=Mood.ORANGE,
        message=_small_model_message(deployment, threshold),
        fix=(
            "AutoModelForCausalLM.from_pretrained(model_id, "
            + (
                f"dtype={_torch_dtype_code(dtype)})  # no quantization_config"
                if dtype
                else "dtype=torch.bfloat16)  # no quantization_config; float16 before Ampere"
            )
        ),
        fix_summary=f"drop quantization and load in {dtype_note}",
        details=(
            ("threshold_b", round(threshold.size_b, 2)),
            ("threshold_basis", threshold.basis),
            ("reported_b", threshold.reported_b),
        ),
    )


def _small_model_message(deployment: Deployment, threshold: SmallModelThreshold) -> str:
    """Why this size is on the costly side, citing only what the measured pairs support."""
    arch = deployment.gpu.architecture
    size = f"{_name(deployment)} ({format_size(deployment.model.params_b)})"
    precision = deployment.precision
    if threshold.basis == "no-saving-measured":
        low = threshold.measured_min_b if threshold.measured_min_b is not None else threshold.size_b
        text = (
            f"{size}: every measured {precision} pair on {arch} "
            f"({format_size(low)} to {format_size(threshold.size_b)}) used more energy than FP16; "
            "no crossover has been observed"
        )
        # A root far past the measured sizes says nothing worth printing.
        if threshold.root_b is not None and threshold.root_b <= 4 * threshold.size_b:
            text += (
                f" (a line fitted to them would reach zero only near {format_size(threshold.root_b)}, "
                "beyond the measured sizes)"
            )
        if deployment.model.params_b < low:
            text += "; this model is smaller than any measured one"
        return text + f", so {precision} dequantization costs more energy than it saves."
    basis = {
        "fitted": f"the crossover fitted to measured pairs for {arch}, inside the measured sizes",
        "reported": f"the reported crossover for {arch}",
        "published-bound": (
            f"the published bound, as no crossover is fitted or reported for {arch}"
            if arch
            else "the published bound, as no GPU architecture is known"
        ),
    }[threshold.basis]
    if threshold.basis == "fitted" and threshold.reported_b is not None:
        basis += f"; the publisher reports {threshold.reported_b:g}B"
    return (
        f"{size} is below the {threshold.size_b:.1f}B crossover ({basis}), where {precision} "
        "dequantization costs more energy than the memory it saves."
    )


def check_fp8_eager(deployment: Deployment, ctx: RuleContext) -> Finding | None:
    """torchao float8 without torch.compile: the weight-only/dynamic float8 paths dequantize in
    Python-dispatched eager ops, many times slower than FP16 per token."""
    quant = deployment.quant
    is_fp8 = deployment.precision in FP8_PRECISIONS or (
        quant.method == "torchao" and "float8" in (quant.quant_type or "").lower()
    )
    # An engine's own FP8 (vLLM/SGLang/TGI ``--quantization fp8``: ``method="other"``, as
    # ``ecoguard.engines.engine_args`` records it) runs fused kernels, not the eager path.
    if not is_fp8 or quant.compiled is True or quant.method not in (None, "torchao"):
        return None
    fixed = _unquantized(deployment)
    dtype = unquantized_dtype(deployment) or "bf16"
    return _priced(
        "fp8-eager",
        deployment,
        fixed,
        ctx,
        mood=Mood.RED,
        message=(
            "torchao float8 weights run through eager dequantization without torch.compile, "
            "which multiplies the energy per token instead of saving it."
        ),
        fix=(
            f"AutoModelForCausalLM.from_pretrained(model_id, dtype={_torch_dtype_code(dtype)})"
            "  # or keep FP8 and run model = torch.compile(model)"
        ),
        fix_summary=f"load in {dtype} without TorchAoConfig (or torch.compile the FP8 model)",
    )


def nightly_versions(deployment: Deployment) -> dict[str, str]:
    """The torch/torchao versions that look like nightly or dev builds (name -> version)."""
    found: dict[str, str] = {}
    for name in ("torch", "torchao"):
        version = getattr(deployment.software, name)
        if version and _NIGHTLY.search(version):
            found[name] = version
    return found


def check_nightly_build(deployment: Deployment, ctx: RuleContext) -> Finding | None:
    """A dev/nightly torch or torchao: kernels and compiled extensions may be missing, so no
    published energy figure applies and regressions are common."""
    found = nightly_versions(deployment)
    if not found:
        return None
    listed = ", ".join(f"{name} {version}" for name, version in found.items())
    return ROWS["nightly-build"].finding(
        mood=Mood.GRAY,
        message=(
            f"{listed} is a development build, which may lack the compiled kernels the "
            "reference figures were measured with, so its energy use is unverified."
        ),
        fix=f"pip install --upgrade {' '.join(found)}  # a stable release from PyPI",
        fix_summary="install a stable release",
        impact=None,
        details=tuple(found.items()),
    )


def check_batch_size_one(deployment: Deployment, ctx: RuleContext) -> Finding | None:
    """Sustained batch-size-1 serving: the GPU streams all weights for one token of one request;
    batching amortises that over many requests."""
    if deployment.batch_size != 1 or deployment.interactive:
        return None
    if (deployment.consecutive_bs1_calls or 0) < BS1_SUSTAINED_CALLS:
        return None
    target = max(2, ctx.settings.max_batch_size)
    fixed = deployment.with_(batch_size=target, consecutive_bs1_calls=0)
    return _priced(
        "batch-size-one",
        deployment,
        fixed,
        ctx,
        mood=Mood.YELLOW,
        message=(
            f"{deployment.consecutive_bs1_calls} consecutive generate calls ran one request "
            "each, so every token pays for a full pass over the weights that a batch would share."
        ),
        fix=(
            "model.generate(input_ids=batch_of_prompts, attention_mask=mask)"
            "  # batching is on, but calls arrive one at a time: nothing to coalesce"
            if ctx.settings.batching
            else f"ecoguard.install(batching=True, max_batch_size={target})"
            "  # or pass several prompts per generate call"
        ),
        fix_summary=(
            "send several prompts per call, or send requests concurrently so the batcher can "
            "coalesce them"
            if ctx.settings.batching
            else f"batch concurrent requests (up to {target} per call)"
        ),
        details=(("consecutive_bs1_calls", deployment.consecutive_bs1_calls),),
    )


def check_bf16_unsupported(deployment: Deployment, ctx: RuleContext) -> Finding | None:
    """bf16 on a GPU before Ampere: no bf16 tensor cores, so matmuls are emulated."""
    uses_bf16 = deployment.dtype == "bf16" or deployment.precision == "bf16"
    uses_bf16 = uses_bf16 or deployment.quant.compute_dtype == "bf16"
    gpu = deployment.gpu
    if not uses_bf16 or (gpu.compute_capability is None and gpu.architecture is None):
        return None
    if not _pre_ampere(deployment):
        return None
    fixed = deployment.with_(
        dtype="fp16", precision="fp16" if deployment.precision == "bf16" else deployment.precision
    )
    where = gpu.name or gpu.profile or gpu.architecture
    return _priced(
        "bf16-unsupported",
        deployment,
        fixed,
        ctx,
        mood=Mood.ORANGE,
        message=(
            f"{where} has no bf16 tensor cores, so bf16 matmuls fall back to slow paths and "
            "waste energy that fp16 would not."
        ),
        fix="AutoModelForCausalLM.from_pretrained(model_id, dtype=torch.float16)",
        fix_summary="use fp16 instead of bf16",
    )


def _memory_need(deployment: Deployment) -> MemoryNeed | None:
    """The estimator's VRAM need for ``deployment`` (``ecoguard.knowledge.memory``), with the
    model's shape from the registry when the deployment lacks it, as the estimator does."""
    try:
        model_info = lookup_model(deployment)
    except Exception as exc:  # registry tables missing: judge on the deployment's own facts
        record_fault("rules.memory_need", exc)
        model_info = None
    return memory_need(deployment, model_info)


def memory_need_gb(deployment: Deployment) -> tuple[float, float] | None:
    """(weights GB, KV cache GB) of the estimator's VRAM need (``ecoguard.knowledge.memory``),
    or None without a model size. The KV cache is 0.0 when the model's shape is unknown; unknown
    token counts default to the estimator's 512 prompt + 256 generated tokens. The full need
    adds the runtime overhead (10 % of the weights + 0.5 GB) to these two."""
    need = _memory_need(deployment)
    if need is None:
        return None
    return need.weights_gb, need.kv_cache_gb or 0.0


def check_vram_overflow(deployment: Deployment, ctx: RuleContext) -> Finding | None:
    """Weights + KV cache + runtime overhead (the estimator's ``vram_gb``) above the GPUs'
    memory: the load fails, or accelerate offloads layers to CPU and every token crosses PCIe."""
    gpu = deployment.gpu
    if gpu.vram_gb is None:
        return None
    need = _memory_need(deployment)
    if need is None:
        return None
    usable_gb = usable_vram_gb(gpu.vram_gb, gpu.count)
    if need.total_gb <= usable_gb:
        return None
    # A shorter context cannot help when the weights and the overhead that comes with them do
    # not fit on their own.
    weights_bound = need.weights_gb + need.overhead_gb > usable_gb
    kv_gb = need.kv_cache_gb
    kv_text = (
        f" + ~{kv_gb:.2f} GB of KV cache ({need.tokens} tokens x BS {need.batch_size})"
        if kv_gb is not None
        else " (KV cache not counted: model shape unknown)"
    )
    gpus = f"{gpu.count} x {gpu.vram_gb:g} GB" if gpu.count > 1 else f"{gpu.vram_gb:g} GB"
    return ROWS["vram-overflow"].finding(
        mood=Mood.RED,
        message=(
            f"{_name(deployment)} needs ~{need.total_gb:.2f} GB of VRAM (~{need.weights_gb:.2f} GB "
            f"of {need.precision} weights{kv_text} + ~{need.overhead_gb:.2f} GB runtime overhead) "
            f"but the GPU memory is {gpus}, so layers spill to CPU (or the load fails) and every "
            "token pays for the transfer."
        ),
        fix=(
            "BitsAndBytesConfig(load_in_4bit=True)  # 4-bit weights, "
            'or device_map="auto" across more GPUs, or a GPU with more memory'
            if weights_bound
            else "model.generate(..., max_new_tokens=<smaller>)  # smaller batch/context, "
            'or device_map="auto" across more GPUs'
        ),
        fix_summary=(
            "the weights and their runtime overhead alone exceed the GPU memory: quantize them "
            "(4/8-bit), or spread the model over more GPU memory"
            if weights_bound
            else "shrink batch or context, or spread the model over more GPU memory"
        ),
        impact=None,
        # Rounded as the estimator's JSON (Estimate.to_dict) rounds vram_gb: 3 decimals.
        details=(
            ("vram_need_gb", round(need.total_gb, 3)),
            ("weights_gb", round(need.weights_gb, 3)),
            ("kv_cache_gb", None if kv_gb is None else round(kv_gb, 3)),
            ("overhead_gb", round(need.overhead_gb, 3)),
            ("usable_vram_gb", round(usable_gb, 3)),
            ("vram_method", need.method),
        ),
    )


def check_reference_deviation(deployment: Deployment, ctx: RuleContext) -> Finding | None:
    """Live J/token far from the reference for the same configuration: something the
    configuration does not show (throttling, contention, a slow kernel path) is at work."""
    measured = ctx.measured_j_per_token
    if measured is None or measured <= 0:
        return None
    reference = estimate_or_none(deployment, ctx.settings)
    per_1k = getattr(reference, "energy_per_1k_tokens_j", None)
    if reference is None or per_1k is None or per_1k <= 0:
        return None
    reference_j = per_1k / 1000.0
    ratio = measured / reference_j
    # A reference is a range, not a point: only a figure beyond both DEVIATION_RATIO and the
    # reference's own p10-p90 interval is a deviation (a carried figure's range is wide).
    bounds = getattr(reference, "energy_per_1k_tokens_j_range", None)
    low_j, high_j = (bounds[0] / 1000.0, bounds[1] / 1000.0) if bounds else (reference_j,) * 2
    upper = max(reference_j * DEVIATION_RATIO, high_j)
    lower = min(reference_j / DEVIATION_RATIO, low_j)
    if lower < measured < upper:
        return None
    span = f" (range {low_j:.3g}-{high_j:.3g})" if bounds else ""
    if measured >= upper:
        mood = Mood.ORANGE if ratio >= SEVERE_DEVIATION_RATIO else Mood.YELLOW
        message = (
            f"This process measures {measured:.3g} J/token, {ratio:.1f}x the {reference.tier} "
            f"reference of {reference_j:.3g} J/token{span} for the same configuration, so energy "
            "is being lost somewhere the configuration does not show."
        )
    else:
        mood = Mood.GRAY
        message = (
            f"This process measures {measured:.3g} J/token, only {ratio:.2f}x the "
            f"{reference.tier} reference of {reference_j:.3g} J/token{span}, which suggests the "
            "configuration differs from what ecoguard was told."
        )
    return ROWS["reference-deviation"].finding(
        mood=mood,
        message=message,
        fix="nvidia-smi -q -d PERFORMANCE,POWER  # look for throttling, power caps, other jobs",
        fix_summary="check clocks, power caps and GPU contention",
        impact=None,
        evidence=tuple(reference.rows),
        details=(
            ("measured_j_per_token", measured),
            ("reference_j_per_token", reference_j),
            ("ratio", round(ratio, 3)),
            ("reference_tier", reference.tier),
            ("reference_range_j_per_token", (round(low_j, 6), round(high_j, 6))),
        ),
    )
