"""The rule table: what each rule is (id, title, summary, why, fix, stage, evidence, moods),
one row per rule, in ``RULE_IDS`` order.

The checks (``ecoguard.rules.checks``) take their rule's id, title and ``changes_outputs`` from
this table through :meth:`RuleRow.finding`, and ``ecoguard.rules`` joins each row with its check
into ``RULES``; so this module imports neither, and the dependency points one way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from ecoguard.findings import RULE_IDS, Finding, Impact, Mood

# ``batch-size-one`` needs this many consecutive batch-size-1 generate calls on one model before
# it calls it a serving pattern: one call (a smoke test, a notebook cell) is not a trap.
BS1_SUSTAINED_CALLS = 8

# The bound the EcoCompute publication states for "small" models when no GPU architecture is
# known: below ~3B parameters, 4-bit/8-bit quantization costs more energy than FP16.
PUBLISHED_SMALL_MODEL_BOUND_B = 3.0


@dataclass(frozen=True, slots=True)
class RuleRow:
    """What one rule is: its stable id, a title, a one-line summary of what it catches, and
    whether its fix may change model outputs. ``why`` and ``fix`` feed ``explain``;
    ``evidence`` selects the reference rows that back it; ``stage`` says when the guard can
    judge it (``load``: from how the model is loaded, ``generate``: from calls)."""

    id: str
    title: str
    summary: str
    changes_outputs: bool
    why: str = ""
    fix: str = ""
    stage: str = "load"
    evidence: Callable[[Any], bool] | None = None
    # The moods this rule's findings can carry: lets the exporter create each counter series at
    # 0 before the first firing, so Prometheus' increase() sees that firing too.
    moods: tuple[Mood, ...] = ()
    # The precisions whose trap this rule is, whatever the model (a question about int8 in
    # general is told about int8-mixed), and the precision its fix is measured against.
    known_for: tuple[str, ...] = ()
    fixed_precision: str = "fp16"
    # A Chinese answer's wording: what happens, fix summary (the fix code stays as written; a
    # finding's title is not shown in an answer, and its JSON keeps the English one).
    message_zh: str = ""
    fix_summary_zh: str = ""
    # What to look for first when a bill is high and nothing is known yet (English, Chinese).
    look_for: str = ""
    look_for_zh: str = ""

    def finding(
        self,
        *,
        mood: Mood,
        message: str,
        fix: str,
        fix_summary: str,
        impact: Impact | None = None,
        evidence: tuple[str, ...] = (),
        details: tuple[tuple[str, object], ...] = (),
    ) -> Finding:
        """A finding of this rule, with its id, title and ``changes_outputs`` from this row."""
        return Finding(
            rule=self.id,
            mood=mood,
            title=self.title,
            message=message,
            fix=fix,
            fix_summary=fix_summary,
            impact=impact,
            evidence=evidence,
            changes_outputs=self.changes_outputs,
            details=details,
        )


def _precision_in(*names: str) -> Callable[[Any], bool]:
    wanted = frozenset(names)
    return lambda row: row.precision in wanted


_ROWS: tuple[RuleRow, ...] = (
    RuleRow(
        id="int8-mixed",
        look_for="load_in_8bit=True at the default llm_int8_threshold=6.0",
        look_for_zh="load_in_8bit=True 且 llm_int8_threshold 为默认的 6.0",
        known_for=("int8_mixed",),
        fixed_precision="int8_pure",
        message_zh=(
            "bitsandbytes 8 位量化默认 llm_int8_threshold=6.0：每次矩阵乘法都拆成 FP16 离群值部分和 INT8 部分，"
            "反复在两种精度之间转换，结果比 FP16 更慢、更耗电。"
        ),
        fix_summary_zh="设置 llm_int8_threshold=0.0（纯 INT8，输出会略有变化），或直接用 FP16",
        moods=(Mood.ORANGE,),
        title="INT8 mixed-precision trap",
        summary="bitsandbytes load_in_8bit without llm_int8_threshold=0.0",
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
    RuleRow(
        id="small-model-quant",
        look_for="4-bit or 8-bit weights on a model below about 3-4B parameters",
        look_for_zh="约 3-4B 参数以下的小模型用了 4 位或 8 位量化",
        known_for=("nf4", "nf4_dq", "int8_pure"),
        message_zh=(
            "量化省下的是显存带宽，但每个 token 都要额外反量化；模型越小，"
            "权重本来就读得快，反量化的开销占主导，量化后比 FP16 更耗电。"
            "交叉点大小取决于 GPU 架构。"
        ),
        fix_summary_zh="小于交叉点的模型用 FP16/BF16；显存不够再考虑量化",
        moods=(Mood.ORANGE,),
        title="Small-model quantization penalty",
        summary="4-bit or 8-bit weights on a model below the architecture's crossover size",
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
    RuleRow(
        id="fp8-eager",
        look_for="torchao FP8 without torch.compile",
        look_for_zh="torchao FP8 没有经过 torch.compile",
        known_for=("fp8_weight_only", "fp8_dynamic"),
        fixed_precision="bf16",
        message_zh=(
            "torchao 的 FP8 在没有 torch.compile 的 eager 模式下，每层都要单独做类型转换和缩放，"
            "实测比 FP16 更耗电很多。"
        ),
        fix_summary_zh="改回 BF16/FP16；若要用 FP8，先加 torch.compile 并用 `ecoguard bench` 实测",
        moods=(Mood.RED,),
        title="FP8 eager-mode penalty",
        summary="torchao float8 quantization on a model that is not torch.compile'd",
        changes_outputs=True,
        why=(
            "torchao's float8 tensor subclasses dequantize through eager dispatch when the model "
            "is not compiled, so each token runs many small kernels; the measured rows (RTX 5090, "
            "eager) use 1.8x to 9.2x the energy of FP16 per token."
        ),
        fix="load in bf16/fp16 without TorchAoConfig, or model = torch.compile(model)",
        evidence=_precision_in("fp8_weight_only", "fp8_dynamic", "fp16", "bf16"),
    ),
    RuleRow(
        id="nightly-build",
        message_zh="开发版可能缺少参考数据测量时使用的编译内核，能耗未经验证。",
        fix_summary_zh="安装 PyPI 上的稳定版",
        moods=(Mood.GRAY,),
        title="Nightly/dev build",
        summary="a dev or nightly torch/torchao build",
        changes_outputs=False,
        why=(
            "Development builds can ship without compiled extensions or with unreleased "
            "regressions; the reference figures were measured on releases, so none of them apply."
        ),
        fix="pip install --upgrade torch torchao  # stable releases",
    ),
    RuleRow(
        id="batch-size-one",
        look_for="one prompt per generate call while requests wait",
        look_for_zh="请求在排队，却每次 generate 只处理一条",
        message_zh=(
            "每次只处理一个请求：每生成一个 token 都要把全部权重读一遍，而批处理可以让多个请求分摊这次读取。"
        ),
        fix_summary_zh="合并并发请求（ecoguard.install(batching=True)）或每次调用传入多个提示词",
        moods=(Mood.YELLOW,),
        title="Batch-size-one serving",
        summary=f"{BS1_SUSTAINED_CALLS}+ consecutive generate calls at batch size 1 (not interactive)",
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
    RuleRow(
        id="bf16-unsupported",
        look_for="bf16 on a GPU before Ampere (T4, V100)",
        look_for_zh="在 Ampere 之前的 GPU（T4、V100）上用 bf16",
        message_zh="Ampere 之前的 GPU 没有 BF16 张量核心，BF16 矩阵乘法被模拟，又慢又耗电。",
        fix_summary_zh="在这块 GPU 上改用 FP16",
        moods=(Mood.ORANGE,),
        title="bf16 on a pre-Ampere GPU",
        summary="bf16 weights or compute dtype on a GPU older than Ampere (sm_80)",
        changes_outputs=True,
        why=(
            "GPUs before Ampere (T4, V100) have no bf16 tensor cores, so bf16 math takes slower "
            "paths; fp16 runs on their tensor cores."
        ),
        fix="from_pretrained(model_id, dtype=torch.float16)",
    ),
    RuleRow(
        id="vram-overflow",
        look_for="weights + KV cache larger than the GPU memory (layers spill to CPU)",
        look_for_zh="权重加 KV 缓存超出显存（层被卸载到 CPU）",
        message_zh=(
            "权重加 KV 缓存超过了显存：模型会被卸载到 CPU 或直接报错，能耗和延迟都会大幅上升。"
        ),
        fix_summary_zh="换更大的 GPU、缩短上下文或减小批大小，或在确有必要时量化",
        moods=(Mood.RED,),
        title="VRAM overflow",
        summary="weights + KV cache + runtime overhead (the estimator's VRAM need) exceed the GPUs' memory",
        changes_outputs=False,
        why=(
            "When weights, KV cache and the runtime's own memory (CUDA context, activations: "
            "10% of the weights + 0.5 GB) do not fit, accelerate offloads layers to CPU memory "
            "and every forward pass moves them over PCIe, or the load fails outright. The need is "
            "the estimator's vram_gb; unknown lengths count as 512 prompt + 256 new tokens."
        ),
        fix='smaller batch or context, a smaller precision, or device_map="auto" over more GPUs',
    ),
    RuleRow(
        id="reference-deviation",
        message_zh="实测每 token 能耗与同配置的参考数据相差很大。",
        fix_summary_zh="检查功耗上限、频率、温度和 GPU 上的其他任务，然后用 `ecoguard bench` 实测",
        moods=(Mood.YELLOW, Mood.ORANGE, Mood.GRAY),
        title="Energy far from the reference",
        summary="live J/token far from the reference for the same configuration",
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

ROWS: Mapping[str, RuleRow] = MappingProxyType({row.id: row for row in _ROWS})
assert tuple(ROWS) == RULE_IDS, "the rule table must cover RULE_IDS in order"
