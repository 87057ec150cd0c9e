"""Rendering an advisor answer: Markdown (default), plain text, or JSON.

Every answer opens with the mood tag and the EcoLobster's line (dropped with ``plain``), shows
the question as understood (conversions and defaults), the protocol's tables and an ASCII bar
chart, dollars per month and savings, a real-world equivalent, and ends with a citation built
from the reference rows actually used. Output is deterministic for a given answer.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Sequence
from typing import Any

from ecoguard.advisor.answers import Answer
from ecoguard.advisor.extract import SYMBOLS
from ecoguard.advisor.protocols import cite
from ecoguard.advisor.texts import TRAPS_ZH, Text, trap_text
from ecoguard.advisor.voice import colorize, lobster_line, mood_tag
from ecoguard.findings import Mood

BAR_WIDTH = 30
ATTRIBUTION = "Hongping Zhang, EcoCompute (2026), Zenodo 10.5281/zenodo.19647290, CC BY 4.0"

_LABELS = {
    "en": {
        "understood": "Understood as",
        "conversions": "Conversions",
        "defaults": "Defaults used",
        "protocol": "protocol",
        "recommendation": "Recommendation",
        "current": "current",
        "optimized": "optimized",
        "saving": "Saving",
        "extra_cost": "Extra cost",
        "per_month": "per month",
        "equivalent": "That is about",
        "equivalent_optimize": "The recommended setup's monthly energy is about",
        "equivalent_current": "This setup's monthly energy is about",
        "findings": "Traps found",
        "fix": "fix",
        "honesty": "Published vs measured",
        "published": "published",
        "measured": "measured",
        "out_of_data": "Outside the reference data",
        "protocol_steps": "Measure it yourself",
        "data": "Data",
        "rows": "reference rows",
        "no_rows": "no reference row backs a figure here",
        "sources": "sources",
        "notes": "Notes",
        "confidence": "confidence",
        "observed": "observed",
        "expected": "expected",
        "no_trap": "No known trap matches this configuration.",
        "not_available": "no data",
        "batching": "Batching",
        "warning": "Warning",
        "pue_local": "PUE {pue:g} (a local machine: no data-centre overhead)",
        "r_cost_year": "cost/year",
        # punctuation
        "colon": ": ",
        "comma": ", ",
        "semicolon": "; ",
        "stop": ".",
        "paren": " ({})",
        # "Understood as" fields
        "f_model": "model",
        "f_gpu": "GPU",
        "f_precision": "precision",
        "f_batch_size": "batch size",
        "f_in_out": "{p} in / {g} out",
        "f_use": "use",
        "f_region": "region",
        "conversion": "{source} -> {value} {field} ({rule})",
        # table headers and row labels
        "h_precision": "precision",
        "h_model": "model",
        "h_rank": "rank",
        "h_bs": "BS",
        "h_tok_s": "tok/s",
        "h_j_1k": "J/1k tok",
        "h_fp16_j_1k": "FP16 J/1k",
        "h_vs_fp16": "vs FP16",
        "h_tok_j": "tok/J",
        "h_vram": "VRAM GB",
        "h_latency": "latency s",
        "h_w": "W",
        "h_usd_month": "$/month",
        "h_tier": "tier",
        "h_metric": "metric",
        "h_gap": "gap",
        "h_row": "row",
        "h_architecture": "architecture",
        "h_fitted": "fitted",
        "h_published": "published",
        "r_j_request": "J/request",
        "r_requests_month": "requests/month",
        "r_kwh_month": "kWh/month",
        "r_cost_month": "cost/month",
        "r_co2_month": "kg CO2/month",
        "setup": "{label} ({p}, BS {bs})",
        # sentences
        "rec_compare": "{label}: {p} ({j} J/1k tok{delta}, {tier}).",
        "rec_delta": ", {d:+.1f}% vs FP16",
        "rec_optimize": "{label}: {p}, batch size {bs}",
        "impact": " (+{pct:.0f}% energy, {tier})",
        "impact_usd": " (+{pct:.0f}% energy, ${usd:,.2f}/month, {tier})",
        "citation": "{data}: {used}{src}. {attribution}.",
    },
    "zh": {
        "understood": "理解为",
        "conversions": "换算",
        "defaults": "使用的默认值",
        "protocol": "协议",
        "recommendation": "建议",
        "current": "当前",
        "optimized": "优化后",
        "saving": "节省",
        "extra_cost": "额外花费",
        "per_month": "每月",
        "equivalent": "大约相当于",
        "equivalent_optimize": "推荐配置每月的能耗大约相当于",
        "equivalent_current": "该配置每月的能耗大约相当于",
        "findings": "发现的陷阱",
        "fix": "修复",
        "honesty": "公开数据与实测对比",
        "published": "公开值",
        "measured": "实测",
        "out_of_data": "超出参考数据范围",
        "protocol_steps": "自己测一测",
        "data": "数据",
        "rows": "条参考数据",
        "no_rows": "此处没有参考数据支撑的数字",
        "sources": "来源",
        "notes": "备注",
        "confidence": "置信度",
        "observed": "你的数据",
        "expected": "参考值",
        "no_trap": "没有匹配的已知陷阱。",
        "not_available": "无数据",
        "batching": "批处理",
        "warning": "注意",
        "pue_local": "PUE {pue:g}（本地机器：不计数据中心开销）",
        "r_cost_year": "每年费用",
        # punctuation
        "colon": "：",
        "comma": "，",
        "semicolon": "；",
        "stop": "。",
        "paren": "（{}）",
        # "Understood as" fields
        "f_model": "模型",
        "f_gpu": "GPU",
        "f_precision": "精度",
        "f_batch_size": "批大小",
        "f_in_out": "输入 {p} / 输出 {g} token",
        "f_use": "用途",
        "f_region": "地区",
        "conversion": "{source} -> {field} {value}（{rule}）",
        "field_total_tokens": "总 token 数",
        "field_requests": "请求数",
        "field_requests_per_month": "每月请求数",
        "field_prompt_tokens": "输入 token 数",
        "field_observed_energy_j_per_1k": "实测每千 token 能耗（J）",
        # table headers and row labels
        "h_precision": "精度",
        "h_model": "模型",
        "h_rank": "排名",
        "h_bs": "批大小",
        "h_tok_s": "吞吐（tok/s）",
        "h_j_1k": "每千 token 能耗（J）",
        "h_fp16_j_1k": "FP16 每千 token 能耗（J）",
        "h_vs_fp16": "相对 FP16",
        "h_tok_j": "能效（tok/J）",
        "h_vram": "显存（GB）",
        "h_latency": "延迟（s）",
        "h_w": "功率（W）",
        "h_usd_month": "每月费用（$）",
        "h_tier": "等级",
        "h_metric": "指标",
        "h_gap": "差距",
        "h_row": "数据行",
        "h_architecture": "架构",
        "h_fitted": "拟合值",
        "h_published": "公开值",
        "r_j_request": "每次请求能耗（J）",
        "r_requests_month": "每月请求数",
        "r_kwh_month": "每月用电（kWh）",
        "r_cost_month": "每月费用",
        "r_co2_month": "每月 CO2（kg）",
        "setup": "{label}（{p}，批大小 {bs}）",
        # tiers and confidence, where shown as words
        "tier_measured": "实测",
        "tier_reported": "公布",
        "tier_derived": "推算",
        "tier_extrapolated": "外推",
        "tier_local": "本机实测",
        "tier_none": "无",
        "conf_high": "高",
        "conf_medium": "中",
        "conf_low": "低",
        "conf_general": "一般",
        # sentences
        "rec_compare": "{label}：{p}（{j} J/1k tok{delta}，{tier}）。",
        "rec_delta": "，相对 FP16 {d:+.1f}%",
        "rec_optimize": "{label}：{p}，批大小 {bs}",
        "impact": "（能耗 +{pct:.0f}%，{tier}）",
        "impact_usd": "（能耗 +{pct:.0f}%，${usd:,.2f}/月，{tier}）",
        "citation": "{data}：{used}{src}。{attribution}.",
    },
}

_MEASUREMENT_STEPS = {
    "en": [
        "Fix the serving setup you will run in production (GPU power limit, driver, CUDA, torch, transformers, quantization library versions) and write it down.",
        "Warm up with 3 runs, then time 10 runs with a fixed prompt length and max_new_tokens; keep the GPU otherwise idle.",
        "Read the NVML energy counter (or power at >= 10 Hz) around each run; report J per 1k generated tokens, tok/s and average W; measure idle power separately and do not subtract it silently.",
        "Run an FP16 baseline in the same session so the delta is like-for-like.",
        "`ecoguard bench` runs this protocol on your machine; its rows are stored with tier `local` and the advisor uses them from then on.",
    ],
    "zh": [
        "固定生产环境的配置（GPU 功耗上限、驱动、CUDA、torch、transformers、量化库版本）并记录下来。",
        "先预热 3 次，再用固定的输入长度和 max_new_tokens 计时 10 次；期间 GPU 不跑别的任务。",
        "在每次运行前后读取 NVML 能耗计数器（或 >= 10 Hz 采样功率）；报告每千个生成 token 的焦耳数、tok/s 和平均功率；空闲功耗单独测量，不要悄悄扣除。",
        "在同一次会话中跑一个 FP16 基线，保证对比公平。",
        "`ecoguard bench` 会在你的机器上执行这套流程；结果以 `local` 等级保存，之后顾问会直接使用。",
    ],
}


def _fmt(value: Any, digits: int = 0) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        if digits == 0:
            return f"{value:,.0f}"
        return f"{value:,.{digits}f}"
    return str(value)


def _fmt_range(value: Any, bounds: Any, digits: int = 0) -> str:
    """``5,030 (4,300-5,600)``: a figure with its p10-p90 range when it has one."""
    text = _fmt(value, digits)
    if value is None or not bounds or len(bounds) != 2 or None in bounds:
        return text
    return f"{text} ({_fmt(bounds[0], digits)}-{_fmt(bounds[1], digits)})"


def _money(
    usd: float | None, cny: float | None = None, currency: str = "USD", local: float | None = None
) -> str:
    if currency == "CNY" and cny is not None:
        text = f"¥{cny:,.2f}"
        return text + (f" (${usd:,.2f})" if usd is not None else "")
    if currency not in ("USD", "CNY") and local is not None:
        return f"{SYMBOLS.get(currency, currency + ' ')}{local:,.2f}"
    return "-" if usd is None else f"${usd:,.2f}"


def _money_year(money: dict[str, Any], monthly: dict[str, Any], currency: str) -> str:
    usd = money.get("cost_usd", monthly.get("cost_usd"))
    cny = money.get("cost_cny")
    return _money(
        None if usd is None else usd * 12,
        None if cny is None else cny * 12,
        currency,
        None if money.get("cost_local") is None else money["cost_local"] * 12,
    )


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], markdown: bool) -> list[str]:
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


def _tier(labels: dict[str, str], tier: object) -> str:
    """A tier as a word in the answer's language (the JSON keeps the identifier)."""
    return labels.get(f"tier_{tier}", str(tier))


