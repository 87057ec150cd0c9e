"""Impact of a finding: the estimator on the deployment vs on its fixed twin."""

from __future__ import annotations

from dataclasses import dataclass

from ecoguard.config import Settings
from ecoguard.deployment import Deployment, GpuSpec, ModelSpec, QuantSpec
from ecoguard.rules import evaluate
from ecoguard.rules import impact as impact_module
from ecoguard.voice import render_alert


@dataclass(frozen=True)
class _Monthly:
    requests: int
    energy_kwh: float
    cost_usd: float
    co2_kg: float


@dataclass(frozen=True)
class _Estimate:
    energy_per_request_j: float
    energy_per_1k_tokens_j: float
    monthly: _Monthly
    tier: str
    sources: tuple
    rows: tuple
    method: str = "fake"


def _fake_estimator(calls):
    def estimate(deployment, *, settings=None, requests_per_month=None):
        calls.append((deployment, requests_per_month))
        if deployment.quant.int8_threshold == 0.0:  # the fixed twin
            return _Estimate(
                100.0,
                400.0,
                _Monthly(requests_per_month, 10.0, 1.2, 4.0),
                "measured",
                ("b.csv",),
                ("r2",),
            )
        return _Estimate(
            150.0,
            600.0,
            _Monthly(requests_per_month, 15.0, 1.8, 6.0),
            "derived",
            ("a.csv",),
            ("r1",),
        )

    return estimate


INT8 = Deployment(
    model=ModelSpec(params_b=7.0),
    precision="int8_mixed",
    quant=QuantSpec(method="bitsandbytes", bits=8, int8_threshold=6.0),
)


def test_impact_arithmetic_and_weaker_tier(monkeypatch):
    calls: list = []
    monkeypatch.setattr(impact_module, "estimator_provider", lambda: _fake_estimator(calls))
    (finding,) = evaluate(INT8, settings=Settings(monthly_requests=5000), only=["int8-mixed"])
    impact = finding.impact
    assert impact.extra_energy_pct == 50.0
    assert impact.extra_usd_per_month == 0.6
    assert impact.extra_kwh_per_month == 5.0
    assert impact.monthly_requests == 5000
    assert impact.tier == "derived"  # the weaker of derived and measured
    assert impact.sources == ("a.csv", "b.csv")
    assert finding.evidence == ("r1", "r2")
    assert [requests for _, requests in calls] == [5000, 5000]
    text = render_alert(finding, deployment=INT8, settings=Settings(price_usd_per_kwh=0.2))
    assert "+50% energy" in text and "$0.60/month" in text and "5,000 requests/month" in text
    assert "$0.2/kWh" in text and "[derived]" in text


def test_no_impact_when_estimator_raises_or_has_nothing(monkeypatch):
    def broken(deployment, **kw):
        raise RuntimeError("no tables")

    monkeypatch.setattr(impact_module, "estimator_provider", lambda: broken)
    (finding,) = evaluate(INT8, only=["int8-mixed"])
    assert finding.impact is None
    monkeypatch.setattr(
        impact_module,
        "estimator_provider",
        lambda: lambda d, **kw: type("E", (), {"tier": "none"})(),
    )
    (finding,) = evaluate(INT8, only=["int8-mixed"])
    assert finding.impact is None
    assert "not estimated" in render_alert(finding)


def test_real_estimator_backs_int8_on_a800():
    """With A's knowledge tables: Mistral-7B INT8 default vs pure on an A800 is measured."""
    from ecoguard.knowledge import resolve_gpu, resolve_model

    gpu, model = resolve_gpu("a800"), resolve_model("mistral-7b")
    deployment = INT8.with_(
        model=ModelSpec(id=model.id, params_b=model.params_b),
        gpu=GpuSpec(profile=gpu.key, architecture=gpu.architecture, vram_gb=gpu.vram_gb),
        batch_size=1,
    )
    (finding,) = evaluate(deployment, only=["int8-mixed"])
    assert finding.impact is not None
    assert finding.impact.tier in ("measured", "reported", "derived")
    assert finding.impact.extra_energy_pct > 0
    assert finding.evidence and all(isinstance(row, str) for row in finding.evidence)


def test_no_impact_when_both_sides_rest_on_the_same_rows():
    """bf16 on a T4 is estimated from the fp16 rows, exactly like its fp16 fix: no figure tells
    them apart, so the finding must not claim "+0% energy, $0.00/month"."""
    from ecoguard.knowledge import resolve_gpu, resolve_model

    gpu, model = resolve_gpu("t4"), resolve_model("qwen2-7b")
    deployment = Deployment(
        model=ModelSpec(id=model.id, params_b=model.params_b),
        gpu=GpuSpec(profile=gpu.key, architecture=gpu.architecture, vram_gb=gpu.vram_gb),
        precision="bf16",
        dtype="bf16",
        batch_size=1,
    )
    (finding,) = evaluate(deployment, only=["bf16-unsupported"])
    assert finding.impact is None
