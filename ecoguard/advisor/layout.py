"""Layout shared by every advisor answer: the labels in both languages, number and money
formats, Markdown or aligned-text tables (CJK characters count two columns), bar charts.

Pure functions over plain values; the answer-specific sections live in ``sections.py`` and
``diagnosis.py``, and ``rendering.render`` puts them together.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ecoguard.advisor.extract import SYMBOLS
from ecoguard.advisor.texts import TIERS_ZH, Text

if TYPE_CHECKING:
    from ecoguard.advisor.answer import Answer

BAR_WIDTH = 30


ATTRIBUTION = "Hongping Zhang, EcoCompute (2026), Zenodo 10.5281/zenodo.19647290, CC BY 4.0"


# Every label of an answer in both languages, one row each (an answer reads them in its own).
LABELS = {
    "understood": Text("Understood as", "理解为"),
    "conversions": Text("Conversions", "换算"),
    "defaults": Text("Defaults used", "使用的默认值"),
    "protocol": Text("protocol", "协议"),
    "recommendation": Text("Recommendation", "建议"),
    "current": Text("current", "当前"),
    "optimized": Text("optimized", "优化后"),
    "saving": Text("Saving", "节省"),
    "extra_cost": Text("Extra cost", "额外花费"),
    "per_month": Text("per month", "每月"),
    "equivalent_optimize": Text(
        "The recommended setup's monthly energy is about", "推荐配置每月的能耗大约相当于"
    ),
    "equivalent_current": Text(
        "This setup's monthly energy is about", "该配置每月的能耗大约相当于"
    ),
    "findings": Text("Traps found", "发现的陷阱"),
    "fix": Text("fix", "修复"),
    "honesty": Text("Published vs measured", "公开数据与实测对比"),
    "published": Text("published", "公开值"),
    "measured": Text("measured", "实测"),
    "out_of_data": Text("Outside the reference data", "超出参考数据范围"),
    "protocol_steps": Text("Measure it yourself", "自己测一测"),
    "data": Text("Data", "数据"),
    "rows": Text("reference rows", "条参考数据"),
    "no_rows": Text("no reference row backs a figure here", "此处没有参考数据支撑的数字"),
    "sources": Text("sources", "来源"),
    "notes": Text("Notes", "备注"),
    "confidence": Text("confidence", "置信度"),
    "observed": Text("observed", "你的数据"),
    "expected": Text("expected", "参考值"),
    "no_trap": Text("No known trap matches this configuration.", "没有匹配的已知陷阱。"),
    "not_available": Text("no data", "无数据"),
    "batching": Text("Batching", "批处理"),
    "trade_offs": Text("Other trade-offs", "其他取舍"),
    "files": Text("Files: ", "文件："),
    "session": Text("session", "会话"),
    "paired": Text(
        "{p} vs FP16, same-session pairs: {parts}; the table uses their median",
        "{p} 相对 FP16（同一会话配对）：{parts}；表中取其中位数",
    ),
    "elsewhere": Text(
        "(rows measured on {others}: none of this trap's evidence rows is on {gpu})",
        "（以上数据测于 {others}：该陷阱没有 {gpu} 上的数据）",
    ),
    "verify": Text("Verify the fix", "验证修复"),
    "v_apply": Text("Apply the fix: ", "应用修复："),
    "v_measure": Text(
        "Measure J per 1k tokens before and after on the same machine, prompt length and "
        "max_new_tokens: ",
        "在同一台机器、同样的输入长度和 max_new_tokens 下，测量修复前后的每千 token 能耗：",
    ),
    "v_near": Text(
        "After the fix the energy should land near the reference figures above; if it is "
        "still more than 20% off, check the power limit, clocks and other jobs on the GPU.",
        "修复后的能耗应接近上表的参考值；若差距仍超过 20%，检查功耗上限、频率和 GPU 上的其他任务。",
    ),
    "v_quality": Text(
        "This fix changes outputs: compare quality on your own evaluation set before and after.",
        "这个修复会改变输出：在你自己的评测集上对比修复前后的质量。",
    ),
    "crossover": Text(
        "Crossover size (quantization saves energy above it)", "交叉点（模型大于它时量化才省电）"
    ),
    "by_precision": Text("J per 1k tokens by precision", "各精度每千 token 能耗"),
    "measured_on": Text("Measured on {gpu}", "{gpu} 上的实测"),
    "ruled_out": Text("Ruled out: ", "已排除："),
    "estimate": Text("Estimate", "估算"),
    "method": Text("Method: ", "方法："),
    "greenest": Text(
        "Already the greenest option the data supports.", "已经是数据支持的最省电配置。"
    ),
    "more_energy": Text(" ({pct:.1f}% more energy)", "（能耗增加 {pct:.1f}%）"),
    "less_energy": Text(" ({pct:.1f}% less energy)", "（能耗降低 {pct:.1f}%）"),
    "warning": Text("Warning", "注意"),
    "pue_local": Text(
        "PUE {pue:g} (a local machine: no data-centre overhead)",
        "PUE {pue:g}（本地机器：不计数据中心开销）",
    ),
    "r_cost_year": Text("cost/year", "每年费用"),
    # punctuation
    "colon": Text(": ", "："),
    "comma": Text(", ", "，"),
    "semicolon": Text("; ", "；"),
    "stop": Text(".", "。"),
    "paren": Text(" ({})", "（{}）"),
    # "Understood as" fields
    "f_gpu": Text("GPU", "GPU"),
    "f_engine": Text("served by", "推理引擎"),
    "f_batch_size": Text("batch size", "批大小"),
    "f_in_out": Text("{p} in / {g} out", "输入 {p} / 输出 {g} token"),
    "f_use": Text("use", "用途"),
    "f_region": Text("region", "地区"),
    "conversion": Text(
        "{source} -> {value} {field} ({rule})", "{source} -> {field} {value}（{rule}）"
    ),
    # table headers and row labels
    "h_precision": Text("precision", "精度"),
    "h_model": Text("model", "模型"),
    "h_rank": Text("rank", "排名"),
    "h_bs": Text("BS", "批大小"),
    "h_tok_s": Text("tok/s", "吞吐（tok/s）"),
    "h_j_1k": Text("J/1k tok", "每千 token 能耗（J）"),
    "h_fp16_j_1k": Text("FP16 J/1k", "FP16 每千 token 能耗（J）"),
    "h_vs_fp16": Text("vs FP16", "相对 FP16"),
    "h_tok_j": Text("tok/J", "能效（tok/J）"),
    "h_vram": Text("VRAM GB", "显存（GB）"),
    "h_latency": Text("latency s", "延迟（s）"),
    "h_w": Text("W", "功率（W）"),
    "h_usd_month": Text("$/month", "每月费用（$）"),
    "h_tier": Text("tier", "等级"),
    "h_metric": Text("metric", "指标"),
    "h_gap": Text("gap", "差距"),
    "h_row": Text("row", "数据行"),
    "h_architecture": Text("architecture", "架构"),
    "h_fitted": Text("fitted", "拟合值"),
    "r_j_request": Text("J/request", "每次请求能耗（J）"),
    "r_requests_month": Text("requests/month", "每月请求数"),
    "r_kwh_month": Text("kWh/month", "每月用电（kWh）"),
    "r_cost_month": Text("cost/month", "每月费用"),
    "r_co2_month": Text("kg CO2/month", "每月 CO2（kg）"),
    "setup": Text("{label} ({p}, BS {bs})", "{label}（{p}，批大小 {bs}）"),
    # sentences
    "rec_compare": Text(
        "{label}: {p} ({j} J/1k tok{delta}, {tier}).",
        "{label}：{p}（{j} J/1k tok{delta}，{tier}）。",
    ),
    "rec_delta": Text(", {d:+.1f}% vs FP16", "，相对 FP16 {d:+.1f}%"),
    "rec_optimize": Text("{label}: {p}, batch size {bs}", "{label}：{p}，批大小 {bs}"),
    "impact": Text(" (+{pct:.0f}% energy, {tier})", "（能耗 +{pct:.0f}%，{tier}）"),
    "impact_usd": Text(
        " (+{pct:.0f}% energy, ${usd:,.2f}/month, {tier})",
        "（能耗 +{pct:.0f}%，${usd:,.2f}/月，{tier}）",
    ),
    "citation": Text("{data}: {used}{src}. {attribution}.", "{data}：{used}{src}。{attribution}."),
    # Identifiers an English answer shows as they are (fields with spaces for underscores)
    "field_total_tokens": Text("total tokens", "总 token 数"),
    "field_requests": Text("requests", "请求数"),
    "field_requests_per_month": Text("requests per month", "每月请求数"),
    "field_prompt_tokens": Text("prompt tokens", "输入 token 数"),
    "field_observed_energy_j_per_1k": Text("observed energy j per 1k", "实测每千 token 能耗（J）"),
    **{f"tier_{tier}": Text(tier, word) for tier, word in TIERS_ZH.items()},
    "conf_high": Text("high", "高"),
    "conf_medium": Text("medium", "中"),
    "conf_low": Text("low", "低"),
    "conf_general": Text("general", "一般"),
}


def fmt(value: Any, digits: int = 0) -> str:
    if value is None:
        return "-"
    if isinstance(value, (int, float)):
        return f"{value:,.{digits}f}"
    return str(value)


def fmt_range(value: Any, bounds: Any, digits: int = 0) -> str:
    """``5,030 (4,300-5,600)``: a figure with its p10-p90 range when it has one."""
    text = fmt(value, digits)
    if value is None or not bounds or len(bounds) != 2 or None in bounds:
        return text
    return f"{text} ({fmt(bounds[0], digits)}-{fmt(bounds[1], digits)})"


def money_text(
    usd: float | None, cny: float | None = None, currency: str = "USD", local: float | None = None
) -> str:
    if currency == "CNY" and cny is not None:
        text = f"¥{cny:,.2f}"
        return text + (f" (${usd:,.2f})" if usd is not None else "")
    if currency not in ("USD", "CNY") and local is not None:
        return f"{SYMBOLS.get(currency, currency + ' ')}{local:,.2f}"
    return "-" if usd is None else f"${usd:,.2f}"


def make_table(headers: Sequence[str], rows: Sequence[Sequence[str]], markdown: bool) -> list[str]:
    if markdown:
        out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
        out += ["| " + " | ".join(r) + " |" for r in rows]
        return out
    widths = [
        max(_width(str(h)), *(_width(str(r[i])) for r in rows)) if rows else _width(h)
        for i, h in enumerate(headers)
    ]
    out = ["  ".join(_pad(str(h), w) for h, w in zip(headers, widths, strict=False))]
    out.append("  ".join("-" * w for w in widths))
    out += ["  ".join(_pad(str(c), w) for c, w in zip(r, widths, strict=False)) for r in rows]
    return out


def _width(text: str) -> int:
    """Columns on a terminal: CJK characters and full-width punctuation take two."""
    return sum(2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1 for ch in text)


def _pad(text: str, width: int) -> str:
    return text + " " * (width - _width(text))


def tier_label(labels: dict[str, str], tier: object) -> str:
    """A tier as a word in the answer's language (the JSON keeps the identifier)."""
    return labels.get(f"tier_{tier}", str(tier))


