"""The protocols take one input, the ``Request``: the question's own facts (prices, accuracy
first, concurrency, observed figures) are read from ``request.question``, and estimate hands
its request to optimize. ``with_precision`` builds the quantization record a loader would."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ecoguard.advisor import protocols
from ecoguard.advisor.answers import answer, build_deployment
from ecoguard.advisor.protocols import Request
from ecoguard.advisor.question import Question
from ecoguard.config import Settings
from ecoguard.deployment import PRECISIONS, Deployment, GpuSpec, ModelSpec, QuantSpec


def _request(protocol: str = "estimate", **facts: object) -> Request:
    question = Question(protocol, model="Qwen2.5-7B", gpu="a800", **facts)
    dep, _ = build_deployment(replace(question, precision=question.precision or "fp16"))
    return Request(question, dep, Settings(), requests_per_month=1_000_000)


def test_estimate_prices_money_as_its_question_asks() -> None:
    usd = protocols.estimate(_request()).money["current"]
    assert usd["currency"] == "USD" and usd["cost_cny"] is None and usd["cost_usd"]
    cny = protocols.estimate(_request(currency="CNY", cny_per_usd=7.0)).money["current"]
    assert cny["currency"] == "CNY" and cny["cost_cny"] == pytest.approx(usd["cost_usd"] * 7.0)
    eur = protocols.estimate(_request(price_per_kwh=0.3, price_currency="EUR")).money["current"]
    assert eur["currency"] == "EUR" and eur["cost_usd"] is None
    assert eur["cost_local"] == pytest.approx(eur["energy_kwh"] * 0.3)
    assert any("0.3 EUR/kWh" in note for note in eur["notes"])


def test_an_accuracy_critical_question_keeps_optimize_to_unquantized_precisions() -> None:
    tried = {row.precision for row in protocols.optimize(_request("optimize")).rows}
    assert tried - {"fp16", "bf16", "fp32"}  # quantized candidates are tried by default
    lossless = protocols.optimize(_request("optimize", accuracy_critical=True))
    assert {row.precision for row in lossless.rows} <= {"fp16", "bf16", "fp32"}
    assert lossless.recommendation["changes_outputs"] is False


def test_estimate_hands_its_request_to_optimize() -> None:
    for concurrency in (None, 8):
        request = _request(concurrency=concurrency, serving=True)
        est, opt = protocols.estimate(request), protocols.optimize(request)
        assert est.recommendation == opt.recommendation
        assert est.batching == opt.batching
    one = protocols.estimate(_request(concurrency=1, serving=True)).batching
    many = protocols.estimate(_request(concurrency=8, serving=True)).batching
    assert one != many  # the question's concurrency reaches the batching advice


def test_diagnose_reads_the_observed_figures_from_the_question() -> None:
    result = protocols.diagnose(_request("diagnose", observed_power_w=250.0))
    assert [(row["metric"], row["observed"]) for row in result.rows] == [("power_w", 250.0)]
    assert protocols.diagnose(_request("diagnose")).rows == ()


def test_a_trap_named_without_a_model_is_explained_without_the_figures() -> None:
    # No model to hold the figures against: the trap is explained from its evidence rows,
    # the same answer as without figures.
    measured = answer(Question.from_flags("estimate", precision="int8", observed_power_w=200.0))
    plain = answer(Question.from_flags("estimate", precision="int8"))
    assert measured.result.protocol == "diagnose" and measured.result.findings
    assert measured.result.to_dict() == plain.result.to_dict()


_NF4 = {"method": "bitsandbytes", "bits": 4, "quant_type": "nf4", "compute_dtype": "fp16"}
_INT8 = {"method": "bitsandbytes", "bits": 8, "quant_type": "int8"}
_FUSED_FP8 = QuantSpec(method="other", bits=8, quant_type="fp8", pre_quantized=True)


def _with_precision_expected(
    precision: str, compiled: bool | None, engine: str | None
) -> tuple[QuantSpec, str]:
    """The quantization record and dtype a loader builds for ``precision``, written out."""
    torchao = {"method": "torchao", "bits": 8, "compiled": compiled}
    return {
        "fp32": (QuantSpec(), "fp32"),
        "fp16": (QuantSpec(), "fp16"),
        "bf16": (QuantSpec(), "bf16"),
        "nf4": (QuantSpec(**_NF4, double_quant=False), "fp16"),
        "nf4_dq": (QuantSpec(**_NF4, double_quant=True), "fp16"),
        "int8_mixed": (QuantSpec(**_INT8, int8_threshold=6.0), "fp16"),
        "int8_pure": (QuantSpec(**_INT8, int8_threshold=0.0), "fp16"),
        "fp8_weight_only": (
            _FUSED_FP8 if engine else QuantSpec(**torchao, quant_type="float8_weight_only"),
            "bf16",
        ),
        "fp8_dynamic": (
            _FUSED_FP8 if engine else QuantSpec(**torchao, quant_type="float8_dynamic"),
            "bf16",
        ),
    }[precision]


@pytest.mark.parametrize("engine", [None, "vllm"])
@pytest.mark.parametrize("compiled", [None, True, False])
@pytest.mark.parametrize("precision", PRECISIONS)
def test_with_precision_builds_the_loaders_quantization_record(
    precision: str, compiled: bool | None, engine: str | None
) -> None:
    start = Deployment(
        model=ModelSpec(id="Qwen/Qwen2.5-7B-Instruct", params_b=7.6),
        gpu=GpuSpec(profile="a800"),
        precision="int8_mixed",
        quant=QuantSpec(method="gguf", bits=5),
        dtype="fp32",
        batch_size=4,
        engine=engine,
    )
    quant, dtype = _with_precision_expected(precision, compiled, engine)
    expected = replace(start, precision=precision, quant=quant, dtype=dtype)
    assert protocols.with_precision(start, precision, compiled=compiled) == expected
