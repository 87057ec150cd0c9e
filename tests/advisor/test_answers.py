"""The seed questions answered end to end; key figures asserted against the knowledge data
(the estimator and the reference rows), never against hard-coded guesses."""

from __future__ import annotations

import math

import pytest

from ecoguard.advisor.answers import advise
from ecoguard.advisor.protocols import with_precision
from ecoguard.config import Settings
from ecoguard.errors import UsageError
from ecoguard.knowledge import crossover, find_rows
from ecoguard.knowledge.estimator import estimate


def _est(dep, requests=None, settings=None):
    return estimate(dep, settings=settings or Settings(), requests_per_month=requests)


def test_greenest_qwen25_3b_on_5090():
    ans = advise("What is the greenest config for Qwen2.5-3B on an RTX 5090?")
    res = ans.result
    assert res.protocol == "optimize" and res.deployment.gpu.profile == "rtx5090"
    rec = res.recommendation
    # Quantized cells whose saving does not hold across the experiments cannot win.
    rows = res.to_dict()["rows"]
    holding = [r["energy_per_1k_tokens_j"] for r in rows if r["holds"]]
    assert rec["energy_per_1k_tokens_j"] <= min(holding) * 1.05
    lower = [r for r in rows if r["energy_per_1k_tokens_j"] < rec["energy_per_1k_tokens_j"]]
    if lower:
        assert not any(r["holds"] for r in lower)
        assert any("does not hold" in reason for reason in rec["reasons"])
    rejected = {r["precision"] for r in res.extra["rejected"]}
    assert {"int8_mixed", "fp8_weight_only"} <= rejected  # the rules rule out the traps
    chosen = with_precision(res.deployment, rec["precision"]).with_(batch_size=rec["batch_size"])
    assert rec["energy_per_1k_tokens_j"] == pytest.approx(_est(chosen).energy_per_1k_tokens_j)
    assert res.tier != "none" and res.sources


def test_mistral_a800_million_requests():
    ans = advise("What will Mistral-7B on an A800 cost for a million requests a month?")
    res = ans.result
    expected = _est(res.deployment, 1_000_000)
    assert res.current.monthly.requests == 1_000_000
    assert res.current.energy_per_1k_tokens_j == pytest.approx(expected.energy_per_1k_tokens_j)
    assert res.money["current"]["cost_usd"] == pytest.approx(expected.monthly.cost_usd, rel=1e-3)
    assert res.current.tier == "measured"


def test_compare_all_precisions_qwen25_7b_5090():
    res = advise("Compare all precisions for Qwen2.5-7B on a 5090").result
    by_p = {r["precision"]: r for r in res.to_dict()["rows"]}
    fp16 = _est(with_precision(res.deployment, "fp16"))
    assert by_p["fp16"]["energy_per_1k_tokens_j"] == pytest.approx(fp16.energy_per_1k_tokens_j)
    assert by_p["int8_mixed"]["delta_vs_fp16_pct"] > 0
    ranked = sorted((r for r in by_p.values() if r["rank"]), key=lambda r: r["rank"])
    assert ranked[0]["energy_per_1k_tokens_j"] == min(r["energy_per_1k_tokens_j"] for r in ranked)
    for key in ("throughput_tok_s", "tokens_per_j", "vram_gb", "latency_s", "power_w", "tier"):
        assert key in by_p["fp16"]


def test_load_in_8bit_bill():
    res = advise("My load_in_8bit bill is crazy, help").result
    assert res.protocol == "diagnose" and "int8-mixed" in {f.rule for f in res.findings}
    assert res.mood.value == "orange"
    assert res.recommendation["fix"].find("llm_int8_threshold=0.0") >= 0


def test_fp8_on_blackwell_matches_rows():
    res = advise("Should I use FP8 on Blackwell?").result
    rows = find_rows(gpu="rtx5090", precision="fp8_weight_only", batch_size=1)
    assert len(res.rows) == len(rows)
    deltas = [r["delta_vs_fp16_pct"] for r in res.rows if r["delta_vs_fp16_pct"] is not None]
    assert deltas and res.recommendation["verdict"] == (
        "stay-fp16" if min(deltas) > 5 else res.recommendation["verdict"]
    )
    assert "fp8-eager" in {f.rule for f in res.findings}


def test_why_4bit_worse_uses_crossovers():
    ans = advise("Why is 4-bit sometimes worse?")
    res = ans.result
    assert "small-model-quant" in {f.rule for f in res.findings}
    turing = next(c for c in res.extra["crossovers"] if c["architecture"] == "turing")
    assert turing["fitted_b"] == crossover("turing", "nf4").fitted_b
    assert turing["reported_b"] == crossover("turing", "nf4").reported_b


def test_yi_6b_million_chars_in_chinese():
    ans = advise("我想用 Yi-6B 跑 100 万字, 要花多少钱?")
    res = ans.result
    assert res.language == "zh" and res.protocol == "estimate"
    requests = math.ceil(500_000 / 256)
    assert res.current.monthly.requests == requests
    expected = _est(res.deployment, requests, Settings(region="china"))
    assert res.money["current"]["cost_usd"] == pytest.approx(expected.monthly.cost_usd, rel=1e-3)
    assert any("汇率" in n for n in res.notes)  # CNY asked, no rate: says so instead of guessing


