"""Accelerators a question names that the GPU table does not hold.

Two cases, answered differently:

- NVIDIA cards outside the table (RTX 4080, RTX 3060, A10G, RTX 2080 Ti...): their public
  specifications are below; the nearest profile in the table is picked (same architecture first,
  then the closest memory bandwidth and board power, on a log scale), its figures are used with
  the tier lowered to ``extrapolated``, and the answer says which profile and why. The card's own
  VRAM is kept, so a model that does not fit its memory is still flagged.
- Other vendors (Intel Gaudi, Apple silicon, Google TPU, AMD, Huawei Ascend): no reference row
  was measured on them and no factor carries an NVIDIA figure over, so the answer is GRAY with
  the measurement protocol and the vendor's own power counter to read.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ecoguard.advisor.texts import Text
from ecoguard.knowledge.records import GpuProfile

SPEC_SHEETS = "vendor specification sheet"


def _card(
    key: str,
    name: str,
    architecture: str,
    capability: tuple[int, int],
    vram_gb: float,
    mem_bandwidth_gbs: float,
    tdp_w: float,
) -> GpuProfile:
    """A card's public specification as a GPU profile (no measured idle power; BF16 from
    Ampere, FP8 from Ada; NVML reports the card's marketing name)."""
    return GpuProfile(
        key,
        name,
        architecture,
        capability,
        vram_gb,
        mem_bandwidth_gbs,
        tdp_w,
        idle_w=None,
        bf16=capability >= (8, 0),
        fp8=capability >= (8, 9),
        nvml_names=(name,),
        source=SPEC_SHEETS,
    )


# NVIDIA cards outside the GPU table (public specifications), by folded name (no spaces,
# dashes, "rtx"/"geforce"/"nvidia"): name, architecture, compute capability, VRAM GB, memory
# bandwidth GB/s, board power W.
NVIDIA_CARDS: dict[str, GpuProfile] = {
    card.key: card
    for card in (
        _card("5080", "NVIDIA GeForce RTX 5080", "blackwell", (12, 0), 16, 960, 360),
        _card("5070ti", "NVIDIA GeForce RTX 5070 Ti", "blackwell", (12, 0), 16, 896, 300),
        _card("5070", "NVIDIA GeForce RTX 5070", "blackwell", (12, 0), 12, 672, 250),
        _card("4080super", "NVIDIA GeForce RTX 4080 SUPER", "ada", (8, 9), 16, 736, 320),
        _card("4080", "NVIDIA GeForce RTX 4080", "ada", (8, 9), 16, 717, 320),
        _card("4070ti", "NVIDIA GeForce RTX 4070 Ti", "ada", (8, 9), 12, 504, 285),
        _card("4070", "NVIDIA GeForce RTX 4070", "ada", (8, 9), 12, 504, 200),
        _card("4060ti", "NVIDIA GeForce RTX 4060 Ti", "ada", (8, 9), 8, 288, 160),
        _card("4060", "NVIDIA GeForce RTX 4060", "ada", (8, 9), 8, 272, 115),
        _card("6000ada", "NVIDIA RTX 6000 Ada Generation", "ada", (8, 9), 48, 960, 300),
        _card("l40", "NVIDIA L40", "ada", (8, 9), 48, 864, 300),
        _card("3090ti", "NVIDIA GeForce RTX 3090 Ti", "ampere", (8, 6), 24, 1008, 450),
        _card("3080ti", "NVIDIA GeForce RTX 3080 Ti", "ampere", (8, 6), 12, 912, 350),
        _card("3080", "NVIDIA GeForce RTX 3080", "ampere", (8, 6), 10, 760, 320),
        _card("3070", "NVIDIA GeForce RTX 3070", "ampere", (8, 6), 8, 448, 220),
        _card("3060ti", "NVIDIA GeForce RTX 3060 Ti", "ampere", (8, 6), 8, 448, 200),
        _card("3060", "NVIDIA GeForce RTX 3060", "ampere", (8, 6), 12, 360, 170),
        _card("a10g", "NVIDIA A10G", "ampere", (8, 6), 24, 600, 300),
        _card("a10", "NVIDIA A10", "ampere", (8, 6), 24, 600, 150),
        _card("a30", "NVIDIA A30", "ampere", (8, 0), 24, 933, 165),
        _card("a40", "NVIDIA A40", "ampere", (8, 6), 48, 696, 300),
        _card("a6000", "NVIDIA RTX A6000", "ampere", (8, 6), 48, 768, 300),
        _card("2080ti", "NVIDIA GeForce RTX 2080 Ti", "turing", (7, 5), 11, 616, 250),
        _card("2080", "NVIDIA GeForce RTX 2080", "turing", (7, 5), 8, 448, 215),
        _card("2070", "NVIDIA GeForce RTX 2070", "turing", (7, 5), 8, 448, 175),
        _card("1080ti", "NVIDIA GeForce GTX 1080 Ti", "pascal", (6, 1), 11, 484, 250),
        _card("p100", "Tesla P100", "pascal", (6, 0), 16, 732, 250),
        _card("h800", "NVIDIA H800", "hopper", (9, 0), 80, 3350, 700),
        _card("h20", "NVIDIA H20", "hopper", (9, 0), 96, 4000, 400),
        _card("b200", "NVIDIA B200", "blackwell", (10, 0), 180, 8000, 1000),
    )
}
# Architectures in release order: a card whose architecture has no profile is matched to the
# nearest one by release, and the answer says so.
ARCH_ORDER = ("pascal", "volta", "turing", "ampere", "ada", "hopper", "blackwell")