def _head(text: str, labels: dict[str, str]) -> str:
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


def render(answer: Answer, *, fmt: str = "md", plain: bool = False, color: bool = False) -> str:
    """The answer as Markdown (``md``), plain text (``text``) or JSON (``json``)."""
    if fmt == "json":
        return json.dumps(
            answer.to_dict(), ensure_ascii=False, indent=2, sort_keys=False, default=str
        )
    markdown = fmt == "md"
    lang = answer.language
    labels = _LABELS.get(lang, _LABELS["en"])
    result = answer.result
    out: list[str] = []
    tag = mood_tag(result.mood)
    head = tag if plain else f"{tag} {lobster_line(result.mood, lang)}"
    out.append(colorize(head, result.mood, color))
    out.append("")
    out.extend(_understood(answer, labels, markdown))
    body = {
        "compare": _compare,
        "optimize": _optimize,
        "estimate": _estimate,
        "diagnose": _diagnose,
        "audit": _audit,
    }[result.protocol]
    if result.out_of_data:
        out.extend(_out_of_data(answer, labels, lang, markdown))
    else:
        out.extend(body(answer, labels, markdown))
        out.extend(_batching(answer, labels, markdown))
        out.extend(_findings(answer, labels, markdown))
    for warning in answer.warnings:
        out.append(f"{labels['warning']}{labels['colon']}{warning.get(lang)}")
        out.append("")
    if answer.asks is not None:
        out.append(answer.asks.get(lang))
        out.append("")
    if result.equivalents:
        # Say whose energy the everyday terms describe: optimize prices the recommendation,
        # estimate and the others the configuration asked about.
        label = labels[
            "equivalent_optimize" if result.protocol == "optimize" else "equivalent_current"
        ]
        if lang == "zh":
            out.append(f"{label}：" + "；".join(result.equivalents) + "。")
        else:
            out.append(f"{label}: " + "; ".join(result.equivalents) + ".")
        out.append("")
    out.extend(_honesty(answer, labels))
    notes = list(result.notes)
    if notes:
        out.append(_head(labels["notes"], labels))
        out.extend(f"- {n}" for n in notes)
        out.append("")
    out.append(_citation(answer, labels))
    return "\n".join(out).rstrip() + "\n"


