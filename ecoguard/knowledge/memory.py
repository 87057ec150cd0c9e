"""How much GPU memory a deployment needs: the one formula the estimator and the rules share.

Need = weights (params x bytes per weight of the precision) + fp16 KV cache
(2 x layers x KV heads x head dim x (prompt + generated tokens) x batch x 2 B) + runtime overhead
(10 % of the weights + 0.5 GB: CUDA context, activations, allocator slack). GB are 1e9 bytes.

The estimator reports ``total_gb`` as ``vram_gb`` and ``method`` as ``vram_method``; the
``vram-overflow`` rule compares the same total against the GPUs' VRAM times
:data:`FULL_NEED_VRAM_FRACTION`, so both always show the same figures. Nothing here imports
torch or transformers, and nothing reads a file unless :func:`lookup_model` is called.
"""

from __future__ import annotations

from dataclasses import dataclass

from ecoguard.deployment import BYTES_PER_PARAM, Deployment
from ecoguard.errors import UnknownModelError
from ecoguard.knowledge.records import ModelInfo
from ecoguard.knowledge.tables import resolve_model

# What a request looks like when the deployment does not say (the estimator states these as
# assumptions, the advisor lists them as defaults): 512 prompt tokens (a system prompt plus a
# user turn), 256 generated tokens. The one home of both; every door reads them from here.
DEFAULT_PROMPT_TOKENS = 512
DEFAULT_GENERATION_TOKENS = 256
# Runtime overhead beyond weights and KV cache: CUDA context, allocator slack and activations.
VRAM_OVERHEAD_FRACTION = 0.10
VRAM_OVERHEAD_GB = 0.5
KV_BYTES = 2  # fp16 KV cache

# Share of the GPUs' VRAM that the *full* need (weights + KV cache + overhead) may take. It is
# 1.0 on purpose: the overhead term already reserves what a blanket headroom (the old 90 %
# "usable" share on weights + KV) stood for, i.e. the CUDA context, activations and allocator
# fragmentation. Taking another 10 % off the VRAM on top of it would count that reserve twice and
# flag deployments that load fine (a 7B fp16 model with a short context on a 16 GB GPU).
FULL_NEED_VRAM_FRACTION = 1.0

NO_SIZE_METHOD = "model size unknown"


@dataclass(frozen=True, slots=True)
class MemoryNeed:
    """GPU memory for one deployment, in GB (1e9 bytes), and the sentence that says how.

    ``kv_cache_gb`` is None when the model's shape (layers, KV heads, head dim) is unknown; the
    total then leaves the cache out and ``method`` says so."""

    weights_gb: float
    kv_cache_gb: float | None
    overhead_gb: float
    total_gb: float
    method: str
    precision: str
    tokens: int
    batch_size: int


def resolved_precision(deployment: Deployment) -> str:
    """The precision the figures assume: the deployment's, else its dtype when that is a float
    format, else fp16 (what the estimator states as an assumption)."""
    if deployment.precision is not None:
        return deployment.precision
    return deployment.dtype if deployment.dtype in ("fp16", "bf16", "fp32") else "fp16"


def lookup_model(deployment: Deployment) -> ModelInfo | None:
    """The knowledge registry's entry for the deployment's model id (or the size its name states),
    None without an id or when nothing matches: the same lookup the estimator makes."""
    if not deployment.model.id:
        return None
    try:
        return resolve_model(deployment.model.id)
    except UnknownModelError:
        return None


def memory_need(
    deployment: Deployment,
    model_info: ModelInfo | None = None,
    *,
    prompt_tokens: int | None = None,
    generation_tokens: int | None = None,
) -> MemoryNeed | None:
    """Weights + KV cache + overhead for ``deployment``; None when the model size is unknown.

    Facts come from the deployment first, then from ``model_info`` (a registry entry, see
    :func:`lookup_model`); nothing is looked up here. Token counts default to the deployment's,
    then to :data:`DEFAULT_PROMPT_TOKENS` / :data:`DEFAULT_GENERATION_TOKENS` (a generation
    length of 0 counts as unknown, as in the estimator); the batch size defaults to 1."""
    spec = deployment.model
    params_b = spec.params_b
    if params_b is None and model_info is not None:
        params_b = model_info.params_b
    if params_b is None:
        return None
    if prompt_tokens is None:
        prompt_tokens = deployment.prompt_tokens
    if prompt_tokens is None:
        prompt_tokens = DEFAULT_PROMPT_TOKENS
    generation_tokens = (
        generation_tokens or deployment.generation_tokens or DEFAULT_GENERATION_TOKENS
    )
    tokens = prompt_tokens + generation_tokens
    batch = deployment.batch_size or 1
    precision = resolved_precision(deployment)

    weights = params_b * BYTES_PER_PARAM.get(precision, 2.0)
    overhead = weights * VRAM_OVERHEAD_FRACTION + VRAM_OVERHEAD_GB
    layers = spec.layers or (model_info.layers if model_info else None)
    kv_heads = spec.kv_heads or (model_info.kv_heads if model_info else None)
    head_dim = spec.head_dim or (model_info.head_dim if model_info else None)
    overhead_note = (
        f"overhead {overhead:.2f} GB ({VRAM_OVERHEAD_FRACTION:.0%} + {VRAM_OVERHEAD_GB:g} GB)"
    )
    if layers and kv_heads and head_dim:
        kv = 2 * layers * kv_heads * head_dim * tokens * batch * KV_BYTES / 1e9
        method = (
            f"weights {weights:.2f} GB ({precision}) + KV cache {kv:.2f} GB "
            f"(2 x {layers} layers x {kv_heads} KV heads x {head_dim} x {tokens} tokens x "
            f"BS {batch} x {KV_BYTES} B) + {overhead_note}"
        )
        return MemoryNeed(
            weights, kv, overhead, weights + kv + overhead, method, precision, tokens, batch
        )
    method = (
        f"weights {weights:.2f} GB ({precision}) + {overhead_note}; KV cache not included "
        "(model shape unknown)"
    )
    return MemoryNeed(weights, None, overhead, weights + overhead, method, precision, tokens, batch)


def usable_vram_gb(vram_gb: float, count: int = 1) -> float:
    """VRAM the full need may take on ``count`` GPUs of ``vram_gb`` each."""
    return vram_gb * max(count, 1) * FULL_NEED_VRAM_FRACTION


__all__ = [
    "DEFAULT_GENERATION_TOKENS",
    "DEFAULT_PROMPT_TOKENS",
    "FULL_NEED_VRAM_FRACTION",
    "KV_BYTES",
    "NO_SIZE_METHOD",
    "VRAM_OVERHEAD_FRACTION",
    "VRAM_OVERHEAD_GB",
    "MemoryNeed",
    "lookup_model",
    "memory_need",
    "resolved_precision",
    "usable_vram_gb",
]
