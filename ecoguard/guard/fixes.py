"""Fix mode: the corrections the guard applies, each saying exactly what it changed.

Load-time fixes rewrite a *copy* of the ``from_pretrained`` kwargs (the caller's objects are
never mutated); a pre-quantized INT8 checkpoint is fixed after load, on the model's own layers.
A fix that cannot be applied returns ``None`` and a reason, and the guard warns instead.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from ecoguard.deployment import Deployment, QuantSpec
from ecoguard.knowledge.memory import FULL_NEED_VRAM_FRACTION, memory_need
from ecoguard.rules import unquantized_dtype

_TORCH_DTYPE = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def _dtype_key(kwargs: Mapping[str, Any]) -> str:
    """transformers 5 reads ``dtype``; older code passes ``torch_dtype``: replace whichever the
    caller used so the load does not see both."""
    return "torch_dtype" if "torch_dtype" in kwargs and "dtype" not in kwargs else "dtype"


def threshold_zero_config(config: Any) -> Any:
    """A copy of a BitsAndBytesConfig (or its dict form) with ``llm_int8_threshold=0.0``."""
    if isinstance(config, Mapping):
        fixed = dict(config)
        fixed["llm_int8_threshold"] = 0.0
        return fixed
    fixed = copy.deepcopy(config)
    fixed.llm_int8_threshold = 0.0
    return fixed


def fix_int8_kwargs(kwargs: dict[str, Any]) -> str:
    """Replace ``quantization_config`` in ``kwargs`` (already a copy) with a threshold-0 copy."""
    original = kwargs["quantization_config"]
    before = (
        original.get("llm_int8_threshold", 6.0)
        if isinstance(original, Mapping)
        else getattr(original, "llm_int8_threshold", 6.0)
    )
    kwargs["quantization_config"] = threshold_zero_config(original)
    return (
        f"loaded with a copy of quantization_config where llm_int8_threshold={before:g} -> 0.0 "
        "(your config object is unchanged)"
    )


def set_int8_threshold_zero(model: Any) -> int:
    """Set ``state.threshold = 0.0`` on every bitsandbytes Linear8bitLt of a loaded model (the
    pre-quantized-checkpoint path); also records it in ``model.config.quantization_config``.
    Returns the number of layers changed."""
    changed = 0
    for module in model.modules():
        if type(module).__name__ != "Linear8bitLt":
            continue
        state = getattr(module, "state", None)
        if state is not None and getattr(state, "threshold", None) != 0.0:
            state.threshold = 0.0
            changed += 1
    quant_cfg = getattr(getattr(model, "config", None), "quantization_config", None)
    if quant_cfg is not None:
        if isinstance(quant_cfg, dict):
            quant_cfg["llm_int8_threshold"] = 0.0
        elif hasattr(quant_cfg, "llm_int8_threshold"):
            quant_cfg.llm_int8_threshold = 0.0
    return changed


def fits_unquantized(deployment: Deployment, dtype: str | None) -> bool | None:
    """Whether the model unquantized (weights in ``dtype``, KV cache and overhead) fits the
    GPUs' VRAM, by the same formula as the estimator and the vram-overflow rule; None if
    unknown."""
    vram_gb = deployment.gpu.vram_gb
    if deployment.model.params_b is None or vram_gb is None:
        return None
    unquantized = deployment.with_(precision=dtype or "fp32", quant=QuantSpec())
    need = memory_need(unquantized)
    if need is None:
        return None
    return need.total_gb <= vram_gb * max(deployment.gpu.count, 1) * FULL_NEED_VRAM_FRACTION


def fix_unquantize_kwargs(
    kwargs: dict[str, Any], deployment: Deployment
) -> tuple[str | None, str | None]:
    """Drop ``quantization_config`` and load in bf16/fp16 (fp32/default on CPU when no GPU is
    known). Returns (what changed, None) or (None, why not)."""
    if deployment.quant.pre_quantized:
        return None, (
            "the checkpoint itself is quantized; load the original half-precision weights instead"
        )
    if "quantization_config" not in kwargs:
        return None, "the quantization does not come from this call's arguments"
    dtype = unquantized_dtype(deployment)
    if fits_unquantized(deployment, dtype) is False:
        return None, "the unquantized weights would not fit in this GPU's memory, so it stays"
    del kwargs["quantization_config"]
    if dtype is None:
        user_dtype = kwargs.get("dtype", kwargs.get("torch_dtype"))
        shown = "your dtype" if user_dtype is not None else "the default dtype (fp32 on CPU)"
        return (
            f"dropped quantization_config and loaded in {shown}: no GPU is known, so no "
            "half-precision choice was made",
            None,
        )
    import torch

    key = _dtype_key(kwargs)
    kwargs[key] = getattr(torch, _TORCH_DTYPE[dtype])
    return f"dropped quantization_config and loaded with {key}=torch.{_TORCH_DTYPE[dtype]}", None


def fix_bf16_kwargs(kwargs: dict[str, Any]) -> tuple[str | None, str | None]:
    """bf16 -> fp16 when the dtype came from this call's arguments."""
    key = _dtype_key(kwargs)
    value = kwargs.get(key)
    if value is None or ("bfloat16" not in str(value) and str(value) != "bf16"):
        return None, "bf16 does not come from this call's dtype argument"
    import torch

    kwargs[key] = torch.float16
    return f"loaded with {key}=torch.float16 instead of bfloat16", None