def fold(name: str) -> str:
    """``RTX 4080``/``GeForce-RTX-4080``/``rtx_4080`` -> ``4080``."""
    text = name.lower()
    for word in ("nvidia", "geforce", "tesla", "rtx", "gtx", "quadro"):
        text = text.replace(word, "")
    return re.sub(r"[\s\-_]+", "", text)


def card_spec(name: str) -> GpuProfile | None:
    """The public specification of an NVIDIA card outside the GPU table, or None."""
    return NVIDIA_CARDS.get(fold(name))


@dataclass(frozen=True, slots=True)
class NearestProfile:
    """The profile an unlisted NVIDIA card is answered with, and why."""

    card: GpuProfile
    profile_key: str
    profile_name: str
    reason: Text

    def to_dict(self) -> dict[str, object]:
        return {
            "card": self.card.name,
            "architecture": self.card.architecture,
            "vram_gb": self.card.vram_gb,
            "matched_profile": self.profile_key,
            "reason": self.reason.en,
        }


def nearest_profile(
    card: GpuProfile, profiles: dict[str, object], with_data: set[str] | None = None
) -> NearestProfile:
    """The closest profile: same architecture if any, else the nearest architecture by release;
    then the smallest log distance in memory bandwidth and board power (decode is
    bandwidth-bound, and board power scales the joules). ``with_data``: profile keys with
    reference rows; the match is made among those when any exists."""
    if with_data:
        kept = {k: p for k, p in profiles.items() if k in with_data}
        profiles = kept or profiles
    archs = {getattr(p, "architecture", None) for p in profiles.values()}
    arch = card.architecture
    same_arch = arch in archs
    if not same_arch:
        rank = ARCH_ORDER.index(arch) if arch in ARCH_ORDER else 0
        present = [a for a in ARCH_ORDER if a in archs]
        arch = min(present, key=lambda a: abs(ARCH_ORDER.index(a) - rank))
    pool = {k: p for k, p in profiles.items() if getattr(p, "architecture", None) == arch}

    def distance(profile: object) -> float:
        bw = float(getattr(profile, "mem_bandwidth_gbs", 0) or 1)
        tdp = float(getattr(profile, "tdp_w", 0) or 1)
        return abs(math.log(bw / card.mem_bandwidth_gbs)) + abs(math.log(tdp / card.tdp_w))

    key = min(sorted(pool), key=lambda k: distance(pool[k]))
    chosen = pool[key]
    name = str(getattr(chosen, "name", key))
    bw, tdp = getattr(chosen, "mem_bandwidth_gbs", 0), getattr(chosen, "tdp_w", 0)
    arch_en = (
        f"same architecture ({card.architecture})"
        if same_arch
        else f"no profile of the {card.architecture} architecture; nearest by release: {arch}"
    )
    arch_zh = (
        f"同为 {card.architecture} 架构"
        if same_arch
        else f"数据中没有 {card.architecture} 架构的 GPU；按发布时间最接近的是 {arch}"
    )
    specs = (
        f"memory bandwidth {card.mem_bandwidth_gbs:,.0f} vs {bw:,.0f} GB/s, "
        f"board power {card.tdp_w:,.0f} vs {tdp:,.0f} W"
    )
    specs_zh = (
        f"显存带宽 {card.mem_bandwidth_gbs:,.0f} 对 {bw:,.0f} GB/s，"
        f"板卡功耗 {card.tdp_w:,.0f} 对 {tdp:,.0f} W"
    )
    reason = Text(
        f"{card.name} is not in the GPU table; answered as {name} ({arch_en}; {specs}). "
        f"The figures are the estimator's for {name}, not scaled to the {card.name}, so every "
        f"tier is at most extrapolated; the {card.vram_gb:g} GB of VRAM is the {card.name}'s own.",
        f"GPU 表里没有 {card.name}；按 {name} 回答（{arch_zh}；{specs_zh}）。"
        f"数字是估算器对 {name} 的估算，没有换算到 {card.name}，所以等级最多为“外推”；"
        f"显存按 {card.name} 自己的 {card.vram_gb:g} GB 计。",
    )
    return NearestProfile(card, key, name, reason)


