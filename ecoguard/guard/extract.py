"""Facts from live calls: ``from_pretrained`` arguments, the loaded model, ``generate`` calls.

Everything here reads objects by duck typing (attribute names of transformers' configs and
models) so it never has to import transformers itself; callers run it inside try/except and
count failures as faults.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ecoguard.deployment import Deployment, ModelSpec, QuantSpec
from ecoguard.errors import UsageError
from ecoguard.faults import record_fault
from ecoguard.knowledge import resolve_model
from ecoguard.quantization import dtype_name, quant_from_config


def _get(config: Any, name: str, default: Any = None) -> Any:
    if isinstance(config, Mapping):
        return config.get(name, default)
    return getattr(config, name, default)


def params_from_config(config: Any) -> float | None:
    """Parameter count (billions) of a decoder-only transformer from its config fields:
    embeddings, attention (q/o full width, k/v at KV width), gated MLP (3 matrices), norms and
    an untied LM head. Good to a few percent for Llama/Qwen/Mistral-style models."""
    hidden = _get(config, "hidden_size")
    layers = _get(config, "num_hidden_layers")
    vocab = _get(config, "vocab_size")
    if not (isinstance(hidden, int) and isinstance(layers, int) and isinstance(vocab, int)):
        return None
    heads = _get(config, "num_attention_heads") or 1
    kv_heads = _get(config, "num_key_value_heads") or heads
    head_dim = _get(config, "head_dim") or hidden // heads
    inter = _get(config, "intermediate_size") or 4 * hidden
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
    mlp = 3 * hidden * inter
    per_layer = attention + mlp + 2 * hidden
    embeddings = vocab * hidden
    head = 0 if _get(config, "tie_word_embeddings", False) else vocab * hidden
    return (embeddings + layers * per_layer + head + hidden) / 1e9


def model_spec_from_config(config: Any, model_id: str | None, params_b: float | None) -> ModelSpec:
    heads = _get(config, "num_attention_heads")
    hidden = _get(config, "hidden_size")
    head_dim = _get(config, "head_dim")
    if head_dim is None and isinstance(hidden, int) and isinstance(heads, int) and heads:
        head_dim = hidden // heads
    return ModelSpec(
        id=model_id,
        params_b=params_b,
        family=_get(config, "model_type"),
        layers=_get(config, "num_hidden_layers"),
        hidden_size=hidden,
        kv_heads=_get(config, "num_key_value_heads") or heads,
        head_dim=head_dim,
        context_window=_get(config, "max_position_embeddings"),
    )


def read_local_config(path: Any) -> dict[str, Any] | None:
    """``config.json`` of a local checkpoint directory, or None (hub ids are never fetched)."""
    try:
        directory = os.fspath(path)
    except TypeError:
        return None
    candidate = os.path.join(directory, "config.json")
    if not os.path.isfile(candidate):
        return None
    with open(candidate, encoding="utf-8") as handle:
        data = json.load(handle)
    return data if isinstance(data, dict) else None


def _model_id(path: Any) -> str | None:
    if path is None:
        return None
    try:
        text = os.fspath(path)
    except TypeError:
        return None
    text = str(text).rstrip("/\\")
    if os.path.isdir(text):
        return os.path.basename(text) or text
    return text


def _params_from_registry(model_id: str | None) -> ModelSpec | None:
    if not model_id:
        return None
    try:
        info = resolve_model(model_id)
    except UsageError:  # unknown to the registry
        return None
    except Exception as exc:  # tables unreadable
        record_fault("guard.extract", exc)
        return None
    return info.to_model_spec(model_id)


@dataclass(frozen=True, slots=True)
class LoadFacts:
    """What the guard knows before weights load, plus where the quantization came from."""

    deployment: Deployment
    quant_source: str | None  # "kwargs" | "checkpoint" | None
    checkpoint_config: dict[str, Any] | None


def facts_from_load_call(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> LoadFacts:
    """Facts from ``from_pretrained(path_or_id, *args, **kwargs)`` before anything loads.

    The checkpoint's own ``quantization_config`` (pre-quantized) wins over the kwargs, as it
    does in transformers; the model size comes from a local ``config.json`` or the registry."""
    path = args[0] if args else kwargs.get("pretrained_model_name_or_path")
    model_id = _model_id(path)
    checkpoint = read_local_config(path) if path is not None else None
    quant_cfg = None
    source = None
    if checkpoint is not None and checkpoint.get("quantization_config"):
        quant_cfg, source = checkpoint["quantization_config"], "checkpoint"
    elif kwargs.get("quantization_config") is not None:
        quant_cfg, source = kwargs["quantization_config"], "kwargs"
    # compiled=False: at load time nothing is compiled yet (torch.compile comes later).
    read = quant_from_config(quant_cfg, pre_quantized=source == "checkpoint", compiled=False)
    precision, quant = read.precision, read.quant
    dtype = dtype_name(kwargs.get("dtype", kwargs.get("torch_dtype")))
    if checkpoint is not None:
        model = model_spec_from_config(checkpoint, model_id, params_from_config(checkpoint))
    else:
        model = _params_from_registry(model_id) or ModelSpec(id=model_id)
    if precision is None and quant.method is None:
        precision = dtype
    deployment = Deployment(model=model, precision=precision, quant=quant, dtype=dtype)
    return LoadFacts(deployment=deployment, quant_source=source, checkpoint_config=checkpoint)


def first_parameter(model: Any) -> Any | None:
    """The model's first parameter (``model.parameters()``), or None when it has none."""
    try:
        return next(iter(model.parameters()))
    except (StopIteration, AttributeError, TypeError):  # no parameters, or not a torch module
        return None
    except Exception as exc:
        record_fault("guard.extract", exc)
        return None


