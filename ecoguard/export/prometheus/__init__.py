"""Prometheus metrics: live joules, watts, tokens, dollars and CO2 next to the reference.

Three pieces, all lazy (nothing runs at import, and this is the only module of ecoguard that
imports ``prometheus_client``):

- :class:`GenerationAggregates` subscribes to ``ecoguard.events.records`` and
  ``ecoguard.events.findings`` and keeps running totals per (model, precision, GPU name). The
  subscribers only add numbers under a lock, because they run on the caller's generate thread.
  Label cardinality is bounded: model names beyond ``max_models`` fold into ``other``.
- :class:`EcoguardCollector` is a custom collector: at scrape time it reads those totals, the
  meter's per-GPU snapshot (``Meter.gpu_states()``, ``Meter.stats()``), the fault counters and the
  live settings, and turns them into metric families. Nothing is cached between scrapes, so a
  scrape shows exactly what the meter knows at that moment.
- :func:`start_metrics_server` serves ``/metrics`` from a tiny ``http.server`` on a named daemon
  thread (127.0.0.1 by default). A port already in use is logged clearly and the application
  goes on without metrics.

Multi-worker servers (gunicorn/uvicorn): with ``PROMETHEUS_MULTIPROC_DIR`` set before the worker
starts, :func:`enable_worker_export` makes each worker write its counters to prometheus_client's
multiprocess files instead, and the ``ecoguard exporter`` sidecar serves them merged, together
with the GPU device metrics it samples once per GPU. See docs/metrics.md.

Metric names, units and labels follow ARCHITECTURE.md ("Metric names"): base units, ``_total``
counters, labels ``gpu``/``uuid`` (as DCGM-exporter) and ``model_name`` (as vLLM). Joules per
token is not exported as a gauge: it is the recording rule ``rate(energy) / rate(tokens)`` in
grafana/prometheus/ecoguard-rules.yml.
"""

from __future__ import annotations

import http.server
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from ecoguard import events
from ecoguard.config import Settings
from ecoguard.faults import fault_counts, record_fault
from ecoguard.forking import register_fork_hooks

_log = logging.getLogger("ecoguard.metrics")

# Default cap on distinct model names per process. 32 leaves room for the usual handful of
# served models (and the 20-model benchmark) while keeping a runaway label (a model name built
# from a request) from exploding Prometheus' series count.
DEFAULT_MAX_MODELS = 32
OTHER = "other"
# The port used when none is configured (the example in the docs and the sidecar's default).
DEFAULT_PORT = 9464
UNKNOWN = "unknown"

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

GENERATION_LABELS: tuple[str, ...] = ("model_name", "precision", "gpu_name")
GPU_LABELS: tuple[str, ...] = ("gpu", "uuid", "gpu_name")
FINDING_LABELS: tuple[str, ...] = ("rule", "mood", "action")


