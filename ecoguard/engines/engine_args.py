"""Serving-engine arguments -> the Deployment record -> the guard's rules.

The one place that knows what vLLM, TGI, SGLang and llama.cpp flags mean for energy. The launch
file audit (``ecoguard audit Dockerfile``) and the vLLM plugin both come here, so a trap reads the
same whether it is found in a Kubernetes manifest or in a starting engine.

Command lines are first reduced to an :class:`EngineConfig` (``parse_command``), the plugin
builds one from vLLM's own config objects; ``engine_deployment`` turns it into a Deployment and
``engine_findings`` runs the rules and words the fixes as engine flags.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache

from ecoguard.deployment import Deployment, GpuSpec, ModelSpec, QuantSpec
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

ENGINES: tuple[str, ...] = ("vllm", "tgi", "sglang", "llamacpp")

# The fields an engine command can set, and the flags that set them, per engine. ``True`` in
# BOOL_FIELDS means the flag is a switch (``--enforce-eager``) rather than ``--flag VALUE``.
FLAGS: dict[str, dict[str, tuple[str, ...]]] = {
    "vllm": {
        "model": ("--model",),
        "served_model_name": ("--served-model-name",),
        "quantization": ("--quantization", "-q"),
        "dtype": ("--dtype",),
        "max_num_seqs": ("--max-num-seqs",),
        "enforce_eager": ("--enforce-eager",),
        "tensor_parallel_size": ("--tensor-parallel-size", "-tp"),
        "hf_overrides": ("--hf-overrides",),
    },
    "tgi": {
        "model": ("--model-id",),
        "quantization": ("--quantize",),
        "dtype": ("--dtype",),
        "max_num_seqs": ("--max-batch-size", "--max-concurrent-requests"),
        # TGI captures CUDA graphs unless told `--cuda-graphs 0`: handled in _tgi_eager.
        "cuda_graphs": ("--cuda-graphs",),
        "tensor_parallel_size": ("--num-shard",),
    },
    "sglang": {
        "model": ("--model-path", "--model"),
        "served_model_name": ("--served-model-name",),
        "quantization": ("--quantization",),
        "dtype": ("--dtype",),
        "max_num_seqs": ("--max-running-requests",),
        "enforce_eager": ("--disable-cuda-graph",),
        "tensor_parallel_size": ("--tp-size", "--tensor-parallel-size", "--tp"),
    },
    "llamacpp": {
        "model": ("--model", "-m", "--hf-repo", "-hf", "-hfr"),
        "max_num_seqs": ("--parallel", "-np"),
        "served_model_name": ("--alias", "-a"),
    },
}
BOOL_FIELDS = frozenset({"enforce_eager"})

# The flag a fix should name, per engine and field.
_FIX_FLAG = {
    engine: {name: flags[0] for name, flags in table.items()} for engine, table in FLAGS.items()
}

_INT_FIELDS = frozenset({"max_num_seqs", "tensor_parallel_size", "cuda_graphs"})

# Method families. Weight-only 4-bit formats have no reference rows of their own: they are
# judged against NF4's (the measured 4-bit weight-only format), and the finding says so.
_FOUR_BIT = ("awq", "gptq", "marlin", "exl2", "moe_wna16", "auto_round", "hqq")
_FP8 = ("fp8", "fbgemm_fp8", "ptpc_fp8", "modelopt", "fp_quant", "mxfp4", "mxfp8")


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """What an engine was told, in one engine-neutral shape. ``None``: not given (the engine's
    default applies). ``quant_config`` is the checkpoint's ``quantization_config`` when known
    (the plugin reads it from the loaded config; the audit from ``--hf-overrides``).
    ``positions`` maps a field to the index of the token that set it (the audit turns it into
    a line number)."""

    engine: str
    model: str | None = None
    served_model_name: str | None = None
    quantization: str | None = None
    dtype: str | None = None
    max_num_seqs: int | None = None
    enforce_eager: bool | None = None
    tensor_parallel_size: int | None = None
    quant_config: Mapping[str, object] | None = None
    positions: Mapping[str, int] = field(default_factory=dict)
    problems: tuple[str, ...] = ()  # values that could not be read ("--max-num-seqs abc")


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


# -- command lines --------------------------------------------------------------------------

_PYTHON = re.compile(r"(^|/)python[0-9.]*$")
_VLLM_MODULES = ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server")


def detect_engine(tokens: Sequence[str]) -> tuple[str, int] | None:
    """Which engine a command line starts, and the index of its first argument: ``vllm serve``,
    ``python -m vllm.entrypoints.openai.api_server``, ``text-generation-launcher``,
    ``python -m sglang.launch_server``, ``llama-server``. Leading ``VAR=value`` assignments and
    wrappers (``exec``, ``nohup``, ``env``) are skipped. None when it starts none of them."""
    index = 0
    while index < len(tokens) and (
        tokens[index] in ("exec", "nohup", "env", "time", "command")
        or re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", tokens[index])
    ):
        index += 1
    if index >= len(tokens):
        return None
    head = tokens[index].rsplit("/", 1)[-1]
    if head == "vllm" and index + 1 < len(tokens) and tokens[index + 1] == "serve":
        return "vllm", index + 2
    if head == "text-generation-launcher":
        return "tgi", index + 1
    if head == "llama-server":
        return "llamacpp", index + 1
    if _PYTHON.search(tokens[index]):
        rest = tokens[index + 1 :]
        for offset, token in enumerate(rest[:-1]):
            if token == "-m":
                module = rest[offset + 1]
                start = index + offset + 3
                if module in _VLLM_MODULES:
                    return "vllm", start
                if module == "sglang.launch_server":
                    return "sglang", start
                return None
    return None


def parse_args(engine: str, tokens: Sequence[str], *, offset: int = 0) -> EngineConfig:
    """Read the flags ecoguard judges from an engine's argument list (``--flag value``,
    ``--flag=value``, underscores or dashes). Unknown flags are skipped; a vLLM positional
    model (``vllm serve MODEL``) is taken as the model. ``offset`` is added to the recorded
    token positions."""
    if engine not in FLAGS:
        raise ValueError(f"unknown engine {engine!r}; accepted: {', '.join(ENGINES)}")
    by_flag = {flag: name for name, flags in FLAGS[engine].items() for flag in flags}
    values: dict[str, object] = {}
    positions: dict[str, int] = {}
    problems: list[str] = []
    index = 0
    while index < len(tokens):
        token = tokens[index]
        flag, has_inline, inline = token.partition("=")
        flag = _normal_flag(flag)
        name = by_flag.get(flag)
        if (
            name is None
            and flag.startswith("--no-")
            and by_flag.get("--" + flag[5:]) in BOOL_FIELDS
        ):
            values[by_flag["--" + flag[5:]]] = False
            positions[by_flag["--" + flag[5:]]] = offset + index
            index += 1
            continue
        if name is None:
            if (
                engine == "vllm"
                and index == 0
                and not token.startswith("-")
                and "model" not in values
            ):
                values["model"], positions["model"] = token, offset
            index += 1
            continue
        if name in BOOL_FIELDS:
            value: object = _bool(inline) if has_inline else True
            if value is None:
                problems.append(f"{flag}={inline}: expected true or false")
            else:
                values[name], positions[name] = value, offset + index
            index += 1
            continue
        if has_inline:
            raw = inline
            index += 1
        elif index + 1 < len(tokens):
            raw = tokens[index + 1]
            index += 2
        else:
            problems.append(f"{flag} has no value")
            break
        if name in _INT_FIELDS:
            try:
                number = int(raw)
            except ValueError:
                problems.append(f"{flag} {raw!r}: expected an integer")
                continue
            # TGI: a concurrency cap of 1 also serialises the batch; a larger one does not say
            # the batch size, so only the cap of 1 is kept.
            if flag == "--max-concurrent-requests" and (number != 1 or "max_num_seqs" in values):
                continue
            values[name] = number
        else:
            values[name] = raw
        positions[name] = offset + index - (1 if has_inline else 2)
    return _config(engine, values, positions, problems)


def _normal_flag(flag: str) -> str:
    if flag.startswith("--"):
        return "--" + flag[2:].replace("_", "-").lower()
    return flag


def _bool(text: str) -> bool | None:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    return None


def _config(
    engine: str, values: dict[str, object], positions: dict[str, int], problems: list[str]
) -> EngineConfig:
    quant_config: Mapping[str, object] | None = None
    overrides = values.pop("hf_overrides", None)
    if isinstance(overrides, str):
        try:
            parsed = json.loads(overrides)
        except ValueError:
            problems.append("--hf-overrides is not JSON; its quantization_config is not read")
        else:
            found = parsed.get("quantization_config") if isinstance(parsed, dict) else None
            if isinstance(found, dict):
                quant_config = found
    cuda_graphs = values.pop("cuda_graphs", None)
    if engine == "tgi" and cuda_graphs is not None:
        # `--cuda-graphs 0` turns graph capture off: TGI then runs eagerly.
        values["enforce_eager"] = cuda_graphs == 0
        positions["enforce_eager"] = positions.pop("cuda_graphs")
    return EngineConfig(
        engine=engine,
        quant_config=quant_config,
        positions=positions,
        problems=tuple(problems),
        **values,  # type: ignore[arg-type]
    )


def parse_command(tokens: Sequence[str]) -> EngineConfig | None:
    """An engine command line (see ``detect_engine``) -> its EngineConfig; None if the tokens
    start no known engine."""
    found = detect_engine(tokens)
    if found is None:
        return None
    engine, start = found
    return parse_args(engine, tokens[start:], offset=start)


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


def _engine_wording(finding: Finding, facts: EngineFacts) -> Finding:
    config = facts.config
    flags = _FIX_FLAG[config.engine]
    message, fix, summary = finding.message, finding.fix, finding.fix_summary
    if finding.rule == "batch-size-one":
        flag = flags.get("max_num_seqs", "--max-num-seqs")
        message = (
            f"{flag} 1 lets the engine run one request at a time, so every generated token pays "
            "for a full pass over the weights that a batch of concurrent requests would share."
        )
        fix = f"remove {flag} 1 (or raise it, e.g. {flag} 64) so the scheduler can batch requests"
        summary = f"raise {flag} above 1"
    elif finding.rule == "small-model-quant":
        flag = flags.get("quantization")
        label = facts.quant_label or "quantized"
        message = message.replace(
            f"where {facts.deployment.precision} dequantization", f"where {label} dequantization"
        )
        dtype = {"fp16": "float16"}.get(unquantized_dtype(facts.deployment) or "", "bfloat16")
        dtype_flag = flags.get("dtype")
        fix = "serve the unquantized checkpoint" + (
            f" with {dtype_flag} {dtype}" if dtype_flag else ""
        )
        if flag and config.quantization:
            fix += f" (drop {flag} {config.quantization})"
        summary = "drop quantization: serve the 16-bit model"
    elif finding.rule == "int8-mixed":
        if config.engine == "tgi":
            fix = "--quantize eetq  # int8 weights without the outlier decomposition, or drop --quantize"
        else:
            fix = (
                "serve the 16-bit checkpoint, or one quantized with "
                "BitsAndBytesConfig(load_in_8bit=True, llm_int8_threshold=0.0)"
            )
        summary = "avoid LLM.int8() at threshold 6.0"
    elif finding.rule == "fp8-eager":
        if config.engine == "vllm":
            fix = "drop --enforce-eager so vLLM compiles the model (or serve it in bf16)"
        elif config.engine == "sglang":
            fix = "drop --disable-cuda-graph (or serve the model in bf16)"
        summary = "compile the FP8 model, or serve it unquantized"
    details = (*finding.details, *facts.details)
    return replace(finding, message=message, fix=fix, fix_summary=summary, details=details)
