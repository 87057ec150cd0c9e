"""GPU names in a question, normalised for ``knowledge.resolve_gpu``: ``RTX 5090`` -> ``rtx5090``,
``4090 D`` -> ``rtx4090d``, ``H100 PCIe`` -> ``h100 pcie``, ``Blackwell`` -> the Blackwell GPU
with the most reference data (a conversion the answer shows). NVIDIA cards outside the table
(``RTX 4080``) are kept as written and matched later (``accelerators.nearest_profile``); another
vendor's accelerator is returned beside them.
"""

from __future__ import annotations

import re

from ecoguard.advisor.accelerators import NVIDIA_CARDS, Vendor, find_vendor
from ecoguard.advisor.accelerators import fold as fold_card
from ecoguard.advisor.conversions import Conversion
from ecoguard.advisor.model_names import NOT_MODEL_AFTER
from ecoguard.advisor.numbers import lazy_pattern
from ecoguard.advisor.words import Word, following

GpuMention = tuple[int, int, str]  # (start, end, normalised name)

# Lower-cased token -> normalised GPU text passed to knowledge.resolve_gpu.
_GPU_TOKENS: dict[str, str] = {
    "5090": "rtx5090",
    "rtx5090": "rtx5090",
    "4090d": "rtx4090d",
    "rtx4090d": "rtx4090d",
    "4090": "rtx4090",
    "rtx4090": "rtx4090",
    "3090": "rtx3090",
    "rtx3090": "rtx3090",
    "a800": "a800",
    "a100": "a100",
    "h100": "h100",
    "h800": "h800",
    "h200": "h200",
    "h20": "h20",
    "t4": "t4",
    "l4": "l4",
    "l40": "l40",
    "l40s": "l40s",
    "v100": "v100",
    "a10": "a10",
    "a10g": "a10g",
    "a6000": "a6000",
    "b200": "b200",
    "b100": "b100",
    "gb200": "gb200",
    "pro6000": "rtxpro6000",
    "rtxpro6000": "rtxpro6000",
}
# Architecture words -> the GPU of that family with the most reference data.
_ARCH_GPUS: dict[str, tuple[str, str]] = {
    "blackwell": ("rtx5090", "RTX 5090"),
    "turing": ("t4", "Tesla T4"),
    "ampere": ("a800", "A800"),
    "ada": ("rtx4090d", "RTX 4090D"),
    "lovelace": ("rtx4090d", "RTX 4090D"),
    "hopper": ("h100", "H100"),
}
_CARD_SUFFIXES = ("ti", "super", "ada")
_FORM_FACTORS = ("pcie", "sxm", "sxm4", "sxm5")


def _key(raw: str) -> str:
    """``NVIDIA-A100`` -> ``a100``, ``RTX_4090`` -> ``rtx4090``."""
    lower = raw.lower()
    for prefix in ("nvidia-", "geforce-", "tesla-"):
        if lower.startswith(prefix):
            lower = lower[len(prefix) :]
    return lower.replace("-", "").replace("_", "")


def _spelled_out(words: list[Word], i: int, key: str, nxt: str) -> GpuMention | None:
    """``RTX PRO 6000``, ``RTX 2080 Ti``, ``GTX 1080 Ti``: a brand word and the card after it.
    ``RTX 4090`` returns None: the table name that follows is read on its own."""
    start = words[i][0]
    joined = "".join(t[2].lower() for t in words[i + 1 : i + 3])
    if joined == "pro6000" and i + 2 < len(words):
        return (start, words[i + 2][1], "rtxpro6000")
    if key in ("rtx", "gtx") and nxt.isdigit() and nxt not in _GPU_TOKENS:
        stop, name = words[i + 1][1], nxt
        if i + 2 < len(words) and words[i + 2][2].lower() in _CARD_SUFFIXES:
            stop, name = words[i + 2][1], name + words[i + 2][2].lower()
        return (start, stop, name)  # outside the table: matched in answers
    return None


def _in_table(words: list[Word], i: int, key: str, nxt: str) -> GpuMention:
    """A GPU of the table, with a ``D``, a form factor (``H100 PCIe``) or its memory size
    (``A100 80GB``: part of the name, not 80 GB of text) written after it."""
    start, end, _raw = words[i]
    norm, stop = _GPU_TOKENS[key], end
    if key in ("4090", "rtx4090") and nxt == "d":
        norm, stop = "rtx4090d", words[i + 1][1]
    elif nxt in _FORM_FACTORS and norm in ("h100", "a800", "a100"):
        norm, stop = f"{norm} {nxt}", words[i + 1][1]  # "H100 PCIe": its own profile
    for j in range(i + 1, min(i + 3, len(words))):
        if _MEMORY_SIZE().fullmatch(words[j][2]) or (
            words[j][2].isdigit() and following(words, j) == "gb"
        ):
            stop = words[j + 1][1] if words[j][2].isdigit() else words[j][1]
            break
    return (start, stop, norm)


_MEMORY_SIZE = lazy_pattern(r"\d{2,3}\s*gb?", re.I)


def _off_table(words: list[Word], i: int, key: str, nxt: str) -> GpuMention | None:
    """An NVIDIA card outside the table (``RTX4080``, ``3060 Ti``, ``A10G``), kept as written
    (with its Ti/SUPER suffix) for ``accelerators.nearest_profile``."""
    start, end, _raw = words[i]
    if key.startswith(("rtx", "gtx", "quadro")) and len(key) > 3:
        if nxt in _CARD_SUFFIXES:
            return (start, words[i + 1][1], key + nxt)
        return (start, end, key)
    if (
        any(ch.isdigit() for ch in key)
        and fold_card(key) in NVIDIA_CARDS
        and (key[0].isalpha() or nxt not in NOT_MODEL_AFTER)
    ):
        if nxt in _CARD_SUFFIXES and fold_card(key + nxt) in NVIDIA_CARDS:
            return (start, words[i + 1][1], key + nxt)
        return (start, end, key)
    return None


