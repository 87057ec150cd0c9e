"""One way to hold wording in both languages: ``Text(en, zh)``, and the Chinese wording of the
rules' trap texts for Chinese answers.

The rules (``ecoguard.rules``) word their findings in English; a Chinese answer shows the
translation below for each rule id it knows, and the English text for one it does not (a new
rule is never dropped for want of a translation).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Text:
    """The same sentence in English and Chinese."""

    en: str
    zh: str

    def get(self, language: str) -> str:
        return self.zh if language == "zh" else self.en

    def format(self, **values: object) -> Text:
        return Text(self.en.format(**values), self.zh.format(**values))


TIERS_ZH = {
    "measured": "实测",
    "reported": "公布",
    "derived": "推算",
    "extrapolated": "外推",
    "local": "本机实测",
    "live": "实时",
    "none": "无",
}


def tier_word(tier: str, language: str) -> str:
    """A data tier as shown in an answer (the JSON keeps the identifier)."""
    return TIERS_ZH.get(tier, tier) if language == "zh" else tier


# Rule id -> (title, what happens, fix summary) in Chinese. The fix code itself stays as written.
TRAPS_ZH: dict[str, tuple[str, str, str]] = {
    "int8-mixed": (
        "bitsandbytes 默认 INT8（混合精度分解）",
        "bitsandbytes 8 位量化默认 llm_int8_threshold=6.0：每次矩阵乘法都拆成 FP16 离群值部分和 INT8 "
        "部分，反复在两种精度之间转换，结果比 FP16 更慢、更耗电。",
        "设置 llm_int8_threshold=0.0（纯 INT8，输出会略有变化），或直接用 FP16",
    ),
    "small-model-quant": (
        "小模型量化反而更耗电",
        "量化省下的是显存带宽，但每个 token 都要额外反量化；模型越小，权重本来就读得快，"
        "反量化的开销占主导，量化后比 FP16 更耗电。交叉点大小取决于 GPU 架构。",
        "小于交叉点的模型用 FP16/BF16；显存不够再考虑量化",
    ),
    "fp8-eager": (
        "torchao FP8 在 eager 模式下",
        "torchao 的 FP8 在没有 torch.compile 的 eager 模式下，每层都要单独做类型转换和缩放，"
        "实测比 FP16 更耗电很多。",
        "改回 BF16/FP16；若要用 FP8，先加 torch.compile 并用 `ecoguard bench` 实测",
    ),
    "nightly-build": (
        "Nightly/开发版",
        "开发版可能缺少参考数据测量时使用的编译内核，能耗未经验证。",
        "安装 PyPI 上的稳定版",
    ),
    "batch-size-one": (
        "批大小为 1 的服务",
        "每次只处理一个请求：每生成一个 token 都要把全部权重读一遍，而批处理可以让多个请求分摊这次读取。",
        "合并并发请求（ecoguard.install(batching=True)）或每次调用传入多个提示词",
    ),
    "bf16-unsupported": (
        "GPU 不支持 BF16",
        "Ampere 之前的 GPU 没有 BF16 张量核心，BF16 矩阵乘法被模拟，又慢又耗电。",
        "在这块 GPU 上改用 FP16",
    ),
    "vram-overflow": (
        "显存不足",
        "权重加 KV 缓存超过了显存：模型会被卸载到 CPU 或直接报错，能耗和延迟都会大幅上升。",
        "换更大的 GPU、缩短上下文或减小批大小，或在确有必要时量化",
    ),
    "reference-deviation": (
        "能耗偏离参考值",
        "实测每 token 能耗与同配置的参考数据相差很大。",
        "检查功耗上限、频率、温度和 GPU 上的其他任务，然后用 `ecoguard bench` 实测",
    ),
}


def trap_text(
    rule: str, language: str, title: str, message: str, fix_summary: str
) -> tuple[str, str, str]:
    """``(title, message, fix_summary)`` in the answer's language."""
    if language == "zh" and rule in TRAPS_ZH:
        return TRAPS_ZH[rule]
    return title, message, fix_summary
