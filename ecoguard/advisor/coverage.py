"""What a question asks about that no reference row covers: another vendor's accelerator, a
quantization method nobody measured (GPTQ, AWQ, GGUF...), a batch size past 64, a sequence past
4,096 tokens. Each is an ``OutOfData`` the answer states instead of inventing a figure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ecoguard.advisor.accelerators import Vendor
from ecoguard.advisor.texts import Text

# The edges of the reference rows.
REFERENCE_MAX_BATCH = 64
REFERENCE_MAX_SEQUENCE = 4096

_OTHER_QUANT = {"gptq": "GPTQ", "awq": "AWQ", "gguf": "GGUF", "exl2": "EXL2", "hqq": "HQQ"}


@dataclass(frozen=True, slots=True)
class OutOfData:
    """Something the question asks about that no reference row covers (AMD GPUs, batch > 64,
    sequences > 4096, GPTQ/AWQ/GGUF)."""

    topic: str  # amd-gpu, accelerator, batch-size, sequence-length, quant-method
    detail: Text
    vendor: str | None = None  # accelerators: a key of accelerators.VENDORS

    def to_dict(self) -> dict[str, str]:
        out = {"topic": self.topic, "detail": self.detail.en}
        if self.vendor:
            out["vendor"] = self.vendor
        return out


def accelerator_gaps(vendor: Vendor | None, lower: str) -> list[OutOfData]:
    """A non-NVIDIA accelerator named, then each unmeasured quantization method named."""
    out: list[OutOfData] = []
    if vendor is not None:
        out.append(
            OutOfData(
                "amd-gpu" if vendor.key == "amd" else "accelerator",
                Text(
                    f"{vendor.name}: every reference row was measured on NVIDIA GPUs, and no "
                    "measured factor carries an NVIDIA figure to it",
                    f"{vendor.name}：所有参考数据都是在 NVIDIA GPU 上测的，也没有实测的系数能把 NVIDIA 的数字换算过去",
                ),
                vendor.key,
            )
        )
    for word, label in _OTHER_QUANT.items():
        if re.search(rf"\b{word}\b", lower):
            out.append(
                OutOfData(
                    "quant-method",
                    Text(
                        f"{label}: no reference row measures {label} kernels",
                        f"{label}：没有参考数据测过 {label} 内核",
                    ),
                )
            )
    return out


# Limits of the reference rows, by topic: the edge and what to say past it.
_EDGES: dict[str, tuple[int, Text]] = {
    "batch-size": (
        REFERENCE_MAX_BATCH,
        Text(
            "batch size {value}: reference rows stop at {edge}",
            "批大小 {value}：参考数据最大只到 {edge}",
        ),
    ),
    "sequence-length": (
        REFERENCE_MAX_SEQUENCE,
        Text(
            "sequence of {value:,} tokens: reference rows stop at {edge:,}",
            "序列长度 {value:,} 个 token：参考数据最长只到 {edge:,}",
        ),
    ),
}


def past_edge(topic: str, value: int) -> list[OutOfData]:
    """``value`` (the largest batch size, or the longest sequence: a context length or prompt
    plus output) when it is past the reference rows' edge for ``topic``."""
    edge, detail = _EDGES[topic]
    return [OutOfData(topic, detail.format(value=value, edge=edge))] if value > edge else []