def _h(text: str, markdown: bool, labels: dict[str, str]) -> str:
    return f"### {text}" if markdown else _head(text, labels)


def _understood(answer: Answer, labels: dict[str, str], markdown: bool) -> list[str]:
    out: list[str] = []
    dep = answer.result.deployment
    colon = labels["colon"]
    parts = [f"{labels['protocol']}{colon}{answer.result.protocol}"]
    if dep is not None:
        if dep.model.id:
            size = _fmt(dep.model.params_b, 2).rstrip("0").rstrip(".")
            parts.append(f"{labels['f_model']}{colon}{dep.model.id} ({size}B)")
        if dep.gpu.name:
            parts.append(f"{labels['f_gpu']}{colon}{dep.gpu.name}")
        if dep.precision:
            parts.append(f"{labels['f_precision']}{colon}{dep.precision}")
        if dep.batch_size:
            parts.append(f"{labels['f_batch_size']}{colon}{dep.batch_size}")
        if dep.prompt_tokens is not None and dep.generation_tokens is not None:
            parts.append(labels["f_in_out"].format(p=dep.prompt_tokens, g=dep.generation_tokens))
        if dep.use:
            why = answer.parsed.use_reason if answer.parsed is not None else None
            use = dep.use + (labels["paren"].format(why.get(answer.language)) if why else "")
            parts.append(f"{labels['f_use']}{colon}{use}")
    if answer.settings_used.get("region"):
        parts.append(f"{labels['f_region']}{colon}{answer.settings_used['region']}")
    if answer.settings_used.get("pue") is not None:
        parts.append(labels["pue_local"].format(pue=answer.settings_used["pue"]))
    out.append(f"{labels['understood']}{colon}" + labels["comma"].join(parts) + labels["stop"])
    if answer.gpu_match is not None:
        out.append(answer.gpu_match.reason.get(answer.language))
    lang = answer.language
    conversions: list[str] = []
    listed = list(answer.parsed.conversions) if answer.parsed is not None else []
    for c in [*listed, *answer.extra_conversions]:
        if c.field == "gpu":
            conversions.append(c.rule.get(lang))
            continue
        conversions.append(
            labels["conversion"].format(
                source=c.source.get(lang),
                value=f"{c.value:,.0f}",
                field=_field(labels, c.field, c.field.replace("_", " ")),
                rule=c.rule.get(lang),
            )
        )
    if conversions:
        out.append(_head(labels["conversions"], labels))
        out.extend(f"- {c}" for c in conversions)
    if answer.defaults:
        out.append(_head(labels["defaults"], labels))
        for d in answer.defaults:
            out.append(f"- {d.field} = {d.value}" + labels["paren"].format(d.how.get(lang)))
    out.append("")
    return out


def _field(labels: dict[str, str], name: str, default: str) -> str:
    return labels.get(f"field_{name}", default)


