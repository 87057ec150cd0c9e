"""What one generation record or finding adds to the metrics, checked once for every sink.

The in-process aggregates and the multi-worker sink both turn a record into
:class:`RecordFacts` and apply its :meth:`~RecordFacts.counter_increments` and
:meth:`~RecordFacts.observations`, so the two paths count the same things under the same labels.
A figure that is missing, not a number, infinite or out of range is skipped (never a NaN or a
negative total on a dashboard); the rest of the record still counts.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from ecoguard.config import Settings
from ecoguard.energy import GenerationRecord
from ecoguard.export.prometheus.spec import (
    BATCH_SIZE,
    BATCHING_SAVED,
    CO2,
    ENERGY_COST,
    GENERATION_CALLS,
    GENERATION_ENERGY,
    GENERATION_REQUESTS,
    GENERATION_TOKENS,
    REQUEST_ENERGY,
    MetricSpec,
)
from ecoguard.export.prometheus.text import encodable
from ecoguard.findings import Finding
from ecoguard.rules import RULES

# Default cap on distinct model names per process. 32 leaves room for the usual handful of
# served models (and the 20-model benchmark) while keeping a runaway label (a model name built
# from a request) from exploding Prometheus' series count.
DEFAULT_MAX_MODELS = 32
OTHER = "other"
UNKNOWN = "unknown"

GenerationKey = tuple[str, str, str]  # (model_name, precision, gpu_name)
FindingKey = tuple[str, str, str]  # (rule, mood, action)


class FindingLike(Protocol):
    """What the metrics read of a finding (``ecoguard.findings.Finding``)."""

    @property
    def rule(self) -> str: ...

    @property
    def mood(self) -> Enum | str: ...


class FindingEventLike(Protocol):
    """What the metrics read of a finding event (``ecoguard.guard.FindingEvent``)."""

    @property
    def finding(self) -> FindingLike: ...

    @property
    def action(self) -> str: ...


# A finding event as published on ``ecoguard.events.findings``: the guard's FindingEvent, a
# ``(finding, action[, source])`` tuple, or a bare Finding (no action: ``unknown``).
FindingEventInput = FindingEventLike | tuple[FindingLike, ...] | Finding


def label(value: object) -> str:
    """A label value: an enum's value, stripped text, ``unknown`` for None or blank; text UTF-8
    cannot encode is escaped (:func:`~ecoguard.export.prometheus.text.encodable`), so that it
    reaches the worker files and the scrape as its own series."""
    if value is None:
        return UNKNOWN
    text = encodable(str(value.value if isinstance(value, Enum) else value).strip())
    return text or UNKNOWN


def gpu_name_label(names: tuple[str, ...]) -> str:
    """One label for the GPUs a call ran on: the name, or distinct names joined with ``+``.

    A tensor-parallel call over four identical GPUs is labelled with that one name, so the label
    set stays as small as the set of GPU models in the fleet."""
    distinct = sorted({label(name) for name in names})
    return "+".join(distinct) if distinct else UNKNOWN


def finding_key(event: FindingEventInput) -> FindingKey:
    """(rule, mood, action) of a finding event."""
    action: object
    if isinstance(event, tuple):
        finding, action = event[0], (event[1] if len(event) > 1 else None)
    elif isinstance(event, Finding):
        finding, action = event, None
    else:
        finding, action = event.finding, event.action
    return (label(finding.rule), label(finding.mood), label(action))


def zero_finding_keys(settings: Settings) -> list[FindingKey]:
    """(rule, mood, configured action) of every finding the settings let happen.

    A counter series that is born at 1 is invisible to increase()/rate(), so a rule's first
    firing would never show on a dashboard or in an alert; creating these series at 0 fixes
    that. Rules turned off get none."""
    keys: list[FindingKey] = []
    for rule_id, spec in RULES.items():
        action = settings.action_for(rule_id)
        if action != "off":
            keys.extend((rule_id, mood.value, action) for mood in spec.moods)
    return keys


def finite_number(value: object) -> float | None:
    """``value`` as a float when it is a finite real number (not a bool), else None."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _at_least(value: object, low: float, *, strict: bool = False) -> float | None:
    number = finite_number(value)
    if number is None or number < low or (strict and number == low):
        return None
    return number


@dataclass(frozen=True, slots=True)
class RecordFacts:
    """A GenerationRecord's figures, checked once: a field that is missing or out of range is
    None and adds nothing."""

    energy_j: float | None
    tokens: float | None
    requests: float | None
    batch_size: float | None
    cost_usd: float | None
    co2_g: float | None
    reference_j_per_token: float | None
    reference_tier: str
    batching_saved_j: float | None  # the meter's estimate for a coalesced call, read as is

    @classmethod
    def of(cls, record: GenerationRecord) -> RecordFacts:
        return cls(
            energy_j=_at_least(record.energy_j, 0.0),
            tokens=_at_least(record.tokens, 0.0),
            requests=_at_least(record.requests, 0.0, strict=True),
            batch_size=_at_least(record.batch_size, 0.0, strict=True),
            cost_usd=_at_least(record.cost_usd, 0.0),
            co2_g=_at_least(record.co2_g, 0.0),
            reference_j_per_token=_at_least(record.reference_j_per_token, 0.0, strict=True),
            reference_tier=label(record.reference_tier),
            batching_saved_j=_at_least(record.batching_saved_j, 0.0, strict=True),
        )

    @property
    def energy_per_request_j(self) -> float | None:
        """Each request in the call gets an equal share of the call's energy."""
        if self.energy_j is None or self.requests is None:
            return None
        return self.energy_j / self.requests

    def counter_increments(self) -> list[tuple[MetricSpec, float]]:
        """What the call adds to each per-call counter (a call always counts as one call)."""
        candidates = (
            (GENERATION_ENERGY, self.energy_j),
            (GENERATION_TOKENS, self.tokens),
            (GENERATION_REQUESTS, self.requests),
            (GENERATION_CALLS, 1.0),
            (ENERGY_COST, self.cost_usd),
            (CO2, self.co2_g),
            (BATCHING_SAVED, self.batching_saved_j),
        )
        return [(spec, value) for spec, value in candidates if value is not None]

    def observations(self) -> list[tuple[MetricSpec, float, float]]:
        """(histogram, value, weight) for each per-call histogram the call feeds: its batch
        size once, and its energy per request once per request."""
        out: list[tuple[MetricSpec, float, float]] = []
        if self.batch_size is not None:
            out.append((BATCH_SIZE, self.batch_size, 1.0))
        per_request = self.energy_per_request_j
        if per_request is not None and self.requests is not None:
            out.append((REQUEST_ENERGY, per_request, self.requests))
        return out


class ModelLabels:
    """The ``model_name`` label with bounded cardinality: the first ``max_models`` names keep
    their own series, later ones are counted under ``other`` (and remembered as folded)."""

    def __init__(self, max_models: int) -> None:
        if max_models < 1:
            raise ValueError(f"max_models must be >= 1, got {max_models!r}")
        self.max_models = max_models
        self._lock = threading.Lock()
        self._models: set[str] = set()
        self._folded: set[str] = set()

    def relock(self) -> None:
        """A fresh lock after a fork (the parent's may have been held by one of its threads)."""
        self._lock = threading.Lock()

    def label(self, model_name: str | None) -> str:
        name = label(model_name)
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

    def key(self, record: GenerationRecord) -> GenerationKey:
        """The (model_name, precision, gpu_name) labels of a record."""
        return (
            self.label(record.model_name),
            label(record.precision),
            gpu_name_label(record.gpu_names),
        )
