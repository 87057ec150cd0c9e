"""The advisor's framing records keep their shapes after issue 28 merged their duplicates: the
keys a parsed question lists and their order, the batching advice's JSON, and the serving
bounds that now lean on ecoguard.deployment's and ecoguard.knowledge's own tables."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ecoguard.advisor.deployments import build_deployment
from ecoguard.advisor.question import Question
from ecoguard.advisor.serving import (
    bandwidth_seconds_per_request,
    neighbour_seconds_per_request,
)
from ecoguard.advisor.texts import Text
from ecoguard.knowledge import find_rows, gpu_profiles
from ecoguard.knowledge.estimator import estimate


def test_a_question_stating_every_fact_lists_them_in_the_fixed_order() -> None:
    question = Question(
        "estimate",
        language="zh",
        text="anything",
        protocol_reason="asked",
        model="Qwen2.5-7B",
        model_size_b=7.6,
        gpu="a800",
        gpus=("a800", "t4"),
        gpu_count=2,
        tensor_parallel=True,
        engine="vllm",
        accuracy_critical=True,
        precision="nf4",
        precisions=("nf4", "fp16"),
        batch_size=4,
        prompt_tokens=100,
        generation_tokens=50,
        use="api",
        requests_per_month=1000,
        total_tokens=5000,
        hours_per_day=8.0,
        region="eu",
        currency="CNY",
        cny_per_usd=7.2,
        price_per_kwh=0.2,
        price_currency="USD",
        int8_threshold=6.0,
        double_quant=True,
        compiled=False,
        compute_dtype="bf16",
        observed_throughput_tok_s=10.0,
        observed_power_w=200.0,
        observed_energy_j_per_1k=30.0,
        paths=("a.py",),
        code="x = 1",
        concurrency=3,
        tokens_period="month",
        serving=True,
        use_reason=Text("why", "为什么"),
        local=True,
        notes=("n",),
    )
    listed = question.to_dict()
    assert list(listed) == [
        "language",
        "protocol",
        "protocol_reason",
        "model",
        "model_size_b",
        "gpu",
        "gpu_count",
        "engine",
        "precision",
        "compute_dtype",
        "batch_size",
        "prompt_tokens",
        "generation_tokens",
        "use",
        "requests_per_month",
        "total_tokens",
        "hours_per_day",
        "region",
        "cny_per_usd",
        "price_per_kwh",
        "price_currency",
        "int8_threshold",
        "double_quant",
        "compiled",
        "observed_throughput_tok_s",
        "observed_power_w",
        "observed_energy_j_per_1k",
        "concurrency",
        "tokens_period",
        "currency",
        "precisions",
        "gpus",
        "paths",
        "code",
        "serving",
        "tensor_parallel",
        "use_reason",
        "local",
        "accuracy_critical",
        "conversions",
        "out_of_data",
        "notes",
    ]
    assert listed["use_reason"] == "why" and listed["compiled"] is False
    assert "text" not in listed


def test_a_question_stating_nothing_lists_only_what_is_always_listed() -> None:
    assert list(Question("optimize", code="").to_dict()) == [
        "language",
        "protocol",
        "protocol_reason",
        "currency",
        "serving",
        "conversions",
        "out_of_data",
    ]


def _deployment(gpu: str, precision: str, model: str = "Qwen2.5-7B"):
    question = Question("estimate", model=model, gpu=gpu, precision=precision)
    return build_deployment(question)[0]


def test_the_bandwidth_bound_reads_packed_four_bit_weights_and_the_deployment_table() -> None:
    # A100: weights x bytes per parameter / memory bandwidth per generated token.
    bandwidth = gpu_profiles()["a100_80gb"].mem_bandwidth_gbs * 1e9
    for precision, per_param in (("fp16", 2.0), ("int8_pure", 1.0), ("nf4", 0.5)):
        dep = _deployment("a100", precision)
        expected = 256 * dep.model.params_b * 1e9 * per_param / bandwidth
        assert bandwidth_seconds_per_request(dep) == pytest.approx(expected)


def _median_speeds(gpu: str) -> dict[float, float]:
    speeds: dict[float, list[float]] = {}
    for row in find_rows(gpu=gpu, precision="fp16", batch_size=1):
        if row.params_b and row.throughput_tok_s and row.tier in ("measured", "reported"):
            speeds.setdefault(row.params_b, []).append(row.throughput_tok_s)
    return {size: sorted(v)[len(v) // 2] for size, v in speeds.items()}


def test_neighbouring_sizes_give_a_measured_size_its_own_speed_and_stop_beyond_twice() -> None:
    speeds = _median_speeds("a800")
    smallest, largest = min(speeds), max(speeds)
    dep = _deployment("a800", "fp16", model="Mistral-7B")

    def seconds(params_b: float) -> float | None:
        return neighbour_seconds_per_request(dep.with_(model=replace(dep.model, params_b=params_b)))

    assert seconds(smallest) == pytest.approx(256 / speeds[smallest], rel=1e-12)
    assert seconds(smallest / 2) == pytest.approx(256 / speeds[smallest], rel=1e-12)
    assert seconds(largest * 2) == pytest.approx(256 / speeds[largest], rel=1e-12)
    assert seconds(smallest / 2.1) is None
    assert seconds(largest * 2.1) is None


def test_a_text_volume_and_serving_hours_become_requests_with_the_rule_shown() -> None:
    from ecoguard.advisor.deployments import monthly_requests, settings_for

    question = Question("estimate", model="Qwen2.5-7B", gpu="a800", generation_tokens=256)
    dep = build_deployment(question)[0]
    settings = settings_for(question)[0]
    one_off = replace(question, total_tokens=1_000_000)
    requests, (conversion,) = monthly_requests(one_off, dep, settings)
    assert requests == 3907  # ceil(1,000,000 / 256)
    assert conversion.source == Text("1,000,000 tokens", "1,000,000 个 token")
    assert conversion.rule == Text(
        "/ 256 generated tokens per request (one-off volume, counted as one month)",
        "按每次请求生成 256 个 token 计；一次性用量，按一个月计",
    )
    monthly = replace(one_off, tokens_period="month")
    assert monthly_requests(monthly, dep, settings)[1][0].source.zh == "每月 1,000,000 个 token"
    hours = replace(question, hours_per_day=8.0, model="Yi-1.5-9B")
    dep = build_deployment(hours)[0]
    requests, (conversion,) = monthly_requests(hours, dep, settings)
    assert conversion.source == Text("8 h/day", "每天 8 小时")
    # The throughput as the answer's JSON gives it (3 decimals), shown with one.
    tput = round(estimate(dep, settings=settings).throughput_tok_s, 3)
    assert requests == int(8 * 3600 * 30 * tput / 256)
    assert f" x {tput:.1f} tok/s " in conversion.rule.en
    assert conversion.rule.en.endswith("tok/s (measured) / 256 tokens per request")
    assert conversion.rule.zh.startswith("8 小时 x 3600 秒 x 30 天 x ")
    assert monthly_requests(replace(question, requests_per_month=5), dep, settings) == (5, [])