def _compare(answer: Answer, labels: dict[str, str], markdown: bool) -> list[str]:
    result = answer.result
    if result.extra.get("scope") == "models":
        return _compare_models(answer, labels, markdown)
    out = [
        _h(
            "J per 1k tokens by precision" if answer.language == "en" else "各精度每千 token 能耗",
            markdown,
            labels,
        )
    ]
    rows = []
    for r in result.rows:
        rows.append(
            [
                r["precision"],
                _fmt(r["throughput_tok_s"], 1),
                _fmt_range(r["energy_per_1k_tokens_j"], r.get("energy_per_1k_tokens_j_range")),
                ("-" if r["delta_vs_fp16_pct"] is None else f"{r['delta_vs_fp16_pct']:+.1f}%"),
                _fmt(r["tokens_per_j"], 3),
                _fmt(r["vram_gb"], 1),
                _fmt(r["latency_s"], 1),
                _fmt(r["power_w"]),
                _money(r.get("cost_usd_per_month")),
                _fmt(r["rank"]),
                _tier(labels, r["tier"]),
            ]
        )
    out += _table(
        [
            labels["h_precision"],
            labels["h_tok_s"],
            labels["h_j_1k"],
            labels["h_vs_fp16"],
            labels["h_tok_j"],
            labels["h_vram"],
            labels["h_latency"],
            labels["h_w"],
            labels["h_usd_month"],
            labels["h_rank"],
            labels["h_tier"],
        ],
        rows,
        markdown,
    )
    out.append("")
    chart = bar_chart(
        [
            (r["precision"], r["energy_per_1k_tokens_j"], _tier(labels, r["tier"]))
            for r in result.rows
        ],
        unit="J/1k",
    )
    if chart:
        out += ["```", *chart, "```"] if markdown else chart
        out.append("")
    out += _paired_lines(answer, labels)
    out += _trade_offs(answer, labels)
    if result.recommendation:
        rec = result.recommendation
        delta = rec.get("delta_vs_fp16_pct")
        out.append(
            labels["rec_compare"].format(
                label=labels["recommendation"],
                p=rec["precision"],
                j=_fmt(rec["energy_per_1k_tokens_j"]),
                delta=labels["rec_delta"].format(d=delta) if delta is not None else "",
                tier=_tier(labels, rec["tier"]),
            )
        )
        out.append("")
    return out


def _paired_lines(answer: Answer, labels: dict[str, str]) -> list[str]:
    """Each precision's change vs FP16 as measured in the same session, per session: the
    figure in the table is their median."""
    out = []
    en = answer.language == "en"
    for r in answer.result.rows:
        pairs = r.get("paired_deltas") or []
        if not pairs:
            continue
        parts = labels["semicolon"].join(
            f"{p['delta_pct']:+.1f}% ({p['source'].rsplit('/', 1)[-1]}"
            + ("" if p["session"] == "-" else f", {'session' if en else '会话'} {p['session']}")
            + ")"
            for p in pairs
        )
        if en:
            out.append(
                f"{r['precision']} vs FP16, same-session pairs: {parts}; the table uses their "
                "median"
            )
        else:
            out.append(f"{r['precision']} 相对 FP16（同一会话配对）：{parts}；表中取其中位数")
    if out:
        out.append("")
    return out


def _compare_models(answer: Answer, labels: dict[str, str], markdown: bool) -> list[str]:
    result = answer.result
    out = [
        _h(
            "Measured on " + str(result.extra.get("gpu"))
            if answer.language == "en"
            else f"{result.extra.get('gpu')} 上的实测",
            markdown,
            labels,
        )
    ]
    rows = [
        [
            str(r["model"]),
            r["precision"],
            _fmt(r["energy_per_1k_tokens_j"]),
            _fmt(r["fp16_energy_per_1k_tokens_j"]),
            "-" if r["delta_vs_fp16_pct"] is None else f"{r['delta_vs_fp16_pct']:+.1f}%",
            _fmt(r["throughput_tok_s"], 1),
            _fmt(r["power_w"]),
            _tier(labels, r["tier"]),
        ]
        for r in result.rows
    ]
    out += _table(
        [
            labels["h_model"],
            labels["h_precision"],
            labels["h_j_1k"],
            labels["h_fp16_j_1k"],
            labels["h_vs_fp16"],
            labels["h_tok_s"],
            labels["h_w"],
            labels["h_tier"],
        ],
        rows,
        markdown,
    )
    out.append("")
    chart = bar_chart(
        [
            (
                f"{r['model']} {r['precision']}",
                r["energy_per_1k_tokens_j"],
                _tier(labels, r["tier"]),
            )
            for r in result.rows
        ],
        unit="J/1k",
    )
    if chart:
        out += ["```", *chart, "```"] if markdown else chart
        out.append("")
    rec = result.recommendation
    if rec:
        verdicts = {
            "en": {
                "stay-fp16": "Stay on FP16: {p} cost more energy on every model measured ({lo:+.0f}% to {hi:+.0f}%).",
                "use": "{p} saved energy on every model measured ({lo:+.0f}% to {hi:+.0f}%).",
                "depends-on-size": "It depends on model size: {p} ranged from {lo:+.0f}% to {hi:+.0f}% vs FP16.",
            },
            "zh": {
                "stay-fp16": "继续用 FP16：在所有实测模型上 {p} 都更耗电（{lo:+.0f}% 到 {hi:+.0f}%）。",
                "use": "{p} 在所有实测模型上都更省电（{lo:+.0f}% 到 {hi:+.0f}%）。",
                "depends-on-size": "取决于模型大小：{p} 相对 FP16 从 {lo:+.0f}% 到 {hi:+.0f}% 不等。",
            },
        }[answer.language if answer.language in ("en", "zh") else "en"]
        if rec.get("delta_min_pct") is not None:
            out.append(
                f"{labels['recommendation']}: "
                + verdicts[rec["verdict"]].format(
                    p=", ".join(rec["precisions"]), lo=rec["delta_min_pct"], hi=rec["delta_max_pct"]
                )
            )
            out.append("")
    return out


