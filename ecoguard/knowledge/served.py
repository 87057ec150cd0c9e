"""How a deployment is served changes its figure: an engine's fused FP8 kernels, several cards.

Both start from the ladder's figure for one card and say how they move it, in the method text.

**Fused FP8** (vLLM, SGLang, TGI, TensorRT-LLM ``--quantization fp8``, or an FP8 checkpoint:
``QuantSpec(method="other", quant_type="fp8")``, :func:`ecoguard.quantization.fused_fp8`). The
reference data's FP8 rows are all torchao's eager path (Python-dispatched dequantization, several
times FP16's energy): they say nothing about fused kernels, so they are not read. No fused-FP8
row is measured either. What the data does support is the configuration's FP16 figure, and the
physics of decode: fused FP8 streams half of FP16's weight bytes per token through the same
memory and runs no more kernel work per layer, so it uses at most about FP16's energy per token
and at least about half of it (the weight-byte ratio, when every step is bound by weight reads).
The figure is FP16's (a ceiling, so a switch to FP16 never looks like a saving) with its range
extended down to half; tier ``derived`` (``extrapolated`` where FP16 itself was carried from
other GPUs), confidence ``low``.

**Several cards** (``gpu.count`` N > 1, tensor parallel). Splitting a model over N cards splits
its weight reads and arithmetic, not their total: the work is one card's figure for the whole
model. What the split adds is the other N-1 cards' base power while they serve: each draws at
least its idle power (measured, else the lowest measured idle share of TDP,
:func:`ecoguard.knowledge.envelope.idle_w`) for as long as a token takes. Small-batch decode gets
far less than an N-fold speed-up (per-layer launch overhead and the all-reduce after every layer
do not shrink with N), so the time per token is taken as one card's:

    energy(N) = energy(1) x (1 + (N - 1) x P_idle / P_card)

with ``P_card`` the figure's own power (its throughput x energy), else the TDP (which makes the
added share a lower bound). The range runs from one card's low end (a perfect N-fold speed-up,
where the other cards' idle time is absorbed) to its high end plus the added share; the
all-reduce traffic itself is not counted. Tier ``extrapolated``, confidence ``low``; power is
all N cards' (throughput unchanged). The VRAM check is per card (``usable_vram_gb``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ecoguard.deployment import FP8_PRECISIONS, Deployment
from ecoguard.knowledge.envelope import idle_w
from ecoguard.knowledge.records import GpuProfile

# Engines whose FP8 is fused kernels (W8A8 on Ada/Hopper, Marlin weight-only before): the
# engines of ecoguard.engines that load FP8 themselves, and TensorRT-LLM.
FUSED_FP8_ENGINES = frozenset({"vllm", "sglang", "tgi", "tensorrt_llm"})

# Engines that batch the requests in flight themselves (continuous batching), by their name in
# Deployment.engine, with how to write it: a batch size nobody stated is theirs, not 1 by choice.
CONTINUOUS_BATCHING_ENGINES: dict[str, str] = {
    "vllm": "vLLM",
    "sglang": "SGLang",
    "tgi": "TGI",
    "tensorrt_llm": "TensorRT-LLM",
}

# Fused FP8 reads half of FP16's weight bytes per token: the lowest share of FP16's energy.
FUSED_FP8_FLOOR = 0.5


def fused_fp8(deployment: Deployment) -> bool:
    """True when the deployment's FP8 runs fused kernels, not torchao's eager path: an FP8
    checkpoint or engine flag (``method="other"``, ``quant_type="fp8"``), or an FP8 precision
    on an engine that loads FP8 itself (unless the engine was told to use torchao)."""
    if deployment.precision not in FP8_PRECISIONS or deployment.quant.method == "torchao":
        return False
    quant = deployment.quant
    checkpoint = quant.method == "other" and (quant.quant_type or "").lower() == "fp8"
    return checkpoint or deployment.engine in FUSED_FP8_ENGINES


@dataclass(frozen=True, slots=True)
class Figures:
    """One estimate's figures before they are turned into an Estimate: J per 1k tokens with its
    p10-p90 range, power and throughput, tier, method, confidence, and the factor applied to
    the figure (what the paired figure is multiplied by too)."""

    energy_1k: float
    low: float
    high: float
    power_w: float | None
    throughput_tok_s: float | None
    tier: str
    method: str
    confidence: str
    factor: float = 1.0


def as_fused_fp8(figures: Figures, engine: str | None) -> Figures:
    """The FP16 figures of the configuration read as fused FP8: the same figure as a ceiling,
    the range down to half of its low end (the weight-byte ratio)."""
    tier = "extrapolated" if figures.tier == "extrapolated" else "derived"
    name = CONTINUOUS_BATCHING_ENGINES.get(engine or "", engine)
    how = f"{name}'s fused FP8 kernels" if name else "FP8 as fused kernels (FP8 checkpoint)"
    method = (
        f"{how}: no measured fused-FP8 row (the reference FP8 rows are torchao's eager path, "
        "not read for it); priced at this configuration's FP16 figure, a ceiling (fused FP8 "
        "reads half the weight bytes per token), range down to "
        f"{FUSED_FP8_FLOOR:g}x its low end (the weight-byte ratio); FP16 figure: "
        f"{figures.method}"
    )
    return replace(
        figures,
        low=figures.low * FUSED_FP8_FLOOR,
        tier=tier,
        method=method,
        confidence="low",
    )


def on_all_cards(figures: Figures, gpu: GpuProfile, count: int) -> Figures:
    """One card's figures spread over ``count`` cards: the same work plus the other cards'
    idle power over the same time per token (module docstring)."""
    if count <= 1:
        return figures
    idle, idle_text = idle_w(gpu)
    card_w = figures.power_w or gpu.tdp_w
    card_text = (
        f"{card_w:,.0f} W (the figure's own power)"
        if figures.power_w
        else f"TDP {card_w:g} W (the card's power is not known: the added share is a lower bound)"
    )
    share = (count - 1) * idle / card_w
    factor = 1.0 + share
    method = (
        f"{count} cards (tensor parallel): one card's figure for the whole model's work plus "
        f"the other {count - 1} cards' idle power ({idle_text} each) over the same time per "
        f"token, +{share:.1%} (one card at {card_text}; no speed-up from the split assumed, "
        f"range down to one card's figure for a perfect {count}-fold speed-up; all-reduce "
        f"traffic not counted); one card: {figures.method}"
    )
    return replace(
        figures,
        energy_1k=figures.energy_1k * factor,
        high=figures.high * factor,
        power_w=(figures.power_w + (count - 1) * idle if figures.power_w is not None else None),
        tier="extrapolated",
        method=method,
        confidence="low",
        factor=figures.factor * factor,
    )


__all__ = [
    "CONTINUOUS_BATCHING_ENGINES",
    "FUSED_FP8_ENGINES",
    "FUSED_FP8_FLOOR",
    "Figures",
    "as_fused_fp8",
    "fused_fp8",
    "on_all_cards",
]
