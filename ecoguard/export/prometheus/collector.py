"""The scrape-time collector: every ecoguard metric family, built from the METRICS rows.

At scrape time it reads the generation aggregates, the meter's per-GPU snapshot
(``Meter.gpu_states()``, ``Meter.stats()``), the fault counters and the live settings, and turns
them into families. Nothing is cached between scrapes, so a scrape shows exactly what the meter
knows at that moment.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from ecoguard.config import Settings
from ecoguard.energy import GpuState, get_meter
from ecoguard.export.prometheus.aggregates import AggregateSnapshot, GenerationAggregates
from ecoguard.export.prometheus.facts import FindingKey, finite_number, label, zero_finding_keys
from ecoguard.export.prometheus.spec import (
    CALL_METRICS,
    CONFIG_INFO,
    FINDINGS,
    FOLDED_MODELS,
    GPU_ENERGY,
    GPU_IDLE_POWER,
    GPU_INFO,
    GPU_POWER,
    GPU_STALE,
    INTERNAL_FAULTS,
    REFERENCE,
    SAMPLER_LAST_SAMPLE,
    SAMPLER_RATE,
    SAMPLER_SAMPLES,
    config_values,
)
from ecoguard.faults import contained, fault_counts


@runtime_checkable
class MeterView(Protocol):
    """What the collector reads of a meter (``ecoguard.energy.Meter``)."""

    def gpu_states(self) -> Sequence[GpuState]: ...

    def stats(self) -> dict[str, Any]: ...


class NullMeter:
    """A meter with no devices: the collector serves no device or sampler families for it
    (multi-worker processes leave those to the sidecar, which samples the GPUs once)."""

    def gpu_states(self) -> Sequence[GpuState]:
        return ()

    def stats(self) -> dict[str, Any]:
        return {}


NO_METER = NullMeter()

# A meter (NO_METER: no device metrics); a zero-argument callable returning one (or None); or
# None (the process' running meter at each scrape).
MeterSource = MeterView | Callable[[], MeterView | None] | None
SettingsSource = Settings | Callable[[], "Settings | None"] | None


class EcoguardCollector(Collector):
    """Builds every ecoguard metric family at scrape time.

    ``aggregates``: the generation/finding totals (None: no generation metrics, as in the
    sidecar). ``meter``: a Meter, or a zero-argument callable returning the current one; the
    default looks up ``ecoguard.energy.get_meter()`` at each scrape; :data:`NO_METER` serves no
    device metrics (multi-worker processes leave them to the sidecar). ``settings``: the live Settings
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

    def _current_meter(self) -> MeterView | None:
        source = self._meter
        if source is None:
            return get_meter()
        if callable(source) and not isinstance(source, MeterView):
            return source()
        return source

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
            with contained("metrics.collect"):
                families.extend(part())
        yield from families

    # -- parts ----------------------------------------------------------------------------
    def _collect_devices(self) -> list[Metric]:
        meter = self._current_meter()
        if meter is None or isinstance(meter, NullMeter):
            return []
        families = gpu_families(meter.gpu_states())
        families.extend(self._sampler_health(meter.stats()))
        return families

    def _sampler_health(self, stats: dict[str, Any]) -> list[Metric]:
        last_epoch = finite_number(stats.get("last_sample_time"))
        if last_epoch is None:
            last_mono = finite_number(stats.get("last_sample_monotonic"))
            if last_mono is not None:
                # Convert the sampler's monotonic stamp to wall time so that alert rules can
                # compare it with Prometheus' time().
                last_epoch = self._clock() - (self._monotonic() - last_mono)
        values = (
            (SAMPLER_LAST_SAMPLE, last_epoch),
            (SAMPLER_SAMPLES, finite_number(stats.get("samples"))),
            (SAMPLER_RATE, finite_number(stats.get("sample_hz_actual"))),
        )
        families: list[Metric] = []
        for spec, value in values:
            if value is not None:
                family = spec.family()
                family.add_metric([], value)
                families.append(family)
        return families

    def _collect_generation(self) -> list[Metric]:
        if self.aggregates is None:
            return []
        snap = self.aggregates.snapshot()
        families = call_families(snap)
        families.append(reference_family(snap))
        findings = FINDINGS.family()
        for key, count in sorted(_with_zero_findings(snap.findings, self._current_settings())):
            findings.add_metric(list(key), count)
        folded = FOLDED_MODELS.family()
        folded.add_metric([], snap.folded_models)
        return [*families, findings, folded]

    def _collect_process(self) -> list[Metric]:
        faults = INTERNAL_FAULTS.family()
        for stage, count in sorted(fault_counts().items()):
            faults.add_metric([stage], count)
        families: list[Metric] = [faults]
        settings = self._current_settings()
        if settings is not None:
            info = CONFIG_INFO.family()
            info.add_metric(config_values(settings), {})
            families.append(info)
        return families


def gpu_families(states: Iterable[GpuState]) -> list[Metric]:
    """The per-GPU families of the meter's snapshot; a reading that is missing or not a finite
    number leaves its series out for this scrape."""
    energy, power, idle, stale, info = (
        spec.family() for spec in (GPU_ENERGY, GPU_POWER, GPU_IDLE_POWER, GPU_STALE, GPU_INFO)
    )
    for state in states:
        labels = [str(state.index), label(state.uuid), label(state.name)]
        for family, reading in (
            (energy, state.energy_j_total),
            (power, state.power_w),
            (idle, state.idle_w),
        ):
            if (value := finite_number(reading)) is not None:
                family.add_metric(labels, value)
        stale.add_metric(labels, 1.0 if state.stale else 0.0)
        info.add_metric(
            labels,
            {
                "profile": label(state.profile),
                "tier": label(state.tier),
                "method": label(state.method),
            },
        )
    return [energy, power, idle, stale, info]


def call_families(snap: AggregateSnapshot) -> list[Metric]:
    """One family per per-call METRICS row, one series per (model, precision, GPU name)."""
    families: list[Metric] = []
    keys = sorted(snap.generation)
    for spec in CALL_METRICS:
        family = spec.family()
        for key in keys:
            totals = snap.generation[key]
            if spec.kind == "histogram":
                histogram = totals.histogram(spec)
                family.add_metric(list(key), histogram.cumulative(), histogram.sum)
                continue
            value = totals.counters.get(spec.name)
            if value is not None and (value or not spec.sparse):
                family.add_metric(list(key), value)
        families.append(family)
    return families


def reference_family(snap: AggregateSnapshot) -> Metric:
    family = REFERENCE.family()
    for key, reference in sorted(snap.reference.items()):
        family.add_metric([*key, reference.tier], reference.joules_per_token)
    return family


def _with_zero_findings(
    findings: dict[FindingKey, float], settings: Settings | None
) -> list[tuple[FindingKey, float]]:
    """Observed finding counts plus a 0 for every (rule, mood, configured action) not seen yet
    (see :func:`~ecoguard.export.prometheus.facts.zero_finding_keys`)."""
    merged = dict(findings)
    if settings is not None:
        for key in zero_finding_keys(settings):
            merged.setdefault(key, 0.0)
    return list(merged.items())
