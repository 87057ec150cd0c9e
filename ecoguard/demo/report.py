"""The demo's closing figures: the ledger read back, J/token against the paired and the
reference-data references, our own ``/metrics`` scraped once, and the EcoLobster's verdict."""

from __future__ import annotations

import logging
import urllib.request
from typing import Any

from ecoguard.config import Settings
from ecoguard.demo.summary import (
    GpuInfo,
    LedgerSummary,
    MeasuredVsReference,
    MetricsScrape,
    PairedReference,
    Phases,
    Savings,
    Verdict,
)
from ecoguard.deployment import Deployment, GpuSpec, ModelSpec
from ecoguard.export import report as report_module
from ecoguard.findings import Mood
from ecoguard.knowledge.estimator import estimate
from ecoguard.voice import COOL_DOWN, SHELL, mood_tag, plural

_log = logging.getLogger(__name__)

# The /metrics totals the demo shows (summed over their labels).
SCRAPED_TOTALS: tuple[str, ...] = (
    "ecoguard_generation_tokens_total",
    "ecoguard_generation_energy_joules_total",
    "ecoguard_generation_calls_total",
)


def ledger_summary(settings: Settings, records: list[Any], since: float) -> LedgerSummary:
    """The ``ecoguard report`` figures for this run, read back from the ledger it wrote (or,
    with the ledger off, from the records in memory, by the same arithmetic)."""
    if settings.ledger_path is None:
        rows = [r.to_dict() for r in records]
        return LedgerSummary(path=None, records=len(rows), total=report_module._summary(rows))
    report = report_module.build_report(settings.ledger_path, since=since)
    return LedgerSummary(
        path=str(settings.ledger_path),
        records=report["total"]["calls"],
        total=report["total"],
        note=report.get("note"),
    )


def scrape(url: str) -> MetricsScrape:
    """Read our own /metrics once, as Prometheus would, and pick out a few totals."""
    # prometheus_client only here, so that importing the demo stays light
    from prometheus_client.parser import text_string_to_metric_families

    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode("utf-8")
    except Exception as exc:  # shown in the report as the scrape's error, not raised
        _log.debug("demo: scraping %s failed: %r", url, exc)
        return MetricsScrape(ok=False, error=str(exc))
    totals: dict[str, float] = {}
    findings: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in SCRAPED_TOTALS:
                totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
            elif sample.name == "ecoguard_findings_total":
                rule = sample.labels.get("rule", "")
                findings[rule] = findings.get(rule, 0.0) + sample.value
    return MetricsScrape(ok=True, bytes=len(text), totals=totals, findings=findings)


def paired_reference(phases: Phases, gpu: GpuInfo) -> PairedReference | None:
    """One at a time against the batched phase of the same run, when both measured tokens."""
    one = phases.batch_size_one.figures.joules_per_token
    batched = phases.batched.figures.joules_per_token
    if not one or not batched:
        return None
    note = None
    if gpu.simulated:
        note = (
            "simulated: the ratio is the batch multiple the simulation takes from the reference "
            "data, not a measurement; on a GPU it is measured"
        )
    return PairedReference(
        joules_per_token=one,
        reference_j_per_token=batched,
        ratio=one / batched,
        tier=gpu.tier,
        note=note,
    )


def measured_vs_reference(
    ledger: LedgerSummary,
    phases: Phases,
    gpu: GpuInfo,
    deployment: Deployment,
    settings: Settings,
) -> MeasuredVsReference:
    """J/token of this run (measured on NVML, simulated otherwise) against two references:
    ``paired``, the batched phase of the same run, and the reference data's figure for the same
    configuration (None with ``reference_missing`` saying why, e.g. a model far smaller than
    any measured)."""
    measured = ledger.joules_per_token_where_reference
    reference = ledger.reference_j_per_token
    return MeasuredVsReference(
        joules_per_token=ledger.joules_per_token,
        paired=paired_reference(phases, gpu),
        joules_per_token_where_reference=measured,
        reference_j_per_token=reference,
        ratio=measured / reference if measured and reference else None,
        tier="/".join(ledger.tiers) or "none",
        reference_tiers=ledger.reference_tiers,
        reference_missing=None if reference is not None else why_no_reference(deployment, settings),
    )


def why_no_reference(deployment: Deployment, settings: Settings) -> str:
    """The estimator's own reason when it has no figure for the served configuration."""
    try:
        est = estimate(deployment, settings=settings)
    except Exception as exc:  # an unknown GPU or model: say what the estimator said
        _log.debug("demo: the estimator raised for %s: %r", deployment.model.id, exc)
        return str(exc)
    if est.tier == "none":
        return est.method
    return "the meter attached no reference figure to these calls"


def served_deployment(
    events: list[Any], model_name: str, gpu: GpuInfo, prompt_tokens: int, generation_tokens: int
) -> Deployment:
    """The served configuration as the guard saw it (model size, GPU), at batch size 1 with the
    default int8 config: the trap configuration the savings start from."""
    seen = next((e.deployment for e in events if e.deployment is not None), None)
    model = seen.model if seen is not None else ModelSpec(id=model_name)
    return Deployment(
        model=model,
        gpu=GpuSpec(profile=gpu.profile, name=gpu.name),
        precision="int8_mixed",
        batch_size=1,
        prompt_tokens=prompt_tokens,
        generation_tokens=generation_tokens,
    )


def verdict(events: list[Any], applied: dict[str, bool], savings: Savings) -> Verdict:
    """The mood of what is left once this run's fixes are in, in the lobster's words."""
    fired: dict[str, Any] = {}
    for event in events:
        fired.setdefault(event.finding.rule, event.finding)
    fixed = sorted(rule for rule in fired if applied.get(rule))
    left = {rule: finding for rule, finding in fired.items() if not applied.get(rule)}
    mood = Mood.worst(f.mood for f in left.values()) if left else Mood.GREEN
    saved = savings.saved.cost_usd
    parts = [f"{plural(len(fired), 'trap')} caught"]
    if fixed:
        money = f", about {money_text(saved)}/month saved" if saved else ""
        parts.append(f"{', '.join(fixed)} fixed{money}")
    if left:
        parts.append(f"still open: {', '.join(sorted(left))}")
    text = f"{mood_tag(mood)} EcoLobster, {SHELL[mood]}: " + "; ".join(parts) + "."
    return Verdict(
        mood=mood.value,
        fixed=tuple(fixed),
        open=tuple(sorted(left)),
        text=text,
        cool_down=COOL_DOWN[mood],
    )


def money_text(value: float | None) -> str:
    """Dollars with cents, or three significant digits below a dollar (a tiny model's savings
    are fractions of a cent and would all read $0.00)."""
    if value is None:
        return "n/a"
    if abs(value) >= 1 or value == 0:
        return f"${value:,.2f}"
    return f"${value:.3g}"