def _optimize(answer: Answer, labels: dict[str, str], markdown: bool) -> list[str]:
    result = answer.result
    rec = result.recommendation
    out: list[str] = []
    if rec is None:
        return out
    line = labels["rec_optimize"].format(
        label=labels["recommendation"], p=rec["precision"], bs=rec["batch_size"]
    )
    out.append(f"**{line}**" if markdown else line)
    for reason in rec.get("reasons", []):
        out.append(f"- {reason}")
    out.append("")
    rows = [
        [
            _fmt(r["rank"]),
            r["precision"],
            str(r["batch_size"]),
            _fmt(r["energy_per_1k_tokens_j"]),
            _fmt(r["throughput_tok_s"], 1),
            _fmt(r["vram_gb"], 1),
            _money(r.get("cost_usd_per_month")),
            _tier(labels, r["tier"]),
        ]
        for r in result.rows[:8]
    ]
    out += _table(
        [
            labels["h_rank"],
            labels["h_precision"],
            labels["h_bs"],
            labels["h_j_1k"],
            labels["h_tok_s"],
            labels["h_vram"],
            labels["h_usd_month"],
            labels["h_tier"],
        ],
        rows,
        markdown,
    )
    out.append("")
    chart = bar_chart(
        [
            (
                f"{r['precision']} BS{r['batch_size']}",
                r["energy_per_1k_tokens_j"],
                _tier(labels, r["tier"]),
            )
            for r in result.rows[:8]
        ],
        unit="J/1k",
    )
    if chart:
        out += ["```", *chart, "```"] if markdown else chart
        out.append("")
    rejected = result.extra.get("rejected") or []
    if rejected:
        names = sorted({f"{r['precision']} ({', '.join(r['rejected_by'])})" for r in rejected})
        out.append(
            ("Ruled out: " if answer.language == "en" else "已排除：")
            + labels["semicolon"].join(names)
        )
        out.append("")
    out += _side_by_side(answer, labels, markdown)
    return out


def _side_by_side(answer: Answer, labels: dict[str, str], markdown: bool) -> list[str]:
    result = answer.result
    current, optimized = result.current or {}, result.optimized or {}
    if not current and not optimized:
        return []
    money = result.money or {}
    money_current, money_optimized = money.get("current") or {}, money.get("optimized") or {}
    current_month, optimized_month = current.get("monthly") or {}, optimized.get("monthly") or {}
    currency = money_current.get("currency", "USD")
    rows = [
        [
            labels["h_j_1k"],
            _fmt_range(
                current.get("energy_per_1k_tokens_j"), current.get("energy_per_1k_tokens_j_range")
            ),
            _fmt_range(
                optimized.get("energy_per_1k_tokens_j"),
                optimized.get("energy_per_1k_tokens_j_range"),
            ),
        ],
        [
            labels["r_j_request"],
            _fmt_range(
                current.get("energy_per_request_j"), current.get("energy_per_request_j_range")
            ),
            _fmt_range(
                optimized.get("energy_per_request_j"), optimized.get("energy_per_request_j_range")
            ),
        ],
        [
            labels["h_tok_s"],
            _fmt(current.get("throughput_tok_s"), 1),
            _fmt(optimized.get("throughput_tok_s"), 1),
        ],
        [labels["h_w"], _fmt(current.get("power_w")), _fmt(optimized.get("power_w"))],
        [labels["h_vram"], _fmt(current.get("vram_gb"), 1), _fmt(optimized.get("vram_gb"), 1)],
        [
            labels["r_requests_month"],
            _fmt(current_month.get("requests")),
            _fmt(optimized_month.get("requests")),
        ],
        [
            labels["r_kwh_month"],
            _fmt_range(current_month.get("energy_kwh"), current_month.get("energy_kwh_range"), 2),
            _fmt_range(
                optimized_month.get("energy_kwh"), optimized_month.get("energy_kwh_range"), 2
            ),
        ],
        [
            labels["r_cost_month"],
            _money(
                money_current.get("cost_usd", current_month.get("cost_usd")),
                money_current.get("cost_cny"),
                currency,
                money_current.get("cost_local"),
            ),
            _money(
                money_optimized.get("cost_usd", optimized_month.get("cost_usd")),
                money_optimized.get("cost_cny"),
                currency,
                money_optimized.get("cost_local"),
            )
            if optimized
            else "-",
        ],
        [
            labels["r_cost_year"],
            _money_year(money_current, current_month, currency),
            _money_year(money_optimized, optimized_month, currency) if optimized else "-",
        ],
        [
            labels["r_co2_month"],
            _fmt_range(current_month.get("co2_kg"), current_month.get("co2_kg_range"), 2),
            _fmt_range(optimized_month.get("co2_kg"), optimized_month.get("co2_kg_range"), 2),
        ],
        [
            labels["h_tier"],
            _tier(labels, current.get("tier", "none")),
            _tier(labels, optimized.get("tier", "none")) if optimized else "-",
        ],
    ]
    deployment = result.deployment
    rec = result.recommendation or {}
    current_label = (
        labels["setup"].format(
            label=labels["current"], p=deployment.precision, bs=deployment.batch_size
        )
        if deployment
        else labels["current"]
    )
    optimized_label = (
        labels["setup"].format(
            label=labels["optimized"], p=rec.get("precision"), bs=rec.get("batch_size")
        )
        if rec
        else labels["optimized"]
    )
    out = _table(["", current_label, optimized_label], rows, markdown)
    out.append("")
    saving_usd = money.get("saving_usd")
    local = _local_price(answer)
    if saving_usd is None and local is None and rec.get("saving_usd_per_month") is not None:
        saving_usd = rec["saving_usd_per_month"]
    if local is not None and money.get("saving_local") is not None:
        saving_usd = money["saving_local"]  # in the question's currency; sign rules as below
    if saving_usd is not None:
        pct = rec.get("saving_pct")
        cny = money.get("saving_cny")
        amount = (
            f"¥{cny:,.2f} (${saving_usd:,.2f})"
            if currency == "CNY" and cny is not None
            else (f"{local[1]}{saving_usd:,.2f}" if local is not None else f"${saving_usd:,.2f}")
        )
        if pct is not None and abs(pct) < 0.05:
            out.append(
                "Already the greenest option the data supports."
                if answer.language == "en"
                else "已经是数据支持的最省电配置。"
            )
        elif saving_usd < 0 or (pct is not None and pct < 0):
            # The recommendation uses more energy than the current setup (chat forces BS 1 on a
            # setup that batches): say so instead of printing a negative saving.
            amount = amount.replace("-", "")
            more = (
                (
                    f" ({-pct:.1f}% more energy)"
                    if answer.language == "en"
                    else f"（能耗增加 {-pct:.1f}%）"
                )
                if pct is not None
                else ""
            )
            out.append(
                f"{labels['extra_cost']}{labels['colon']}{amount} {labels['per_month']}{more}{labels['stop']}"
            )
        else:
            less = (
                (
                    f" ({pct:.1f}% less energy)"
                    if answer.language == "en"
                    else f"（能耗降低 {pct:.1f}%）"
                )
                if pct is not None
                else ""
            )
            out.append(
                f"{labels['saving']}{labels['colon']}{amount} {labels['per_month']}{less}{labels['stop']}"
            )
        out.append("")
    return out


