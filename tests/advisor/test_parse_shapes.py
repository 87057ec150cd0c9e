"""What ``parse_question`` reads from a question, every stated fact at once: each reader (names,
work, money, use, measured figures) gives its facts under the ``Question`` field's own name, and
the question's other fields stay at their defaults."""

from __future__ import annotations

import dataclasses

import pytest

from ecoguard.advisor.extract import MoneyFacts, UseFact
from ecoguard.advisor.observed import Observed
from ecoguard.advisor.parse import parse_question
from ecoguard.advisor.precisions import CodeFlags
from ecoguard.advisor.question import Question

_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Question)}
_SERVED = "a request volume from many users"

# (question, every field that is not its default; conversions as (field, source, value, rule),
# out_of_data as (topic, detail), use_reason in English)
CASES: list[tuple[str, dict[str, object]]] = [
    (
        "Qwen2.5-7B on 4x A100 80GB with tp=4, 1M requests a month, 8 hours a day, $0.15/kWh in "
        "the EU",
        {
            "protocol": "estimate",
            "protocol_reason": "asks what it will cost",
            "model": "Qwen2.5-7B",
            "model_size_b": 7.0,
            "gpu": "a100",
            "gpus": ("a100",),
            "gpu_count": 4,
            "tensor_parallel": True,
            "use": "api",
            "requests_per_month": 1_000_000,
            "hours_per_day": 8.0,
            "region": "eu",
            "price_per_kwh": 0.15,
            "price_currency": "USD",
            "serving": True,
            "use_reason": _SERVED,
        },
    ),
    (
        "Mistral-7B on two A800s, electricity price is 0.6 元/度, 汇率 7.2, cost per month?",
        {
            "protocol": "estimate",
            "language": "zh",
            "protocol_reason": "asks what it will cost",
            "model": "Mistral-7B",
            "model_size_b": 7.0,
            "gpu": "a800",
            "gpus": ("a800",),
            "gpu_count": 2,
            "currency": "CNY",
            "cny_per_usd": 7.2,
            "price_per_kwh": 0.6,
            "price_currency": "CNY",
        },
    ),
    (
        "每天运行 8 小时，Qwen2.5-7B 在 A800 上，每天 1 万用户，电价 0.6 元",
        {
            "protocol": "estimate",
            "language": "zh",
            "protocol_reason": "asks what it will cost",
            "model": "Qwen2.5-7B",
            "model_size_b": 7.0,
            "gpu": "a800",
            "gpus": ("a800",),
            "use": "api",
            "requests_per_month": 1_500_000,
            "hours_per_day": 8.0,
            "currency": "CNY",
            "price_per_kwh": 0.6,
            "price_currency": "CNY",
            "serving": True,
            "use_reason": _SERVED,
            "conversions": [
                (
                    "requests_per_month",
                    "1 万用户",
                    1_500_000.0,
                    "10,000 users per day x 5 requests per user x 30 days per month",
                )
            ],
        },
    ),
    (
        "Llama-3-8B on H100 PCIe served by vLLM, €0.25/kWh, 500 concurrent users, 1024 tokens in "
        "/ 256 out, chatbot",
        {
            "protocol": "estimate",
            "protocol_reason": "asks what it will cost",
            "model": "Llama-3-8B",
            "model_size_b": 8.0,
            "gpu": "h100 pcie",
            "gpus": ("h100 pcie",),
            "engine": "vllm",
            "prompt_tokens": 1024,
            "generation_tokens": 256,
            "use": "chat",
            "currency": "EUR",
            "price_per_kwh": 0.25,
            "price_currency": "EUR",
            "concurrency": 500,
            "serving": True,
            "use_reason": "interactive chat, served: 500 requests at once",
        },
    ),
    (
        "Qwen2.5-0.5B on RTX 4090 D, load_in_8bit=True, llm_int8_threshold=0.0, why? I get "
        "10 tok/s at 300 W",
        {
            "protocol": "diagnose",
            "protocol_reason": "reports a measured figure to check",
            "model": "Qwen2.5-0.5B",
            "model_size_b": 0.5,
            "gpu": "rtx4090d",
            "gpus": ("rtx4090d",),
            "precision": "int8_pure",
            "precisions": ("int8_pure",),
            "int8_threshold": 0.0,
            "observed_throughput_tok_s": 10.0,
            "observed_power_w": 300.0,
        },
    ),
    (
        "BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_use_double_quant=True, "
        "bnb_4bit_compute_dtype=torch.bfloat16) for Qwen2.5-0.5B on a T4",
        {
            "protocol": "estimate",
            "protocol_reason": "names a model without a specific request; estimating it",
            "model": "Qwen2.5-0.5B",
            "model_size_b": 0.5,
            "gpu": "t4",
            "gpus": ("t4",),
            "precision": "nf4_dq",
            "precisions": ("nf4_dq",),
            "compute_dtype": "bf16",
            "double_quant": True,
        },
    ),
    (
        "TinyLlama on my gaming pc, 1 GB of text, accuracy-critical",
        {
            "protocol": "estimate",
            "protocol_reason": "asks what it will cost",
            "model": "TinyLlama-1.1B",
            "accuracy_critical": True,
            "use": "batch",
            "total_tokens": 250_000_000,
            "use_reason": "a one-off text volume is processed offline",
            "local": True,
            "conversions": [("total_tokens", "1 GB", 250_000_000.0, "~4 bytes of text per token")],
        },
    ),
    (
        "Qwen2.5-7B on A800 with GPTQ, batch size 128, 8k context, estimate fp16 and int8",
        {
            "protocol": "estimate",
            "protocol_reason": "asks what it will cost",
            "model": "Qwen2.5-7B",
            "model_size_b": 7.0,
            "gpu": "a800",
            "gpus": ("a800",),
            "precision": "fp16",
            "precisions": ("fp16", "int8_mixed"),
            "batch_size": 128,
            "notes": ("several precisions named; estimating fp16",),
            "out_of_data": [
                ("quant-method", "GPTQ: no reference row measures GPTQ kernels"),
                ("batch-size", "batch size 128: reference rows stop at 64"),
                ("sequence-length", "sequence of 8,192 tokens: reference rows stop at 4,096"),
            ],
        },
    ),
    (
        "FP8 on Blackwell?",
        {
            "protocol": "compare",
            "protocol_reason": "asks about a precision on a GPU without a model",
            "gpu": "rtx5090",
            "gpus": ("rtx5090",),
            "precision": "fp8_weight_only",
            "precisions": ("fp8_weight_only",),
            "conversions": [
                (
                    "gpu",
                    "Blackwell",
                    0.0,
                    "Blackwell -> RTX 5090 (the Blackwell GPU with the most reference data)",
                )
            ],
        },
    ),
    (
        "Qwen2.5-7B on A800, 0.5 J/token at 250 W (TDP 300 W)",
        {
            "protocol": "diagnose",
            "protocol_reason": "reports a measured figure to check",
            "model": "Qwen2.5-7B",
            "model_size_b": 7.0,
            "gpu": "a800",
            "gpus": ("a800",),
            "observed_power_w": 250.0,
            "observed_energy_j_per_1k": 500.0,
            "conversions": [
                (
                    "observed_energy_j_per_1k",
                    "0.5 J/token",
                    500.0,
                    "J per token x 1000 = J per 1k tokens",
                )
            ],
        },
    ),
]


def _stated(question: Question) -> dict[str, object]:
    """The fields that are not their default, in the shape CASES writes them."""
    out: dict[str, object] = {}
    for name, default in _DEFAULTS.items():
        value = getattr(question, name)
        if name == "text" or value == default:
            continue
        if name == "conversions":
            value = [(c.field, c.source.en, c.value, c.rule.en) for c in value]
        elif name == "out_of_data":
            value = [(o.topic, o.detail.en) for o in value]
        elif name == "use_reason":
            value = value.en
        out[name] = value
    return out


@pytest.mark.parametrize(("text", "expected"), CASES, ids=[c[0][:40] for c in CASES])
def test_every_fact_stated_is_read_and_nothing_else(text: str, expected: dict[str, object]):
    question = parse_question(text)
    assert question.text == text
    assert _stated(question) == expected


@pytest.mark.parametrize("record", [UseFact, Observed, MoneyFacts, CodeFlags])
def test_readers_name_their_facts_as_the_question_does(record: type) -> None:
    """parse_question passes these records' fields to Question by name."""
    assert set(record._fields) <= set(_DEFAULTS)
