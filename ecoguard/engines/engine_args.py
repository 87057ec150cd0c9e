"""Serving-engine configuration -> the Deployment record -> the guard's rules.

The one place that knows what vLLM, TGI, SGLang and llama.cpp settings mean for energy. The
launch file audit (``ecoguard audit Dockerfile``) and the vLLM plugin both come here, so a trap
reads the same whether it is found in a Kubernetes manifest or in a starting engine.

Command lines are first reduced to an :class:`EngineConfig` by
:mod:`ecoguard.engines.command_line`; the plugin builds one from vLLM's own config objects.
``engine_deployment`` turns it into a Deployment, ``engine_findings`` runs the rules and words
the fixes as engine flags (``ENGINE_WORDING``, one row per rule).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import NamedTuple

from ecoguard.deployment import Deployment, GpuSpec, ModelSpec, QuantSpec
from ecoguard.engines.command_line import FLAGS, EngineConfig
from ecoguard.errors import UsageError
from ecoguard.findings import Finding
from ecoguard.knowledge import resolve_model as knowledge_resolve_model
from ecoguard.quantization import (
    BNB_DEFAULT_THRESHOLD,
    QUANT_RULES,
    QuantFacts,
    bnb_4bit,
    bnb_8bit,
    dtype_name,
    fused_fp8,
    gguf,
    torchao_facts,
    torchao_type_name,
    weight_only,
)
from ecoguard.rules import BS1_SUSTAINED_CALLS, evaluate, unquantized_dtype

# The flag a fix should name, per engine and field.
_FIX_FLAG = {
    engine: {name: flags[0] for name, flags in table.items()} for engine, table in FLAGS.items()
}

# Method families. Weight-only 4-bit formats have no reference rows of their own: they are
# judged against NF4's (the measured 4-bit weight-only format), and the finding says so.
_FOUR_BIT = ("awq", "gptq", "marlin", "exl2", "moe_wna16", "auto_round", "hqq")
_FP8 = ("fp8", "fbgemm_fp8", "ptpc_fp8", "modelopt", "fp_quant", "mxfp4", "mxfp8")


@dataclass(frozen=True, slots=True)
class EngineFacts:
    """The Deployment an engine configuration amounts to. ``unknown`` names rules whose facts
    could not be read (their findings are dropped rather than guessed); ``details`` say how a
    fact was inferred (a model name, a proxy precision)."""

    config: EngineConfig
    deployment: Deployment
    unknown: frozenset[str] = frozenset()
    details: tuple[tuple[str, object], ...] = ()
    quant_label: str | None = None  # "AWQ 4-bit", for wording


def resolve_model_spec(text: str) -> ModelSpec | None:
    """The model a model id or path names, with its size, from the knowledge registry (or the
    size in the name, ``-1.5B``); None when it names nothing that can be sized."""
    return _resolve_model_spec(text)


@lru_cache(maxsize=512)
def _resolve_model_spec(text: str) -> ModelSpec | None:
    try:
        info = knowledge_resolve_model(text)
    except UsageError:
        return None
    return info.to_model_spec(info.id or text)


# -- facts ------------------------------------------------------------------------------------


def engine_deployment(
    config: EngineConfig,
    *,
    gpu: GpuSpec | None = None,
    resolve_model: Callable[[str], ModelSpec | None] | None = None,
) -> EngineFacts:
    """The Deployment an engine configuration serves. ``resolve_model`` maps a model id or
    path to a ModelSpec with its size (the knowledge registry); without it only the id is
    kept. Quantization not named by a flag is inferred from the checkpoint's config or, in the
    audit, from the model name (``-AWQ``, ``-GPTQ``, ``bnb-4bit``), and the details say so."""
    gpu = gpu or GpuSpec()
    if config.tensor_parallel_size and config.tensor_parallel_size > 1:
        gpu = replace(gpu, count=config.tensor_parallel_size)
    model = ModelSpec(id=config.model)
    if config.model and resolve_model is not None:
        model = resolve_model(config.model) or model
    details: list[tuple[str, object]] = [("engine", config.engine)]
    method, source = _method(config)
    if method is not None:
        details.append(("quantization", method))
        if source != "flag":
            details.append(("quantization_source", source))
    quant = _quant_facts(config, method)
    details.extend(quant.details)
    dtype = dtype_name(config.dtype)
    batch: dict[str, object] = {}
    if config.max_num_seqs == 1:
        # One running sequence at most, for the engine's whole life: the serving pattern the
        # batch-size-one rule waits to observe is fixed by configuration.
        batch = {
            "batch_size": 1,
            "consecutive_bs1_calls": BS1_SUSTAINED_CALLS,
            "interactive": False,
        }
    deployment = Deployment(
        model=model,
        gpu=gpu,
        precision=quant.precision if method is not None else dtype,
        quant=quant.quant,
        dtype=dtype,
        engine=config.engine,
        **batch,  # type: ignore[arg-type]
    )
    return EngineFacts(config, deployment, quant.unknown, tuple(details), quant.label)


# A precision as the ``--quantization`` that loads it (TGI: 8-bit is its ``bitsandbytes``).
_PRECISION_FLAGS = {"nf4": "bitsandbytes-nf4", "nf4_dq": "bitsandbytes-nf4", "fp8": "fp8"}


def served_by(deployment: Deployment, engine: str) -> tuple[Deployment, frozenset[str]]:
    """``deployment`` as ``engine`` serves it, with ``engine`` set: its precision named as the
    engine's quantization flag and read back here, so the advisor, the audit and the plugin make
    one decision (an engine's FP8 is fused kernels); and the rules the engine hides."""
    precision, quant = deployment.precision or "", deployment.quant
    flag = _PRECISION_FLAGS.get(precision.split("_")[0])
    if precision.startswith("int8") or (flag and flag.startswith("bits") and engine != "tgi"):
        flag = "bitsandbytes"
    threshold = 6.0 if quant.int8_threshold is None else quant.int8_threshold
    eight = {"load_in_8bit": True, "llm_int8_threshold": threshold}
    four = {"bnb_4bit_use_double_quant": precision == "nf4_dq"}
    count, dtype = deployment.gpu.count, deployment.dtype
    config = EngineConfig(engine, quantization=flag, dtype=dtype, tensor_parallel_size=count)
    config = replace(config, quant_config=eight if precision.startswith("int8") else four)
    facts = engine_deployment(config, gpu=deployment.gpu)
    if flag is not None and facts.deployment.precision is not None:
        quant = replace(facts.deployment.quant, compute_dtype=quant.compute_dtype)
        precision = facts.deployment.precision
    return replace(deployment, engine=engine, precision=precision or None, quant=quant), (
        facts.unknown
    )


_NAME_HINTS = (
    (re.compile(r"(^|[-_./])awq($|[-_./])", re.I), "awq"),
    (re.compile(r"(^|[-_./])gptq($|[-_./])", re.I), "gptq"),
    (re.compile(r"bnb[-_]?(4|8)[-_]?bit|(^|[-_./])(4|8)bit($|[-_./])", re.I), "bitsandbytes"),
    (re.compile(r"(^|[-_./])(fp8|float8)($|[-_./])", re.I), "fp8"),
    (re.compile(r"\.gguf$|(^|[-_./])gguf($|[-_./])", re.I), "gguf"),
)


def _method(config: EngineConfig) -> tuple[str | None, str]:
    if config.quantization:
        return config.quantization.strip().lower().replace("-", "_"), "flag"
    if config.quant_config:
        method = config.quant_config.get("quant_method")
        if isinstance(method, str):
            return method.lower().replace("-", "_"), "checkpoint config"
    for pattern, method in _NAME_HINTS:
        if config.model and pattern.search(config.model):
            return method, "model name"
    return None, "none"


def _quant_facts(config: EngineConfig, method: str | None) -> QuantFacts:
    if method is None:
        return QuantFacts(None, QuantSpec())
    qc = config.quant_config or {}
    if method.startswith("bitsandbytes"):
        return _bitsandbytes(config, method, qc)
    if method == "eetq":
        # TGI's EETQ: per-channel int8 weights, no outlier decomposition.
        return QuantFacts(
            "int8_pure", QuantSpec(method="other", bits=8, quant_type="eetq"), label="EETQ int8"
        )
    if method.startswith(_FOUR_BIT):
        bits = qc.get("bits", qc.get("w_bit"))
        return weight_only(method.split("_")[0], bits if isinstance(bits, int) else None)
    if method == "torchao":
        return _torchao(config, qc)
    if method.startswith(_FP8) or "fp8" in method:
        # vLLM/SGLang/TGI FP8 runs fused kernels (W8A8 on Ada/Hopper, Marlin weight-only
        # before): not torchao's eager path (ecoguard.quantization.fused_fp8).
        return fused_fp8(pre_quantized=None)
    if method == "gguf":
        match = re.search(r"[Qq]([2-8])_", config.model or "")
        return gguf(int(match.group(1)) if match else None)
    # compressed-tensors, quark, experts_int8...: the bits live in the checkpoint.
    return QuantFacts(None, QuantSpec(method="other", quant_type=method), QUANT_RULES, method)


def _bitsandbytes(config: EngineConfig, method: str, qc: Mapping[str, object]) -> QuantFacts:
    eight = qc.get("load_in_8bit") is True
    if config.engine == "tgi":
        # TGI: `bitsandbytes` is LLM.int8() at the default threshold; -nf4 / -fp4 are 4-bit.
        eight = method == "bitsandbytes"
    elif not qc and config.model and re.search(r"8[-_]?bit|int8", config.model, re.I):
        eight = True
    if eight:
        raw = qc.get("llm_int8_threshold")
        given = isinstance(raw, int | float) and not isinstance(raw, bool)
        facts = bnb_8bit(float(raw) if given else BNB_DEFAULT_THRESHOLD)  # type: ignore[arg-type]
        source = "checkpoint config" if given else "bitsandbytes default"
        return replace(facts, details=(("int8_threshold_source", source),))
    quant_type = qc.get("bnb_4bit_quant_type")
    if not isinstance(quant_type, str):
        # The engines' own defaults: an ``-fp4`` flag says fp4, otherwise NF4.
        quant_type = "fp4" if method.endswith("fp4") else "nf4"
    return bnb_4bit(quant_type, double_quant=qc.get("bnb_4bit_use_double_quant") is True)


def _torchao(config: EngineConfig, qc: Mapping[str, object]) -> QuantFacts:
    label = torchao_type_name(qc.get("quant_type")) or config.model
    # vLLM compiles the model unless told --enforce-eager; torchao float8 then runs fused,
    # eager it dequantizes op by op.
    compiled = (
        None
        if config.enforce_eager is None and config.engine != "vllm"
        else not config.enforce_eager
    )
    facts = torchao_facts(label, compiled=compiled)
    if facts.quant.bits is None:  # no torchao type named: the rules cannot tell
        return QuantFacts(None, QuantSpec(method="torchao"), QUANT_RULES, "torchao")
    return facts


# -- findings ---------------------------------------------------------------------------------


def engine_findings(facts: EngineFacts, *, settings=None) -> list[Finding]:
    """The guard's rules on an engine's Deployment, with fixes written as the engine's flags
    (``--max-num-seqs``, ``--quantize``) instead of Python calls. Rule ids, moods, impact and
    evidence are the rules' own."""
    kwargs = {"settings": settings} if settings is not None else {}
    found = evaluate(facts.deployment, **kwargs)
    out = []
    for finding in found:
        if finding.rule in facts.unknown:
            continue
        out.append(_engine_wording(finding, facts))
    return out


class Wording(NamedTuple):
    """A finding's message, fix and fix summary as an engine operator reads them."""

    message: str
    fix: str
    summary: str


def _batch_size_one(finding: Finding, facts: EngineFacts, flags: dict[str, str]) -> Wording:
    flag = flags.get("max_num_seqs", "--max-num-seqs")
    return Wording(
        f"{flag} 1 lets the engine run one request at a time, so every generated token pays "
        "for a full pass over the weights that a batch of concurrent requests would share.",
        f"remove {flag} 1 (or raise it, e.g. {flag} 64) so the scheduler can batch requests",
        f"raise {flag} above 1",
    )


def _small_model_quant(finding: Finding, facts: EngineFacts, flags: dict[str, str]) -> Wording:
    config, flag = facts.config, flags.get("quantization")
    label = facts.quant_label or "quantized"
    message = finding.message.replace(
        f"where {facts.deployment.precision} dequantization", f"where {label} dequantization"
    )
    dtype = {"fp16": "float16"}.get(unquantized_dtype(facts.deployment) or "", "bfloat16")
    dtype_flag = flags.get("dtype")
    fix = "serve the unquantized checkpoint" + (f" with {dtype_flag} {dtype}" if dtype_flag else "")
    if flag and config.quantization:
        fix += f" (drop {flag} {config.quantization})"
    return Wording(message, fix, "drop quantization: serve the 16-bit model")


def _int8_mixed(finding: Finding, facts: EngineFacts, flags: dict[str, str]) -> Wording:
    if facts.config.engine == "tgi":
        fix = (
            "--quantize eetq  # int8 weights without the outlier decomposition, or drop --quantize"
        )
    else:
        fix = (
            "serve the 16-bit checkpoint, or one quantized with "
            "BitsAndBytesConfig(load_in_8bit=True, llm_int8_threshold=0.0)"
        )
    return Wording(finding.message, fix, "avoid LLM.int8() at threshold 6.0")


# How each engine compiles a model it was told to run eagerly; engines not named keep the rule's
# own fix.
_FP8_COMPILE_FIX = {
    "vllm": "drop --enforce-eager so vLLM compiles the model (or serve it in bf16)",
    "sglang": "drop --disable-cuda-graph (or serve the model in bf16)",
}


def _fp8_eager(finding: Finding, facts: EngineFacts, flags: dict[str, str]) -> Wording:
    return Wording(
        finding.message,
        _FP8_COMPILE_FIX.get(facts.config.engine, finding.fix),
        "compile the FP8 model, or serve it unquantized",
    )


# Rule id -> how its finding reads for an engine operator; rules not named keep their wording.
ENGINE_WORDING: dict[str, Callable[[Finding, EngineFacts, dict[str, str]], Wording]] = {
    "batch-size-one": _batch_size_one,
    "small-model-quant": _small_model_quant,
    "int8-mixed": _int8_mixed,
    "fp8-eager": _fp8_eager,
}


def _engine_wording(finding: Finding, facts: EngineFacts) -> Finding:
    details = (*finding.details, *facts.details)
    word = ENGINE_WORDING.get(finding.rule)
    if word is None:
        return replace(finding, details=details)
    message, fix, summary = word(finding, facts, _FIX_FLAG[facts.config.engine])
    return replace(finding, message=message, fix=fix, fix_summary=summary, details=details)