def _local_price(answer: Answer) -> tuple[float, str] | None:
    """(price per kWh, symbol) when the question priced electricity in a currency that is not
    converted to USD (no exchange rate): money is then shown in that currency only."""
    price, currency = (
        answer.settings_used.get("price_per_kwh"),
        answer.settings_used.get("price_currency"),
    )
    if price is None or currency in (None, "USD", "CNY"):
        return None
    return float(price), SYMBOLS.get(str(currency), f"{currency} ")


def _batching(answer: Answer, labels: dict[str, str], markdown: bool) -> list[str]:
    advice = answer.batching
    if advice is None:
        return []
    lines = advice.lines(answer.language, _local_price(answer))
    if not lines:
        return []
    return [_h(labels["batching"], markdown, labels), *(f"- {line}" for line in lines), ""]


def _estimate(answer: Answer, labels: dict[str, str], markdown: bool) -> list[str]:
    result = answer.result
    out = [_h("Estimate" if answer.language == "en" else "估算", markdown, labels)]
    if (result.current or {}).get("tier", "none") == "none":
        out.append(
            labels["not_available"]
            + labels["colon"]
            + str((result.current or {}).get("method") or "")
        )
        out.append("")
        return out
    method = (result.current or {}).get("method")
    if method:
        out.append(("Method: " if answer.language == "en" else "方法：") + str(method))
        out.append("")
    out += _side_by_side(answer, labels, markdown)
    return out


def _diagnose(answer: Answer, labels: dict[str, str], markdown: bool) -> list[str]:
    result = answer.result
    out: list[str] = []
    if result.rows:
        rows = [
            [
                r["metric"],
                _fmt(r["observed"], 1),
                _fmt(r["expected"], 1),
                "-" if r["gap_pct"] is None else f"{r['gap_pct']:+.1f}%",
                _tier(labels, r["tier"]),
            ]
            for r in result.rows
        ]
        headers = [
            labels["h_metric"],
            labels["observed"],
            labels["expected"],
            labels["h_gap"],
            labels["h_tier"],
        ]
        out += _table(headers, rows, markdown)
        out.append("")
    rec = result.recommendation or {}
    if rec.get("rule"):
        conf = result.extra.get("confidence")
        conf = labels.get(f"conf_{conf}", str(conf))
        out.append(
            f"{labels['confidence']}{labels['colon']}{conf}" + labels["paren"].format(rec["rule"])
        )
        out.append("")
    elif result.mood != Mood.GRAY:
        out.append(labels["no_trap"])
        out.append("")
    for item in result.extra.get("explained", []):
        why = item.get("why")
        if answer.language == "zh" and item.get("rule") in TRAPS_ZH:
            why = TRAPS_ZH[item["rule"]][1]
        if why:
            out.append(f"{item['rule']}{labels['colon']}{why}")
        ev = sorted(
            _relevant_evidence(
                [e for e in item.get("evidence") or [] if isinstance(e, dict)],
                result.deployment.gpu.profile if result.deployment else None,
            ),
            key=lambda e: e.get("precision") == "fp16",
        )
        ev_rows = []
        for e in ev[:8]:
            if isinstance(e, dict):
                delta = _delta_vs_fp16(e, ev)
                ev_rows.append(
                    [
                        str(e.get("id", "-")),
                        str(e.get("precision", "-")),
                        _fmt(e.get("energy_j_per_1k") or e.get("energy_per_1k_tokens_j")),
                        "-" if delta is None else f"{delta:+.1f}%",
                        _tier(labels, e.get("tier", "-")),
                    ]
                )
        if ev_rows:
            headers = [
                labels["h_row"],
                labels["h_precision"],
                labels["h_j_1k"],
                labels["h_vs_fp16"],
                labels["h_tier"],
            ]
            out += _table(headers, ev_rows, markdown)
            gpu = result.deployment.gpu.profile if result.deployment else None
            others = sorted({str(e.get("gpu")) for e in ev if e.get("gpu") != gpu})
            if gpu and others and all(e.get("gpu") != gpu for e in ev):
                out.append(
                    f"(rows measured on {', '.join(others)}: none of this trap's evidence rows is on {gpu})"
                    if answer.language == "en"
                    else f"（以上数据测于 {', '.join(others)}：该陷阱没有 {gpu} 上的数据）"
                )
        out.append("")
    out += _crossovers(answer, labels, markdown)
    out += _verify_steps(answer, labels, markdown)
    return out


_FIXED_PRECISION = {"int8-mixed": "int8_pure", "small-model-quant": "fp16", "fp8-eager": "bf16"}


