"""Serving-engine command lines -> :class:`EngineConfig`: which engine a command starts and what
its flags set.

One flag table (``FLAGS``) per engine (vLLM, TGI, SGLang, llama.cpp); the launch-file audit reads
commands through ``parse_command``, and :mod:`ecoguard.engines.engine_args` turns the resulting
EngineConfig into the Deployment and the rules' findings (the fixes name flags from this table).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

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

_INT_FIELDS = frozenset({"max_num_seqs", "tensor_parallel_size", "cuda_graphs"})


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
