"""The rules: pure judgements of a Deployment, the same for every front door.

``evaluate(deployment)`` runs every rule (or ``only`` some) and returns the findings, most
severe first. ``explain(rule_id)`` says what a rule checks, why, the fix and the reference rows
behind it. Nothing here imports torch, transformers, pynvml or prometheus_client.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from ecoguard.config import Settings
from ecoguard.deployment import Deployment
from ecoguard.errors import UsageError
from ecoguard.faults import record_fault
from ecoguard.findings import RULE_IDS, Finding, Mood
from ecoguard.rules.checks import (
    BS1_SUSTAINED_CALLS,
    PUBLISHED_SMALL_MODEL_BOUND_B,
    RuleContext,
    SmallModelThreshold,
    check_batch_size_one,
    check_bf16_unsupported,
    check_fp8_eager,
    check_int8_mixed,
    check_nightly_build,
    check_reference_deviation,
    check_small_model_quant,
    check_vram_overflow,
    memory_need_gb,
    nightly_versions,
    small_model_threshold,
    unquantized_dtype,
)

Check = Callable[[Deployment, RuleContext], "Finding | None"]


@dataclass(frozen=True, slots=True)
class RuleSpec:
    """One rule: its stable id, a title, a one-line summary of what it catches, the check
    function, and whether its fix may change model outputs. ``why`` and ``fix`` feed
    ``explain``; ``evidence`` selects the reference rows that back it; ``stage`` says when the
    guard can judge it (``load``: from how the model is loaded, ``generate``: from calls)."""

    id: str
    title: str
    summary: str
    check: Check
    changes_outputs: bool
    why: str = ""
    fix: str = ""
    stage: str = "load"
    evidence: Callable[[Any], bool] | None = None
    # The moods this rule's findings can carry: lets the exporter create each counter series at
    # 0 before the first firing, so Prometheus' increase() sees that firing too.
    moods: tuple[Mood, ...] = ()


def _precision_in(*names: str) -> Callable[[Any], bool]:
    wanted = frozenset(names)
    return lambda row: row.precision in wanted


_SPECS: tuple[RuleSpec, ...] = (
    RuleSpec(
        id="int8-mixed",
        moods=(Mood.ORANGE,),
        title="INT8 mixed-precision trap",
        summary="bitsandbytes load_in_8bit without llm_int8_threshold=0.0",
        check=check_int8_mixed,
        changes_outputs=True,
        why=(
            "With the default threshold of 6.0, LLM.int8() finds outlier activations in every "
            "matmul and computes them in fp16 next to the int8 part; the extra kernels and "
            "copies cost more energy per token than FP16 itself (+50% to +595% in every "
            "measured pair). Threshold 0.0 keeps the matmul purely int8; perplexity moved by "
            "-11.0% to +25.4% vs FP16 in the measured pairs, so check output quality."
        ),
        fix="BitsAndBytesConfig(load_in_8bit=True, llm_int8_threshold=0.0)",
        evidence=_precision_in("int8_mixed", "int8_pure", "fp16"),
    ),
    RuleSpec(
        id="small-model-quant",
        moods=(Mood.ORANGE,),
        title="Small-model quantization penalty",
        summary="4-bit or 8-bit weights on a model below the architecture's crossover size",
        check=check_small_model_quant,
        changes_outputs=True,
        why=(
            "Quantization saves memory traffic but adds dequantization work per token. For small "
            "models the weights are cheap to stream anyway, so the extra work dominates and the "
            "quantized model uses more energy than FP16. The crossover size depends on the GPU "
            f"architecture; without one, the published bound is ~{PUBLISHED_SMALL_MODEL_BOUND_B:g}B."
        ),
        fix="from_pretrained(model_id, dtype=torch.bfloat16)  # fp16 before Ampere; no quantization",
        evidence=lambda row: (
            row.precision in ("nf4", "nf4_dq", "int8_mixed", "fp16")
            and row.params_b is not None
            and row.params_b < 6
        ),
    ),
    RuleSpec(
        id="fp8-eager",
        moods=(Mood.RED,),
        title="FP8 eager-mode penalty",
        summary="torchao float8 quantization on a model that is not torch.compile'd",
        check=check_fp8_eager,
        changes_outputs=True,
        why=(
            "torchao's float8 tensor subclasses dequantize through eager dispatch when the model "
            "is not compiled, so each token runs many small kernels; the measured rows (RTX 5090, "
            "eager) use 1.8x to 9.2x the energy of FP16 per token."
        ),
        fix="load in bf16/fp16 without TorchAoConfig, or model = torch.compile(model)",
        evidence=_precision_in("fp8_weight_only", "fp8_dynamic", "fp16", "bf16"),
    ),
    RuleSpec(
        id="nightly-build",
        moods=(Mood.GRAY,),
        title="Nightly/dev build",
        summary="a dev or nightly torch/torchao build",
        check=check_nightly_build,
        changes_outputs=False,
        why=(
            "Development builds can ship without compiled extensions or with unreleased "
            "regressions; the reference figures were measured on releases, so none of them apply."
        ),
        fix="pip install --upgrade torch torchao  # stable releases",
    ),
    RuleSpec(
        id="batch-size-one",
        moods=(Mood.YELLOW,),
        title="Batch-size-one serving",
        summary=f"{BS1_SUSTAINED_CALLS}+ consecutive generate calls at batch size 1 (not interactive)",
        check=check_batch_size_one,
        changes_outputs=False,
        why=(
            "Decoding one request at a time reads every weight for a single token; batching "
            "shares that read across requests, and energy per request falls steeply with batch "
            "size."
        ),
        fix="ecoguard.install(batching=True), or pass several prompts per generate call",
        stage="generate",
        evidence=lambda row: row.batch_size is not None and row.batch_size > 1,
    ),
    RuleSpec(
        id="bf16-unsupported",
        moods=(Mood.ORANGE,),
        title="bf16 on a pre-Ampere GPU",
        summary="bf16 weights or compute dtype on a GPU older than Ampere (sm_80)",
        check=check_bf16_unsupported,
        changes_outputs=True,
        why=(
            "GPUs before Ampere (T4, V100) have no bf16 tensor cores, so bf16 math takes slower "
            "paths; fp16 runs on their tensor cores."
        ),
        fix="from_pretrained(model_id, dtype=torch.float16)",
    ),
    RuleSpec(
        id="vram-overflow",
        moods=(Mood.RED,),
        title="VRAM overflow",
        summary="weights + KV cache + runtime overhead (the estimator's VRAM need) exceed the GPUs' memory",
        check=check_vram_overflow,
        changes_outputs=False,
        why=(
            "When weights, KV cache and the runtime's own memory (CUDA context, activations: "
            "10% of the weights + 0.5 GB) do not fit, accelerate offloads layers to CPU memory "
            "and every forward pass moves them over PCIe, or the load fails outright. The need is "
            "the estimator's vram_gb; unknown lengths count as 128 prompt + 256 new tokens."
        ),
        fix='smaller batch or context, a smaller precision, or device_map="auto" over more GPUs',
    ),
    RuleSpec(
        id="reference-deviation",
        moods=(Mood.YELLOW, Mood.ORANGE, Mood.GRAY),
        title="Energy far from the reference",
        summary="live J/token far from the reference for the same configuration",
        check=check_reference_deviation,
        changes_outputs=False,
        why=(
            "When the measured energy per token is far above the reference for the same model, "
            "GPU and precision, something outside the configuration (throttling, power caps, "
            "contention) is wasting energy."
        ),
        fix="nvidia-smi -q -d PERFORMANCE,POWER  # look for throttling and other jobs",
        stage="measure",
    ),
)

RULES: Mapping[str, RuleSpec] = MappingProxyType({spec.id: spec for spec in _SPECS})
assert tuple(RULES) == RULE_IDS, "RULES must cover RULE_IDS in order"


def _check_ids(ids: Iterable[str]) -> list[str]:
    chosen = list(ids)
    for rule_id in chosen:
        if rule_id not in RULES:
            raise UsageError(f"unknown rule {rule_id!r}; accepted: {', '.join(RULE_IDS)}")
    return chosen


def evaluate(
    deployment: Deployment,
    *,
    settings: Settings | None = None,
    only: Iterable[str] | None = None,
    measured_j_per_token: float | None = None,
) -> list[Finding]:
    """Every rule's finding for ``deployment``, most severe mood first (ties in RULES order).

    ``only`` limits the rules run (UsageError on an unknown id). Rules whose action in
    ``settings`` is ``off`` are skipped. ``measured_j_per_token`` feeds ``reference-deviation``.
    A rule that raises is counted as a fault and skipped: one broken rule never hides the others.
    """
    settings = settings or Settings()
    ids = _check_ids(only) if only is not None else list(RULES)
    context = RuleContext(settings=settings, measured_j_per_token=measured_j_per_token)
    findings: list[Finding] = []
    for rule_id in ids:
        if settings.action_for(rule_id) == "off":
            continue
        try:
            finding = RULES[rule_id].check(deployment, context)
        except Exception as exc:
            record_fault(f"rules.{rule_id}", exc)
            continue
        if finding is not None:
            findings.append(finding)
    order = {rule_id: index for index, rule_id in enumerate(RULES)}
    findings.sort(key=lambda f: (-f.mood.rank, order[f.rule]))
    return findings


_EVIDENCE_LIMIT = 8


def explain(rule_id: str) -> dict[str, Any]:
    """What ``rule_id`` checks, why, the fix, and the reference rows behind it (ids, figures,
    tiers). UsageError for an unknown id."""
    spec = RULES.get(rule_id)
    if spec is None:
        raise UsageError(f"unknown rule {rule_id!r}; accepted: {', '.join(RULE_IDS)}")
    rows: list[dict[str, Any]] = []
    if spec.evidence is not None:
        try:
            from ecoguard.knowledge import reference_rows

            for row in reference_rows():
                if row.tier in ("measured", "reported") and spec.evidence(row):
                    rows.append(
                        {
                            "id": row.id,
                            "gpu": row.gpu,
                            "model": row.model_id,
                            "precision": row.precision,
                            "batch_size": row.batch_size,
                            "energy_j_per_1k": row.energy_j_per_1k,
                            "tier": row.tier,
                            "source": row.source,
                        }
                    )
                    if len(rows) >= _EVIDENCE_LIMIT:
                        break
        except Exception as exc:  # knowledge tables not available: explain without rows
            record_fault("rules.explain", exc)
    return {
        "id": spec.id,
        "title": spec.title,
        "what": spec.summary,
        "why": spec.why,
        "fix": spec.fix,
        "changes_outputs": spec.changes_outputs,
        "stage": spec.stage,
        "evidence": rows,
    }


__all__ = [
    "BS1_SUSTAINED_CALLS",
    "PUBLISHED_SMALL_MODEL_BOUND_B",
    "RULES",
    "RuleContext",
    "RuleSpec",
    "SmallModelThreshold",
    "evaluate",
    "explain",
    "memory_need_gb",
    "nightly_versions",
    "small_model_threshold",
    "unquantized_dtype",
]
