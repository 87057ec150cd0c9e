"""The physical envelope a decode step obeys: the bounds every carried figure is checked against.

A decode step of batch size B reads the weights (and the KV cache) from GPU memory, so it lasts
at least bytes / bandwidth; on top of that come the fixed costs of each layer's small kernels
and the host (launches, Python, sampling), which the measured rows show. The board draws between
its idle power and its power limit (TDP). So the energy per generated token lies in

    low  = P_idle x (weight bytes / bandwidth) / B
    high = (TDP x (weight + KV-cache bytes) / bandwidth + layers x e_layer) / B

``e_layer`` is the overhead energy per layer and per step: for each measured row, its step time
(B / throughput) less its weight bytes over its GPU's bandwidth, over its model's layers, times
its GPU's TDP; the largest any row of the same precision shows. Counted in energy at TDP rather
than in time, the overhead is close to constant across GPUs (FP16: 0.09-0.26 J per layer on the
A800, RTX 5090 and RTX PRO 6000, 0.24-0.33 J on the 70 W T4, whose small kernels run as much
slower as its power limit is lower), so a bound read on some GPUs holds on another.
``P_idle`` is the GPU's measured idle power, else the lowest idle share of TDP among the GPUs
whose idle is measured. Offloaded rows (weights over PCIe) and runs shorter than 64 tokens
(prefill-dominated) are not read.

A carried figure (the ``cross-gpu`` rung) above or below these bounds is moved to the bound it
crossed, its band kept on the other side and clipped to the envelope, and the method says so
with the bound's terms; a throughput that would put the power outside idle-TDP is brought
inside the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

from ecoguard.deployment import BYTES_PER_PARAM
from ecoguard.knowledge import tables
from ecoguard.knowledge.evidence import MIN_TOKENS, Evidence, Figure, usable
from ecoguard.knowledge.memory import DEFAULT_GENERATION_TOKENS, KV_BYTES
from ecoguard.knowledge.records import GpuProfile, ModelInfo, ReferenceRow

# Context of the KV cache read at the upper bound when the query does not say: the estimator's
# default generation length, plus as many prompt tokens (the cache read per step grows with both).
KV_CONTEXT_TOKENS = 2 * DEFAULT_GENERATION_TOKENS


@dataclass(frozen=True, slots=True)
class Envelope:
    """Bounds on J per 1k generated tokens, and the terms that set them."""

    low_j_per_1k: float
    high_j_per_1k: float
    reason: str


def _weight_bytes(params_b: float, precision: str) -> float:
    return params_b * 1e9 * BYTES_PER_PARAM.get(precision, 2.0)


def _model(model_key: str | None) -> ModelInfo | None:
    return tables.model_registry().get(model_key or "")


def _kv_bytes(model: ModelInfo | None, batch_size: int) -> float:
    if model is None or not (model.layers and model.kv_heads and model.head_dim):
        return 0.0
    return (
        2.0
        * model.layers
        * model.kv_heads
        * model.head_dim
        * KV_CONTEXT_TOKENS
        * batch_size
        * KV_BYTES
    )


def row_overhead_per_layer_s(row: ReferenceRow, gpu: GpuProfile) -> float | None:
    """A measured row's host overhead per decode step and per layer (s), or None when the row
    lacks a throughput or its model's layer count is unknown."""
    model = _model(row.model_key)
    if not row.throughput_tok_s or model is None or not model.layers:
        return None
    step_s = (row.batch_size or 1) / row.throughput_tok_s
    memory_s = _weight_bytes(row.params_b, row.precision) / (gpu.mem_bandwidth_gbs * 1e9)
    return max(step_s - memory_s, 0.0) / model.layers


def overhead_energy_per_layer_j(ev: Evidence, precision: str) -> tuple[float, str] | None:
    """The largest overhead energy per layer and step (J, at the row GPU's TDP) among the
    visible measured or local rows of ``precision`` of 64 tokens or more, and the row that shows
    it; None when no such row has a throughput."""
    profiles = tables.gpu_profiles()
    best: tuple[float, str] | None = None
    for rows in ev.by_config.values():
        for row in rows:
            if (
                row.precision != precision
                or row.tier == "reported"
                or not usable(row)
                or (row.generation_tokens or MIN_TOKENS) < MIN_TOKENS
            ):
                continue
            gpu = profiles.get(row.gpu)
            seconds = row_overhead_per_layer_s(row, gpu) if gpu else None
            if seconds is not None and gpu is not None:
                value = seconds * gpu.tdp_w
                if best is None or value > best[0]:
                    best = (value, row.id)
    return best


def _deepest() -> int:
    return max((m.layers for m in tables.model_registry().values() if m.layers), default=80)


