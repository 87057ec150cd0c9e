"""Model names in a question, as written: ``Qwen2.5-7B``, ``mistral-7b``, ``Llama 3 8B``,
``TinyLlama``, ``Phi-3-mini``, a bare ``7B``; with the size in billions where the name carries
one. Resolving a name against the model registry happens later (``deployments.py``).
"""

from __future__ import annotations

import re

from ecoguard.advisor.accelerators import VENDOR_TOKENS
from ecoguard.advisor.words import Word, following
from ecoguard.errors import UsageError

ModelMention = tuple[int, int, str, float | None]  # (start, end, name as written, size_b)

MODEL_FAMILIES = frozenset(
    {
        "qwen",
        "qwen1.5",
        "qwen2",
        "qwen2.5",
        "qwen3",
        "mistral",
        "mixtral",
        "llama",
        "llama2",
        "llama3",
        "llama-2",
        "llama-3",
        "tinyllama",
        "yi",
        "yi-1.5",
        "phi",
        "phi-2",
        "phi-3",
        "gemma",
        "gemma2",
        "deepseek",
        "baichuan",
        "baichuan2",
        "chatglm",
        "glm",
        "internlm",
        "falcon",
        "opt",
        "smollm",
        "smollm2",
        "gpt2",
        "gpt-2",
        "bloom",
        "olmo",
        "starcoder",
        "codellama",
        "vicuna",
    }
)
# Model names without a size in them, as people write them -> the name the registry resolves.
_SHORT_MODELS: dict[str, str] = {
    "tinyllama": "TinyLlama-1.1B",
    "phi-3-mini": "Phi-3-mini",
    "phi3-mini": "Phi-3-mini",
    "phi-3-small": "Phi-3-small",
    "phi3-small": "Phi-3-small",
    "phi-3-medium": "Phi-3-medium",
    "phi3-medium": "Phi-3-medium",
}
# Words after a bare size ("100B tokens") that mean it is not a model size.
NOT_MODEL_AFTER = frozenset(
    {"token", "tokens", "request", "requests", "words", "chars", "users", "bytes"}
)
_SIZE_PART = re.compile(r"(\d+(?:\.\d+)?)([bBmM])")


def _size_b(parts: list[str]) -> float | None:
    """The last ``7B``/``1.5b``/``135M`` part of a name, in billions of parameters."""
    size_b: float | None = None
    for part in parts:
        m = _SIZE_PART.fullmatch(part)
        if m:
            value = float(m.group(1))
            size_b = value if m.group(2) in "bB" else value / 1000.0
    return size_b


def _sized(words: list[Word], i: int, size_b: float) -> ModelMention | None:
    """A bare size (``7B``): a model when no counted noun follows; joined to a family name
    written before it (``Llama 7B`` -> ``Llama-7B``), with its version (``Llama 3 8B``)."""
    start, end, raw = words[i]
    if following(words, i) in NOT_MODEL_AFTER or raw[-1] in "mM":
        return None
    prev = words[i - 1] if i > 0 else None
    if prev is not None and prev[2].lower() in MODEL_FAMILIES:
        return (prev[0], end, f"{prev[2]}-{raw}", size_b)
    family = words[i - 2] if i > 1 else None
    if family and prev and family[2].lower() in MODEL_FAMILIES and _VERSION.fullmatch(prev[2]):
        # "Llama 3 8B" -> Llama3-8B, "Qwen 2.5 7B" -> Qwen2.5-7B, "Llama 3.1 8B" -> Llama-3.1-8B
        joined = family[2] + prev[2]
        name = joined if joined.lower() in MODEL_FAMILIES else f"{family[2]}-{prev[2]}"
        return (family[0], end, f"{name}-{raw}", size_b)
    return (start, end, raw, size_b)


# A family's version written apart from its name ("Llama 3", "Qwen 2.5").
_VERSION = re.compile(r"\d(?:\.\d{1,2})?")


def _unsized(words: list[Word], i: int) -> ModelMention | None:
    """A name without a size: a short name (``TinyLlama``, ``Phi-3 mini``) or a hub id."""
    start, end, raw = words[i]
    base = raw.lower().split("/")[-1]
    nxt = following(words, i)
    if base in _SHORT_MODELS:
        return (start, end, _SHORT_MODELS[base], None)
    if f"{base}-{nxt}" in _SHORT_MODELS:
        return (start, words[i + 1][1], _SHORT_MODELS[f"{base}-{nxt}"], None)
    if any(base.startswith(f) for f in ("tinyllama", "smollm")) or (
        "/" in raw and base.split("-")[0] in MODEL_FAMILIES
    ):
        return (start, end, raw, None)
    return None


def find_models(words: list[Word]) -> list[ModelMention]:
    """Model mentions: ``(start, end, text, size_b)``."""
    found: list[ModelMention] = []
    for i, (start, end, raw) in enumerate(words):
        if raw.lower() in VENDOR_TOKENS:
            continue  # "910B" is a Huawei Ascend chip, not a 910-billion-parameter model
        parts = [p for p in re.split(r"[-/_]", raw) if p]
        size_b = _size_b(parts)
        if size_b is not None and len(parts) > 1:
            mention: ModelMention | None = (start, end, raw, size_b)
        elif size_b is not None:
            mention = _sized(words, i, size_b)
        else:
            mention = _unsized(words, i)
        if mention is not None:
            found.append(mention)
    return found


def one_model(models: list[ModelMention]) -> tuple[str | None, float | None]:
    """The model asked about and its size; several different models is a usage error."""
    if not models:
        return None, None
    if len({m[2].lower() for m in models}) > 1 and len({m[3] for m in models}) > 1:
        raise UsageError(
            "the question names more than one model ("
            + ", ".join(m[2] for m in models)
            + "); ask about one model at a time"
        )
    return models[0][2], models[0][3]
