"""The body of each protocol's answer: compare (by precision or across models), optimize,
estimate (current vs optimized side by side), the batching advice and the audit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ecoguard.advisor.layout import (
    bar_chart,
    fmt,
    fmt_range,
    heading,
    list_head,
    local_price,
    make_table,
    money_text,
    money_year_text,
    tier_label,
)

if TYPE_CHECKING:
    from ecoguard.advisor.answers import Answer


def compare_section(answer: Answer, labels: dict[str, str], markdown: bool) -> list[str]:
    result = answer.result
    if result.extra.get("scope") == "models":
        return _compare_models(answer, labels, markdown)
    out = [
        heading(
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
                fmt(r["throughput_tok_s"], 1),
                fmt_range(r["energy_per_1k_tokens_j"], r.get("energy_per_1k_tokens_j_range")),
                ("-" if r["delta_vs_fp16_pct"] is None else f"{r['delta_vs_fp16_pct']:+.1f}%"),
                fmt(r["tokens_per_j"], 3),
                fmt(r["vram_gb"], 1),
                fmt(r["latency_s"], 1),
                fmt(r["power_w"]),
                money_text(r.get("cost_usd_per_month")),
                fmt(r["rank"]),
                tier_label(labels, r["tier"]),
            ]
        )
    out += make_table(
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
            (r["precision"], r["energy_per_1k_tokens_j"], tier_label(labels, r["tier"]))
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
                j=fmt(rec["energy_per_1k_tokens_j"]),
                delta=labels["rec_delta"].format(d=delta) if delta is not None else "",
                tier=tier_label(labels, rec["tier"]),
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
    return [list_head(title, labels), *(f"- {line}" for line in out), ""]


def _compare_models(answer: Answer, labels: dict[str, str], markdown: bool) -> list[str]:
    result = answer.result
    out = [
        heading(
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
            fmt(r["energy_per_1k_tokens_j"]),
            fmt(r["fp16_energy_per_1k_tokens_j"]),
            "-" if r["delta_vs_fp16_pct"] is None else f"{r['delta_vs_fp16_pct']:+.1f}%",
            fmt(r["throughput_tok_s"], 1),
            fmt(r["power_w"]),
            tier_label(labels, r["tier"]),
        ]
        for r in result.rows
    ]
    out += make_table(
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
                tier_label(labels, r["tier"]),
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


def optimize_section(answer: Answer, labels: dict[str, str], markdown: bool) -> list[str]:
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
            fmt(r["rank"]),
            r["precision"],
            str(r["batch_size"]),
            fmt(r["energy_per_1k_tokens_j"]),
            fmt(r["throughput_tok_s"], 1),
            fmt(r["vram_gb"], 1),
            money_text(r.get("cost_usd_per_month")),
            tier_label(labels, r["tier"]),
        ]
        for r in result.rows[:8]
    ]
    out += make_table(
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
                tier_label(labels, r["tier"]),
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
            fmt_range(
                current.get("energy_per_1k_tokens_j"), current.get("energy_per_1k_tokens_j_range")
            ),
            fmt_range(
                optimized.get("energy_per_1k_tokens_j"),
                optimized.get("energy_per_1k_tokens_j_range"),
            ),
        ],
        [
            labels["r_j_request"],
            fmt_range(
                current.get("energy_per_request_j"), current.get("energy_per_request_j_range")
            ),
            fmt_range(
                optimized.get("energy_per_request_j"), optimized.get("energy_per_request_j_range")
            ),
        ],
        [
            labels["h_tok_s"],
            fmt(current.get("throughput_tok_s"), 1),
            fmt(optimized.get("throughput_tok_s"), 1),
        ],
        [labels["h_w"], fmt(current.get("power_w")), fmt(optimized.get("power_w"))],
        [labels["h_vram"], fmt(current.get("vram_gb"), 1), fmt(optimized.get("vram_gb"), 1)],
        [
            labels["r_requests_month"],
            fmt(current_month.get("requests")),
            fmt(optimized_month.get("requests")),
        ],
        [
            labels["r_kwh_month"],
            fmt_range(current_month.get("energy_kwh"), current_month.get("energy_kwh_range"), 2),
            fmt_range(
                optimized_month.get("energy_kwh"), optimized_month.get("energy_kwh_range"), 2
            ),
        ],
        [
            labels["r_cost_month"],
            money_text(
                money_current.get("cost_usd", current_month.get("cost_usd")),
                money_current.get("cost_cny"),
                currency,
                money_current.get("cost_local"),
            ),
            money_text(
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
            money_year_text(money_current, current_month, currency),
            money_year_text(money_optimized, optimized_month, currency) if optimized else "-",
        ],
        [
            labels["r_co2_month"],
            fmt_range(current_month.get("co2_kg"), current_month.get("co2_kg_range"), 2),
            fmt_range(optimized_month.get("co2_kg"), optimized_month.get("co2_kg_range"), 2),
        ],
        [
            labels["h_tier"],
            tier_label(labels, current.get("tier", "none")),
            tier_label(labels, optimized.get("tier", "none")) if optimized else "-",
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
    out = make_table(["", current_label, optimized_label], rows, markdown)
    out.append("")
    saving_usd = money.get("saving_usd")
    local = local_price(answer)
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


def batching_section(answer: Answer, labels: dict[str, str], markdown: bool) -> list[str]:
    advice = answer.batching
    if advice is None:
        return []
    lines = advice.lines(answer.language, local_price(answer))
    if not lines:
        return []
    return [heading(labels["batching"], markdown, labels), *(f"- {line}" for line in lines), ""]


def estimate_section(answer: Answer, labels: dict[str, str], markdown: bool) -> list[str]:
    result = answer.result
    out = [heading("Estimate" if answer.language == "en" else "估算", markdown, labels)]
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


def audit_section(answer: Answer, labels: dict[str, str], markdown: bool) -> list[str]:
    extra = answer.result.extra
    zh = answer.language == "zh"
    lines = extra.get("code_lines") or 0
    if lines:
        return [
            f"代码：问题中粘贴的 {lines} 行，按文本审计（不会运行）。"
            if zh
            else f"Code: {lines} {'line' if lines == 1 else 'lines'} pasted into the question, "
            "audited as text (never run).",
            "",
        ]
    paths = extra.get("paths") or []
    if not paths:
        return []
    return [("文件：" if zh else "Files: ") + ", ".join(paths), ""]
