"""GPU names in a question, normalised for ``knowledge.resolve_gpu``: ``RTX 5090`` -> ``rtx5090``,
``4090 D`` -> ``rtx4090d``, ``H100 PCIe`` -> ``h100 pcie``, ``Blackwell`` -> the Blackwell GPU
with the most reference data (a conversion the answer shows). NVIDIA cards outside the table
(``RTX 4080``) are kept as written and matched later (``accelerators.nearest_profile``); another
vendor's accelerator is returned beside them.
"""

from __future__ import annotations

from ecoguard.advisor.accelerators import NVIDIA_CARDS, Vendor, find_vendor
from ecoguard.advisor.accelerators import fold as fold_card
from ecoguard.advisor.conversions import Conversion
from ecoguard.advisor.model_names import NOT_MODEL_AFTER
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
    """A GPU of the table, with a ``D`` or a form factor (``H100 PCIe``) written after it."""
    start, end, _raw = words[i]
    norm, stop = _GPU_TOKENS[key], end
    if key in ("4090", "rtx4090") and nxt == "d":
        norm, stop = "rtx4090d", words[i + 1][1]
    elif nxt in _FORM_FACTORS and norm in ("h100", "a800", "a100"):
        norm, stop = f"{norm} {nxt}", words[i + 1][1]  # "H100 PCIe": its own profile
    return (start, stop, norm)


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
