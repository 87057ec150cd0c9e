"""Frozen records of the knowledge layer: reference rows, GPU profiles, models, grids.

Plain dataclasses with no behaviour beyond ``to_dict`` so every front and back door (rules,
advisor, meter, exporter) can hold and print them without importing the loaders.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ecoguard.deployment import GpuSpec, ModelSpec


@dataclass(frozen=True, slots=True)
class ReferenceRow:
    """One configuration from the compiled reference data (``data/reference_rows.json``).

    Units: ``throughput_tok_s`` generated tokens per second over the whole batch; ``power_w``
    average board power; ``energy_j_per_1k`` joules per 1000 generated tokens;
    ``energy_j_per_request`` joules per sequence. ``tier`` is ``measured`` (a data file with runs),
    ``reported`` (prose table only, or a figure a data file quotes from an unpublished run) or
    ``local`` (measured on this machine). ``source`` is the file relative to the reference-data
    folder (``data/upstream/``). ``scope`` says what the energy covers: ``end_to_end`` (the whole
    generate call, idle power included), ``idle_subtracted`` (the source subtracted idle power and
    the row cannot be corrected), ``decode_active`` (idle subtracted, decode only) or
    ``duplicate`` (an anchor repeating another file's row); the estimator uses only
    ``end_to_end`` rows. ``idle_added_w`` is set where ecoguard added back the idle power the
    source had subtracted (``energy_j_per_1k`` = ``energy_j_per_1k_stated`` + idle_added_w x 1000
    / throughput_tok_s); ``params_b`` is the model registry's size for ``model_key``.
    ``offloaded`` is True where the configuration needs more memory than the GPU has (the
    ``vram-overflow`` rule's model, :mod:`ecoguard.knowledge.memory`): the run must have
    offloaded weights, so the row is shown, flagged, and kept out of every fit, ratio and carry.
    ``quotes`` names the session (``source#session``) whose run this row quotes when another
    document already gives the same configuration with the same figures: one session, not two.
    """

    id: str
    gpu: str
    model_id: str
    params_b: float
    precision: str
    batch_size: int | None
    prompt_tokens: int | None
    generation_tokens: int | None
    throughput_tok_s: float | None
    throughput_std: float | None
    power_w: float | None
    power_std: float | None
    energy_j_per_1k: float | None
    energy_j_per_1k_std: float | None
    energy_j_per_request: float | None
    n_runs: int | None
    cv_pct: float | None
    perplexity: float | None
    software: str
    date: str
    tier: str
    source: str
    note: str
    model_key: str = ""
    scope: str = "end_to_end"
    session: str = ""
    fp16_energy_j_per_1k: float | None = None
    delta_vs_fp16_pct: float | None = None
    baseline_row: str | None = None
    energy_j_per_request_std: float | None = None
    idle_added_w: float | None = None
    energy_j_per_1k_stated: float | None = None
    offloaded: bool = False
    quotes: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class GpuProfile:
    """A GPU's public specification. ``mem_bandwidth_gbs`` in GB/s, ``tdp_w`` board power limit,
    ``idle_w`` measured idle power where a reference file gives it (else None)."""

    key: str
    name: str
    architecture: str
    compute_capability: tuple[int, int]
    vram_gb: float
    mem_bandwidth_gbs: float
    tdp_w: float
    idle_w: float | None
    bf16: bool
    fp8: bool
    nvml_names: tuple[str, ...]
    source: str
    nicknames: tuple[str, ...] = ()
    note: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    def to_gpu_spec(self, *, name: str | None = None, count: int = 1) -> GpuSpec:
        """This profile as a Deployment's GpuSpec: ``count`` such GPUs, named ``name`` (what a
        driver reported; default: the profile's own name)."""
        capability = self.compute_capability
        return GpuSpec(
            profile=self.key,
            name=name or self.name,
            architecture=self.architecture,
            compute_capability=tuple(capability)[:2] if capability else None,  # type: ignore[arg-type]
            vram_gb=self.vram_gb,
            count=count,
        )


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """A model's shape. ``id`` is the registry key (``qwen2.5-7b``) or, for a model known only
    by its size, the text given. Fields the registry does not know are None."""

    id: str
    params_b: float
    family: str | None = None
    layers: int | None = None
    hidden_size: int | None = None
    kv_heads: int | None = None
    head_dim: int | None = None
    context_window: int | None = None
    source: str = ""
    hf_id: str | None = None

    def to_model_spec(self, id: str | None = None) -> ModelSpec:
        """This shape as the Deployment's ModelSpec, named ``id`` (default: the registry id)."""
        return ModelSpec(
            id=id or self.id,
            params_b=self.params_b,
            family=self.family,
            layers=self.layers,
            hidden_size=self.hidden_size,
            kv_heads=self.kv_heads,
            head_dim=self.head_dim,
            context_window=self.context_window,
        )

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class GridInfo:
    """Electricity price (USD/kWh), grid carbon intensity (gCO2/kWh) and default PUE."""

    key: str
    name: str
    price_usd_per_kwh: float
    gco2_per_kwh: float
    pue: float
    source: str

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Crossover:
    """Model size (billions of parameters) above which a quantized precision uses less energy
    per token than FP16 on one architecture. ``fitted_b`` is ecoguard's fit of the measured pairs
    (tier ``derived``; ``method`` says how), set only when the fitted line crosses zero inside
    the measured sizes (``measured_min_b`` to ``measured_max_b``); a root outside them is
    ``root_b`` alone, an extrapolation, not an observed crossover. ``saving_measured`` says
    whether any measured pair used less energy than its FP16 baseline. ``reported_b`` is the
    publisher's threshold (tier ``reported``)."""

    architecture: str
    precision: str
    fitted_b: float | None
    reported_b: float | None
    method: str
    points: int
    sources: tuple[str, ...]
    fitted_tier: str = "derived"
    reported_tier: str = "reported"
    root_b: float | None = None
    measured_min_b: float | None = None
    measured_max_b: float | None = None
    saving_measured: bool = False

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Equivalent:
    """A real-world comparison for an amount of energy or CO2 (``value`` in ``label`` units)."""

    key: str
    label: str
    value: float
    factor: float
    unit: str
    basis: str
    source: str

    def to_dict(self) -> dict:
        return asdict(self)
