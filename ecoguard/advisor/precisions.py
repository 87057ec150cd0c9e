"""Precisions a question names, in order: words (``FP16``, ``NF4``, ``INT8 pure``, ``半精度``,
``4位``) and code flags (``load_in_8bit=True``, ``torch_dtype=torch.bfloat16``,
``llm_int8_threshold=0.0``, ``bnb_4bit_use_double_quant=True``, ``torch.compile``), as the
deployment record's canonical names.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from ecoguard.advisor.numbers import NUMBER
from ecoguard.advisor.words import Word
from ecoguard.deployment import PRECISION_ALIASES
from ecoguard.errors import UsageError

# Code flags (read only from a question that holds "=" or "float8"; compiled by re's cache).
_CODE_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"(?i)load_in_8bit\s*=\s*true", "int8_mixed"),
    (r"(?i)load_in_4bit\s*=\s*true", "nf4"),
    (r"(?i)(?:torch_)?dtype\s*=\s*(?:torch\.)?(?:float16|half)\b", "fp16"),
    (r"(?i)(?:torch_)?dtype\s*=\s*(?:torch\.)?bfloat16\b", "bf16"),
    (r"(?i)(?:torch_)?dtype\s*=\s*(?:torch\.)?float32\b", "fp32"),
    (r"(?i)float8_dynamic_activation|float8dynamicactivation", "fp8_dynamic"),
    (r"(?i)float8_weight_only|float8weightonly", "fp8_weight_only"),
)
_ZH_PRECISIONS: tuple[tuple[str, str], ...] = (
    ("纯int8", "int8_pure"),
    ("纯 int8", "int8_pure"),
    ("半精度", "fp16"),
    ("8位", "int8_mixed"),
    ("8 位", "int8_mixed"),
    ("八位", "int8_mixed"),
    ("8比特", "int8_mixed"),
    ("4位", "nf4"),
    ("4 位", "nf4"),
    ("四位", "nf4"),
    ("4比特", "nf4"),
)
_INT8_WORDS = ("int8", "8bit", "8_bit")
# Aliases too common as plain words to name a precision alone ("half" does in "half precision").
_NOT_A_PRECISION = ("float", "full", "half")


def _word_precision(key: str, prev: str, nxt: str) -> str | None:
    """The precision a word names, read with the words around it (``pure int8``, ``fp8
    dynamic``, ``nf4 dq``, ``half precision``)."""
    if key in _INT8_WORDS and (prev in ("pure", "纯") or nxt == "pure"):
        return "int8_pure"
    if key in _INT8_WORDS and prev in ("mixed",):
        return "int8_mixed"
    if key in ("fp8", "float8") and nxt in ("dynamic", "dyn", "dynamic_activation"):
        return "fp8_dynamic"
    if (
        key in ("nf4", "4bit", "4_bit") and nxt in ("dq", "double_quant", "double", "双重量化")
    ) or key == "nf4+dq":
        return "nf4_dq"
    if key in PRECISION_ALIASES and key not in _NOT_A_PRECISION:
        return PRECISION_ALIASES[key]
    if key == "half" and nxt == "precision":
        return "fp16"
    return None


def find_precisions(text: str, words: list[Word]) -> list[tuple[int, str]]:
    """Every precision named, ``(position, canonical name)``, in the order written."""
    found: list[tuple[int, str]] = []
    lower = text.lower()
    for pattern, precision in _CODE_PATTERNS if "=" in text or "float8" in lower else ():
        for m in re.finditer(pattern, text):
            found.append((m.start(), precision))
    for needle, precision in _ZH_PRECISIONS:
        pos = lower.find(needle)
        if pos >= 0:
            found.append((pos, precision))
    lowered = [(s, t.lower()) for s, _e, t in words]
    for i, (start, word) in enumerate(lowered):
        if "=" in word or word.startswith("torch"):
            continue
        nxt = lowered[i + 1][1] if i + 1 < len(lowered) else ""
        prev = lowered[i - 1][1] if i > 0 else ""
        precision = _word_precision(word.replace("-", "_"), prev, nxt)
        if precision is not None:
            found.append((start, precision))
    found.sort()
    return found


class CodeFlags(NamedTuple):
    """Code flags that refine the precisions named (``llm_int8_threshold=0.0`` -> pure INT8),
    named as the Question's fields."""

    precisions: tuple[str, ...]
    int8_threshold: float | None = None
    double_quant: bool | None = None
    compiled: bool | None = None
    compute_dtype: str | None = None  # the dtype named beside a load_in_4bit/8bit flag


_LOAD_IN = r"(?i)load_in_(?:4|8)bit\s*=\s*true"
_COMPUTE_DTYPE = r"(?i)bnb_4bit_compute_dtype\s*=\s*(?:torch\.)?(bfloat16|float16|half|float32)\b"
_UNQUANTIZED = ("bf16", "fp16", "fp32")


def _compute_dtype(question: str, precisions: list[str]) -> tuple[list[str], str | None]:
    """With a ``load_in_4bit``/``load_in_8bit`` flag, a dtype named beside it (``bf16``,
    ``torch_dtype=torch.bfloat16``, ``bnb_4bit_compute_dtype``) is the compute dtype of the
    quantized weights, not the precision: the precisions without it, and the dtype."""
    m = re.search(_COMPUTE_DTYPE, question)
    named = PRECISION_ALIASES[m.group(1).lower()] if m else None
    if not re.search(_LOAD_IN, question):
        return precisions, named
    dtypes = [p for p in precisions if p in _UNQUANTIZED]
    quantized = [p for p in precisions if p not in _UNQUANTIZED]
    if not dtypes or not quantized:
        return precisions, named
    return quantized, named or dtypes[0]


def code_flags(question: str, found: list[tuple[int, str]]) -> CodeFlags:
    """The precisions named, refined by the code flags; ``load_in_8bit=True`` with
    ``load_in_4bit=True`` is a contradiction (UsageError)."""
    precisions = list(dict.fromkeys(p for _pos, p in found))
    if "=" not in question and "compile" not in question:  # no code flag can be set
        return CodeFlags(tuple(precisions))
    threshold: float | None = None
    m = re.search(rf"llm_int8_threshold\s*=\s*({NUMBER})", question, re.I)
    if m:
        threshold = float(m.group(1))
        if threshold == 0.0:
            precisions = ["int8_pure" if p == "int8_mixed" else p for p in precisions]
            if "int8_pure" not in precisions:
                precisions.insert(0, "int8_pure")
    double_quant = None
    if re.search(r"bnb_4bit_use_double_quant\s*=\s*true", question, re.I):
        double_quant = True
        precisions = ["nf4_dq" if p == "nf4" else p for p in precisions]
    compiled = True if re.search(r"torch\.compile|compile\s*=\s*true", question, re.I) else None
    precisions, compute_dtype = _compute_dtype(question, precisions)
    if re.search(r"load_in_8bit\s*=\s*true", question, re.I) and re.search(
        r"load_in_4bit\s*=\s*true", question, re.I
    ):
        raise UsageError(
            "contradiction: load_in_8bit=True and load_in_4bit=True cannot both be set; "
            "say which one the model is loaded with"
        )
    return CodeFlags(
        tuple(dict.fromkeys(precisions)), threshold, double_quant, compiled, compute_dtype
    )