def _verify_steps(answer: Answer, labels: dict[str, str], markdown: bool) -> list[str]:
    """How to check that the fix worked: measure before and after, same workload."""
    result = answer.result
    rec = result.recommendation or {}
    rule = rec.get("rule")
    if not rule:
        return []
    dep = result.deployment
    model = dep.model.id if dep is not None and dep.model.id else "MODEL"
    current = dep.precision if dep is not None and dep.precision else "CURRENT"
    fixed = _FIXED_PRECISION.get(rule, "fp16")
    prompt = dep.prompt_tokens if dep is not None and dep.prompt_tokens else 512
    gen = dep.generation_tokens if dep is not None and dep.generation_tokens else 256
    bench = (
        f"ecoguard bench --model {model} --precisions {current},{fixed} --batch-sizes 1 "
        f"--prompt-tokens {prompt} --generation-tokens {gen}"
    )
    code = f"`{bench}`" if markdown else bench
    zh = answer.language == "zh"
    quality = bool(rec.get("changes_outputs"))
    steps = (
        [
            f"应用修复：{rec.get('fix') or ''}",
            f"在同一台机器、同样的输入长度和 max_new_tokens 下，测量修复前后的每千 token 能耗：{code}",
            "修复后的能耗应接近上表的参考值；若差距仍超过 20%，检查功耗上限、频率和 GPU 上的其他任务。",
        ]
        if zh
        else [
            f"Apply the fix: {rec.get('fix') or ''}",
            f"Measure J per 1k tokens before and after on the same machine, prompt length and "
            f"max_new_tokens: {code}",
            "After the fix the energy should land near the reference figures above; if it is "
            "still more than 20% off, check the power limit, clocks and other jobs on the GPU.",
        ]
    )
    if quality:
        steps.append(
            "这个修复会改变输出：在你自己的评测集上对比修复前后的质量。"
            if zh
            else "This fix changes outputs: compare quality on your own evaluation set before "
            "and after."
        )
    title = "验证修复" if zh else "Verify the fix"
    return [_h(title, markdown, labels), *(f"{i}. {s}" for i, s in enumerate(steps, start=1)), ""]


def _trade_offs(answer: Answer, labels: dict[str, str]) -> list[str]:
    """Besides energy: memory, latency, cost and accuracy, per precision compared."""
    rows = [r for r in answer.result.rows if r.get("energy_per_1k_tokens_j") is not None]
    if len(rows) < 2:
        return []
    zh = answer.language == "zh"
    out = []

    def pick(key: str) -> dict[str, Any] | None:
        known = [r for r in rows if r.get(key) is not None]
        return min(known, key=lambda r: r[key]) if known else None

    vram, fast, cheap = pick("vram_gb"), pick("latency_s"), pick("cost_usd_per_month")
    if vram is not None:
        out.append(
            f"显存最少：{vram['precision']}（{vram['vram_gb']:.1f} GB）"
            if zh
            else f"least memory: {vram['precision']} ({vram['vram_gb']:.1f} GB)"
        )
    if fast is not None:
        out.append(
            f"延迟最低：{fast['precision']}（{fast['latency_s']:.1f} s/请求）"
            if zh
            else f"lowest latency: {fast['precision']} ({fast['latency_s']:.1f} s per request)"
        )
    if cheap is not None:
        out.append(
            f"每月最便宜：{cheap['precision']}（${cheap['cost_usd_per_month']:,.2f}）"
            if zh
            else f"cheapest per month: {cheap['precision']} (${cheap['cost_usd_per_month']:,.2f})"
        )
    out.append(
        "精度：FP16/BF16 不改变输出；NF4、INT8、FP8 会改变输出，换用前请在自己的评测集上检查质量"
        if zh
        else "accuracy: FP16/BF16 keep outputs; NF4, INT8 and FP8 change them, so check quality "
        "on your own evaluation set before switching"
    )
    title = "其他取舍" if zh else "Other trade-offs"
    return [_head(title, labels), *(f"- {line}" for line in out), ""]


def _relevant_evidence(rows: list[dict[str, Any]], gpu: str | None) -> list[dict[str, Any]]:
    """The trap's rows (those of the asked-about GPU when it has any) and, beside them, only the
    FP16 baselines of the same GPU, model and batch size (another GPU's or batch size's FP16
    row says nothing about this change)."""
    trap_rows = [r for r in rows if r.get("precision") != "fp16"]
    on_gpu = [r for r in trap_rows if gpu and r.get("gpu") == gpu]
    trap_rows = on_gpu or trap_rows
    keys = {(r.get("gpu"), r.get("model"), r.get("batch_size")) for r in trap_rows}
    baselines = [
        r
        for r in rows
        if r.get("precision") == "fp16"
        and (r.get("gpu"), r.get("model"), r.get("batch_size")) in keys
    ]
    return trap_rows + baselines if trap_rows else rows


def _crossovers(answer: Answer, labels: dict[str, str], markdown: bool) -> list[str]:
    items = answer.result.extra.get("crossovers") or []
    if not items:
        return []
    title = (
        "Crossover size (quantization saves energy above it)"
        if answer.language == "en"
        else "交叉点（模型大于它时量化才省电）"
    )
    rows = [
        [
            c["architecture"],
            c["precision"],
            _fmt(c["fitted_b"], 2) + "B" if c["fitted_b"] else "-",
            _tier(labels, c["fitted_tier"]),
            _fmt(c["reported_b"], 1) + "B" if c["reported_b"] else "-",
            _tier(labels, c["reported_tier"]),
        ]
        for c in items
    ]
    headers = [
        labels["h_architecture"],
        labels["h_precision"],
        labels["h_fitted"],
        labels["h_tier"],
        labels["h_published"],
        labels["h_tier"],
    ]
    return [
        _h(title, markdown, labels),
        *_table(headers, rows, markdown),
        "",
    ]


def _audit(answer: Answer, labels: dict[str, str], markdown: bool) -> list[str]:
    paths = answer.result.extra.get("paths") or []
    return [("Files: " if answer.language == "en" else "文件：") + ", ".join(paths), ""]


