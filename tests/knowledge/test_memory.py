"""One VRAM formula: the estimator's ``vram_gb`` and the ``vram-overflow`` rule agree."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ecoguard.deployment import Deployment, GpuSpec, ModelSpec
from ecoguard.knowledge import resolve_gpu, resolve_model
from ecoguard.knowledge.estimator import estimate
from ecoguard.knowledge.memory import (
    DEFAULT_GENERATION_TOKENS,
    DEFAULT_PROMPT_TOKENS,
    FULL_NEED_VRAM_FRACTION,
    lookup_model,
    memory_need,
)
from ecoguard.rules import evaluate, memory_need_gb


def _gpu(name: str, count: int = 1) -> GpuSpec:
    p = resolve_gpu(name)
    return GpuSpec(
        profile=p.key,
        name=p.name,
        architecture=p.architecture,
        compute_capability=tuple(p.compute_capability)[:2] if p.compute_capability else None,
        vram_gb=p.vram_gb,
        count=count,
    )


def _model(model_id: str) -> ModelSpec:
    return resolve_model(model_id).to_model_spec(id=model_id)


MISTRAL = "mistralai/Mistral-7B-Instruct-v0.2"
LLAMA70 = "meta-llama/Llama-2-70b-hf"
QWEN7 = "Qwen/Qwen2.5-7B-Instruct"

# (case, deployment, whether vram-overflow fires)
CASES = [
    (
        "Mistral-7B bf16 on a T4",
        Deployment(model=_model(MISTRAL), gpu=_gpu("T4"), precision="bf16", dtype="bf16"),
        True,
    ),
    (
        "Mistral-7B bf16 on a T4, model known only by id",
        Deployment(model=ModelSpec(id=MISTRAL), gpu=_gpu("T4"), precision="bf16"),
        True,
    ),
    (
        "Llama-2-70B fp16 on 2x A100-80GB",
        Deployment(model=_model(LLAMA70), gpu=_gpu("A100-80GB", 2), precision="fp16"),
        False,
    ),
    (
        "Llama-2-70B fp16 on 2x A100-80GB, BS 16 x 4k context",
        Deployment(
            model=_model(LLAMA70),
            gpu=_gpu("A100-80GB", 2),
            precision="fp16",
            batch_size=16,
            prompt_tokens=3072,
            generation_tokens=1024,
        ),
        True,
    ),
    (
        "Llama-2-70B fp16 on one A100-80GB",
        Deployment(model=_model(LLAMA70), gpu=_gpu("A100-80GB"), precision="fp16"),
        True,
    ),
    (
        "Qwen2.5-7B nf4 on an L4",
        Deployment(model=_model(QWEN7), gpu=_gpu("L4"), precision="nf4", batch_size=8),
        False,
    ),
    (
        "7B fp16 of unknown shape on a T4 (no KV cache counted)",
        Deployment(model=ModelSpec(params_b=7.0), gpu=_gpu("T4"), precision="fp16"),
        False,
    ),
]


@pytest.mark.parametrize(("case", "deployment", "fires"), CASES, ids=[c[0] for c in CASES])
def test_rule_fires_exactly_when_estimator_need_exceeds_vram(case, deployment, fires):
    est = estimate(deployment)
    assert est.vram_gb is not None
    usable = deployment.gpu.vram_gb * deployment.gpu.count * FULL_NEED_VRAM_FRACTION
    findings = evaluate(deployment, only=["vram-overflow"])
    assert bool(findings) is (est.vram_gb > usable) is fires
    if not findings:
        return
    (finding,) = findings
    details = dict(finding.details)
    shown = est.to_dict()
    assert details["vram_need_gb"] == shown["vram_gb"] == round(est.vram_gb, 3)
    assert details["vram_method"] == est.vram_method
    assert details["usable_vram_gb"] == round(usable, 3)
    need = memory_need(
        deployment,
        lookup_model(deployment),
        prompt_tokens=deployment.prompt_tokens,
        generation_tokens=deployment.generation_tokens,
    )
    assert need is not None and need.total_gb == est.vram_gb
    assert details["weights_gb"] == round(need.weights_gb, 3)
    assert details["overhead_gb"] == round(need.overhead_gb, 3)
    assert details["kv_cache_gb"] == (
        None if need.kv_cache_gb is None else round(need.kv_cache_gb, 3)
    )
    # The message states the figures the estimator's method states (2 decimals).
    assert f"{est.vram_gb:.2f} GB" in finding.message
    assert f"{need.weights_gb:.2f} GB" in est.vram_method
    assert f"{need.weights_gb:.2f} GB" in finding.message
    assert f"{need.overhead_gb:.2f} GB" in est.vram_method
    assert f"{need.overhead_gb:.2f} GB" in finding.message


def test_memory_need_formula_and_defaults():
    dep = Deployment(
        model=ModelSpec(params_b=7.0, layers=32, kv_heads=8, head_dim=128), precision="fp16"
    )
    need = memory_need(dep)
    assert need is not None
    tokens = DEFAULT_PROMPT_TOKENS + DEFAULT_GENERATION_TOKENS
    kv = 2 * 32 * 8 * 128 * tokens * 1 * 2 / 1e9
    assert need.weights_gb == pytest.approx(14.0)
    assert need.kv_cache_gb == pytest.approx(kv)
    assert need.overhead_gb == pytest.approx(14.0 * 0.10 + 0.5)
    assert need.total_gb == pytest.approx(14.0 + kv + 1.9)
    assert need.tokens == tokens and need.batch_size == 1
    assert "(10% + 0.5 GB)" in need.method
    # The estimator's figure for the same deployment is this total.
    assert estimate(dep).vram_gb == need.total_gb
    # The rules' (weights, KV) pair is the same need, less its overhead.
    assert memory_need_gb(dep) == (need.weights_gb, need.kv_cache_gb)
    # Explicit token counts win over the defaults; no model size means no figure.
    longer = memory_need(dep, prompt_tokens=1000, generation_tokens=1000)
    assert longer is not None and longer.tokens == 2000
    assert memory_need(Deployment(model=ModelSpec(id=None))) is None


def test_memory_module_and_rules_import_no_torch():
    code = (
        "import sys\n"
        "import ecoguard.knowledge.memory, ecoguard.rules\n"
        "from ecoguard.deployment import Deployment, GpuSpec, ModelSpec\n"
        "ecoguard.rules.evaluate(Deployment(model=ModelSpec(id='mistral-7b'),"
        " gpu=GpuSpec(vram_gb=16), precision='fp16'), only=['vram-overflow'])\n"
        "bad = [m for m in ('torch', 'transformers') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