def idle_w(gpu: GpuProfile) -> tuple[float, str]:
    """The GPU's idle power: measured, else the lowest idle share of TDP among measured GPUs."""
    if gpu.idle_w:
        return gpu.idle_w, f"idle {gpu.idle_w:g} W (measured)"
    shares = [p.idle_w / p.tdp_w for p in tables.gpu_profiles().values() if p.idle_w and p.tdp_w]
    share = min(shares) if shares else 0.05
    return (
        gpu.tdp_w * share,
        f"idle {gpu.tdp_w * share:.1f} W ({share:.1%} of TDP, the lowest measured share)",
    )


def envelope(
    ev: Evidence,
    gpu: GpuProfile,
    model_key: str | None,
    params_b: float,
    precision: str,
    batch_size: int,
) -> Envelope | None:
    """The envelope of J per 1k tokens for this configuration; None without its terms (no
    bandwidth or TDP, no measured row with a throughput for the precision)."""
    overhead = overhead_energy_per_layer_j(ev, precision)
    return bounds(gpu, model_key, params_b, precision, batch_size, overhead)


def bounds(
    gpu: GpuProfile,
    model_key: str | None,
    params_b: float,
    precision: str,
    batch_size: int,
    overhead: tuple[float, str] | None,
) -> Envelope | None:
    """:func:`envelope` with the precision's overhead per layer already read (a ladder keeps
    it per precision)."""
    if overhead is None or not gpu.mem_bandwidth_gbs or not gpu.tdp_w:
        return None
    model = _model(model_key)
    # Without the model's layer count, the deepest registered model's stands in.
    layers = model.layers if model is not None and model.layers else _deepest()
    bandwidth = gpu.mem_bandwidth_gbs * 1e9
    weights_s = _weight_bytes(params_b, precision) / bandwidth
    kv_s = _kv_bytes(model, batch_size) / bandwidth
    idle, idle_text = idle_w(gpu)
    low = idle * weights_s / batch_size * 1000.0
    high = (gpu.tdp_w * (weights_s + kv_s) + layers * overhead[0]) / batch_size * 1000.0
    reason = (
        f"step >= {weights_s * 1000:.1f} ms of weight reads at {gpu.mem_bandwidth_gbs:g} GB/s "
        f"(+ {kv_s * 1000:.1f} ms of KV cache at most) at power between {idle_text} and TDP "
        f"{gpu.tdp_w:g} W, + {layers} layers x {overhead[0]:.3f} J of overhead per layer and "
        f"step (the most any measured {precision} row shows: {overhead[1]}); BS {batch_size}"
    )
    return Envelope(low, high, reason)


def within_envelope(
    env: Envelope | None, gpu: GpuProfile, fig: Figure, tput: float | None
) -> tuple[Figure, float | None, str, tuple[float, float] | None]:
    """The carried figure brought inside the physical envelope ``env`` of ``gpu`` (centre moved
    to the bound it crossed, band clipped), the throughput kept to what the power bounds allow,
    what was done (for the method) and the bounds (None without an envelope)."""
    if env is None:
        return fig, tput, "", None
    value = min(max(fig.value, env.low_j_per_1k), env.high_j_per_1k)
    # A moved centre keeps the band's width on the side away from the bound it crossed.
    low = min(max(fig.low * value / max(fig.value, value), env.low_j_per_1k), value)
    high = max(min(fig.high * value / min(fig.value, value), env.high_j_per_1k), value)
    notes = []
    if value != fig.value:
        side = "above the upper" if fig.value > value else "below the lower"
        notes.append(f"{fig.value:,.0f} J/1k lay {side} bound: set to {value:,.0f} J/1k")
    elif (low, high) != (fig.low, fig.high):
        notes.append(f"band clipped to {low:,.0f}-{high:,.0f} J/1k")
    if tput:
        idle, _ = idle_w(gpu)
        fitted = min(max(tput, idle * 1000.0 / value), gpu.tdp_w * 1000.0 / value)
        if abs(fitted - tput) > 1e-9:
            notes.append(f"throughput {tput:,.1f} -> {fitted:,.1f} tok/s (power within idle-TDP)")
            tput = fitted
    note = (
        f"; physical envelope {env.low_j_per_1k:,.0f}-{env.high_j_per_1k:,.0f} J/1k "
        f"({env.reason})" + (f": {'; '.join(notes)}" if notes else ": inside")
    )
    moved = Figure(value, low, high, fig.tier, fig.description, fig.rows, fig.sessions)
    return (moved if notes else fig), tput, note, (env.low_j_per_1k, env.high_j_per_1k)


__all__ = [
    "Envelope",
    "bounds",
    "envelope",
    "idle_w",
    "overhead_energy_per_layer_j",
    "row_overhead_per_layer_s",
    "within_envelope",
]
