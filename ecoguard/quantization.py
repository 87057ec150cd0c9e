"""What a quantization config amounts to: the one reading shared by every front door.

The guard reads live configs (``BitsAndBytesConfig``, ``TorchAoConfig`` or their ``config.json``
dict form), the audit reads the same settings from source code, the engines from command lines
and checkpoint configs, the advisor from a question. Each gathers the raw settings its own way,
then asks this module what they amount to, so one checkpoint gets one verdict everywhere: the
canonical precision the rules and the estimator judge, and the ``QuantSpec`` that says how.

Judgements made here, once:

- bitsandbytes 8-bit: ``llm_int8_threshold`` 0.0 is ``int8_pure``; anything else (6.0 is the
  default) is ``int8_mixed``, the outlier path the study measured as slow.
- bitsandbytes 4-bit: NF4 and FP4 run the same dequantize-then-matmul kernels; the study measured
  NF4, so FP4 is judged as ``nf4`` (``nf4_dq`` with double quantization) and says so.
- torchao: one table of type names (class names, old function names, ``TorchAoConfig``
  strings, serialised ``{"_type": ...}`` forms). A bare ``float8`` is torchao's weight-only
  float8, the eager-mode trap.
- AWQ / GPTQ: weight-only formats judged against the measured rows of the same bit width
  (4-bit as NF4, 8-bit as pure INT8).
- FP8 checkpoints (``quant_method: fp8``) run fused kernels, not torchao's eager path: the
  fp8-eager rule cannot apply, so it is named as unknown.
- GGUF and other methods: the bits live in the checkpoint; no measured crossover covers them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ecoguard.deployment import QuantSpec

# The one dtype table: how torch dtypes and their spellings read as precision names.
DTYPES: dict[str, str] = {
    "float16": "fp16",
    "half": "fp16",
    "fp16": "fp16",
    "bfloat16": "bf16",
    "bf16": "bf16",
    "float32": "fp32",
    "float": "fp32",
    "fp32": "fp32",
}

# The rules that need a quantization fact (silent when a config cannot be read).
QUANT_RULES = frozenset({"int8-mixed", "small-model-quant", "fp8-eager"})
BNB_RULES = frozenset({"int8-mixed", "small-model-quant"})
TORCHAO_RULES = frozenset({"fp8-eager", "small-model-quant"})

# bitsandbytes' defaults: the outlier threshold of LLM.int8(), and BitsAndBytesConfig's 4-bit
# quant type when none is given.
BNB_DEFAULT_THRESHOLD = 6.0
BNB_DEFAULT_4BIT_TYPE = "fp4"

# torchao quant types, first match wins (dynamic before weight-only): pattern -> (canonical
# precision or None where no measured row covers it, bits, the QuantSpec's quant_type).
TORCHAO_TYPES: tuple[tuple[re.Pattern[str], str | None, int, str], ...] = (
    (
        re.compile(r"float8_?dynamic|float8dq|fp8dq|fp8_?dynamic", re.I),
        "fp8_dynamic",
        8,
        "float8_dynamic",
    ),
    (re.compile(r"float8|fp8", re.I), "fp8_weight_only", 8, "float8_weight_only"),
    (re.compile(r"int8_?dynamic", re.I), None, 8, "int8_dynamic"),
    (re.compile(r"int8", re.I), None, 8, "int8_weight_only"),
    (re.compile(r"int4", re.I), None, 4, "int4_weight_only"),
)

# Pre-quantized weight-only formats read by bit width against the measured formats.
_WEIGHT_ONLY_AS = {4: "nf4", 8: "int8_pure"}


@dataclass(frozen=True, slots=True)
class QuantFacts:
    """What a quantization config amounts to. ``precision`` is the canonical name the rules and
    the estimator judge (None: no measured precision covers it); ``unknown`` names the rules
    whose facts could not be read from it; ``label`` is how to say it to a person; ``details``
    are (key, value) notes such as how a format was judged."""

    precision: str | None
    quant: QuantSpec
    unknown: frozenset[str] = frozenset()
    label: str | None = None
    details: tuple[tuple[str, object], ...] = ()


NONE = QuantFacts(None, QuantSpec())


def dtype_name(dtype: Any) -> str | None:
    """``torch.float16`` / ``"float16"`` / ``"bf16"`` -> ``fp16``/``bf16``/``fp32``; None for
    ``"auto"``, None or anything else."""
    if dtype is None:
        return None
    return DTYPES.get(str(dtype).rsplit(".", 1)[-1].strip().lower())


def bnb_8bit(threshold: float | None, *, pre_quantized: bool | None = None) -> QuantFacts:
    """bitsandbytes 8-bit at ``threshold`` (None: a threshold that could not be read, so the
    int8-mixed rule cannot tell)."""
    quant = QuantSpec(
        method="bitsandbytes",
        bits=8,
        quant_type="int8",
        int8_threshold=threshold,
        pre_quantized=pre_quantized,
    )
    unknown = frozenset({"int8-mixed"}) if threshold is None else frozenset()
    precision = "int8_pure" if threshold == 0.0 else "int8_mixed"
    return QuantFacts(precision, quant, unknown, "bitsandbytes 8-bit")


def bnb_4bit(
    quant_type: str | None,
    *,
    double_quant: bool | None = False,
    compute_dtype: str | None = None,
    pre_quantized: bool | None = None,
) -> QuantFacts:
    """bitsandbytes 4-bit of ``quant_type`` (None: BitsAndBytesConfig's default, fp4)."""
    kind = (quant_type or BNB_DEFAULT_4BIT_TYPE).lower()
    quant = QuantSpec(
        method="bitsandbytes",
        bits=4,
        quant_type=kind,
        compute_dtype=compute_dtype,
        double_quant=bool(double_quant),
        pre_quantized=pre_quantized,
    )
    precision = "nf4_dq" if double_quant else "nf4"
    details: tuple[tuple[str, object], ...] = ()
    if kind != "nf4":
        details = (("judged_as", f"{precision}: the same 4-bit dequantization kernels as NF4"),)
    return QuantFacts(precision, quant, label=f"bitsandbytes 4-bit ({kind})", details=details)


def torchao_type_name(quant_type: Any) -> str | None:
    """A torchao quant type as text: a string as it is, a config object's class name, a
    serialised config's ``_type`` (also under ``default``); None when there is none."""
    if quant_type is None:
        return None
    if isinstance(quant_type, str):
        return quant_type
    if isinstance(quant_type, Mapping):
        if "_type" in quant_type:
            return str(quant_type["_type"])
        if "default" in quant_type:  # serialised form: {"default": {"_type": ...}}
            return torchao_type_name(quant_type["default"])
        return json.dumps(quant_type, default=str)  # a per-module mapping: its text
    return type(quant_type).__name__


def torchao_facts(
    label: str | None, *, compiled: bool | None, pre_quantized: bool | None = None
) -> QuantFacts:
    """What a torchao quant type amounts to (``label`` None: it could not be read)."""
    if not label:
        return QuantFacts(None, QuantSpec(method="torchao"), TORCHAO_RULES, "torchao")
    for pattern, precision, bits, quant_type in TORCHAO_TYPES:
        if pattern.search(label):
            quant = QuantSpec(
                method="torchao",
                bits=bits,
                quant_type=quant_type,
                compiled=compiled,
                pre_quantized=pre_quantized,
            )
            return QuantFacts(precision, quant, label=f"torchao {quant_type}")
    quant = QuantSpec(method="torchao", quant_type=label, pre_quantized=pre_quantized)
    return QuantFacts(None, quant, label=f"torchao {label}")


def weight_only(method: str, bits: int | None, *, pre_quantized: bool | None = True) -> QuantFacts:
    """An AWQ or GPTQ checkpoint of ``bits`` (None: 4, their usual width)."""
    bits = 4 if bits is None else bits
    precision = _WEIGHT_ONLY_AS.get(bits)
    details = (
        (("judged_as", f"{precision}: the measured {bits}-bit weight-only format"),)
        if precision
        else ()
    )
    quant = QuantSpec(
        method=method if method in ("awq", "gptq") else "other",
        bits=bits,
        pre_quantized=pre_quantized,
    )
    return QuantFacts(precision, quant, label=f"{method.upper()} {bits}-bit", details=details)


def fused_fp8(*, pre_quantized: bool | None = True) -> QuantFacts:
    """An FP8 checkpoint or engine flag: fused kernels, so torchao's eager trap cannot apply
    and no measured crossover covers it."""
    quant = QuantSpec(method="other", bits=8, quant_type="fp8", pre_quantized=pre_quantized)
    return QuantFacts("fp8_dynamic", quant, frozenset({"fp8-eager"}), "FP8")


def gguf(bits: int | None) -> QuantFacts:
    """GGUF blocks are multiplied quantized; the measured crossovers do not cover them."""
    quant = QuantSpec(method="gguf", bits=bits, pre_quantized=True)
    return QuantFacts(None, quant, QUANT_RULES, f"GGUF Q{bits}" if bits else "GGUF")


def _get(config: Any, name: str, default: Any = None) -> Any:
    if isinstance(config, Mapping):
        return config.get(name, default)
    return getattr(config, name, default)


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def quant_from_config(
    config: Any, *, pre_quantized: bool | None = None, compiled: bool | None = None
) -> QuantFacts:
    """What a quantization config amounts to: ``BitsAndBytesConfig``, ``TorchAoConfig``, AWQ /
    GPTQ / FP8 configs, or their dict form (``config.json``'s ``quantization_config``)."""
    if config is None:
        return NONE
    method = _get(config, "quant_method")
    method = str(getattr(method, "value", method) or "").lower().replace("-", "_")
    load_8bit = bool(_get(config, "load_in_8bit") or _get(config, "_load_in_8bit"))
    load_4bit = bool(_get(config, "load_in_4bit") or _get(config, "_load_in_4bit"))
    if load_8bit:
        raw = _get(config, "llm_int8_threshold", BNB_DEFAULT_THRESHOLD)
        threshold = BNB_DEFAULT_THRESHOLD if raw is None else _number(raw)
        return bnb_8bit(threshold, pre_quantized=pre_quantized)
    if load_4bit:
        kind = _get(config, "bnb_4bit_quant_type")
        return bnb_4bit(
            kind if isinstance(kind, str) else None,
            double_quant=bool(_get(config, "bnb_4bit_use_double_quant")),
            compute_dtype=dtype_name(_get(config, "bnb_4bit_compute_dtype")),
            pre_quantized=pre_quantized,
        )
    if method == "bitsandbytes":
        quant = QuantSpec(method="bitsandbytes", pre_quantized=pre_quantized)
        return QuantFacts(None, quant, BNB_RULES, "bitsandbytes")
    if method == "torchao":
        label = torchao_type_name(_get(config, "quant_type"))
        return torchao_facts(label, compiled=compiled, pre_quantized=pre_quantized)
    bits = _get(config, "bits", _get(config, "w_bit"))
    bits = bits if isinstance(bits, int) and not isinstance(bits, bool) else None
    if method in ("awq", "gptq"):
        return weight_only(method, bits, pre_quantized=pre_quantized)
    if method == "fp8" or method.startswith("fp8_"):
        return fused_fp8(pre_quantized=pre_quantized)
    if method == "gguf":
        return gguf(bits)
    if not method:
        return NONE
    quant = QuantSpec(method="other", bits=bits, quant_type=method, pre_quantized=pre_quantized)
    return QuantFacts(None, quant, QUANT_RULES, method)


# The inverse: a precision as the config that loads it (bitsandbytes, torchao), for fixes and
# for engines that take a precision as a flag.
_CONFIGS: dict[str, dict[str, object]] = {
    "int8_mixed": {"load_in_8bit": True, "llm_int8_threshold": BNB_DEFAULT_THRESHOLD},
    "int8_pure": {"load_in_8bit": True, "llm_int8_threshold": 0.0},
    "nf4": {"load_in_4bit": True, "bnb_4bit_quant_type": "nf4"},
    "nf4_dq": {
        "load_in_4bit": True,
        "bnb_4bit_quant_type": "nf4",
        "bnb_4bit_use_double_quant": True,
    },
    "fp8_weight_only": {"quant_method": "torchao", "quant_type": "float8_weight_only"},
    "fp8_dynamic": {
        "quant_method": "torchao",
        "quant_type": "float8_dynamic_activation_float8_weight",
    },
}


def config_for(precision: str) -> dict[str, object] | None:
    """The quantization config (dict form) that loads ``precision``; None for an unquantized
    precision. ``quant_from_config(config_for(p)).precision == p`` for every quantized one."""
    config = _CONFIGS.get(precision)
    return dict(config) if config is not None else None


def facts_for(precision: str, *, compiled: bool | None = None) -> QuantFacts:
    """What ``precision`` amounts to when loaded the usual way (bitsandbytes for NF4/INT8, with
    FP16 compute for NF4; torchao for FP8, ``compiled`` or not); ``NONE`` for an unquantized
    precision. The inverse of ``quant_from_config``, like ``config_for``."""
    if precision in ("nf4", "nf4_dq"):
        return bnb_4bit("nf4", double_quant=precision == "nf4_dq", compute_dtype="fp16")
    return quant_from_config(config_for(precision), compiled=compiled)