def test_cny_with_rate_and_price():
    res = advise("电价 0.6 元/度，汇率 7.2，Mistral-7B 在 A800 上每月 50 万次请求要花多少钱").result
    cur = res.money["current"]
    assert cur["cost_cny"] == pytest.approx(cur["energy_kwh"] * 0.6)
    assert cur["cost_usd"] == pytest.approx(cur["cost_cny"] / 7.2)


def test_diagnose_infers_precision_from_throughput():
    res = advise("Mistral-7B on A800, I only get 10 tok/s, why?").result
    rows = find_rows(gpu="a800", model="mistral-7b", precision="int8_mixed", batch_size=1)
    assert rows and res.deployment.precision == "int8_mixed"
    assert "int8-mixed" in {f.rule for f in res.findings}


def test_honesty_pure_int8_on_a800():
    ans = advise("Qwen2.5-14B 纯 INT8 在 A800 上每月 100 万次请求的电费")
    measured = [
        r.delta_vs_fp16_pct
        for r in find_rows(gpu="a800", precision="int8_pure", batch_size=1)
        if r.tier == "measured" and r.delta_vs_fp16_pct is not None
    ]
    notes = [h for h in ans.honesty if "pure INT8" in h.topic.en]
    assert notes and notes[0].measured[0] == pytest.approx(round(min(measured), 1))


@pytest.mark.parametrize(
    "question",
    ["Qwen2-1.5B on an AMD MI300X, cost?", "Mistral-7B on A800 with batch size 128 cost"],
)
def test_out_of_data_is_gray_with_protocol(question):
    ans = advise(question)
    assert ans.result.mood.value == "gray" and ans.measurement_protocol


@pytest.mark.parametrize(
    "question",
    [
        "cost of Qwen2-7B on an RTX 9999 Ti",
        "Qwen2-7B on a GTX480 cost",
        "cost of Foo-7B-ultra-z on A800 x",
    ],
)
def test_unknown_names_are_usage_errors(question):
    if "Foo" in question:
        # An unknown model with a size in its name still resolves by size (a useful answer).
        assert advise(question).result.deployment.model.params_b == 7
        return
    with pytest.raises(UsageError):
        advise(question)


def test_json_keys_others_rely_on():
    d = advise("Compare all precisions for Qwen2.5-7B on a 5090").to_dict()
    for key in (
        "protocol",
        "parsed",
        "mood",
        "findings",
        "recommendation",
        "rows",
        "tier",
        "sources",
    ):
        assert key in d


def test_package_names_stay_functions_after_submodules_load():
    """A submodule named like a public function would replace it on the package once imported."""
    import ecoguard.advisor
    import ecoguard.advisor.answers
    import ecoguard.advisor.protocols
    import ecoguard.advisor.rendering

    for name in ecoguard.advisor.__all__:
        value = getattr(ecoguard.advisor, name)
        assert callable(value) and not isinstance(value, type(ecoguard)), name


def test_estimate_optimized_column_keeps_the_batching_the_deployment_already_has() -> None:
    # A BS-32 deployment with no stated use must not be "optimized" into a BS-1 chat setup
    # that costs more than it does now.
    answer = advise("Qwen2.5-7B on L4 with batch size 32, what does it cost?")
    current = answer.result.current.energy_per_1k_tokens_j
    optimized = answer.result.optimized.energy_per_1k_tokens_j
    assert optimized <= current
    assert answer.result.money["saving_usd"] >= 0


def test_the_use_is_a_stated_default_when_the_question_gives_none():
    answer = advise("What is the greenest config for Qwen2.5-3B on an RTX 5090?")
    defaults = {d["field"]: d["value"] for d in answer.to_dict()["defaults"]}
    assert defaults["use"] == "api"  # served traffic, never silently a one-user chat
    stated = advise("Greenest config for Qwen2.5-3B on an RTX 5090 for a batch job")
    assert "use" not in {d["field"] for d in stated.to_dict()["defaults"]}


def test_honesty_crossover_failures_raise_unknown_architectures_are_no_note(monkeypatch):
    """The advisor does not fail open (issue 28): a crossover table that fails is a bug and
    raises; an architecture the table does not cover is simply no note."""
    import ecoguard.advisor.deployments as deployments
    from ecoguard.advisor.deployments import build_deployment, honesty_notes
    from ecoguard.advisor.question import Question

    dep, _ = build_deployment(
        Question("estimate", model="Qwen2.5-7B", gpu="t4", precision="nf4", batch_size=1)
    )
    assert [n.topic.en for n in honesty_notes(dep, ("nf4",))] == ["nf4 crossover on turing"]

    def broken(arch, precision):
        raise RuntimeError("crossover table unreadable")

    monkeypatch.setattr(deployments, "crossover", broken)
    with pytest.raises(RuntimeError, match="unreadable"):
        honesty_notes(dep, ("nf4",))

    def unknown(arch, precision):
        raise UsageError(f"unknown architecture {arch!r}")

    monkeypatch.setattr(deployments, "crossover", unknown)
    assert honesty_notes(dep, ("nf4",)) == []