def _architecture(words: list[Word], i: int, key: str, conversions: list[Conversion]) -> GpuMention:
    """An architecture word: the GPU of that family with the most reference data."""
    start, end, raw = words[i]
    norm, label = _ARCH_GPUS[key]
    conversions.append(
        Conversion.of(
            "gpu",
            raw,
            0.0,
            f"{raw} -> {label} (the {raw} GPU with the most reference data)",
            f"{raw} -> {label}（该架构中参考数据最多的 GPU）",
        )
    )
    return (start, end, norm)


def find_gpus(
    words: list[Word], conversions: list[Conversion]
) -> tuple[list[GpuMention], Vendor | None]:
    """GPU mentions ``(start, end, normalised)`` and the non-NVIDIA accelerator named, if any.
    An architecture read as a GPU appends its conversion to ``conversions``."""
    found: list[GpuMention] = []
    for i, (_start, _end, raw) in enumerate(words):
        key = _key(raw)
        if key not in _GPU_TOKENS and key.endswith("s") and key[:-1] in _GPU_TOKENS:
            key = key[:-1]  # "two A800s"
        nxt = following(words, i)
        mention: GpuMention | None
        if key in ("rtx", "gtx", "pro") and nxt:
            mention = _spelled_out(words, i, key, nxt)
        elif key in _GPU_TOKENS:
            mention = _in_table(words, i, key, nxt)
        elif key in _ARCH_GPUS:
            mention = _architecture(words, i, key, conversions)
        else:
            mention = _off_table(words, i, key, nxt)
        if mention is not None:
            found.append(mention)
    return found, find_vendor([raw for _s, _e, raw in words])


# ---------------------------------------------------------------------------------------------
# How many GPUs: "4x A100", "A100 x4", "two A800s", "2 GPUs", "tp=4", "两张 A800", "4卡"

_COUNT_WORDS = {
    "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "eight": 8, "sixteen": 16,
    "一": 1, "二": 2, "两": 2, "双": 2, "三": 3, "四": 4, "五": 5, "六": 6, "八": 8, "单": 1,
}  # fmt: skip
_COUNT = rf"(\d{{1,3}}|{'|'.join(_COUNT_WORDS)})"
_TIMES = r"^(\d{1,3})\s*[x×]$|^[x×](\d{1,3})$"
# Words a GPU's name may start with before the part the tables match ("NVIDIA RTX 5090").
_BRAND_WORDS = frozenset({"nvidia", "geforce", "rtx", "tesla", "quadro"})
# Read only when the question holds one of _COUNT_GATE (compiled by re's cache on first use).
_COUNT_GATE = ("tp", "tensor", "gpu", "card", "张", "块", "卡")
_COUNT_PATTERNS = (
    # "tp=4", "tensor parallel size 4", "--tensor-parallel-size 4", "tp_size=4"
    r"(?i)(?:\btp|tensor[\s_-]?parallel(?:[\s_-]?size)?|--tp-size|tp_size)\s*(?:=|:|of|is)?\s*"
    r"(\d{1,3})\b",
    # "2 GPUs", "two cards", "8 x GPUs"
    rf"(?i)(?<![\w.]){_COUNT}\s*(?:x\s*)?(?:gpus|cards|graphics cards)\b",
    # "两张 A800", "4张卡", "4 块 GPU", "4卡", "双卡"
    rf"(?<![\d.]){_COUNT}\s*(?:张|块(?!钱)|卡)",
)


def gpu_count(text: str, words: list[Word], gpus: list[GpuMention]) -> tuple[int | None, bool]:
    """How many GPUs the question serves on (None: not said), and whether it says tensor
    parallel. Read around the GPU's name (``4x A100``, ``A100 x4``, ``two A800s``) or from
    words anywhere (``2 GPUs``, ``tp=4``, ``两张``, ``4卡``)."""
    lower = text.lower()
    parallel = ("t" in lower or "并行" in text) and bool(
        re.search(r"tensor[\s_-]?parallel|\btp\s*=|张量并行", lower)
    )
    starts = {start for start, _e, _n in gpus}
    for i, (start, _end, _raw) in enumerate(words):
        if start not in starts:
            continue
        j = i - 1  # the word before the name, past its brand words ("4x NVIDIA RTX 5090")
        while j >= 0 and words[j][2].lower() in _BRAND_WORDS:
            j -= 1
        before = words[j][2].lower() if j >= 0 else ""
        if before in ("x", "×") and j > 0:
            before = words[j - 1][2].lower() + "x"
        m = re.match(_TIMES, before) or re.match(_TIMES, following(words, i))
        if m:
            return int(m.group(1) or m.group(2)), parallel
        if before.isdigit() or before in _COUNT_WORDS:
            return _count_value(before), parallel
    if not any(w in lower for w in _COUNT_GATE):
        return None, parallel
    for pattern in _COUNT_PATTERNS:
        m = re.search(pattern, text)
        if m:
            return _count_value(m.group(1).lower()), parallel
    return None, parallel


def _count_value(word: str) -> int | None:
    value = int(word) if word.isdigit() else _COUNT_WORDS.get(word)
    return value if value is not None and 1 <= value <= 64 else None
