"""Every ecoguard metric family, declared once: name, kind, HELP, labels, buckets.

The in-process collector, the multi-worker sink and the sidecar all build their families from
these rows, so a family cannot exist on one path only and its HELP cannot drift between them.
Names, labels and buckets are a contract with grafana/ and deploy/ (dashboards, recording and
alert rules): ARCHITECTURE.md, "Metric names". Base units, ``_total`` added to counters by the
exposition, labels ``gpu``/``uuid`` as DCGM-exporter and ``model_name`` as vLLM.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)

from ecoguard import __version__
from ecoguard.config import Settings

Kind = Literal["counter", "gauge", "histogram", "info"]
# Where a family's values come from. ``gpu``/``sampler``: the meter, read at scrape time (the
# in-process server, or the sidecar that samples the GPUs once for all workers). ``call``,
# ``reference``, ``finding``, ``folding``: generation records and findings, kept by the process
# that served the call (in-process aggregates, or each worker's multiprocess files merged by the
# sidecar). ``fault``/``config``: this process' own state.
Source = Literal["gpu", "sampler", "call", "reference", "finding", "folding", "fault", "config"]
WORKER_SOURCES: frozenset[str] = frozenset({"call", "reference", "finding", "folding"})

GENERATION_LABELS: tuple[str, ...] = ("model_name", "precision", "gpu_name")
GPU_LABELS: tuple[str, ...] = ("gpu", "uuid", "gpu_name")
FINDING_LABELS: tuple[str, ...] = ("rule", "mood", "action")
GPU_INFO_KEYS: tuple[str, ...] = ("profile", "tier", "method")

# Generate-call batch sizes: powers of two up to the batcher's 1024 ceiling.
BATCH_SIZE_BUCKETS: tuple[float, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
# Energy per request in joules: a tiny model on a small GPU is well under 1 J per request, a 70B
# model generating 1k tokens is several kJ.
REQUEST_ENERGY_BUCKETS_J: tuple[float, ...] = (
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    25,
    50,
    100,
    250,
    500,
    1000,
    2500,
    5000,
    10000,
)


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One metric family. ``name`` is the family name (the exposition adds ``_total`` to a
    counter and ``_info`` to an info). ``sparse``: no series for a label set until its first
    non-zero value (most label sets never have one). ``multiprocess_mode``: how the sidecar
    merges a gauge that workers write (prometheus_client's modes)."""

    name: str
    kind: Kind
    help: str
    source: Source
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()
    sparse: bool = False
    multiprocess_mode: str = ""

    @property
    def written_by_workers(self) -> bool:
        """True when multi-worker processes write it to their multiprocess files."""
        return self.source in WORKER_SOURCES

    def family(self) -> Metric:
        """An empty family of this kind, to be filled at scrape time."""
        if self.kind == "counter":
            return CounterMetricFamily(self.name, self.help, labels=self.labels)
        if self.kind == "gauge":
            return GaugeMetricFamily(self.name, self.help, labels=self.labels)
        if self.kind == "histogram":
            return HistogramMetricFamily(self.name, self.help, labels=self.labels)
        return InfoMetricFamily(self.name, self.help, labels=self.labels)


def _gpu(name: str, kind: Kind, help: str) -> MetricSpec:
    return MetricSpec(name, kind, help, "gpu", GPU_LABELS)


def _call(
    name: str, kind: Kind, help: str, *, buckets: tuple[float, ...] = (), sparse: bool = False
) -> MetricSpec:
    return MetricSpec(name, kind, help, "call", GENERATION_LABELS, buckets, sparse)


