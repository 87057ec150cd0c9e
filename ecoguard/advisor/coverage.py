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


def _past_edge(topic: str, value: int, edge: int, detail: Text) -> list[OutOfData]:
    return [OutOfData(topic, detail)] if value > edge else []


def batch_gap(largest: int) -> list[OutOfData]:
    """The largest batch size named, when it is past the reference rows."""
    return _past_edge(
        "batch-size",
        largest,
        REFERENCE_MAX_BATCH,
        Text(
            f"batch size {largest}: reference rows stop at {REFERENCE_MAX_BATCH}",
            f"批大小 {largest}：参考数据最大只到 {REFERENCE_MAX_BATCH}",
        ),
    )


def sequence_gap(longest: int) -> list[OutOfData]:
    """The longest sequence named (context, or prompt plus output), when past the rows."""
    return _past_edge(
        "sequence-length",
        longest,
        REFERENCE_MAX_SEQUENCE,
        Text(
            f"sequence of {longest:,} tokens: reference rows stop at {REFERENCE_MAX_SEQUENCE:,}",
            f"序列长度 {longest:,} 个 token：参考数据最长只到 {REFERENCE_MAX_SEQUENCE:,}",
        ),
    )
