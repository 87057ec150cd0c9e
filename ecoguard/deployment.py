"""The Deployment record: one plain, frozen description of how a model is served.

Every front door (the live guard, the source audit, the advisor's parser, the meter) builds one of
these; the rules and the estimator judge it. Unknown facts stay ``None``: a rule that needs a fact
it does not have stays silent rather than guessing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Literal

from ecoguard.errors import UsageError

# Canonical precision names, as used in the reference data, metrics labels and JSON output.
PRECISIONS: tuple[str, ...] = (
    "fp32",
    "fp16",
    "bf16",
    "nf4",
    "nf4_dq",
    "int8_mixed",
    "int8_pure",
    "fp8_weight_only",
    "fp8_dynamic",
)

# What people type -> canonical name. Keys are compared after lower-casing and folding
# spaces/dashes to underscores.
PRECISION_ALIASES: dict[str, str] = {
    "fp32": "fp32",
    "float32": "fp32",
    "float": "fp32",
    "full": "fp32",
    "fp16": "fp16",
    "float16": "fp16",
    "half": "fp16",
    "bf16": "bf16",
    "bfloat16": "bf16",
    "nf4": "nf4",
    "4bit": "nf4",
    "4_bit": "nf4",
    "int4": "nf4",
    "load_in_4bit": "nf4",
    "bnb_4bit": "nf4",
    "nf4_dq": "nf4_dq",
    "nf4_double_quant": "nf4_dq",
    "nf4+dq": "nf4_dq",
    "int8_mixed": "int8_mixed",
    "int8_default": "int8_mixed",
    "int8": "int8_mixed",
    "8bit": "int8_mixed",
    "8_bit": "int8_mixed",
    "load_in_8bit": "int8_mixed",
    "llm_int8": "int8_mixed",
    "int8_mix": "int8_mixed",
    "int8_pure": "int8_pure",
    "pure_int8": "int8_pure",
    "int8_threshold0": "int8_pure",
    "fp8": "fp8_weight_only",
    "float8": "fp8_weight_only",
    "fp8_weight_only": "fp8_weight_only",
    "float8_weight_only": "fp8_weight_only",
    "fp8_wo": "fp8_weight_only",
    "fp8_dynamic": "fp8_dynamic",
    "fp8_dyn": "fp8_dynamic",
    "float8_dynamic": "fp8_dynamic",
    "fp8_dynamic_activation": "fp8_dynamic",
}

QUANTIZED_PRECISIONS = frozenset({"nf4", "nf4_dq", "int8_mixed", "int8_pure"})
FP8_PRECISIONS = frozenset({"fp8_weight_only", "fp8_dynamic"})

# Bytes per weight, for VRAM estimates (NF4 includes its per-block scales, roughly).
BYTES_PER_PARAM: dict[str, float] = {
    "fp32": 4.0,
    "fp16": 2.0,
    "bf16": 2.0,
    "nf4": 0.5625,
    "nf4_dq": 0.53,
    "int8_mixed": 1.0,
    "int8_pure": 1.0,
    "fp8_weight_only": 1.0,
    "fp8_dynamic": 1.0,
}

MAX_GPU_COUNT = 64  # GPUs one model is spread over (tensor/pipeline parallel)

Use = Literal["chat", "api", "batch"]
USES: tuple[str, ...] = ("chat", "api", "batch")
# The serving engines a Deployment may name (``engine``); None is transformers' own generate.
SERVING_ENGINES: tuple[str, ...] = ("vllm", "sglang", "tgi", "tensorrt_llm", "llamacpp")


def normalize_precision(text: str) -> str:
    """Map a precision as people write it (``int8_default``, ``4bit``, ``half``) to its canonical
    name. Raises UsageError naming the accepted values."""
    if not isinstance(text, str) or not text.strip():
        raise UsageError(f"empty precision; accepted: {', '.join(PRECISIONS)}")
    key = re.sub(r"[\s\-]+", "_", text.strip().lower())
    if key in PRECISION_ALIASES:
        return PRECISION_ALIASES[key]
    raise UsageError(
        f"unknown precision {text!r}; accepted: {', '.join(PRECISIONS)} "
        f"(aliases: int8/int8_default/load_in_8bit -> int8_mixed, 4bit -> nf4, "
        f"fp8 -> fp8_weight_only, half -> fp16)"
    )


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """The model being served. ``params_b`` is the parameter count in billions."""

    id: str | None = None
    params_b: float | None = None
    family: str | None = None
    layers: int | None = None
    hidden_size: int | None = None
    kv_heads: int | None = None
    head_dim: int | None = None
    context_window: int | None = None


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """The GPU(s) the model runs on. ``profile`` is a key of the knowledge GPU table (``a800``,
    ``rtx5090``); ``name`` is what the driver reports (``NVIDIA A800-SXM4-80GB``)."""

    profile: str | None = None
    name: str | None = None
    architecture: str | None = None  # turing, ampere, ada, hopper, blackwell, volta
    compute_capability: tuple[int, int] | None = None
    vram_gb: float | None = None
    count: int = 1


@dataclass(frozen=True, slots=True)
class QuantSpec:
    """How weights are quantized. ``method``: ``bitsandbytes``, ``torchao``, ``gptq``, ``awq``,
    ``gguf``, ``other`` or None for none. ``int8_threshold`` is bitsandbytes'
    ``llm_int8_threshold`` (6.0 by default, which enables the slow mixed-precision path)."""

    method: str | None = None
    bits: int | None = None
    quant_type: str | None = None  # nf4, fp4, int8, float8_weight_only, float8_dynamic, ...
    int8_threshold: float | None = None
    compute_dtype: str | None = None
    double_quant: bool | None = None
    compiled: bool | None = None  # torch.compile applied (matters for torchao float8)
    pre_quantized: bool | None = None  # the checkpoint itself carries the quantization config


@dataclass(frozen=True, slots=True)
class SoftwareVersions:
    torch: str | None = None
    transformers: str | None = None
    bitsandbytes: str | None = None
    torchao: str | None = None


@dataclass(frozen=True, slots=True)
class Deployment:
    """One serving configuration. All fields optional: front doors fill what they know."""

    model: ModelSpec = field(default_factory=ModelSpec)
    gpu: GpuSpec = field(default_factory=GpuSpec)
    precision: str | None = None  # canonical, see PRECISIONS
    quant: QuantSpec = field(default_factory=QuantSpec)
    dtype: str | None = None  # compute/storage dtype of unquantized weights: fp16, bf16, fp32
    batch_size: int | None = None
    prompt_tokens: int | None = None
    generation_tokens: int | None = None
    software: SoftwareVersions = field(default_factory=SoftwareVersions)
    use: str | None = None  # chat, api, batch
    use_cache: bool | None = None
    # Observed serving pattern, filled by the guard (or the audit): how many consecutive
    # generate calls ran at batch size 1, and whether the process looks interactive.
    consecutive_bs1_calls: int | None = None
    interactive: bool | None = None
    # The serving engine (``vllm``, ``tgi``, ``sglang``, ``tensorrt_llm``, ``llamacpp``), None for
    # transformers' own generate: an engine's fused kernels change which traps apply.
    engine: str | None = None

    @property
    def gpu_count(self) -> int:
        """GPUs the model is spread over (tensor parallel): the VRAM check is per card and the
        energy is for all of them. Stored once, on ``gpu.count``."""
        return max(self.gpu.count, 1)

    def with_(self, **changes: object) -> Deployment:
        """A copy with some fields replaced (the record itself is frozen)."""
        return replace(self, **changes)

    def validate(self) -> Deployment:
        """Check ranges; raise UsageError saying what is wrong and what is accepted."""
        if self.precision is not None and self.precision not in PRECISIONS:
            raise UsageError(
                f"unknown precision {self.precision!r}; accepted: {', '.join(PRECISIONS)}"
            )
        for name, low, high in (
            ("batch_size", 1, 4096),
            ("prompt_tokens", 0, 1_048_576),
            ("generation_tokens", 1, 1_048_576),
        ):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise UsageError(f"{name} must be an integer from {low} to {high}, got {value!r}")
        if self.model.params_b is not None and not 0 < self.model.params_b <= 2000:
            raise UsageError(
                f"model size must be between 0 and 2000 billion parameters, got {self.model.params_b!r}"
            )
        if (
            isinstance(self.gpu.count, bool)
            or not isinstance(self.gpu.count, int)
            or not (1 <= self.gpu.count <= MAX_GPU_COUNT)
        ):
            raise UsageError(
                f"GPU count must be an integer from 1 to {MAX_GPU_COUNT}, got {self.gpu.count!r}"
            )
        if self.use is not None and self.use not in USES:
            raise UsageError(f"unknown use {self.use!r}; accepted: {', '.join(USES)}")
        return self
