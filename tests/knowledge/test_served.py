"""How a deployment is served moves its estimate (ecoguard.knowledge.served, issue 28):
an engine's fused FP8 is not priced from torchao's eager rows, and N cards' energy counts all N."""

from __future__ import annotations

from dataclasses import replace

import pytest
from knowledge_support import deployment

from ecoguard.deployment import GpuSpec, QuantSpec
from ecoguard.knowledge.envelope import idle_w
from ecoguard.knowledge.estimator import estimate
from ecoguard.knowledge.served import FUSED_FP8_FLOOR, fused_fp8
from ecoguard.knowledge.tables import resolve_gpu
from ecoguard.quantization import fused_fp8 as fp8_checkpoint


def _fp8(engine=None, quant=None, gpu="h100_sxm", model="qwen2.5-7b"):
    dep = deployment(model, gpu, "fp8_dynamic")
    return replace(dep, engine=engine, quant=quant or dep.quant)


@pytest.mark.parametrize("engine", ["vllm", "sglang", "tgi", "tensorrt_llm"])
def test_an_engines_fp8_is_priced_from_fp16_not_torchao_eager_rows(engine: str) -> None:
    eager = estimate(_fp8())
    fused = estimate(_fp8(engine=engine))
    fp16 = estimate(deployment("qwen2.5-7b", "h100_sxm", "fp16"))
    # torchao's eager FP8 costs about twice FP16 here; the engine's FP8 is not priced from it.
    assert eager.energy_per_1k_tokens_j > 1.5 * fp16.energy_per_1k_tokens_j
    assert fused.energy_per_1k_tokens_j == pytest.approx(fp16.energy_per_1k_tokens_j)
    low, high = fused.energy_per_1k_tokens_j_range
    fp16_low, fp16_high = fp16.energy_per_1k_tokens_j_range
    assert low == pytest.approx(fp16_low * FUSED_FP8_FLOOR) and high == pytest.approx(fp16_high)
    assert not any("fp8" in row for row in fused.rows)  # no torchao FP8 row read
    shown = {"vllm": "vLLM", "sglang": "SGLang", "tgi": "TGI", "tensorrt_llm": "TensorRT-LLM"}
    assert f"{shown[engine]}'s fused FP8 kernels" in fused.method
    assert "no measured fused-FP8 row" in fused.method
    assert fused.tier == "extrapolated"  # H100's FP16 is itself carried from other GPUs
    assert fused.confidence == "low"
    assert fused.vram_gb < fp16.vram_gb  # one byte per weight all the same


def test_an_fp8_checkpoint_is_fused_without_an_engine_and_torchao_on_an_engine_is_not() -> None:
    checkpoint = _fp8(quant=fp8_checkpoint().quant, gpu="a800", model="mistral-7b")
    assert fused_fp8(checkpoint)
    fp16 = estimate(deployment("mistral-7b", "a800", "fp16"))
    got = estimate(checkpoint)
    assert got.energy_per_1k_tokens_j == pytest.approx(fp16.energy_per_1k_tokens_j)
    assert got.tier == "derived"  # from this configuration's measured FP16
    assert got.measurements == () and got.paired_deltas == ()  # FP16's sessions are not FP8's
    torchao = QuantSpec(method="torchao", bits=8, quant_type="float8_dynamic")
    assert not fused_fp8(_fp8(engine="vllm", quant=torchao))
    assert not fused_fp8(_fp8())  # plain FP8 without an engine: torchao's eager path
    assert not fused_fp8(replace(_fp8(engine="vllm"), precision="fp16"))


def test_fused_fp8_on_a_card_without_fp8_kernels_has_no_figure() -> None:
    got = estimate(_fp8(engine="vllm", gpu="tesla_t4"))
    assert got.energy_per_1k_tokens_j is None and got.tier == "none"
    assert "runs no FP8 kernels" in got.method


def _on(count: int, model="mistral-7b", gpu="a800", precision="fp16"):
    dep = deployment(model, gpu, precision)
    return replace(dep, gpu=replace(dep.gpu, count=count))


def test_four_cards_cost_more_than_one_for_the_same_work() -> None:
    one, four = estimate(_on(1)), estimate(_on(4))
    idle, _ = idle_w(resolve_gpu("a800"))
    # The same work, plus three other cards' idle power over the same time per token.
    expected = one.energy_per_1k_tokens_j * (1 + 3 * idle / one.power_w)
    assert four.energy_per_1k_tokens_j == pytest.approx(expected)
    assert four.energy_per_1k_tokens_j > one.energy_per_1k_tokens_j
    assert four.power_w == pytest.approx(one.power_w + 3 * idle)
    assert four.throughput_tok_s == one.throughput_tok_s
    # power x 1000 / throughput is still the energy shown
    assert four.power_w * 1000 / four.throughput_tok_s == pytest.approx(four.energy_per_1k_tokens_j)
    low, high = four.energy_per_1k_tokens_j_range
    assert low == pytest.approx(one.energy_per_1k_tokens_j_range[0])  # perfect speed-up
    assert high > one.energy_per_1k_tokens_j_range[1]
    assert four.monthly.cost_usd > one.monthly.cost_usd
    assert four.tier == "extrapolated" and four.confidence == "low"
    assert "4 cards (tensor parallel)" in four.method and "idle power" in four.method
    assert four.paired_energy_per_1k_tokens_j > one.paired_energy_per_1k_tokens_j
    assert not any("multi-GPU not modelled" in a for a in four.assumptions)
    data = four.to_dict()
    assert data["gpu_count"] == 4 and data["deployment"]["gpu"]["count"] == 4


def test_without_a_power_figure_the_other_cards_are_counted_at_tdp_as_a_lower_bound() -> None:
    one, two = (
        estimate(_on(1, "qwen2.5-7b", "h100_sxm")),
        estimate(_on(2, "qwen2.5-7b", "h100_sxm")),
    )
    assert one.power_w is None
    gpu = resolve_gpu("h100_sxm")
    idle, _ = idle_w(gpu)
    assert two.energy_per_1k_tokens_j == pytest.approx(
        one.energy_per_1k_tokens_j * (1 + idle / gpu.tdp_w)
    )
    assert "lower bound" in two.method


def test_vram_is_checked_per_card() -> None:
    # Llama-2-70B in FP16 (~140 GB of weights) overflows one 80 GB A800, fits on four.
    dep = deployment("llama-2-70b", "a800", "fp16")
    one = estimate(dep)
    four = estimate(replace(dep, gpu=GpuSpec(profile="a800", count=4)))
    assert [f.rule for f in one.findings] == ["vram-overflow"]
    assert four.findings == ()
    assert four.vram_gb == pytest.approx(one.vram_gb)  # the whole need, split over four
    assert four.to_dict()["vram_gb_per_card"] == pytest.approx(round(one.vram_gb / 4, 3))
