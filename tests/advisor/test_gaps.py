"""The smaller gaps of issue 22, one behaviour each: money in the question's currency, a local
machine's PUE, the yearly figure, the context-window warning, singular wording, a trap the
answer's own figures call negligible, translated trap texts, verification steps, trade-offs,
GPU evidence, accelerators, and quantization only when its saving holds."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ecoguard.advisor import protocols
from ecoguard.advisor.answers import Answer, advise, answer, build_deployment
from ecoguard.advisor.question import Question
from ecoguard.advisor.rendering import render
from ecoguard.advisor.uncertainty import quantization_holds
from ecoguard.config import Settings
from ecoguard.deployment import Deployment
from ecoguard.findings import Finding, Impact, Mood
from ecoguard.knowledge import regions
from ecoguard.knowledge.estimator import Estimate, estimate
from ecoguard.rules.table import ROWS


def _text(question: str, fmt: str = "text") -> str:
    return render(advise(question), fmt=fmt, plain=True)


def test_a_price_in_euros_prices_in_euros_only() -> None:
    answer = advise("Qwen2.5-7B on A800 at €0.25/kWh, 1M requests a month")
    money = answer.result.money["current"]
    assert money["currency"] == "EUR" and money["cost_usd"] is None
    assert money["cost_local"] == pytest.approx(money["energy_kwh"] * 0.25)
    text = render(answer, fmt="text", plain=True)
    cost_line = next(line for line in text.splitlines() if line.startswith("cost/month"))
    assert "€" in cost_line and "$" not in cost_line
    assert "Saving: €" in text


def test_a_local_machine_counts_no_facility_overhead() -> None:
    home = advise("Qwen2.5-3B on my local GPU at home, an RTX 4090, 1M requests a month")
    cloud = advise("Qwen2.5-3B on an RTX 4090, 1M requests a month")
    assert home.settings_used["pue"] == 1.0 and "pue" not in cloud.settings_used
    ratio = home.result.current.monthly.energy_kwh / cloud.result.current.monthly.energy_kwh
    assert ratio == pytest.approx(1.0 / regions()["us"].pue, rel=1e-3)
    assert "PUE 1" in render(home, fmt="text")


def test_the_yearly_cost_is_twelve_months() -> None:
    answer = advise("What will Mistral-7B on an A800 cost for a million requests a month?")
    text = render(answer, fmt="text", plain=True)
    monthly = answer.result.money["current"]["cost_usd"]
    year_line = next(line for line in text.splitlines() if line.startswith("cost/year"))
    assert f"${monthly * 12:,.2f}" in year_line


def test_a_prompt_past_the_context_window_is_warned_and_not_green() -> None:
    answer = advise("TinyLlama on a T4 with 3000 prompt tokens, cost?")
    assert answer.warnings and "2,048" in answer.warnings[0].en
    assert answer.result.mood != Mood.GREEN
    assert "Warning:" in render(answer, fmt="text")
    short = advise("TinyLlama on a T4 with 1000 prompt tokens, cost?")
    assert not short.warnings


def test_one_candidate_and_one_token_read_in_the_singular() -> None:
    question = Question("optimize", model="Mistral-7B", gpu="a800", precision="fp16")
    dep, _ = build_deployment(replace(question, batch_size=1, use="api"))
    result = protocols.optimize(
        protocols.Request(question, dep), precisions=("fp16",), batch_sizes=(1,)
    )
    reason = result.recommendation["reasons"][0]
    assert "among 1 candidate that passes" in reason and "0 ruled out as traps" in reason
    answer = advise("Mistral-7B on A800 for 1 token, how much energy?")
    text = render(answer, fmt="text")
    assert "1 tokens" not in text


def test_an_orange_trap_the_answer_calls_negligible_opens_yellow() -> None:
    trap = Finding(
        rule="small-model-quant", mood=Mood.ORANGE, title="t", message="m", fix="f",
        impact=Impact(extra_energy_pct=0.2, tier="measured"),
    )  # fmt: skip
    result = protocols.AdvisorResult(
        protocol="estimate", mood=Mood.ORANGE, findings=(trap,),
        recommendation={"saving_pct": 0.2},
    )  # fmt: skip
    from ecoguard.advisor.answers import _mood_within_saving

    calmed = _mood_within_saving(result, "en")
    assert calmed.mood == Mood.YELLOW and "0.2%" in calmed.notes[-1]
    big = protocols.AdvisorResult(
        protocol="estimate", mood=Mood.ORANGE,
        findings=(Finding(**{**_fields(trap), "impact": Impact(extra_energy_pct=44.0)}),),
        recommendation={"saving_pct": 40.0},
    )  # fmt: skip
    assert _mood_within_saving(big, "en").mood == Mood.ORANGE


def _fields(finding: Finding) -> dict:
    return {name: getattr(finding, name) for name in finding.__slots__}


def test_chinese_answers_translate_trap_texts_and_fixes() -> None:
    text = _text("我的服务用了load_in_8bit=True，电费很高，怎么办？")
    what, fix = ROWS["int8-mixed"].message_zh, ROWS["int8-mixed"].fix_summary_zh
    assert what in text and fix in text
    assert "splits every matmul" not in text and "With the default threshold" not in text
    assert "请补充模型" in text  # asks, in Chinese, for what prices it


def test_diagnose_gives_verification_steps_and_only_comparable_evidence() -> None:
    flags = Question.from_flags(
        "diagnose", model="Mistral-7B", gpu="a800", observed_throughput_tok_s=10.0
    )
    text = render(answer(flags), fmt="text", plain=True)
    assert "Verify the fix:" in text and "ecoguard bench --model mistral-7b" in text
    evidence = text.split("int8-mixed: With")[1].split("\n\n")[0]
    # Only the trap's own rows and the FP16 baselines of the same GPU, model and batch size.
    assert "fp16/bs4" not in evidence and "fp16/bs8" not in evidence
    assert "a800/mistral-7b/fp16/bs1" in evidence


def test_compare_states_memory_latency_cost_and_accuracy() -> None:
    text = _text("Compare all precisions for Qwen2.5-7B on a 5090")
    trade = text.split("Other trade-offs:")[1]
    for word in ("least memory", "lowest latency", "cheapest per month", "accuracy"):
        assert word in trade


@pytest.mark.parametrize(
    ("question", "tool"),
    [
        ("Qwen2.5-7B on Intel Gaudi 2, cost per month?", "hl-smi"),
        ("Llama-3-8B on an Apple M2 Max, energy?", "powermetrics"),
        ("Qwen2-1.5B on an AMD MI300X, cost?", "amd-smi"),
        ("Run Mistral-7B on a TPU v5e, how much?", "cloud provider"),
    ],
)
def test_accelerators_outside_the_data_are_gray_with_their_power_tool(question, tool) -> None:
    answer = advise(question)
    assert answer.result.mood == Mood.GRAY and answer.measurement_protocol
    text = render(answer, fmt="text", plain=True)
    assert tool in text and "ecoguard bench" in text
    assert "$" not in text  # never priced as an NVIDIA card


def test_an_unlisted_nvidia_card_says_which_profile_and_why() -> None:
    answer = advise("Mistral-7B on an RTX 3060 cost for 100k requests a month")
    assert answer.gpu_match is not None and answer.gpu_match.card.vram_gb == 12
    text = render(answer, fmt="text", plain=True)
    assert "RTX 3060 is not in the GPU table" in text and "ampere" in text
    assert answer.result.current.tier in ("extrapolated", "none")
    assert "vram-overflow" in {f.rule for f in answer.result.findings}  # 12 GB, its own VRAM


def test_flags_optimize_never_recommends_a_smaller_batch_silently() -> None:
    # issue 22: `optimize --model Mistral-7B --gpu a800 --batch-size 16` recommended BS 1.
    served = answer(Question.from_flags("optimize", model="Mistral-7B", gpu="a800", batch_size=16))
    rec = served.result.recommendation
    assert rec["batch_size"] >= 16 and rec["saving_pct"] >= 0
    assert served.result.deployment.use == "api"  # no stated use: never a one-user chat
    chat = Question.from_flags(
        "optimize", model="Mistral-7B", gpu="a800", batch_size=16, use="chat"
    )
    assert answer(chat).result.recommendation["batch_size"] >= 16


# quantized, unquantized estimate dicts -> holds?
HOLDS = [
    ({"energy_per_1k_tokens_j_range": [80, 90]}, {"energy_per_1k_tokens_j_range": [95, 105]}, True),
    (
        {"energy_per_1k_tokens_j_range": [80, 99]},
        {"energy_per_1k_tokens_j_range": [95, 105]},
        False,
    ),
    (
        {
            "energy_per_1k_tokens_j_range": [80, 99],
            "paired_deltas": [{"delta_pct": -8.0}, {"delta_pct": -7.4}],
        },
        {"energy_per_1k_tokens_j_range": [95, 105]},
        True,
    ),
    (
        # RTX 5090 Qwen2.5-3B NF4: +11.7% in one study, about -7.5% in another.
        {
            "energy_per_1k_tokens_j_range": [2848, 3617],
            "paired_deltas": [{"delta_pct": 11.7}, {"delta_pct": -8.0}, {"delta_pct": -7.4}],
        },
        {"energy_per_1k_tokens_j_range": [3077, 3310]},
        False,
    ),
    ({"energy_per_1k_tokens_j": 80.0}, {"energy_per_1k_tokens_j": 100.0}, True),
    ({"energy_per_1k_tokens_j": 97.0}, {"energy_per_1k_tokens_j": 100.0}, False),
]


def _record(spec: dict) -> Estimate:
    """An estimate with only the figures ``spec`` gives (as its JSON spells them)."""
    bounds = spec.get("energy_per_1k_tokens_j_range")
    return replace(
        estimate(Deployment()),
        energy_per_1k_tokens_j=spec.get("energy_per_1k_tokens_j"),
        energy_per_1k_tokens_j_range=None if bounds is None else tuple(bounds),
        paired_deltas=tuple(
            ("src", "s", p["delta_pct"], "fp16") for p in spec.get("paired_deltas", ())
        ),
    )


@pytest.mark.parametrize(("quantized", "unquantized", "holds"), HOLDS)
def test_quantization_holds(quantized, unquantized, holds) -> None:
    assert quantization_holds(_record(quantized), _record(unquantized)) is holds


def test_disagreeing_experiments_recommend_the_unquantized_setup_and_show_the_range() -> None:
    answer = advise("Qwen2.5-3B chat for a single user on RTX 5090 with NF4: the greenest?")
    rec = answer.result.recommendation
    assert rec["precision"] == "fp16" and rec["changes_outputs"] is False
    text = render(answer, fmt="text", plain=True)
    assert "+11.7%" in text and "does not hold" in text


def test_batching_advice_numbers_follow_the_estimator() -> None:
    answer = advise("Mistral-7B on A800 serving 1M requests/month at batch size 1")
    advice = answer.batching
    single = protocols.run_estimate(
        answer.result.deployment.with_(batch_size=1), Settings(), 1_000_000
    )
    assert advice.seconds_per_request == pytest.approx(single.latency_s, abs=1e-3)
    assert advice.gpu_days_per_month == pytest.approx(1_000_000 * single.latency_s / 86_400, 1e-3)
    assert advice.concurrency == pytest.approx(advice.gpu_days_per_month / 30)
    assert advice.target_batch == round(advice.concurrency)
    assert "ecoguard.install(batching=True" in advice.fix
    target = protocols.run_estimate(
        answer.result.deployment.with_(batch_size=advice.target_batch),
        Settings(),
        1_000_000,
    )
    expected = (1 - target.energy_per_1k_tokens_j / single.energy_per_1k_tokens_j) * 100
    assert advice.saving_pct == pytest.approx(expected, abs=0.1)
    assert isinstance(answer, Answer)


def test_requests_in_flight_without_own_latency_come_from_neighbouring_models() -> None:
    # Qwen2.5-7B on A800 has no throughput of its own; Mistral-7B (7.24B) and Yi-1.5-9B
    # (8.83B) measured on the same GPU bracket it.
    import math

    from ecoguard.knowledge import find_rows

    answer = advise("Qwen2.5-7B on A800 serving 1M requests a month")
    advice = answer.batching
    assert advice.concurrency_basis == "neighbours"
    speeds: dict[float, list[float]] = {}
    for row in find_rows(gpu="a800", precision="fp16", batch_size=1):
        if row.params_b and row.throughput_tok_s and row.tier in ("measured", "reported"):
            speeds.setdefault(row.params_b, []).append(row.throughput_tok_s)
    median = {k: sorted(v)[len(v) // 2] for k, v in speeds.items()}
    lo = max(k for k in median if k <= 7.62)
    hi = min(k for k in median if k >= 7.62)
    frac = math.log(7.62 / lo) / math.log(hi / lo)
    tput = math.exp(math.log(median[lo]) + frac * (math.log(median[hi]) - math.log(median[lo])))
    assert advice.seconds_per_request == pytest.approx(256 / tput)
    assert "neighbouring size" in render(answer, fmt="text")


def test_a_bandwidth_bound_is_called_a_lower_bound_and_does_not_cap_the_batcher() -> None:
    # A100 has no reference rows: only the roofline bound is left, which understates overlap.
    answer = advise("We run Qwen2.5-7B with BS=1 in production on an A100, is that ok?")
    advice = answer.batching
    assert advice.concurrency_basis == "bandwidth" and advice.target_batch == 16
    text = render(answer, fmt="text")
    assert "at least" in text and "a lower bound" in text
    assert answer.result.mood == Mood.YELLOW  # BS 1 in production is not green
    assert answer.result.deployment.prompt_tokens == 512  # "BS=1 in" is not a prompt length


def test_pasted_code_is_audited_as_text_with_its_line() -> None:
    question = (
        "audit my code:\nfrom transformers import AutoModelForCausalLM\n"
        "model = AutoModelForCausalLM.from_pretrained('x', load_in_8bit=True)"
    )
    answer = advise(question)
    assert answer.result.protocol == "audit" and answer.question.code
    text = render(answer, fmt="text", plain=True)
    assert "pasted into the question, audited as text (never run)" in text
    assert "line 2: int8-mixed" in text  # the line of the load, counted in the pasted code


def test_chinese_gray_answers_are_chinese() -> None:
    text = _text("Qwen2.5-7B 在 Intel Gaudi 2 上每月电费多少")
    assert "所有参考数据都是在 NVIDIA GPU 上测的" in text
    assert "every reference row" not in text
    text = _text("Qwen2.5-7B 在 A800 上，批大小 128，多少钱")
    assert "参考数据最大只到 64" in text


def test_spec_sheet_cards_are_data_outside_the_gpu_profiles() -> None:
    from ecoguard.knowledge.tables import gpu_profiles, spec_sheet_cards

    cards = spec_sheet_cards()
    assert len(cards) >= 30 and not set(cards) & set(gpu_profiles())
    for key, card in cards.items():
        assert card.source == "vendor specification sheet" and card.idle_w is None, key
        assert card.bf16 == (card.compute_capability >= (8, 0)), key
        assert card.fp8 == (card.compute_capability >= (8, 9)), key
