"""The demo's text: numbered progress lines while it runs, and the report at the end, read from
the typed summary (never from its JSON form)."""

from __future__ import annotations

import shlex
import time
from typing import TextIO

from ecoguard.demo.report import money_text
from ecoguard.demo.summary import (
    DemoSummary,
    GpuInfo,
    MeasuredVsReference,
    Phases,
    Savings,
    SavingsItem,
)
from ecoguard.voice import plural


class Progress:
    """Numbered progress lines, flushed at once so a slow step shows while it runs."""

    def __init__(self, stream: TextIO, steps: int) -> None:
        self.stream = stream
        self.steps = steps
        self.step = 0
        self.started = time.perf_counter()

    def head(self, text: str) -> None:
        self.step += 1
        elapsed = time.perf_counter() - self.started
        self.say(f"\n[{self.step}/{self.steps}] {text}  (t={elapsed:.1f}s)")

    def say(self, text: str = "") -> None:
        print(text, file=self.stream, flush=True)


def number(value: float | None, spec: str = ".3g", unit: str = "") -> str:
    return "n/a" if value is None else f"{format(value, spec)}{unit}"


def say_phase_comparison(out: Progress, phases: Phases, gpu: GpuInfo) -> None:
    one = phases.batch_size_one.figures.joules_per_token
    many = phases.batched.figures.joules_per_token
    if not one or not many:
        return
    ratio = one / many
    compared = f"{ratio:.1f}x less" if ratio >= 1 else f"{1 / ratio:.1f}x more"
    out.say(
        f"  measured here: {one:.3g} J/token one by one, {many:.3g} J/token batched ({compared}) "
        f"[{gpu.tier}]"
    )


def say_measured_vs_reference(
    out: Progress, ref: MeasuredVsReference, gpu: GpuInfo, label: str
) -> None:
    paired = ref.paired
    if paired is not None:
        out.say(
            f"  J/token : one at a time {number(paired.joules_per_token)} vs "
            f"{number(paired.reference_j_per_token)} batched [{label}], the batched phase of "
            f"this run as the paired reference (same model, prompts and session): one at a time "
            f"used {paired.ratio:.3g}x the energy per token"
        )
        if paired.note:
            out.say(f"            ({paired.note})")
    else:
        out.say(f"  J/token : {number(ref.joules_per_token)} [{label}] (no batched phase to pair)")
    reference_tiers = "/".join(ref.reference_tiers) or "none"
    if ref.reference_j_per_token is None:
        out.say(
            f"  data    : no reference-data figure for this configuration on {gpu.name}: "
            f"{ref.reference_missing}"
        )
        return
    out.say(
        f"  data    : measured {number(ref.joules_per_token_where_reference)} [{label}] vs "
        f"reference {number(ref.reference_j_per_token)} [{reference_tiers}] for the same "
        f"configuration on {gpu.name}"
    )
    if gpu.simulated:
        out.say(
            "            (simulated: the GPU's reference throughput and power, so the gap "
            "says how far this model is from the reference rows, not how good a GPU would be)"
        )


def _item_line(item: SavingsItem) -> str:
    # batch-size-one is "applied" by the demo's own batched phase, not by the guard
    status = "not applied"
    if item.applied:
        status = "applied by the batched phase" if item.rule == "batch-size-one" else "applied"
    return (
        f"    {item.rule:<15} {item.change:<30} {number(item.energy_saved_pct, '.0f', '%')} "
        f"energy, {money_text(item.cost_usd)}/month, {number(item.co2_kg, '.3g', ' kg')} "
        f"CO2/month [{item.tier}, {item.confidence} confidence] ({status})"
    )


def say_savings(out: Progress, savings: Savings) -> None:
    if not savings.for_served_model:
        out.say(f"\n  Note: {savings.basis}.")
    out.say(
        f"\n  What the fixes are worth at {savings.monthly_requests:,} requests/month of "
        f"{savings.generation_tokens} generated tokens "
        f"({savings.model} on {savings.gpu}, region {savings.region}, "
        f"${number(savings.price_usd_per_kwh, 'g')}/kWh, "
        f"{number(savings.gco2_per_kwh, 'g')} gCO2/kWh):"
    )
    for item in savings.items:
        out.say(_item_line(item))
    saved, available = savings.saved, savings.available
    out.say(
        f"    saved by this run: {money_text(saved.cost_usd)}/month, "
        f"{number(saved.co2_kg, '.3g', ' kg')} CO2/month; still available: "
        f"{money_text(available.cost_usd)}/month"
    )
    out.say(
        "    (from the estimator over the reference data; the tier says how each figure is known)"
    )


def print_report(out: Progress, summary: DemoSummary) -> None:
    ledger = summary.ledger
    label = "SIMULATED" if summary.gpu.simulated else summary.gpu.tier
    where = ledger.path or "memory (ledger off)"
    out.say(f"  ledger  : {plural(ledger.records, 'call')} recorded in {where}")
    out.say(
        f"  total   : {plural(ledger.tokens, 'token')}, {number(ledger.energy_j, '.4g', ' J')}, "
        f"{money_text(ledger.cost_usd)}, {number(ledger.co2_g, '.3g', ' g CO2')} [{label}]"
    )
    say_measured_vs_reference(out, summary.measured_vs_reference, summary.gpu, label)
    metrics = summary.metrics
    if metrics is not None and metrics.ok:
        tokens = metrics.totals.get("ecoguard_generation_tokens_total")
        shown = {rule: n for rule, n in sorted(metrics.findings.items()) if n}
        out.say(
            f"  /metrics: scraped {metrics.bytes} bytes; ecoguard_generation_tokens_total "
            f"{number(tokens, '.0f')}; findings {shown}"
        )
    say_savings(out, summary.savings)
    verdict = summary.verdict
    out.say(f"\n{verdict.text}\n  {verdict.cool_down}")
    if ledger.path:
        again = f"See it again with `ecoguard report --ledger {shlex.quote(ledger.path)}`"
    else:  # nothing was kept: say how to keep it, not a command that shows other figures
        again = (
            "The ledger was off, so no call was kept: rerun with --ledger PATH (or without "
            "--ledger, for the demo's own) to read it back with `ecoguard report --ledger PATH`"
        )
    out.say(
        f"\nDone in {summary.wall_s:.1f}s. {again}; run your own code under the guard with "
        "`import ecoguard.auto`."
    )
