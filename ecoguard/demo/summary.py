"""What one demo run found, as typed records from the run to the JSON edge.

The phases fill these in, the renderer reads their attributes, and ``to_dict()`` is the one
place they become the ``--json`` document: each record's fields, in order, are that document's
keys (the README's claims are checked against it), so a field is declared where its key stands.
A key the JSON has only sometimes (``gpu.simulation`` when a meter ran, ``ledger.note`` when a
ledger file was read, a phase's ``refused_by_strict``, ``savings.served_model``) is left out in
exactly those cases, by the record's ``_omitted()``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from ecoguard.rules.impact import weaker_tier

# Confidence of an estimate, least first: a difference of two is as confident as the lesser.
CONFIDENCE_ORDER: tuple[str, ...] = ("none", "low", "medium", "high")

_record = dataclass(frozen=True, slots=True, kw_only=True)


def _plain(value: Any) -> Any:
    if isinstance(value, _Record):
        return value.to_dict()
    if isinstance(value, tuple):
        return [_plain(item) for item in value]
    return value


class _Record:
    """A summary record whose JSON form is its fields in order (records nested, tuples as
    lists), less the ones ``_omitted()`` names."""

    __slots__ = ()

    def _omitted(self) -> tuple[str, ...]:
        return ()

    def to_dict(self) -> dict[str, Any]:
        left_out = self._omitted()
        return {
            f.name: _plain(getattr(self, f.name))
            for f in fields(self)  # type: ignore[arg-type]
            if f.name not in left_out
        }


@_record
class GpuInfo(_Record):
    """The GPU the meter reads: ``tier`` is ``simulated`` or ``live`` (``none`` without a meter);
    ``simulation`` says what a simulated GPU assumes."""

    name: str | None
    profile: str | None
    tier: str
    backend: str
    simulation: str | None = None
    metered: bool = True

    @property
    def simulated(self) -> bool:
        return self.tier == "simulated"

    def _omitted(self) -> tuple[str, ...]:
        return ("metered",) if self.metered else ("metered", "simulation")


@_record
class ModelInfo(_Record):
    kind: str
    name: str
    path: str
    note: str
    prepared_s: float


@_record
class Int8Load(_Record):
    """The int8 threshold asked for and the one the loaded layers run with; ``fixed_by`` names
    who set it to 0.0 (None unless ``fixed``)."""

    threshold_requested: float
    threshold_loaded: float | None
    linear8bit_layers: int
    layers_at_zero: int
    fixed: bool
    fixed_by: str | None
    changed: str | None


@_record
class PhaseFigures(_Record):
    """Energy, tokens and time of one phase's records, as the meter published them (measured
    on NVML, simulated otherwise: ``tiers`` says which)."""

    records: int = 0
    tokens: int = 0
    energy_j: float = 0.0
    duration_s: float = 0.0
    joules_per_token: float | None = None
    tokens_per_s: float | None = None
    tiers: tuple[str, ...] = ()

    @classmethod
    def of(cls, records: list[Any]) -> PhaseFigures:
        energy_j = sum(r.energy_j for r in records)
        tokens = sum(r.tokens for r in records)
        duration_s = sum(r.duration_s for r in records)
        return cls(
            records=len(records),
            tokens=tokens,
            energy_j=energy_j,
            duration_s=duration_s,
            joules_per_token=energy_j / tokens if tokens else None,
            tokens_per_s=tokens / duration_s if duration_s else None,
            tiers=tuple(sorted({r.tier for r in records})),
        )


@_record
class Phase(_Record):
    """One serving phase: its calls, the first answer, and what the meter measured.
    ``refused_by_strict`` is None for a phase that strict mode cannot cut short."""

    calls: int
    refused_by_strict: bool | None = None
    wall_s: float
    sample_answer: str | None
    figures: PhaseFigures = field(default_factory=PhaseFigures)

    def _omitted(self) -> tuple[str, ...]:
        return (
            ("figures",) if self.refused_by_strict is not None else ("figures", "refused_by_strict")
        )

    def to_dict(self) -> dict[str, Any]:
        return {**_Record.to_dict(self), **self.figures.to_dict()}


@_record
class Phases(_Record):
    batch_size_one: Phase
    batched: Phase


@_record
class Alert(_Record):
    rule: str
    mood: str
    action: str
    source: str
    changed: str | None
    message: str

    @classmethod
    def of(cls, event: Any) -> Alert:
        """From a guard finding event (``ecoguard.events.findings``)."""
        finding = event.finding
        return cls(
            rule=finding.rule,
            mood=finding.mood.value,
            action=event.action,
            source=event.source,
            changed=event.changed,
            message=finding.message,
        )


@_record
class MetricsScrape(_Record):
    """One read of our own ``/metrics``: a few summed totals and the findings per rule."""

    ok: bool
    error: str | None = None
    bytes: int = 0
    totals: dict[str, float] = field(default_factory=dict)
    findings: dict[str, float] = field(default_factory=dict)

    def _omitted(self) -> tuple[str, ...]:
        return ("error",) if self.ok else ("bytes", "totals", "findings")


@_record
class LedgerSummary(_Record):
    """``ecoguard report``'s figures for this run: ``total`` is its ``--json`` total as it is
    (that command's contract, passed through, and read only by the properties below); ``path``
    None when the ledger was off and the figures came from the records in memory."""

    path: str | None
    records: int
    total: dict[str, Any]
    note: str | None = None

    def _omitted(self) -> tuple[str, ...]:
        return ("note",) if self.path is None else ()

    @property
    def tokens(self) -> int:
        return self.total["tokens"]

    @property
    def energy_j(self) -> float:
        return self.total["energy_j"]

    @property
    def cost_usd(self) -> float | None:
        return self.total["cost_usd"]

    @property
    def co2_g(self) -> float | None:
        return self.total["co2_g"]

    @property
    def tiers(self) -> tuple[str, ...]:
        return tuple(self.total.get("tiers") or ())

    @property
    def joules_per_token(self) -> float | None:
        return self.total.get("joules_per_token")

    @property
    def joules_per_token_where_reference(self) -> float | None:
        """Measured J/token over the calls that have a reference figure (like for like)."""
        return self.total.get("joules_per_token_where_reference")

    @property
    def reference_j_per_token(self) -> float | None:
        return self.total.get("reference_j_per_token")

    @property
    def reference_tiers(self) -> tuple[str, ...]:
        return tuple(self.total.get("reference_tiers") or ())


@_record
class PairedReference(_Record):
    """J/token one at a time against the batched phase of the same run."""

    reference: str = "the batched phase of this run (same model, prompts, settings and session)"
    joules_per_token: float
    reference_j_per_token: float
    ratio: float
    tier: str | None
    note: str | None


@_record
class MeasuredVsReference(_Record):
    """This run's J/token against the paired reference and the reference data's figure for the
    same configuration (None, with ``reference_missing`` saying why, where it has none)."""

    joules_per_token: float | None
    paired: PairedReference | None
    joules_per_token_where_reference: float | None
    reference_j_per_token: float | None
    ratio: float | None
    tier: str
    reference_tiers: tuple[str, ...]
    reference_missing: str | None


@_record
class EstimateFigures(_Record):
    """One configuration's figures from the estimator (reference data, not measured here:
    ``tier`` and ``confidence`` say how they are known)."""

    precision: str | None
    batch_size: int | None
    energy_per_1k_tokens_j: float | None
    energy_per_request_j: float | None
    monthly_kwh: float | None
    monthly_usd: float | None
    monthly_co2_kg: float | None
    tier: str
    confidence: str

    @classmethod
    def of(cls, estimate: Any) -> EstimateFigures:
        """From a ``knowledge.estimator.Estimate``, on the paired chain where it has one: two
        configurations compare by their same-session changes, as the rules' impact does
        (``rules.impact.impact_between``), not by two medians of different sessions."""
        monthly = estimate.monthly
        shown = estimate.energy_per_request_j
        paired = getattr(estimate, "paired_energy_per_request_j", None)
        scale = paired / shown if paired is not None and shown else 1.0
        return cls(
            precision=estimate.deployment.precision,
            batch_size=estimate.deployment.batch_size,
            energy_per_1k_tokens_j=_times(estimate.energy_per_1k_tokens_j, scale),
            energy_per_request_j=_times(shown, scale),
            monthly_kwh=_times(monthly.energy_kwh, scale),
            monthly_usd=_times(monthly.cost_usd, scale),
            monthly_co2_kg=_times(monthly.co2_kg, scale),
            tier=estimate.tier,
            confidence=estimate.confidence,
        )


def _times(value: float | None, scale: float) -> float | None:
    return None if value is None else value * scale


def _minus(first: float | None, second: float | None) -> float | None:
    return None if first is None or second is None else first - second


def _sum(values: list[float | None]) -> float | None:
    """The sum; None when any is None; 0.0 for none at all."""
    return None if None in values else sum((v for v in values if v is not None), 0.0)


def _lesser_confidence(first: str, second: str) -> str:
    def rank(confidence: str) -> int:
        return CONFIDENCE_ORDER.index(confidence) if confidence in CONFIDENCE_ORDER else 0

    return second if rank(second) < rank(first) else first


@_record
class MonthlySaving(_Record):
    """Monthly energy, money and CO2 a change saves (None where a side has no figure)."""

    energy_kwh: float | None
    cost_usd: float | None
    co2_kg: float | None

    @classmethod
    def total(cls, savings: list[MonthlySaving]) -> MonthlySaving:
        return cls(
            energy_kwh=_sum([s.energy_kwh for s in savings]),
            cost_usd=_sum([s.cost_usd for s in savings]),
            co2_kg=_sum([s.co2_kg for s in savings]),
        )


@_record
class SavingsItem(_Record):
    """One fix in the chain: what it saves between the estimator's figures before and after."""

    rule: str
    change: str
    applied: bool
    energy_saved_pct: float | None
    energy_kwh: float | None
    cost_usd: float | None
    co2_kg: float | None
    tier: str
    confidence: str

    @classmethod
    def between(
        cls, rule: str, change: str, applied: bool, before: EstimateFigures, after: EstimateFigures
    ) -> SavingsItem:
        was, now = before.energy_per_request_j, after.energy_per_request_j
        return cls(
            rule=rule,
            change=change,
            applied=applied,
            energy_saved_pct=(1 - now / was) * 100 if was and now is not None else None,
            energy_kwh=_minus(before.monthly_kwh, after.monthly_kwh),
            cost_usd=_minus(before.monthly_usd, after.monthly_usd),
            co2_kg=_minus(before.monthly_co2_kg, after.monthly_co2_kg),
            # The rules' own combination (rules.impact.weaker_tier): a difference is known only
            # as well as the weaker of its two sides.
            tier=weaker_tier(before.tier, after.tier),
            confidence=_lesser_confidence(before.confidence, after.confidence),
        )

    @property
    def saving(self) -> MonthlySaving:
        return MonthlySaving(energy_kwh=self.energy_kwh, cost_usd=self.cost_usd, co2_kg=self.co2_kg)


