"""The estimator's paired chain, intervals, hold-outs and validated cross-GPU carry (issue 15)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from knowledge_support import deployment

from ecoguard.cli import main
from ecoguard.config import Settings
from ecoguard.deployment import QuantSpec
from ecoguard.errors import UsageError
from ecoguard.knowledge import reference_rows
from ecoguard.knowledge.estimator import estimate, method_error
from ecoguard.knowledge.evidence import Evidence, session_of
from ecoguard.knowledge.validation import MODES, holdout_points, summary

REPO = Path(__file__).resolve().parents[2]


# ----------------------------------------------------------------------------- paired chain


def test_a_change_is_the_median_of_same_session_pairs_not_of_unpaired_averages():
    ev = Evidence(reference_rows())
    pairs = ev.precision_pairs(("rtx5090", "qwen2-7b", "nf4", 1))
    assert {session_of(p.row) for p in pairs} == {
        "ecocompute-ai/data/rtx5090_benchmark_results.csv#-",
        "quant-energy/data/rtx5090_bnb_2026-09-20.csv#A",
        "quant-energy/data/rtx5090_bnb_2026-09-20.csv#A_retry",
        "quant-energy/data/rtx5090_bnb_2026-09-20.csv#B",
    }
    for pair in pairs:  # every pair's baseline is the FP16 row of its own session
        assert pair.baseline is not None and pair.baseline.source == pair.row.source
    ratio, low, high, sessions = ev.ratio_figure(pairs)
    assert len(sessions) == 4 and low < ratio < high
    assert round((ratio - 1) * 100, 2) == pytest.approx(-31.55, abs=0.05)


def test_estimate_compare_optimize_and_the_alert_agree_to_the_joule():
    from ecoguard.advisor.protocols import Request, compare, optimize
    from ecoguard.advisor.question import Question
    from ecoguard.rules.impact import impact_between

    dep = deployment("mistral-7b", "a800", "int8_mixed", 1, 256, 512)
    settings = Settings()
    request = Request(Question("compare"), dep, settings)
    cells = {c["precision"]: c for c in compare(request).to_dict()["rows"]}
    for precision in ("fp16", "int8_mixed", "int8_pure", "nf4"):
        est = estimate(dep.with_(precision=precision), settings=settings)
        assert cells[precision]["energy_per_1k_tokens_j"] == pytest.approx(
            est.energy_per_1k_tokens_j, abs=1e-3
        )
    opt = optimize(request, batch_sizes=(1,), precisions=("int8_pure",))
    assert opt.optimized.energy_per_1k_tokens_j == pytest.approx(
        estimate(dep.with_(precision="int8_pure"), settings=settings).energy_per_1k_tokens_j,
        abs=1e-3,
    )
    mixed = dep.with_(
        quant=QuantSpec(method="bitsandbytes", bits=8, quant_type="int8", int8_threshold=6.0)
    )
    pure = dep.with_(
        precision="int8_pure",
        quant=QuantSpec(method="bitsandbytes", bits=8, quant_type="int8", int8_threshold=0.0),
    )
    impact, _rows = impact_between(mixed, pure, settings)
    # Alerts read the paired chain (same-session changes), not the ratio of two medians.
    expected = (
        estimate(mixed, settings=settings).paired_energy_per_request_j
        / estimate(pure, settings=settings).paired_energy_per_request_j
        - 1
    ) * 100
    assert impact is not None and impact.extra_energy_pct == pytest.approx(expected, abs=0.05)
    # Within each session that measured both 8-bit modes against one FP16 run (issue 15: the
    # README's old "+44%" compared rows from different sessions and lengths).
    assert impact.paired_range_pct == (55.7, 66.2) and impact.paired_sessions == 2
    from ecoguard.findings import Finding
    from ecoguard.voice import cost_line

    finding = Finding(
        rule="int8-mixed", mood="orange", title="t", message="m", fix="f", impact=impact
    )
    assert "(+56% to +66% in 2 same-session pairs)" in cost_line(finding, settings)


def test_prompt_length_does_not_change_the_figure():
    """estimate and compare once disagreed (6,530 vs 6,907 J/1k) on a length filter."""
    with_lengths = estimate(deployment("mistral-7b", "a800", "int8_pure", 1, 256, 256))
    without = estimate(deployment("mistral-7b", "a800", "int8_pure", 1))
    assert with_lengths.energy_per_1k_tokens_j == without.energy_per_1k_tokens_j


def test_short_smoke_runs_do_not_pull_the_figure():
    rtx_pro = estimate(deployment("qwen2.5-3b", "rtx_pro_6000", "fp16"))
    assert rtx_pro.energy_per_1k_tokens_j < 3000  # not the 4,996 J/1k of the 32-token smoke run


# ----------------------------------------------------------------------------- intervals


@pytest.mark.parametrize(
    ("model", "gpu", "precision", "bs"),
    [
        ("qwen2-7b", "rtx5090", "nf4", 1),  # exact, four sessions
        ("yi-1.5-9b", "a800", "fp16", 8),  # batch
        ("qwen2.5-7b", "a800", "fp16", 1),  # size
        ("llama-3.1-8b", "h100_sxm", "fp16", 1),  # cross-gpu
        ("qwen2-7b", "l4", "nf4", 1),
    ],
)
def test_every_estimate_carries_an_interval_around_it(model, gpu, precision, bs):
    est = estimate(deployment(model, gpu, precision, bs, 256), requests_per_month=10_000)
    lo, hi = est.energy_per_1k_tokens_j_range
    assert lo <= est.energy_per_1k_tokens_j <= hi and lo < hi
    rlo, rhi = est.energy_per_request_j_range
    assert rlo == pytest.approx(lo * 0.256) and rhi == pytest.approx(hi * 0.256)
    klo, khi = est.monthly.energy_kwh_range
    assert klo <= est.monthly.energy_kwh <= khi
    clo, chi = est.monthly.cost_usd_range
    assert clo == pytest.approx(klo * est.monthly.price_usd_per_kwh)
    assert chi == pytest.approx(khi * est.monthly.price_usd_per_kwh)
    data = est.to_dict()
    assert len(data["energy_per_1k_tokens_j_range"]) == 2
    assert len(data["monthly"]["co2_kg_range"]) == 2


def test_confidence_is_read_from_the_methods_hold_out_error():
    carried = estimate(deployment("llama-3.1-8b", "h100_sxm", "fp16"))
    err = method_error("cross-gpu")
    assert carried.holdout_error_pct == (err["median_abs_error_pct"], err["p90_abs_error_pct"])
    expected = (
        "high"
        if err["median_abs_error_pct"] <= 10
        else "medium"
        if err["median_abs_error_pct"] <= 25
        else "low"
    )
    assert carried.confidence == expected
    assert "h100_sxm" not in carried.carried_from and len(carried.carried_from) >= 3


# ----------------------------------------------------------------------------- hold-outs


def test_holdout_config_never_lists_a_hidden_row():
    dep = deployment("qwen2-7b", "rtx5090", "nf4")
    hidden = {
        r.id
        for r in reference_rows()
        if (r.gpu, r.model_key, r.precision, r.batch_size or 1) == ("rtx5090", "qwen2-7b", "nf4", 1)
    }
    assert hidden
    held = estimate(dep, holdout="config")
    assert held.family != "exact" and not hidden & set(held.rows)
    assert held.energy_per_1k_tokens_j is not None
    assert any("hold-out" in a for a in held.assumptions)


def test_holdout_gpu_answers_from_other_gpus_only():
    held = estimate(deployment("qwen2-7b", "rtx5090", "fp16"), holdout="gpu")
    assert held.family == "cross-gpu" and held.tier == "extrapolated"
    assert "rtx5090" not in held.carried_from
    rows = {r.id: r for r in reference_rows()}
    assert all(rows[i].gpu != "rtx5090" for i in held.rows)


def test_bad_holdout_is_a_usage_error(capsys):
    with pytest.raises(UsageError, match="config, gpu"):
        estimate(deployment("qwen2-7b", "rtx5090", "fp16"), holdout="model")
    argv = ["estimate", "--model", "qwen2-7b", "--gpu", "rtx5090", "--holdout", "nope"]
    assert main(argv) == 2
    assert "invalid choice" in capsys.readouterr().err


def test_cli_holdout_json(capsys):
    argv = ["estimate", "--model", "qwen2-7b", "--gpu", "rtx5090", "--precision", "nf4"]
    assert main([*argv, "--holdout", "config", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["holdout"] == "config" and out["family"] != "exact"
    assert "rtx5090/qwen2-7b/nf4/bs1/ecai-5090csv" not in out["rows"]
    assert main([*argv, "--json"]) == 0
    exact = json.loads(capsys.readouterr().out)
    assert exact["family"] == "exact" and len(exact["paired_deltas"]) == 4


# ----------------------------------------------------------------------------- validation


def test_validation_meets_the_targets_and_the_shipped_table_is_current():
    """The issue's targets, measured now; the table estimates read from is regenerated and
    must be byte-identical to the shipped one."""
    result = {mode: summary(holdout_points(mode), mode) for mode in MODES}
    loco, logo = result["config"], result["gpu"]
    # 79 since the offloaded T4 Qwen2-7B FP16 row left the data the estimator reads (issue 30).
    assert loco["answered"] == loco["configurations"] >= 79
    # Issue 30: no worse than before measured figures answered for themselves.
    assert loco["median_abs_error_pct"] <= 9.5 and loco["p90_abs_error_pct"] <= 29
    assert logo["median_abs_error_pct"] <= 16.5 and logo["p90_abs_error_pct"] <= 33
    for s in (loco, logo):
        assert 75 <= s["coverage_pct"] <= 95 and s["median_width_pct"] <= 100
    check = subprocess.run(
        [sys.executable, str(REPO / "tools" / "validate_estimator.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert check.returncode == 0, check.stderr
    shipped = json.loads((REPO / "data" / "estimator_validation.json").read_text())
    assert shipped["summary"]["config"] == loco and shipped["summary"]["gpu"] == logo
    carriers = shipped["carriers"]
    chosen = carriers[shipped["carrier_chosen"]]["median_abs_error_pct"]
    assert chosen == min(c["median_abs_error_pct"] for c in carriers.values())
    # Every other design choice is scored and really changes the ladder (its branch runs): no
    # alternative scores exactly like the shipped set in both hold-outs.
    assert set(shipped["choices"]) == {
        "size before inverse ratio",
        "ratio held 2x (as sizes)",
        "two-nearest-sizes slope",
    }
    for name, alternative in shipped["choices"].items():
        assert any(
            alternative[mode][k] != shipped["summary"][mode][k]
            for mode in ("config", "gpu")
            for k in ("answered", "median_abs_error_pct", "p90_abs_error_pct")
        ), name


def test_holdout_scores_are_not_trivial():
    """A hold-out that leaked the hidden rows would score 0 error: some must be off."""
    points = [p for p in holdout_points("config") if p.error is not None]
    assert sum(1 for p in points if abs(p.error) > 0.05) > len(points) / 3
    assert all(p.family != "exact" for p in points)
    gpu_points = [p for p in holdout_points("gpu") if p.error is not None]
    assert all(p.family == "cross-gpu" and p.gpu not in p.carried_from for p in gpu_points)
    assert all(math.isfinite(p.residual) for p in gpu_points)


def test_cli_data_validate(capsys):
    assert main(["data", "--validate", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"config", "gpu"}
    assert out["config"]["by_method"]
    assert main(["data", "--validate"]) == 0
    text = capsys.readouterr().out
    assert "leave one configuration out" in text and "leave one GPU out" in text


def test_hiding_a_baseline_breaks_its_pairs():
    """A pair's FP16 baseline is the hidden measurement itself: with FP16 hidden, no pair."""
    rows = reference_rows()
    key = ("rtx5090", "qwen2-7b", "nf4", 1)
    assert Evidence(rows).precision_pairs(key)
    held = Evidence(rows, hidden_configs=frozenset({("rtx5090", "qwen2-7b", "fp16", 1)}))
    assert held.precision_pairs(key) == []
    figure = held.anchored(key)  # falls back to the NF4 rows' own sessions
    assert figure is not None and "x FP16" not in figure.description


def test_an_exact_band_covers_every_session_of_the_configuration():
    ev = Evidence(reference_rows())
    for key in ev.configs():
        fig = ev.anchored(key)
        own = ev.direct(key)
        assert fig.low <= fig.value <= fig.high
        if own.spread_known and fig.description.startswith("median"):
            assert fig.low <= own.value <= fig.high