def list_head(text: str, labels: dict[str, str]) -> str:
    """A label that introduces a list: ``Notes:`` / ``备注：``."""
    return text + labels["colon"].rstrip()


def bar_chart(items: Sequence[tuple[str, float | None, str]], *, unit: str) -> list[str]:
    """``label |#######      | value unit (tier)``; bars scaled to the largest value."""
    known = [v for _, v, _ in items if v is not None and v > 0]
    if not known:
        return []
    top = max(known)
    width = max(len(label) for label, _, _ in items)
    lines = []
    for label, value, tier in items:
        if value is None:
            lines.append(f"{label.ljust(width)} |{' ' * BAR_WIDTH}| -")
            continue
        filled = max(1, round(BAR_WIDTH * value / top)) if value > 0 else 0
        lines.append(
            f"{label.ljust(width)} |{'#' * filled}{' ' * (BAR_WIDTH - filled)}| {value:,.0f} {unit} ({tier})"
        )
    return lines


def heading(text: str, markdown: bool, labels: dict[str, str]) -> str:
    return f"### {text}" if markdown else list_head(text, labels)


def local_price(answer: Answer) -> tuple[float, str] | None:
    """(price per kWh, symbol) when the question priced electricity in a currency that is not
    converted to USD (no exchange rate): money is then shown in that currency only."""
    price, currency = (
        answer.settings_used.get("price_per_kwh"),
        answer.settings_used.get("price_currency"),
    )
    if price is None or currency in (None, "USD", "CNY"):
        return None
    return float(price), SYMBOLS.get(str(currency), f"{currency} ")
