"""The demo's savings and typed summary, without running a model.

The savings chain uses the estimator the rules use for a finding's impact; each step must agree
with ``rules.impact.impact_between`` for the same pair of configurations (to the impact's
rounding), so the demo and the alerts can never quote two different figures for one fix. The
summary's ``to_dict()`` leaves a key out in exactly the cases the ``--json`` output always did.
"""

from __future__ import annotations

import pytest

from ecoguard.config import Settings
from ecoguard.demo import savings as demo_savings
from ecoguard.demo.summary import (
    GpuInfo,
    LedgerSummary,
    MetricsScrape,
    MonthlySaving,
    Phase,
    PhaseFigures,
)
from ecoguard.deployment import Deployment, GpuSpec, ModelSpec
from ecoguard.rules.impact import impact_between


def _served(params_b: float = 0.135, profile: str = "a800") -> Deployment:
    return Deployment(
        model=ModelSpec(id="smollm2-135m", params_b=params_b),
        gpu=GpuSpec(profile=profile),
        precision="int8_mixed",
        batch_size=1,
        prompt_tokens=36,
        generation_tokens=24,
    )


@pytest.mark.parametrize(
    "applied",
    [
        {"int8-mixed": False, "batch-size-one": True},  # warn mode
        {"int8-mixed": True, "batch-size-one": True},  # fix and strict mode
    ],
)
def test_each_saving_is_the_rules_impact_of_that_step(applied):
    settings = Settings()
    found = demo_savings.savings_with_basis(settings, _served(), applied, 8)
    # 135M is far below the INT8 rows: the figures are for the smallest model measured there.
    assert found.served_model == "smollm2-135m" and found.model in found.basis
    nearest = demo_savings.nearest_measured(_served())
    steps = demo_savings.chain(nearest, applied, 8)
    assert [fix.rule for fix, _ in steps] == [item.rule for item in found.items]
    before = nearest
    for (fix, after), item in zip(steps, found.items, strict=True):
        impact, rows = impact_between(before, after, settings)
        assert impact is not None and rows, fix.rule
        assert item.cost_usd == pytest.approx(impact.extra_usd_per_month, abs=0.0051)
        assert item.energy_kwh == pytest.approx(impact.extra_kwh_per_month, abs=0.00051)
        assert item.tier == impact.tier
        # The demo says what a fix saves of the trap's energy; the impact what the trap costs
        # on top of the fixed configuration: the same two estimates, read from either side.
        extra = impact.extra_energy_pct / 100
        assert item.energy_saved_pct == pytest.approx(100 * extra / (1 + extra), abs=0.1)
        before = after
    # Saved and still available add up to the whole difference, exactly.
    whole = found.before.monthly_usd - found.after.monthly_usd
    assert found.saved.cost_usd + found.available.cost_usd == pytest.approx(whole, rel=1e-12)


def test_savings_for_a_measured_model_need_no_stand_in():
    found = demo_savings.savings_with_basis(
        Settings(), _served(params_b=7.24), {"batch-size-one": True}, 8
    )
    assert found.for_served_model and found.served_model is None
    assert "served_model" not in found.to_dict()
    assert found.to_dict()["basis"] == "served model"


def test_monthly_totals_keep_none_and_start_from_zero():
    assert MonthlySaving.total([]).to_dict() == {"energy_kwh": 0.0, "cost_usd": 0.0, "co2_kg": 0.0}
    assert isinstance(MonthlySaving.total([]).cost_usd, float)
    some = MonthlySaving(energy_kwh=1.0, cost_usd=None, co2_kg=0.5)
    total = MonthlySaving.total([some, some])
    assert (total.energy_kwh, total.cost_usd, total.co2_kg) == (2.0, None, 1.0)


def test_to_dict_leaves_out_what_the_json_never_had():
    unmetered = GpuInfo(name=None, profile=None, tier="none", backend="simulated", metered=False)
    assert list(unmetered.to_dict()) == ["name", "profile", "tier", "backend"]
    metered = GpuInfo(name="A800", profile="a800", tier="simulated", backend="simulated")
    assert list(metered.to_dict()) == ["name", "profile", "tier", "backend", "simulation"]

    in_memory = LedgerSummary(path=None, records=2, total={"tokens": 3})
    assert list(in_memory.to_dict()) == ["path", "records", "total"]
    on_disk = LedgerSummary(path="/tmp/l.sqlite", records=2, total={"tokens": 3}, note=None)
    assert list(on_disk.to_dict()) == ["path", "records", "total", "note"]

    assert MetricsScrape(ok=False, error="refused").to_dict() == {"ok": False, "error": "refused"}
    assert list(MetricsScrape(ok=True, bytes=10).to_dict()) == ["ok", "bytes", "totals", "findings"]


def test_a_phase_flattens_its_figures_in_the_json_order():
    figures = PhaseFigures.of([])
    one = Phase(calls=7, refused_by_strict=True, wall_s=1.5, sample_answer=None, figures=figures)
    batched = Phase(calls=1, wall_s=0.2, sample_answer="Paris.", figures=figures)
    tail = ["records", "tokens", "energy_j", "duration_s", "joules_per_token", "tokens_per_s"]
    assert list(one.to_dict()) == [
        "calls",
        "refused_by_strict",
        "wall_s",
        "sample_answer",
        *tail,
        "tiers",
    ]
    assert list(batched.to_dict()) == ["calls", "wall_s", "sample_answer", *tail, "tiers"]
    assert batched.to_dict()["tiers"] == [] and batched.to_dict()["joules_per_token"] is None
