"""Accelerators a question names that the GPU table does not hold.

Two cases, answered differently:

- NVIDIA cards outside the table (RTX 4080, RTX 3060, A10G, RTX 2080 Ti...): their public
  specifications are in data/gpu_cards.json; the nearest profile in the table is picked (same architecture first,
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
from ecoguard.knowledge.tables import accelerator_vendors, spec_sheet_cards

# NVIDIA cards outside the GPU table (data/gpu_cards.json, from vendor specification sheets),
# by folded name (no spaces, dashes, "rtx"/"geforce"/"nvidia").
NVIDIA_CARDS: dict[str, GpuProfile] = spec_sheet_cards()
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
    card: GpuProfile, profiles: dict[str, GpuProfile], with_data: set[str] | None = None
) -> NearestProfile:
    """The closest profile: same architecture if any, else the nearest architecture by release;
    then the smallest log distance in memory bandwidth and board power (decode is
    bandwidth-bound, and board power scales the joules). ``with_data``: profile keys with
    reference rows; the match is made among those when any exists."""
    if with_data:
        kept = {k: p for k, p in profiles.items() if k in with_data}
        profiles = kept or profiles
    archs = {p.architecture for p in profiles.values()}
    arch = card.architecture
    same_arch = arch in archs
    if not same_arch:
        rank = ARCH_ORDER.index(arch) if arch in ARCH_ORDER else 0
        present = [a for a in ARCH_ORDER if a in archs]
        arch = min(present, key=lambda a: abs(ARCH_ORDER.index(a) - rank))
    pool = {k: p for k, p in profiles.items() if p.architecture == arch}

    def distance(p: GpuProfile) -> float:
        return abs(math.log(p.mem_bandwidth_gbs / card.mem_bandwidth_gbs)) + abs(
            math.log(p.tdp_w / card.tdp_w)
        )

    key = min(sorted(pool), key=lambda k: distance(pool[k]))
    chosen = pool[key]
    name, bw, tdp = chosen.name, chosen.mem_bandwidth_gbs, chosen.tdp_w
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
    v["key"]: Vendor(v["key"], v["name"], Text(**v["power_tool"])) for v in accelerator_vendors()
}
# Folded token -> vendor key, checked per token of the question (whole words only); substrings
# are looked for inside a non-ASCII token.
VENDOR_TOKENS = {t: v["key"] for v in accelerator_vendors() for t in v["tokens"]}
_VENDOR_SUBSTRINGS = {t: v["key"] for v in accelerator_vendors() for t in v["substrings"]}


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