GPU_ENERGY = _gpu(
    "ecoguard_gpu_energy_joules",
    "counter",
    "Energy used by the GPU since the sampler started, in joules (NVML counter, or integrated "
    "power where the counter is missing).",
)
GPU_POWER = _gpu(
    "ecoguard_gpu_power_watts", "gauge", "Instant GPU power draw in watts at the last sample."
)
GPU_IDLE_POWER = _gpu(
    "ecoguard_gpu_idle_power_watts",
    "gauge",
    "Measured (or profile) idle power of the GPU in watts; reported, never subtracted.",
)
GPU_STALE = _gpu(
    "ecoguard_gpu_stale", "gauge", "1 when the sampler has no recent reading for this GPU, else 0."
)
GPU_INFO = _gpu(
    "ecoguard_gpu",
    "info",
    "Static facts about a sampled GPU: knowledge profile, data tier (live or simulated) and how "
    "its energy is measured.",
)
SAMPLER_LAST_SAMPLE = MetricSpec(
    "ecoguard_sampler_last_sample_timestamp_seconds",
    "gauge",
    "Wall-clock time of the sampler's last reading, in seconds since the epoch.",
    "sampler",
)
SAMPLER_SAMPLES = MetricSpec(
    "ecoguard_sampler_samples", "counter", "Sampler readings taken since it started.", "sampler"
)
SAMPLER_RATE = MetricSpec(
    "ecoguard_sampler_rate_hertz", "gauge", "Sampler readings per second, as achieved.", "sampler"
)
GENERATION_ENERGY = _call(
    "ecoguard_generation_energy_joules",
    "counter",
    "GPU energy attributed to generate calls, in joules (overlapping calls share).",
)
GENERATION_TOKENS = _call(
    "ecoguard_generation_tokens",
    "counter",
    "Generated tokens (per sequence up to the first EOS; no prompt, no padding).",
)
GENERATION_REQUESTS = _call(
    "ecoguard_generation_requests", "counter", "Requests (sequences) served by generate calls."
)
GENERATION_CALLS = _call(
    "ecoguard_generation_calls",
    "counter",
    "Measured generate calls; under vLLM, engine steps (one per step while requests are in "
    "flight), not requests: requests are ecoguard_generation_requests.",
)
ENERGY_COST = _call(
    "ecoguard_energy_cost_usd",
    "counter",
    "Electricity cost of the attributed energy in US dollars (price and PUE of the configured "
    "region).",
)
CO2 = _call(
    "ecoguard_co2_grams",
    "counter",
    "CO2 of the attributed energy in grams (grid intensity and PUE of the region).",
)
BATCH_SIZE = _call(
    "ecoguard_generation_batch_size",
    "histogram",
    "Batch size of each measured generate call.",
    buckets=BATCH_SIZE_BUCKETS,
)
BATCHING_SAVED = _call(
    "ecoguard_batching_energy_saved_joules",
    "counter",
    "Estimated energy that ecoguard's batching saved against running each coalesced request "
    "alone, in joules (derived: batch scaling of the measured A800 sweep).",
    sparse=True,
)
REQUEST_ENERGY = _call(
    "ecoguard_request_energy_joules",
    "histogram",
    "Energy per request in joules (a call's energy shared equally by its requests).",
    buckets=REQUEST_ENERGY_BUCKETS_J,
)
REFERENCE = MetricSpec(
    "ecoguard_reference_energy_per_token_joules",
    "gauge",
    "What the reference data says this model, precision and GPU should use, in joules per "
    "generated token; ``tier`` says how that is known.",
    "reference",
    (*GENERATION_LABELS, "tier"),
    sparse=True,
    # The sidecar shows the latest value any worker wrote, not a sum.
    multiprocess_mode="mostrecent",
)
FINDINGS = MetricSpec(
    "ecoguard_findings",
    "counter",
    "Energy-trap findings raised by the guard, by rule, mood and action taken.",
    "finding",
    FINDING_LABELS,
)
FOLDED_MODELS = MetricSpec(
    "ecoguard_folded_model_names",
    "gauge",
    'Distinct model names counted under model_name="other" (label cardinality cap).',
    "folding",
    # Each worker folds its own names: the sidecar shows the most any worker folded.
    multiprocess_mode="max",
)
INTERNAL_FAULTS = MetricSpec(
    "ecoguard_internal_faults",
    "counter",
    "ecoguard's own failures by stage; each was contained and the user's call went on.",
    "fault",
    ("stage",),
)


def _text(value: object) -> str:
    return str(value)


def _number(value: float) -> str:
    return f"{value:g}"


def _flag(value: bool) -> str:
    return str(value).lower()


def _optional(value: object) -> str:
    return "" if value is None else str(value)


def _rules(rules: Mapping[str, str]) -> str:
    return ",".join(f"{rule}:{action}" for rule, action in sorted(rules.items()))


def _on_off(path: object) -> str:
    return "off" if path is None else "on"


@dataclass(frozen=True, slots=True)
class ConfigLabel:
    """One label of ``ecoguard_config_info``: its name and how its value is written from the
    live Settings (the Settings fields that matter to someone reading a graph)."""

    name: str
    value: Callable[[Settings], str]


def _field(name: str, write: Callable[[Any], str] = _text, *, label: str = "") -> ConfigLabel:
    return ConfigLabel(label or name, lambda settings: write(getattr(settings, name)))


# The one declaration of ecoguard_config_info's labels: CONFIG_INFO's label names and the values
# the collector writes both come from it.
CONFIG_LABELS: tuple[ConfigLabel, ...] = (
    ConfigLabel("version", lambda _settings: __version__),
    _field("mode"),
    _field("rules", _rules),
    _field("backend"),
    _field("simulated_gpu"),
    _field("sample_hz", _number),
    _field("measure", _flag),
    _field("region"),
    _field("price_usd_per_kwh", _optional),
    _field("grid_gco2_per_kwh", _optional),
    _field("pue", _optional),
    _field("monthly_requests"),
    _field("batching", _flag),
    _field("max_batch_size"),
    _field("max_wait_ms", _number),
    _field("ledger_path", _on_off, label="ledger"),
)


def config_values(settings: Settings) -> list[str]:
    """The settings as ``ecoguard_config_info`` label values, in CONFIG_INFO's label order."""
    return [label.value(settings) for label in CONFIG_LABELS]


CONFIG_INFO = MetricSpec(
    "ecoguard_config",
    "info",
    "The live ecoguard configuration of this process.",
    "config",
    tuple(label.name for label in CONFIG_LABELS),
)

# In exposition order.
METRICS: tuple[MetricSpec, ...] = (
    GPU_ENERGY,
    GPU_POWER,
    GPU_IDLE_POWER,
    GPU_STALE,
    GPU_INFO,
    SAMPLER_LAST_SAMPLE,
    SAMPLER_SAMPLES,
    SAMPLER_RATE,
    GENERATION_ENERGY,
    GENERATION_TOKENS,
    GENERATION_REQUESTS,
    GENERATION_CALLS,
    ENERGY_COST,
    CO2,
    BATCH_SIZE,
    BATCHING_SAVED,
    REQUEST_ENERGY,
    REFERENCE,
    FINDINGS,
    FOLDED_MODELS,
    INTERNAL_FAULTS,
    CONFIG_INFO,
)
# The families fed per (model_name, precision, gpu_name) by each generate call.
CALL_METRICS: tuple[MetricSpec, ...] = tuple(spec for spec in METRICS if spec.source == "call")
WORKER_METRICS: tuple[MetricSpec, ...] = tuple(spec for spec in METRICS if spec.written_by_workers)


def metrics_from(source: Source) -> tuple[MetricSpec, ...]:
    """The rows of one source, in exposition order."""
    return tuple(spec for spec in METRICS if spec.source == source)