def facts_from_model(model: Any, base: Deployment | None = None) -> Deployment:
    """Facts from a loaded model: its ``config.quantization_config`` (wins for pre-quantized
    checkpoints), parameter count, dtype and device. ``base`` carries what the load call said."""
    deployment = base or Deployment()
    config = getattr(model, "config", None)
    quant_cfg = getattr(config, "quantization_config", None) if config is not None else None
    if quant_cfg is not None:
        pre = deployment.quant.pre_quantized
        read = quant_from_config(quant_cfg, pre_quantized=pre, compiled=False)
        deployment = deployment.with_(precision=read.precision, quant=read.quant)
    elif getattr(model, "hf_quantizer", None) is not None:
        deployment = deployment.with_(quant=QuantSpec(method="other"))
    model_id = deployment.model.id or getattr(config, "_name_or_path", None) or None
    params_b = deployment.model.params_b
    if params_b is None:
        try:
            params_b = model.num_parameters() / 1e9
        except (AttributeError, TypeError):  # not a transformers model
            params_b = None
        except Exception as exc:
            record_fault("guard.extract", exc)
            params_b = None
    if config is not None:
        spec = model_spec_from_config(config, model_id, params_b)
    else:
        spec = deployment.model.__class__(id=model_id, params_b=params_b)
    dtype = dtype_name(getattr(model, "dtype", None))
    if deployment.quant.method is None and deployment.precision is None:
        deployment = deployment.with_(precision=dtype)
    return deployment.with_(model=spec, dtype=dtype or deployment.dtype)


def model_devices(model: Any) -> tuple[int, ...] | None:
    """CUDA device indices the model's weights live on (``hf_device_map`` or ``model.device``);
    None when on CPU or unknown, so the meter picks its default."""
    device_map = getattr(model, "hf_device_map", None)
    found: set[int] = set()
    if isinstance(device_map, Mapping):
        for value in device_map.values():
            if isinstance(value, int):
                found.add(value)
            elif isinstance(value, str) and value.startswith("cuda"):
                _, _, index = value.partition(":")
                found.add(int(index) if index else 0)
    if not found:
        device = getattr(model, "device", None)
        if getattr(device, "type", None) == "cuda":
            found.add(device.index or 0)
    return tuple(sorted(found)) or None


@dataclass(frozen=True, slots=True)
class GenerateFacts:
    """One generate call: rows in, prompt width (incl. left padding; the output's prompt part),
    real prompt tokens per row, and ``max_new_tokens`` when given."""

    batch_size: int | None
    prompt_width: int
    prompt_tokens: int | None
    max_new_tokens: int | None


def facts_from_generate(
    model: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> GenerateFacts:
    """Batch size from the first positional ``inputs``, ``input_ids`` or ``inputs_embeds``."""
    inputs = args[0] if args else kwargs.get("inputs")
    if inputs is None:
        inputs = kwargs.get("input_ids")
    prompt_in_output = True
    if inputs is None and kwargs.get("inputs_embeds") is not None:
        inputs = kwargs["inputs_embeds"]
        prompt_in_output = False  # decoder-only output then holds only new tokens
    config = getattr(model, "config", None)
    # Encoder-decoder outputs start with the decoder start token, not the prompt.
    encoder_decoder = bool(getattr(config, "is_encoder_decoder", False))
    shape = getattr(inputs, "shape", None)
    batch = prompt = None
    if shape is not None and len(shape) >= 1:
        batch = int(shape[0])
        prompt = int(shape[1]) if len(shape) >= 2 else None
    mask = kwargs.get("attention_mask")
    prompt_tokens = prompt
    if mask is not None and batch:
        try:
            prompt_tokens = int(mask.sum()) // batch
        except (AttributeError, TypeError, ValueError):  # a mask that is not a tensor
            prompt_tokens = prompt
        except Exception as exc:
            record_fault("guard.extract", exc)
            prompt_tokens = prompt
    max_new = kwargs.get("max_new_tokens")
    if max_new is None:
        generation_config = kwargs.get("generation_config") or getattr(
            model, "generation_config", None
        )
        max_new = getattr(generation_config, "max_new_tokens", None)
    return GenerateFacts(
        batch_size=batch,
        prompt_width=1 if encoder_decoder else ((prompt or 0) if prompt_in_output else 0),
        prompt_tokens=prompt_tokens,
        max_new_tokens=max_new if isinstance(max_new, int) else None,
    )
