"""Running totals of generation records and findings, read by the collector at scrape time.

:class:`GenerationAggregates` subscribes to ``ecoguard.events.records`` and
``ecoguard.events.findings`` and keeps totals per (model, precision, GPU name). The subscribers
only add numbers under a lock, because they run on the caller's generate thread. Label
cardinality is bounded: model names beyond ``max_models`` fold into ``other``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from ecoguard import events
from ecoguard.energy import GenerationRecord
from ecoguard.export.prometheus.facts import (
    DEFAULT_MAX_MODELS,
    OTHER,
    FindingEventInput,
    FindingKey,
    GenerationKey,
    ModelLabels,
    RecordFacts,
    finding_key,
)
from ecoguard.export.prometheus.spec import (
    CALL_METRICS,
    GENERATION_CALLS,
    GENERATION_ENERGY,
    GENERATION_REQUESTS,
    GENERATION_TOKENS,
    MetricSpec,
)


def le_label(bound: float) -> str:
    """A bucket bound as the ``le`` label writes it (``+Inf`` for the last one)."""
    if bound == float("inf"):
        return "+Inf"
    return repr(float(bound))


@dataclass(slots=True)
class Histogram:
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
            out.append((le_label(bound), running))
        return out

    def copy(self) -> Histogram:
        return Histogram(self.bounds, list(self.counts), self.total, self.sum)


@dataclass(slots=True)
class GenerationTotals:
    """Running totals for one (model_name, precision, gpu_name) key, by family name.

    ``counters`` holds every per-call counter from the key's first call on (at 0 until fed),
    except sparse ones, which appear with their first value; ``histograms`` every per-call
    histogram. The properties name the figures for readers."""

    counters: dict[str, float]
    histograms: dict[str, Histogram]

    @classmethod
    def empty(cls) -> GenerationTotals:
        return cls(
            counters={s.name: 0.0 for s in CALL_METRICS if s.kind == "counter" and not s.sparse},
            histograms={
                s.name: Histogram(s.buckets) for s in CALL_METRICS if s.kind == "histogram"
            },
        )

    def add(self, facts: RecordFacts) -> None:
        counters = self.counters
        for spec, value in facts.counter_increments():
            counters[spec.name] = counters.get(spec.name, 0.0) + value
        for spec, value, weight in facts.observations():
            self.histograms[spec.name].observe(value, weight)

    def copy(self) -> GenerationTotals:
        return GenerationTotals(
            dict(self.counters), {name: h.copy() for name, h in self.histograms.items()}
        )

    def total(self, spec: MetricSpec) -> float:
        """A per-call counter's running total (0 before its first value)."""
        return self.counters.get(spec.name, 0.0)

    def histogram(self, spec: MetricSpec) -> Histogram:
        return self.histograms[spec.name]

    # The headline figures, by name.
    @property
    def energy_j(self) -> float:
        return self.total(GENERATION_ENERGY)

    @property
    def tokens(self) -> float:
        return self.total(GENERATION_TOKENS)

    @property
    def requests(self) -> float:
        return self.total(GENERATION_REQUESTS)

    @property
    def calls(self) -> float:
        return self.total(GENERATION_CALLS)


@dataclass(frozen=True, slots=True)
class Reference:
    """What the reference data expects for a key, and how that is known."""

    joules_per_token: float
    tier: str


@dataclass(frozen=True, slots=True)
class AggregateSnapshot:
    """A consistent copy of the aggregates, taken under the lock at scrape time."""

    generation: dict[GenerationKey, GenerationTotals]
    reference: dict[GenerationKey, Reference]
    findings: dict[FindingKey, float]
    folded_models: int


class GenerationAggregates:
    """Totals of generation records and findings, fed by ``ecoguard.events``.

    Thread-safe: ``observe_*`` may run concurrently on any generate thread; :meth:`snapshot`
    copies under the same lock. ``max_models`` bounds the ``model_name`` label: the first
    ``max_models`` names seen keep their own series, later ones are counted under ``other``.
    """

    def __init__(self, *, max_models: int = DEFAULT_MAX_MODELS) -> None:
        self._labels = ModelLabels(max_models)
        self.max_models = max_models
        self._lock = threading.Lock()
        self._generation: dict[GenerationKey, GenerationTotals] = {}
        self._reference: dict[GenerationKey, Reference] = {}
        self._findings: dict[FindingKey, float] = {}
        self._unsubscribers: list[Callable[[], None]] = []

    # -- wiring ---------------------------------------------------------------------------
    def relock(self) -> None:
        """Fresh locks after a fork (the parent's may have been held by one of its threads)."""
        self._lock = threading.Lock()
        self._labels.relock()

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
    def observe_record(self, record: GenerationRecord) -> None:
        """Add one GenerationRecord (ecoguard.energy). Figures out of range are skipped."""
        facts = RecordFacts.of(record)
        key = self._labels.key(record)
        with self._lock:
            totals = self._generation.get(key)
            if totals is None:
                totals = self._generation[key] = GenerationTotals.empty()
            totals.add(facts)
            # The reference for a folded model is meaningless under "other": skip it.
            if facts.reference_j_per_token is not None and key[0] != OTHER:
                self._reference[key] = Reference(facts.reference_j_per_token, facts.reference_tier)

    def observe_finding(self, event: FindingEventInput) -> None:
        """Count one FindingEvent(finding, action, source); plain tuples are accepted too."""
        key = finding_key(event)
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