@dataclass(frozen=True, slots=True)
class Vendor:
    """An accelerator family outside the data, and the tool that reads its power."""

    key: str
    name: str
    power_tool: Text


VENDORS: dict[str, Vendor] = {
    "intel-gaudi": Vendor(
        "intel-gaudi",
        "Intel Gaudi",
        Text("`hl-smi` (power draw per card)", "`hl-smi`（每张卡的功耗）"),
    ),
    "apple": Vendor(
        "apple",
        "Apple silicon",
        Text(
            "`sudo powermetrics --samplers gpu_power` (GPU power on macOS)",
            "`sudo powermetrics --samplers gpu_power`（macOS 上的 GPU 功耗）",
        ),
    ),
    "google-tpu": Vendor(
        "google-tpu",
        "Google TPU",
        Text(
            "the cloud provider's power or energy reporting for the TPU host",
            "云服务商为 TPU 主机提供的功耗或能耗报告",
        ),
    ),
    "amd": Vendor(
        "amd",
        "AMD GPU",
        Text(
            "`amd-smi metric --power` (or `rocm-smi --showpower`)",
            "`amd-smi metric --power`（或 `rocm-smi --showpower`）",
        ),
    ),
    "huawei-ascend": Vendor(
        "huawei-ascend",
        "Huawei Ascend",
        Text("`npu-smi info` (power per NPU)", "`npu-smi info`（每块 NPU 的功耗）"),
    ),
}

# Folded token -> vendor key. Checked per token of the question (whole words only).
VENDOR_TOKENS: dict[str, str] = {
    "gaudi": "intel-gaudi",
    "gaudi2": "intel-gaudi",
    "gaudi3": "intel-gaudi",
    "habana": "intel-gaudi",
    "hpu": "intel-gaudi",
    "apple": "apple",
    "mps": "apple",
    "macbook": "apple",
    "mac": "apple",
    "imac": "apple",
    "m1": "apple",
    "m2": "apple",
    "m3": "apple",
    "m4": "apple",
    "tpu": "google-tpu",
    "tpus": "google-tpu",
    "tpuv4": "google-tpu",
    "tpuv5e": "google-tpu",
    "tpuv5p": "google-tpu",
    "v5e": "google-tpu",
    "v5p": "google-tpu",
    "amd": "amd",
    "radeon": "amd",
    "instinct": "amd",
    "rocm": "amd",
    "mi300x": "amd",
    "mi300": "amd",
    "mi325x": "amd",
    "mi250": "amd",
    "mi250x": "amd",
    "mi210": "amd",
    "mi100": "amd",
    "rx7900": "amd",
    "7900xtx": "amd",
    "ascend": "huawei-ascend",
    "910b": "huawei-ascend",
    "昇腾": "huawei-ascend",
}
_VENDOR_SUBSTRINGS = {"昇腾": "huawei-ascend", "苹果": "apple", "谷歌tpu": "google-tpu"}


def find_vendor(tokens: list[str]) -> Vendor | None:
    """The first non-NVIDIA accelerator named among the question's tokens."""
    for raw in tokens:
        key = raw.lower().replace("-", "").replace("_", "")
        if key in VENDOR_TOKENS:
            return VENDORS[VENDOR_TOKENS[key]]
        if key.startswith("mi") and key[2:5].isdigit() and len(key) <= 6:
            return VENDORS["amd"]
        if not raw.isascii():
            for needle, vendor in _VENDOR_SUBSTRINGS.items():
                if needle in raw:
                    return VENDORS[vendor]
    return None