@_record
class Savings(_Record):
    """What the fixes are worth per month, chained from the trap configuration with this run's
    fixes first, so ``saved`` and ``available`` add up to ``before`` minus ``after``."""

    monthly_requests: int
    region: str
    price_usd_per_kwh: float | None
    gco2_per_kwh: float | None
    gpu: str | None
    model: str | None
    params_b: float | None
    prompt_tokens: int | None
    generation_tokens: int | None
    before: EstimateFigures
    after: EstimateFigures
    items: tuple[SavingsItem, ...]
    saved: MonthlySaving
    available: MonthlySaving
    basis: str = "served model"
    served_model: str | None = None

    @property
    def for_served_model(self) -> bool:
        return self.basis == "served model"

    def _omitted(self) -> tuple[str, ...]:
        return ("served_model",) if self.served_model is None else ()


@_record
class Verdict(_Record):
    mood: str
    fixed: tuple[str, ...]
    open: tuple[str, ...]
    text: str
    cool_down: str


@_record
class DemoSummary(_Record):
    """Everything one ``ecoguard demo`` run shows; ``to_dict()`` is its ``--json`` output."""

    quick: bool
    mode: str
    gpu: GpuInfo
    metrics_url: str | None
    model: ModelInfo
    int8: Int8Load
    phases: Phases
    metrics: MetricsScrape | None
    alerts: tuple[Alert, ...]
    ledger: LedgerSummary
    measured_vs_reference: MeasuredVsReference
    savings: Savings
    verdict: Verdict
    wall_s: float