def _findings(answer: Answer, labels: dict[str, str], markdown: bool) -> list[str]:
    findings = answer.result.findings
    if not findings:
        return []
    out = [_head(labels["findings"], labels)]
    for f in findings:
        impact = ""
        if f.impact is not None and f.impact.extra_energy_pct is not None:
            tier = _tier(labels, f.impact.tier)
            impact = labels["impact"].format(pct=f.impact.extra_energy_pct, tier=tier)
            if f.impact.extra_usd_per_month is not None:
                impact = labels["impact_usd"].format(
                    pct=f.impact.extra_energy_pct, usd=f.impact.extra_usd_per_month, tier=tier
                )
        _title, message, fix_summary = trap_text(
            f.rule, answer.language, f.title, f.message, f.fix_summary or ""
        )
        if f.rule == "batch-size-one":
            message, fix_summary = f.message, f.fix_summary or ""  # the advisor's own wording
        out.append(f"- {mood_tag(f.mood)} {f.rule}{labels['colon']}{message}{impact}")
        fix = f"`{f.fix}`" if markdown else f.fix
        out.append(f"  {labels['fix']}{labels['colon']}{fix_summary} {fix}".rstrip())
    out.append("")
    return out


def _honesty(answer: Answer, labels: dict[str, str]) -> list[str]:
    if not answer.honesty:
        return []
    out = [_head(labels["honesty"], labels)]
    lang = answer.language
    for note in answer.honesty:
        measured, published = note.measured, note.published
        m = (
            f"{measured[0]:+.1f}% .. {measured[1]:+.1f}%"
            if isinstance(measured, list)
            else f"{measured:g}"
        )
        if isinstance(published, Text):
            p = published.get(lang)
        elif isinstance(published, list):
            p = f"{published[0]:+.1f}% .. {published[1]:+.1f}%"
        else:
            p = f"{published:g}"
        out.append(
            f"- {note.topic.get(lang)}{labels['paren'].format(note.unit.get(lang))}{labels['colon']}"
            f"{labels['measured']} {m} [{_tier(labels, note.measured_tier)}]{labels['semicolon']}"
            f"{labels['published']} {p} [{_tier(labels, note.published_tier)}]"
        )
    out.append("")
    return out


def _out_of_data(answer: Answer, labels: dict[str, str], lang: str, markdown: bool) -> list[str]:
    out = [_head(labels["out_of_data"], labels)]
    out.extend(f"- {o['detail']}" for o in answer.result.out_of_data)
    out.append("")
    out.append(_h(labels["protocol_steps"], markdown, labels))
    steps = list(_MEASUREMENT_STEPS.get(lang, _MEASUREMENT_STEPS["en"]))
    vendor = answer.vendor
    if vendor is not None:
        tool = vendor.power_tool.get(lang)
        steps[2] = (
            f"`ecoguard bench` reads power through NVML, which exists only on NVIDIA GPUs; on "
            f"{vendor.name} read power with {tool} at >= 10 Hz around each run and report J per "
            "1k generated tokens, tok/s and average W; measure idle power separately."
            if lang == "en"
            else f"`ecoguard bench` 通过 NVML 读取功耗，只适用于 NVIDIA GPU；在 {vendor.name} 上请用 {tool} "
            "以 >= 10 Hz 采样每次运行的功耗，报告每千个生成 token 的焦耳数、tok/s 和平均功率；空闲功耗单独测量。"
        )
        steps[4] = (
            f"Compare with an NVIDIA baseline only as a ratio measured the same way; no figure in "
            f"the reference data is carried to {vendor.name}."
            if lang == "en"
            else f"与 NVIDIA 基线对比时，只比较用同样方法测出的比值；参考数据中的数字不会换算到 {vendor.name}。"
        )
    out.extend(f"{i}. {s}" for i, s in enumerate(steps, start=1))
    out.append("")
    return out


def _citation(answer: Answer, labels: dict[str, str]) -> str:
    result = answer.result
    extra_sources: list[str] = []
    for note in answer.honesty:
        extra_sources.extend(note.sources)
    sources, tiers = cite(result.evidence, list(result.sources) + extra_sources)
    count = sum(tiers.values())
    if count:
        tier_text = labels["comma"].join(
            f"{n} {_tier(labels, t)}"
            for t, n in sorted(tiers.items(), key=lambda kv: (-kv[1], kv[0]))
        )
        used = f"{count} {labels['rows']}" + labels["paren"].format(tier_text)
    else:
        used = labels["no_rows"]
    src = (
        labels["semicolon"] + labels["sources"] + labels["colon"] + labels["comma"].join(sources)
        if sources
        else ""
    )
    return labels["citation"].format(
        data=labels["data"], used=used, src=src, attribution=ATTRIBUTION
    )


def _delta_vs_fp16(row: dict, evidence: list) -> float | None:
    """The row's own published change vs FP16, else one computed against an FP16 row of the
    same GPU, model and batch size among the evidence (same source first)."""
    if row.get("delta_vs_fp16_pct") is not None:
        return float(row["delta_vs_fp16_pct"])
    energy = row.get("energy_j_per_1k")
    if row.get("precision") == "fp16" or not energy:
        return None
    same = [
        e
        for e in evidence
        if isinstance(e, dict)
        and e.get("precision") == "fp16"
        and e.get("energy_j_per_1k")
        and all(e.get(k) == row.get(k) for k in ("gpu", "model", "batch_size"))
    ]
    if not same:
        return None
    same.sort(key=lambda e: (e.get("source") != row.get("source"), e.get("tier") != "measured"))
    return (energy / same[0]["energy_j_per_1k"] - 1.0) * 100.0