# --------------------------------------------------------------------------------------------
# Aggregation of events
# --------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Histogram:
    """Cumulative-at-render histogram: per-bucket counts (not cumulative), count and sum."""

    bounds: tuple[float, ...]
    counts: list[float] = field(default_factory=list)
    total: float = 0.0
    sum: float = 0.0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0.0] * (len(self.bounds) + 1)  # last slot: +Inf

    def observe(self, value: float, weight: float = 1.0) -> None:
        for i, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[i] += weight
                break
        else:
            self.counts[-1] += weight
        self.total += weight
        self.sum += value * weight

    def cumulative(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        running = 0.0
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += count
            out.append((_le(bound), running))
        return out

    def copy(self) -> _Histogram:
        return _Histogram(self.bounds, list(self.counts), self.total, self.sum)


@dataclass(slots=True)
class _Totals:
    """Running totals for one (model_name, precision, gpu_name) key."""

    energy_j: float = 0.0
    tokens: float = 0.0
    requests: float = 0.0
    calls: float = 0.0
    cost_usd: float = 0.0
    co2_g: float = 0.0
    batch_size: _Histogram = field(default_factory=lambda: _Histogram(BATCH_SIZE_BUCKETS))
    request_energy: _Histogram = field(default_factory=lambda: _Histogram(REQUEST_ENERGY_BUCKETS_J))
    batching_saved_j: float = 0.0

    def copy(self) -> _Totals:
        return _Totals(
            self.energy_j,
            self.tokens,
            self.requests,
            self.calls,
            self.cost_usd,
            self.co2_g,
            self.batch_size.copy(),
            self.request_energy.copy(),
            self.batching_saved_j,
        )


_saved_ratio_cache: dict[tuple[int, int], float | None] = {}


def batching_saved_energy_j(record: Any) -> float | None:
    """Estimated energy a coalesced call saved against running its requests alone.

    A record whose ``batch_size`` (the batch the GPU ran) exceeds its own ``requests`` was
    coalesced by ecoguard's batching. Running alone, its tokens would have cost more per token by
    the ratio the measured A800 batch sweep gives between the two batch sizes (tier ``derived``,
    ``ecoguard.knowledge.estimator.batch_energy_ratio``); the saving is the difference."""
    energy_j = _number(getattr(record, "energy_j", None))
    requests = _number(getattr(record, "requests", None))
    batch_size = _number(getattr(record, "batch_size", None))
    if not energy_j or not requests or not batch_size or batch_size <= requests:
        return None
    key = (int(batch_size), int(requests))
    if key not in _saved_ratio_cache:
        try:
            from ecoguard.knowledge.estimator import batch_energy_ratio

            _saved_ratio_cache[key] = batch_energy_ratio(key[0], key[1])[0]
        except Exception as exc:  # no sweep rows: no estimate, never a failed scrape
            record_fault("export.batching_saved", exc)
            _saved_ratio_cache[key] = None
    ratio = _saved_ratio_cache[key]
    if ratio is None or ratio <= 1.0:
        return None
    return energy_j * (ratio - 1.0)


@dataclass(frozen=True, slots=True)
class AggregateSnapshot:
    """A consistent copy of the aggregates, taken under the lock at scrape time."""

    generation: dict[tuple[str, str, str], _Totals]
    # (model_name, precision, gpu_name) -> (joules per token, tier)
    reference: dict[tuple[str, str, str], tuple[float, str]]
    findings: dict[tuple[str, str, str], float]
    folded_models: int


def _label(value: object) -> str:
    if value is None:
        return UNKNOWN
    text = str(getattr(value, "value", value)).strip()
    return text or UNKNOWN


def _gpu_name_label(names: object) -> str:
    """One label for the GPUs a call ran on: the name, or distinct names joined with ``+``.

    A tensor-parallel call over four identical GPUs is labelled with that one name, so the label
    set stays as small as the set of GPU models in the fleet."""
    if names is None:
        return UNKNOWN
    if isinstance(names, str):
        return _label(names)
    distinct = sorted({_label(n) for n in names})
    return "+".join(distinct) if distinct else UNKNOWN


def _finding_key(event: Any) -> tuple[str, str, str]:
    """(rule, mood, action) of a FindingEvent, a (finding, action, source) tuple or a Finding."""
    finding = getattr(event, "finding", None)
    action = getattr(event, "action", None)
    if finding is None and isinstance(event, tuple) and event:
        finding = event[0]
        action = event[1] if len(event) > 1 else None
    if finding is None:
        finding = event
    return (
        _label(getattr(finding, "rule", None)),
        _label(getattr(finding, "mood", None)),
        _label(action),
    )


def _number(value: object) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return number if number == number and number not in (float("inf"), float("-inf")) else None


@dataclass(frozen=True, slots=True)
class _RecordFacts:
    """A GenerationRecord's figures, checked once for both sinks (in-process aggregates and
    multiprocess worker files): a field that is missing or out of range is None and skipped."""

    energy_j: float | None
    tokens: float | None
    requests: float | None
    batch_size: float | None
    cost_usd: float | None
    co2_g: float | None
    reference_j_per_token: float | None
    reference_tier: str
    batching_saved_j: float | None

    @classmethod
    def of(cls, record: Any) -> _RecordFacts:
        def at_least(name: str, low: float, *, strict: bool = False) -> float | None:
            value = _number(getattr(record, name, None))
            if value is None or value < low or (strict and value == low):
                return None
            return value

        return cls(
            energy_j=at_least("energy_j", 0.0),
            tokens=at_least("tokens", 0.0),
            requests=at_least("requests", 0.0, strict=True),
            batch_size=at_least("batch_size", 0.0, strict=True),
            cost_usd=at_least("cost_usd", 0.0),
            co2_g=at_least("co2_g", 0.0),
            reference_j_per_token=at_least("reference_j_per_token", 0.0, strict=True),
            reference_tier=_label(getattr(record, "reference_tier", None)),
            batching_saved_j=batching_saved_energy_j(record),
        )

    @property
    def energy_per_request_j(self) -> float | None:
        """Each request in the call gets an equal share of the call's energy."""
        if self.energy_j is None or self.requests is None:
            return None
        return self.energy_j / self.requests


class _ModelLabels:
    """The ``model_name`` label with bounded cardinality: the first ``max_models`` names keep
    their own series, later ones are counted under ``other`` (and remembered as folded)."""

    def __init__(self, max_models: int) -> None:
        if max_models < 1:
            raise ValueError(f"max_models must be >= 1, got {max_models!r}")
        self.max_models = max_models
        self._lock = threading.Lock()
        self._models: set[str] = set()
        self._folded: set[str] = set()

    def label(self, model_name: object) -> str:
        name = _label(model_name)
        with self._lock:
            if name in self._models:
                return name
            if len(self._models) < self.max_models:
                self._models.add(name)
                return name
            self._folded.add(name)
        return OTHER

    @property
    def folded(self) -> int:
        with self._lock:
            return len(self._folded)


def _generation_key(labels: _ModelLabels, record: Any) -> tuple[str, str, str]:
    return (
        labels.label(getattr(record, "model_name", None)),
        _label(getattr(record, "precision", None)),
        _gpu_name_label(getattr(record, "gpu_names", None)),
    )


class GenerationAggregates:
    """Totals of generation records and findings, fed by ``ecoguard.events``.

    Thread-safe: ``observe_*`` may run concurrently on any generate thread; :meth:`snapshot`
    copies under the same lock. ``max_models`` bounds the ``model_name`` label: the first
    ``max_models`` names seen keep their own series, later ones are counted under ``other``.
    """

    def __init__(self, *, max_models: int = DEFAULT_MAX_MODELS) -> None:
        self._labels = _ModelLabels(max_models)
        self.max_models = max_models
        self._lock = threading.Lock()
        self._generation: dict[tuple[str, str, str], _Totals] = {}
        self._reference: dict[tuple[str, str, str], tuple[float, str]] = {}
        self._findings: dict[tuple[str, str, str], float] = {}
        self._unsubscribers: list[Callable[[], None]] = []

    # -- wiring ---------------------------------------------------------------------------
    def _relock(self) -> None:
        """Fresh locks after a fork (the parent's may have been held by one of its threads)."""
        self._lock = threading.Lock()
        self._labels._lock = threading.Lock()

    def subscribe(self) -> None:
        """Start receiving records and findings. Idempotent."""
        with self._lock:
            if self._unsubscribers:
                return
            self._unsubscribers = [
                events.records.subscribe(self.observe_record),
                events.findings.subscribe(self.observe_finding),
            ]

    def unsubscribe(self) -> None:
        with self._lock:
            unsubscribers, self._unsubscribers = self._unsubscribers, []
        for unsubscribe in unsubscribers:
            unsubscribe()

    @property
    def subscribed(self) -> bool:
        return bool(self._unsubscribers)

    # -- feeding --------------------------------------------------------------------------
    def observe_record(self, record: Any) -> None:
        """Add one GenerationRecord (ecoguard.energy). Fields that are None are skipped."""
        facts = _RecordFacts.of(record)
        key = _generation_key(self._labels, record)
        with self._lock:
            totals = self._generation.get(key)
            if totals is None:
                totals = self._generation[key] = _Totals()
            totals.calls += 1
            if facts.energy_j is not None:
                totals.energy_j += facts.energy_j
            if facts.tokens is not None:
                totals.tokens += facts.tokens
            if facts.requests is not None:
                totals.requests += facts.requests
            if facts.energy_per_request_j is not None:
                totals.request_energy.observe(facts.energy_per_request_j, weight=facts.requests)
            if facts.batch_size is not None:
                totals.batch_size.observe(facts.batch_size)
            if facts.batching_saved_j is not None:
                totals.batching_saved_j += facts.batching_saved_j
            if facts.cost_usd is not None:
                totals.cost_usd += facts.cost_usd
            if facts.co2_g is not None:
                totals.co2_g += facts.co2_g
            # The reference for a folded model is meaningless under "other": skip it.
            if facts.reference_j_per_token is not None and key[0] != OTHER:
                self._reference[key] = (facts.reference_j_per_token, facts.reference_tier)

    def observe_finding(self, event: Any) -> None:
        """Count one FindingEvent(finding, action, source); plain tuples are accepted too."""
        key = _finding_key(event)
        with self._lock:
            self._findings[key] = self._findings.get(key, 0.0) + 1

    # -- reading --------------------------------------------------------------------------
    def snapshot(self) -> AggregateSnapshot:
        with self._lock:
            return AggregateSnapshot(
                generation={k: v.copy() for k, v in self._generation.items()},
                reference=dict(self._reference),
                findings=dict(self._findings),
                folded_models=self._labels.folded,
            )


# --------------------------------------------------------------------------------------------
# The collector
# --------------------------------------------------------------------------------------------


def _le(bound: float) -> str:
    if bound == float("inf"):
        return "+Inf"
    return repr(float(bound))


def _default_meter() -> Any:
    """The process' running meter, if the energy package exists and one was started."""
    try:
        from ecoguard.energy import get_meter  # type: ignore[attr-defined]
    except ImportError:
        return None
    return get_meter()


MeterSource = Any  # a Meter, a zero-argument callable returning one (or None), or None
SettingsSource = Settings | Callable[[], "Settings | None"] | None


class EcoguardCollector(Collector):
    """Builds every ecoguard metric family at scrape time.

    ``aggregates``: the generation/finding totals (None: no generation metrics, as in the
    sidecar). ``meter``: a Meter, or a zero-argument callable returning the current one; the
    default looks up ``ecoguard.energy.get_meter()`` at each scrape; ``False`` disables device
    metrics (multi-worker processes leave them to the sidecar). ``settings``: the live Settings
    (or a callable), exposed as ``ecoguard_config_info``. ``clock``: epoch seconds, injected by
    tests. A failure in one part is counted as a fault (``metrics.collect``) and the rest of the
    scrape still answers.
    """

    def __init__(
        self,
        *,
        aggregates: GenerationAggregates | None = None,
        meter: MeterSource = None,
        settings: SettingsSource = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.aggregates = aggregates
        self._meter = meter
        self._settings = settings
        self._clock = clock
        self._monotonic = monotonic

    def set_meter(self, meter: MeterSource) -> None:
        self._meter = meter

    def set_settings(self, settings: SettingsSource) -> None:
        self._settings = settings

    def _current_meter(self) -> Any:
        if self._meter is False:
            return None
        if self._meter is None:
            return _default_meter()
        if callable(self._meter) and not hasattr(self._meter, "gpu_states"):
            return self._meter()
        return self._meter

    def _current_settings(self) -> Settings | None:
        source = self._settings
        if source is None or isinstance(source, Settings):
            return source
        return source()

    def describe(self) -> Iterable[Metric]:
        # Registering must not trigger a scrape (and its meter calls): describe nothing.
        return []

    def collect(self) -> Iterator[Metric]:
        families: list[Metric] = []
        for part in (self._collect_devices, self._collect_generation, self._collect_process):
            try:
                families.extend(part())
            except Exception as exc:
                record_fault("metrics.collect", exc)
        yield from families

    # -- parts ----------------------------------------------------------------------------
    def _collect_devices(self) -> list[Metric]:
        meter = self._current_meter()
        if meter is None:
            return []
        energy = CounterMetricFamily(
            "ecoguard_gpu_energy_joules",
            "Energy used by the GPU since the sampler started, in joules (NVML counter, or "
            "integrated power where the counter is missing).",
            labels=GPU_LABELS,
        )
        power = GaugeMetricFamily(
            "ecoguard_gpu_power_watts",
            "Instant GPU power draw in watts at the last sample.",
            labels=GPU_LABELS,
        )
        idle = GaugeMetricFamily(
            "ecoguard_gpu_idle_power_watts",
            "Measured (or profile) idle power of the GPU in watts; reported, never subtracted.",
            labels=GPU_LABELS,
        )
        stale = GaugeMetricFamily(
            "ecoguard_gpu_stale",
            "1 when the sampler has no recent reading for this GPU, else 0.",
            labels=GPU_LABELS,
        )
        info = InfoMetricFamily(
            "ecoguard_gpu",
            "Static facts about a sampled GPU: knowledge profile, data tier (live or "
            "simulated) and how its energy is measured.",
            labels=GPU_LABELS,
        )
        for state in meter.gpu_states():
            labels = [
                str(getattr(state, "index", UNKNOWN)),
                _label(getattr(state, "uuid", None)),
                _label(getattr(state, "name", None)),
            ]
            if (value := _number(getattr(state, "energy_j_total", None))) is not None:
                energy.add_metric(labels, value)
            if (value := _number(getattr(state, "power_w", None))) is not None:
                power.add_metric(labels, value)
            if (value := _number(getattr(state, "idle_w", None))) is not None:
                idle.add_metric(labels, value)
            stale.add_metric(labels, 1.0 if getattr(state, "stale", False) else 0.0)
            info.add_metric(
                labels,
                {
                    "profile": _label(getattr(state, "profile", None)),
                    "tier": _label(getattr(state, "tier", None)),
                    "method": _label(getattr(state, "method", None)),
                },
            )
        families: list[Metric] = [energy, power, idle, stale, info]
        families.extend(self._sampler_health(meter))
        return families

    def _sampler_health(self, meter: Any) -> list[Metric]:
        stats_fn = getattr(meter, "stats", None)
        stats = stats_fn() if callable(stats_fn) else {}
        families: list[Metric] = []
        last_epoch = _number(stats.get("last_sample_time"))
        if last_epoch is None:
            last_mono = _number(stats.get("last_sample_monotonic"))
            if last_mono is not None:
                # Convert the sampler's monotonic stamp to wall time so that alert rules can
                # compare it with Prometheus' time().
                last_epoch = self._clock() - (self._monotonic() - last_mono)
        if last_epoch is not None:
            g = GaugeMetricFamily(
                "ecoguard_sampler_last_sample_timestamp_seconds",
                "Wall-clock time of the sampler's last reading, in seconds since the epoch.",
            )
            g.add_metric([], last_epoch)
            families.append(g)
        if (samples := _number(stats.get("samples"))) is not None:
            c = CounterMetricFamily(
                "ecoguard_sampler_samples", "Sampler readings taken since it started."
            )
            c.add_metric([], samples)
            families.append(c)
        if (rate := _number(stats.get("sample_hz_actual"))) is not None:
            g = GaugeMetricFamily(
                "ecoguard_sampler_rate_hertz", "Sampler readings per second, as achieved."
            )
            g.add_metric([], rate)
            families.append(g)
        return families

    def _collect_generation(self) -> list[Metric]:
        if self.aggregates is None:
            return []
        snap = self.aggregates.snapshot()
        energy = CounterMetricFamily(
            "ecoguard_generation_energy_joules",
            "GPU energy attributed to generate calls, in joules (overlapping calls share).",
            labels=GENERATION_LABELS,
        )
        tokens = CounterMetricFamily(
            "ecoguard_generation_tokens",
            "Generated tokens (per sequence up to the first EOS; no prompt, no padding).",
            labels=GENERATION_LABELS,
        )
        requests = CounterMetricFamily(
            "ecoguard_generation_requests",
            "Requests (sequences) served by generate calls.",
            labels=GENERATION_LABELS,
        )
        calls = CounterMetricFamily(
            "ecoguard_generation_calls",
            "Measured generate calls.",
            labels=GENERATION_LABELS,
        )
        cost = CounterMetricFamily(
            "ecoguard_energy_cost_usd",
            "Electricity cost of the attributed energy in US dollars (price and PUE of the "
            "configured region).",
            labels=GENERATION_LABELS,
        )
        co2 = CounterMetricFamily(
            "ecoguard_co2_grams",
            "CO2 of the attributed energy in grams (grid intensity and PUE of the region).",
            labels=GENERATION_LABELS,
        )
        batch = HistogramMetricFamily(
            "ecoguard_generation_batch_size",
            "Batch size of each measured generate call.",
            labels=GENERATION_LABELS,
        )
        batching_saved = CounterMetricFamily(
            "ecoguard_batching_energy_saved_joules",
            "Estimated energy that ecoguard's batching saved against running each coalesced "
            "request alone, in joules (derived: batch scaling of the measured A800 sweep).",
            labels=GENERATION_LABELS,
        )
        request_energy = HistogramMetricFamily(
            "ecoguard_request_energy_joules",
            "Energy per request in joules (a call's energy shared equally by its requests).",
            labels=GENERATION_LABELS,
        )
        for key, totals in sorted(snap.generation.items()):
            labels = list(key)
            energy.add_metric(labels, totals.energy_j)
            tokens.add_metric(labels, totals.tokens)
            requests.add_metric(labels, totals.requests)
            calls.add_metric(labels, totals.calls)
            cost.add_metric(labels, totals.cost_usd)
            co2.add_metric(labels, totals.co2_g)
            batch.add_metric(labels, totals.batch_size.cumulative(), totals.batch_size.sum)
            if totals.batching_saved_j:
                batching_saved.add_metric(labels, totals.batching_saved_j)
            request_energy.add_metric(
                labels, totals.request_energy.cumulative(), totals.request_energy.sum
            )
        reference = GaugeMetricFamily(
            "ecoguard_reference_energy_per_token_joules",
            "What the reference data says this model, precision and GPU should use, in joules "
            "per generated token; ``tier`` says how that is known.",
            labels=(*GENERATION_LABELS, "tier"),
        )
        for key, (value, tier) in sorted(snap.reference.items()):
            reference.add_metric([*key, tier], value)
        findings = CounterMetricFamily(
            "ecoguard_findings",
            "Energy-trap findings raised by the guard, by rule, mood and action taken.",
            labels=FINDING_LABELS,
        )
        for key, count in sorted(_with_zero_findings(snap.findings, self._current_settings())):
            findings.add_metric(list(key), count)
        folded = GaugeMetricFamily(
            "ecoguard_folded_model_names",
            'Distinct model names counted under model_name="other" (label cardinality cap).',
        )
        folded.add_metric([], snap.folded_models)
        return [
            energy,
            tokens,
            requests,
            calls,
            cost,
            co2,
            batch,
            batching_saved,
            request_energy,
            reference,
            findings,
            folded,
        ]

    def _collect_process(self) -> list[Metric]:
        families: list[Metric] = []
        faults = CounterMetricFamily(
            "ecoguard_internal_faults",
            "ecoguard's own failures by stage; each was contained and the user's call went on.",
            labels=("stage",),
        )
        for stage, count in sorted(fault_counts().items()):
            faults.add_metric([stage], count)
        families.append(faults)
        settings = self._current_settings()
        if settings is not None:
            info = InfoMetricFamily(
                "ecoguard_config", "The live ecoguard configuration of this process."
            )
            info.add_metric([], config_labels(settings))
            families.append(info)
        return families


def _with_zero_findings(
    findings: dict[tuple[str, str, str], float], settings: Settings | None
) -> list[tuple[tuple[str, str, str], float]]:
    """Observed finding counts plus a 0 for every (rule, mood, configured action) not seen yet.

    A counter series that is born at 1 is invisible to increase()/rate(), so a rule's first
    firing would never show on a dashboard or in an alert; creating the series at 0 fixes that."""
    merged = dict(findings)
    if settings is not None:
        from ecoguard.rules import RULES

        for rule_id, spec in RULES.items():
            action = settings.action_for(rule_id)
            if action == "off":
                continue
            for mood in spec.moods:
                merged.setdefault((rule_id, mood.value, action), 0.0)
    return list(merged.items())


def config_labels(settings: Settings) -> dict[str, str]:
    """The settings as label values (Settings fields that matter to someone reading a graph)."""
    from ecoguard import __version__

    def opt(value: object) -> str:
        return "" if value is None else str(value)

    return {
        "version": __version__,
        "mode": settings.mode,
        "rules": ",".join(f"{rule}:{action}" for rule, action in sorted(settings.rules.items())),
        "backend": settings.backend,
        "simulated_gpu": settings.simulated_gpu,
        "sample_hz": f"{settings.sample_hz:g}",
        "measure": str(settings.measure).lower(),
        "region": settings.region,
        "price_usd_per_kwh": opt(settings.price_usd_per_kwh),
        "grid_gco2_per_kwh": opt(settings.grid_gco2_per_kwh),
        "pue": opt(settings.pue),
        "monthly_requests": str(settings.monthly_requests),
        "batching": str(settings.batching).lower(),
        "max_batch_size": str(settings.max_batch_size),
        "max_wait_ms": f"{settings.max_wait_ms:g}",
        "ledger": "off" if settings.ledger_path is None else "on",
    }


# --------------------------------------------------------------------------------------------
# Multi-process mode (gunicorn/uvicorn workers)
# --------------------------------------------------------------------------------------------


def multiprocess_dir() -> str | None:
    """``PROMETHEUS_MULTIPROC_DIR`` when it names an existing directory, else None."""
    path = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    return path if path and os.path.isdir(path) else None


class _MultiprocessSink:
    """Writes records and findings into prometheus_client's multiprocess files.

    Each worker process owns its own mmap files; the sidecar's ``MultiProcessCollector`` adds
    the counters of all workers (live and dead) at scrape time. Metric objects live in a private
    registry so they never appear twice in an in-process scrape.
    """

    def __init__(self, *, max_models: int = DEFAULT_MAX_MODELS) -> None:
        from prometheus_client import Counter, Gauge, Histogram

        registry = CollectorRegistry(auto_describe=False)
        self._labels = _ModelLabels(max_models)
        self.max_models = max_models
        labels = GENERATION_LABELS
        self.energy = Counter(
            "ecoguard_generation_energy_joules",
            "GPU energy attributed to generate calls, in joules.",
            labels,
            registry=registry,
        )
        self.tokens = Counter(
            "ecoguard_generation_tokens", "Generated tokens.", labels, registry=registry
        )
        self.requests = Counter(
            "ecoguard_generation_requests", "Requests served.", labels, registry=registry
        )
        self.calls = Counter(
            "ecoguard_generation_calls", "Measured generate calls.", labels, registry=registry
        )
        self.cost = Counter(
            "ecoguard_energy_cost_usd", "Cost of attributed energy, USD.", labels, registry=registry
        )
        self.co2 = Counter(
            "ecoguard_co2_grams", "CO2 of attributed energy, grams.", labels, registry=registry
        )
        self.batch = Histogram(
            "ecoguard_generation_batch_size",
            "Batch size of each measured generate call.",
            labels,
            buckets=BATCH_SIZE_BUCKETS,
            registry=registry,
        )
        self.request_energy = Histogram(
            "ecoguard_request_energy_joules",
            "Energy per request in joules.",
            labels,
            buckets=REQUEST_ENERGY_BUCKETS_J,
            registry=registry,
        )
        # "mostrecent": the sidecar shows the latest value any worker wrote, not a sum.
        self.reference = Gauge(
            "ecoguard_reference_energy_per_token_joules",
            "Reference joules per generated token.",
            (*labels, "tier"),
            multiprocess_mode="mostrecent",
            registry=registry,
        )
        self.findings = Counter(
            "ecoguard_findings", "Energy-trap findings.", FINDING_LABELS, registry=registry
        )
        self.batching_saved = Counter(
            "ecoguard_batching_energy_saved_joules",
            "Estimated energy saved by ecoguard's batching, joules (derived).",
            labels,
            registry=registry,
        )

    def observe_record(self, record: Any) -> None:
        facts = _RecordFacts.of(record)
        key = _generation_key(self._labels, record)
        self.calls.labels(*key).inc()
        if facts.energy_j is not None:
            self.energy.labels(*key).inc(facts.energy_j)
        if facts.tokens is not None:
            self.tokens.labels(*key).inc(facts.tokens)
        if facts.requests is not None:
            self.requests.labels(*key).inc(facts.requests)
        if facts.energy_per_request_j is not None:
            # prometheus_client's Histogram has no weighted observe: one observation per
            # request, capped so a huge batch cannot stall the caller (the in-process path
            # weights exactly).
            child = self.request_energy.labels(*key)
            for _ in range(min(int(facts.requests), 1024)):
                child.observe(facts.energy_per_request_j)
        if facts.batch_size is not None:
            self.batch.labels(*key).observe(facts.batch_size)
        if facts.batching_saved_j is not None:
            self.batching_saved.labels(*key).inc(facts.batching_saved_j)
        if facts.cost_usd is not None:
            self.cost.labels(*key).inc(facts.cost_usd)
        if facts.co2_g is not None:
            self.co2.labels(*key).inc(facts.co2_g)
        if facts.reference_j_per_token is not None and key[0] != OTHER:
            self.reference.labels(*key, facts.reference_tier).set(facts.reference_j_per_token)

    def observe_finding(self, event: Any) -> None:
        self.findings.labels(*_finding_key(event)).inc()


_worker_lock = threading.Lock()
_worker_unsubscribers: list[Callable[[], None]] = []


def enable_worker_export(*, max_models: int = DEFAULT_MAX_MODELS) -> bool:
    """In a multi-worker server, write this worker's counters to ``PROMETHEUS_MULTIPROC_DIR``.

    Returns False (and does nothing) when the variable is unset or was set only after
    prometheus_client was imported (its value class is chosen at import, so such a worker would
    keep its counters in memory, invisible to the sidecar). Idempotent.
    """
    from prometheus_client import values

    if multiprocess_dir() is None:
        return False
    if not getattr(values.ValueClass, "_multiprocess", True):
        _log.error(
            "ecoguard: PROMETHEUS_MULTIPROC_DIR was set after prometheus_client was imported; "
            "set it in the environment before the worker starts (see docs/metrics.md)"
        )
        return False
    with _worker_lock:
        if _worker_unsubscribers:
            return True
        sink = _MultiprocessSink(max_models=max_models)

        def on_record(record: Any) -> None:
            sink.observe_record(record)

        def on_finding(event: Any) -> None:
            sink.observe_finding(event)

        _worker_unsubscribers.extend(
            [events.records.subscribe(on_record), events.findings.subscribe(on_finding)]
        )
    return True


def disable_worker_export() -> None:
    with _worker_lock:
        unsubscribers = list(_worker_unsubscribers)
        _worker_unsubscribers.clear()
    for unsubscribe in unsubscribers:
        unsubscribe()


# --------------------------------------------------------------------------------------------
# The HTTP server
# --------------------------------------------------------------------------------------------


_TEXT_TYPES = {
    "info": "gauge",
    "stateset": "gauge",
    "gaugehistogram": "histogram",
    "unknown": "untyped",
}
_OM_SUFFIXES = ("_created", "_gsum", "_gcount")


def _escape_label_value(value: str) -> str:
    if "\\" in value or "\n" in value or '"' in value:
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return value


def render_text(registry: CollectorRegistry) -> bytes:
    """The registry in Prometheus text format 0.0.4, byte for byte what
    ``prometheus_client.generate_latest`` writes, at a fraction of its cost.

    Why: the client validates and escapes every label name of every sample on every scrape;
    with 8 GPUs and 20 models (about 1,700 samples, mostly histogram buckets) that alone took
    longer than the 10 ms scrape budget. Label names here are fixed identifiers, so each
    distinct label set is rendered once per scrape and reused by all its buckets.
    """
    from prometheus_client.utils import floatToGoString

    out: list[str] = []
    append = out.append
    for metric in registry.collect():
        name, kind = metric.name, metric.type
        if kind == "counter":
            name += "_total"
        elif kind == "info":
            name += "_info"
        kind = _TEXT_TYPES.get(kind, kind)
        doc = metric.documentation.replace("\\", r"\\").replace("\n", r"\n")
        append(f"# HELP {name} {doc}\n# TYPE {name} {kind}\n")
        extra: dict[str, list[str]] = {}
        # Per label set without "le": the rendered text before and after the "le" pair (labels
        # are written sorted by name, as prometheus_client does), so histogram buckets reuse it.
        cache: dict[tuple[tuple[str, str], ...], tuple[str, str]] = {}
        for sample in metric.samples:
            labels = sample.labels
            if labels:
                le = labels.get("le")
                base = tuple(item for item in labels.items() if item[0] != "le")
                parts = cache.get(base)
                if parts is None:
                    before = [f'{k}="{_escape_label_value(v)}"' for k, v in base if k < "le"]
                    after = [f'{k}="{_escape_label_value(v)}"' for k, v in base if k > "le"]
                    before.sort()
                    after.sort()
                    parts = cache[base] = (",".join(before), ",".join(after))
                before_text, after_text = parts
                if le is None:
                    joined = ",".join(p for p in parts if p)
                else:
                    le_text = f'le="{_escape_label_value(le)}"'
                    joined = ",".join(p for p in (before_text, le_text, after_text) if p)
                text = "{" + joined + "}"
            else:
                text = ""
            line = f"{sample.name}{text} {floatToGoString(sample.value)}"
            if sample.timestamp is not None:
                line += f" {int(float(sample.timestamp) * 1000):d}"
            line += "\n"
            for suffix in _OM_SUFFIXES:
                if sample.name == metric.name + suffix:
                    extra.setdefault(suffix, []).append(line)
                    break
            else:
                append(line)
        for suffix, lines in extra.items():
            append(f"# HELP {metric.name}{suffix} {doc}\n# TYPE {metric.name}{suffix} gauge\n")
            out.extend(lines)
    return "".join(out).encode("utf-8")


# See _MetricsHTTPServer.request_queue_size and _MetricsHandler._discard_request_body.
LISTEN_BACKLOG = 1024
MAX_DISCARDED_BODY_BYTES = 65536


class _MetricsHandler(http.server.BaseHTTPRequestHandler):
    """Answers GET and HEAD on /metrics (query string ignored); 404 elsewhere, 405 otherwise."""

    server: _MetricsHTTPServer
    server_version = "ecoguard-metrics"
    protocol_version = "HTTP/1.1"
    # Seconds a connection may sit without sending a request before it is closed, so idle or
    # half-open connections (slowloris) cannot pin a thread each forever. Scrapes take ms.
    timeout = 30.0

    def _is_metrics_path(self) -> bool:
        return self.path.split("?", 1)[0] in ("/metrics", "/metrics/")

    def _reply(self, code: int, body: bytes, content_type: str, *, head: bool = False) -> None:
        self._discard_request_body()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        if code == 405:
            self.send_header("Allow", "GET, HEAD")
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _discard_request_body(self) -> None:
        """Read and drop a body sent with the request (a GET may carry one), so it is not
        parsed as the next request on a kept-alive connection. A body that cannot be read
        cheaply (chunked, a bad or large length) closes the connection after the reply."""
        if self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            return
        raw = self.headers.get("Content-Length")
        if raw is None:
            return
        try:
            length = int(raw)
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_DISCARDED_BODY_BYTES:
            self.close_connection = True
            return
        while length > 0:
            chunk = self.rfile.read(min(length, 65536))
            if not chunk:
                self.close_connection = True
                return
            length -= len(chunk)

    def _serve(self, *, head: bool) -> None:
        if not self._is_metrics_path():
            self._reply(404, b"not found; metrics are at /metrics\n", "text/plain", head=head)
            return
        try:
            body = render_text(self.server.registry)
        except Exception as exc:
            record_fault("metrics.serve", exc)
            self._reply(500, b"ecoguard: metrics collection failed\n", "text/plain", head=head)
            return
        self._reply(200, body, CONTENT_TYPE_LATEST, head=head)

    def do_GET(self) -> None:
        self._serve(head=False)

    def do_HEAD(self) -> None:
        self._serve(head=True)

    def _not_allowed(self) -> None:
        self._reply(405, b"method not allowed\n", "text/plain")

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _not_allowed

    def log_message(self, format: str, *args: Any) -> None:
        _log.debug("metrics %s - " + format, self.address_string(), *args)


class _MetricsHTTPServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # The listen backlog: socketserver's default of 5 dropped most of 200 simultaneous scrapes
    # (a fleet's Prometheus replicas, a burst after a restart). The kernel caps it at
    # net.core.somaxconn (4096 on current Linux).
    request_queue_size = LISTEN_BACKLOG

    def __init__(self, address: tuple[str, int], registry: CollectorRegistry) -> None:
        self.registry = registry
        # Open client connections, so stop() can close kept-alive ones: Prometheus reuses its
        # connection, and a handler thread would otherwise go on answering it after shutdown().
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, _MetricsHandler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # socketserver prints a traceback to stderr; a scraper dropping its connection (or
        # stop() cutting it) is no news for the application's console.
        _log.debug("metrics connection from %s failed", client_address, exc_info=True)

    def close_connections(self) -> None:
        """Cut every open client connection; its handler thread then sees EOF and ends."""
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed by the client


class MetricsServer:
    """A running /metrics endpoint. ``port`` is the bound port (useful when 0 was asked)."""

    def __init__(
        self,
        httpd: _MetricsHTTPServer,
        registry: CollectorRegistry,
        collector: EcoguardCollector | None,
    ) -> None:
        self._httpd = httpd
        self.registry = registry
        self.collector = collector
        self.addr: str = httpd.server_address[0]
        self.port: int = httpd.server_address[1]
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.5},
            name=f"ecoguard-metrics-{self.port}",
            daemon=True,
        )
        self._stopped = False
        self._thread.start()

    @property
    def url(self) -> str:
        host = f"[{self.addr}]" if ":" in self.addr else self.addr
        return f"http://{host}:{self.port}/metrics"

    @property
    def running(self) -> bool:
        return not self._stopped and self._thread.is_alive()

    def stop(self) -> None:
        """Stop serving and close the socket. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        self._httpd.shutdown()
        self._httpd.server_close()
        self._httpd.close_connections()
        self._thread.join(timeout=5)

    def __repr__(self) -> str:
        return f"MetricsServer({self.url!r}, running={self.running})"

    def _abandon_in_child(self) -> None:
        """In a forked child: the serving thread is the parent's, so only close this process'
        copies of the sockets (the port stays the parent's alone) and mark it stopped."""
        self._stopped = True
        for close in (self._httpd.socket.close, self._httpd.close_connections):
            try:
                close()
            except OSError:
                pass


def serve_registry(addr: str, port: int, registry: CollectorRegistry) -> MetricsServer:
    """Serve ``registry`` on ``addr:port`` (0: any free port). Raises OSError if it cannot bind."""
    httpd = _MetricsHTTPServer((addr, port), registry)
    return MetricsServer(httpd, registry, None)


_server_lock = threading.Lock()
_server: MetricsServer | None = None
_aggregates: GenerationAggregates | None = None


def _register_fork_hook() -> None:
    """Once per process, when metrics start (never at import)."""
    register_fork_hooks("metrics", after_in_child=_after_fork_in_child)


def _after_fork_in_child() -> None:
    """A forked child of a process with metrics: fresh locks (one held by a parent thread at
    the fork would deadlock the child's first record or install()), the parent's server
    forgotten and its listening socket closed here, so install(metrics_port=...) in the child
    starts its own and uninstall() never waits for a thread the child does not have."""
    global _server_lock, _start_lock, _worker_lock, _server
    _server_lock = threading.Lock()
    _start_lock = threading.Lock()
    _worker_lock = threading.Lock()
    server, _server = _server, None
    if server is not None:
        server._abandon_in_child()
    if _aggregates is not None:
        _aggregates._relock()


def process_aggregates() -> GenerationAggregates:
    """The process-wide aggregates behind the in-process /metrics, subscribed on first use."""
    global _aggregates
    _register_fork_hook()
    with _server_lock:
        if _aggregates is None:
            _aggregates = GenerationAggregates()
        _aggregates.subscribe()
        return _aggregates


def start_metrics_server(
    settings: Settings,
    *,
    meter: MeterSource = None,
    registry: CollectorRegistry | None = None,
    aggregates: GenerationAggregates | None = None,
) -> MetricsServer | None:
    """Serve this process' ecoguard metrics on ``settings.metrics_addr:settings.metrics_port``.

    ``metrics_port`` 0 binds any free port (read it from ``.port``); None means
    :data:`DEFAULT_PORT`. One server per
    process: calling again with the same address updates the settings and meter and returns the
    running server; another address replaces it. ``meter`` defaults to the running meter at each
    scrape. ``registry``/``aggregates`` are injected by tests (fresh objects each).

    A port already in use (or any other bind failure) is logged as an error naming the address
    and the way out, and returns None: metrics are an extra, never a reason for the app to stop.
    """
    _register_fork_hook()
    # One starter at a time: two concurrent callers must not both bind a server (one leaking).
    with _start_lock:
        return _start_metrics_server(settings, meter, registry, aggregates)


_start_lock = threading.Lock()


def _start_metrics_server(
    settings: Settings,
    meter: MeterSource,
    registry: CollectorRegistry | None,
    aggregates: GenerationAggregates | None,
) -> MetricsServer | None:
    global _server
    port = DEFAULT_PORT if settings.metrics_port is None else settings.metrics_port
    addr = settings.metrics_addr or "127.0.0.1"
    with _server_lock:
        current = _server
    if current is not None and current.running and current.collector is not None:
        if current.addr == addr and (port == 0 or current.port == port):
            current.collector.set_settings(settings)
            if meter is not None:
                current.collector.set_meter(meter)
            return current
        stop_metrics_server()
    if aggregates is None:
        aggregates = process_aggregates()
    else:
        aggregates.subscribe()
    collector = EcoguardCollector(aggregates=aggregates, meter=meter, settings=settings)
    registry = registry if registry is not None else CollectorRegistry(auto_describe=False)
    registry.register(collector)
    try:
        httpd = _MetricsHTTPServer((addr, port), registry)
    except (OSError, UnicodeError, ValueError, TypeError) as exc:
        registry.unregister(collector)
        if isinstance(exc, socket.gaierror) or not isinstance(exc, OSError):
            # The address itself is the problem (a name that does not resolve): not the port.
            way_out = "Set ECOGUARD_METRICS_ADDR to an IP address such as 127.0.0.1"
        else:
            way_out = (
                "Choose another port with ECOGUARD_METRICS_PORT (0 picks a free one) or "
                "install(metrics_port=...)"
            )
        _log.error(
            "ecoguard: cannot serve metrics on %s:%d (%s); the application goes on without "
            "/metrics. %s.",
            addr,
            port,
            getattr(exc, "strerror", None) or exc,
            way_out,
        )
        record_fault("metrics.bind", exc)
        return None
    server = MetricsServer(httpd, registry, collector)
    with _server_lock:
        _server = server
    _log.info("ecoguard: serving metrics at %s", server.url)
    return server


def get_metrics_server() -> MetricsServer | None:
    with _server_lock:
        return _server


def stop_metrics_server() -> None:
    """Stop the process' metrics server, if any. Idempotent. Aggregates keep counting (a
    restarted server continues the same counters, as Prometheus expects)."""
    global _server
    with _server_lock:
        server, _server = _server, None
    if server is not None:
        server.stop()
