"""The body of each protocol's answer: compare (by precision or across models), optimize,
estimate (current vs optimized side by side), the batching advice and the audit.
"""

from __future__ import annotations

from collections.abc import Callable
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
    tier_label,
)
from ecoguard.advisor.protocols.base import money
from ecoguard.advisor.texts import Text

if TYPE_CHECKING:
    from ecoguard.advisor.answer import Answer
    from ecoguard.knowledge.estimator import Estimate


def compare_section(answer: Answer, labels: dict[str, str], markdown: bool) -> list[str]:
    result = answer.result
    if result.extra.get("scope") == "models":
        return _compare_models(answer, labels, markdown)
    out = [heading(labels["by_precision"], markdown, labels)]
    rows, bars = [], []
    for cell in result.rows:
        est, delta = cell.estimate, cell.delta_vs_fp16_pct
        rows.append(
            [
                cell.precision,
                fmt(est.throughput_tok_s, 1),
                fmt_range(est.energy_per_1k_tokens_j, est.energy_per_1k_tokens_j_range),
                "-" if delta is None else f"{delta:+.1f}%",
                fmt(est.tokens_per_j, 3),
                fmt(est.vram_gb, 1),
                fmt(est.latency_s, 1),
                fmt(est.power_w),
                _month_cost(answer, est),
                fmt(cell.rank),
                tier_label(labels, est.tier),
            ]
        )
        bars.append((cell.precision, est.energy_per_1k_tokens_j, tier_label(labels, est.tier)))
    out += _table_with_chart(_columns(answer, _PRECISION_COLUMNS), rows, bars, labels, markdown)
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


# Each table's columns, left to right (label keys).
_PRECISION_COLUMNS = (
    "h_precision",
    "h_tok_s",
    "h_j_1k",
    "h_vs_fp16",
    "h_tok_j",
    "h_vram",
    "h_latency",
    "h_w",
    "h_usd_month",
    "h_rank",
    "h_tier",
)
_MODEL_COLUMNS = (
    "h_model",
    "h_precision",
    "h_j_1k",
    "h_fp16_j_1k",
    "h_vs_fp16",
    "h_tok_s",
    "h_w",
    "h_tier",
)
_OPTIMIZE_COLUMNS = (
    "h_rank",
    "h_precision",
    "h_bs",
    "h_j_1k",
    "h_tok_s",
    "h_vram",
    "h_usd_month",
    "h_tier",
)


def _columns(answer: Answer, columns: tuple[str, ...]) -> tuple[str, ...]:
    """A table's columns; its cost column is headed in USD unless the answer prices its rows in
    another currency (see ``_month_cost``)."""
    priced = (money(answer.question, c.estimate) for c in answer.result.rows if answer.question)
    currency = next((m["currency"] for m in priced if m["energy_kwh"] is not None), "USD")
    if currency == "USD":
        return columns
    return tuple("r_cost_month" if key == "h_usd_month" else key for key in columns)


def _month_cost(answer: Answer, est: Estimate) -> str:
    """An estimate's monthly cost as the answer prices it (``protocols.money``, as the
    side-by-side table and estimate do): in yuan (with USD) for a question that asks in yuan and
    gives a rate, in the question's own currency when it priced electricity in one without a
    rate, else in USD."""
    if answer.question is None:
        return money_text(est.monthly.cost_usd)
    m = money(answer.question, est)
    return money_text(m["cost_usd"], m["cost_cny"], m["currency"], m["cost_local"])


def _table_with_chart(
    columns: tuple[str, ...],
    cells: list[list[str]],
    bars: list[tuple[str, float | None, str]],
    labels: dict[str, str],
    markdown: bool,
) -> list[str]:
    """A table of ``cells`` under ``columns``, then the rows' J per 1k tokens as ``bars``
    (label, figure, tier; fenced in Markdown) when any is known."""
    out = make_table([labels[key] for key in columns], cells, markdown)
    chart = bar_chart(bars, unit="J/1k")
    if chart:
        out += ["", *(["```", *chart, "```"] if markdown else chart)]
    return [*out, ""]


def _paired_lines(answer: Answer, labels: dict[str, str]) -> list[str]:
    """Each precision's change vs FP16 as measured in the same session, per session: the
    figure in the table is their median."""
    out = []
    for cell in answer.result.rows:
        if not cell.estimate.paired_deltas:
            continue
        parts = labels["semicolon"].join(
            f"{delta:+.1f}% ({source.rsplit('/', 1)[-1]}"
            + ("" if session == "-" else f", {labels['session']} {session}")
            + ")"
            for source, session, delta, _ in cell.estimate.paired_deltas
        )
        out.append(labels["paired"].format(p=cell.precision, parts=parts))
    if out:
        out.append("")
    return out


def _trade_offs(answer: Answer, labels: dict[str, str]) -> list[str]:
    """Besides energy: memory, latency, cost and accuracy, per precision compared."""
    rows = [c for c in answer.result.rows if c.estimate.energy_per_1k_tokens_j is not None]
    if len(rows) < 2:
        return []
    out: list[Text] = []

    def pick(value: Callable[[Estimate], float | None]) -> tuple[str, float] | None:
        known = [(c.precision, v) for c in rows if (v := value(c.estimate)) is not None]
        return min(known, key=lambda pv: pv[1]) if known else None

    vram, fast = pick(lambda e: e.vram_gb), pick(lambda e: e.latency_s)
    priced = [c for c in rows if c.estimate.monthly.cost_usd is not None]
    cheap = min(priced, key=lambda c: c.estimate.monthly.cost_usd or 0.0, default=None)
    if vram is not None:
        p, gb = vram
        out.append(Text(f"least memory: {p} ({gb:.1f} GB)", f"显存最少：{p}（{gb:.1f} GB）"))
    if fast is not None:
        p, s = fast
        out.append(
            Text(f"lowest latency: {p} ({s:.1f} s per request)", f"延迟最低：{p}（{s:.1f} s/请求）")
        )
    if cheap is not None:
        p, cost = cheap.precision, _month_cost(answer, cheap.estimate)
        out.append(Text(f"cheapest per month: {p} ({cost})", f"每月最便宜：{p}（{cost}）"))
    out.append(
        Text(
            "accuracy: FP16/BF16 keep outputs; NF4, INT8 and FP8 change them, so check quality "
            "on your own evaluation set before switching",
            "精度：FP16/BF16 不改变输出；NF4、INT8、FP8 会改变输出，换用前请在自己的评测集上检查质量",
        )
    )
    lines = (f"- {line.get(answer.language)}" for line in out)
    return [list_head(labels["trade_offs"], labels), *lines, ""]


def _compare_models(answer: Answer, labels: dict[str, str], markdown: bool) -> list[str]:
    result = answer.result
    out = [heading(labels["measured_on"].format(gpu=result.extra.get("gpu")), markdown, labels)]
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
    bars = [
        (
            f"{r['model']} {r['precision']}",
            r["energy_per_1k_tokens_j"],
            tier_label(labels, r["tier"]),
        )
        for r in result.rows
    ]
    out += _table_with_chart(_MODEL_COLUMNS, rows, bars, labels, markdown)
    rec = result.recommendation
    if rec and rec.get("delta_min_pct") is not None:
        verdict = _VERDICTS[rec["verdict"]].format(
            p=", ".join(rec["precisions"]), lo=rec["delta_min_pct"], hi=rec["delta_max_pct"]
        )
        out += [f"{labels['recommendation']}: " + verdict.get(answer.language), ""]
    return out


# A precision compared across the measured models: the verdict, by the recommendation's.
_VERDICTS = {
    "stay-fp16": Text(
        "Stay on FP16: {p} cost more energy on every model measured ({lo:+.0f}% to {hi:+.0f}%).",
        "继续用 FP16：在所有实测模型上 {p} 都更耗电（{lo:+.0f}% 到 {hi:+.0f}%）。",
    ),
    "use": Text(
        "{p} saved energy on every model measured ({lo:+.0f}% to {hi:+.0f}%).",
        "{p} 在所有实测模型上都更省电（{lo:+.0f}% 到 {hi:+.0f}%）。",
    ),
    "depends-on-size": Text(
        "It depends on model size: {p} ranged from {lo:+.0f}% to {hi:+.0f}% vs FP16.",
        "取决于模型大小：{p} 相对 FP16 从 {lo:+.0f}% 到 {hi:+.0f}% 不等。",
    ),
}


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
    rows, bars = [], []
    for cell in result.rows[:8]:
        est, tier = cell.estimate, tier_label(labels, cell.estimate.tier)
        rows.append(
            [
                fmt(cell.rank),
                cell.precision,
                str(cell.batch_size),
                fmt(est.energy_per_1k_tokens_j),
                fmt(est.throughput_tok_s, 1),
                fmt(est.vram_gb, 1),
                _month_cost(answer, est),
                tier,
            ]
        )
        bars.append((f"{cell.precision} BS{cell.batch_size}", est.energy_per_1k_tokens_j, tier))
    out += _table_with_chart(_columns(answer, _OPTIMIZE_COLUMNS), rows, bars, labels, markdown)
    rejected = result.extra.get("rejected") or []
    if rejected:
        names = sorted({f"{r['precision']} ({', '.join(r['rejected_by'])})" for r in rejected})
        out.append(labels["ruled_out"] + labels["semicolon"].join(names))
        out.append("")
    out += _side_by_side(answer, labels, markdown)
    return out


def _side_by_side(answer: Answer, labels: dict[str, str], markdown: bool) -> list[str]:
    """The current and the optimized configuration in one table, then the saving."""
    result = answer.result
    if result.current is None and result.optimized is None:
        return []
    money = result.money or {}
    currency = (money.get("current") or {}).get("currency", "USD")
    now = _side_column(result.current, money.get("current") or {}, currency, labels)
    then = _side_column(result.optimized, money.get("optimized") or {}, currency, labels)
    rows = [[labels[key], now.get(key, "-"), then.get(key, "-")] for key in now or then]
    deployment, rec = result.deployment, result.recommendation or {}
    current, optimized = labels["current"], labels["optimized"]
    if deployment:
        p, bs = deployment.precision, deployment.batch_size
        current = labels["setup"].format(label=current, p=p, bs=bs)
    if rec:
        p, bs = rec.get("precision"), rec.get("batch_size")
        optimized = labels["setup"].format(label=optimized, p=p, bs=bs)
    out = make_table(["", current, optimized], rows, markdown)
    out.append("")
    saving = _saving_amount(answer, money, rec, currency)
    if saving is not None:
        out += [_saving_line(labels, *saving, rec.get("saving_pct")), ""]
    return out


def _side_column(
    est: Estimate | None, money: dict[str, Any], currency: str, labels: dict[str, str]
) -> dict[str, str]:
    """One configuration's cells by row label, top to bottom; none without one (its column
    shows ``-``)."""
    if est is None:
        return {}
    month = est.monthly
    usd = money.get("cost_usd", month.cost_usd)
    cny, local = money.get("cost_cny"), money.get("cost_local")
    year = [None if v is None else v * 12 for v in (usd, cny, local)]
    return {
        "h_j_1k": fmt_range(est.energy_per_1k_tokens_j, est.energy_per_1k_tokens_j_range),
        "r_j_request": fmt_range(est.energy_per_request_j, est.energy_per_request_j_range),
        "h_tok_s": fmt(est.throughput_tok_s, 1),
        "h_w": fmt(est.power_w),
        "h_vram": fmt(est.vram_gb, 1),
        "r_requests_month": fmt(month.requests),
        "r_kwh_month": fmt_range(month.energy_kwh, month.energy_kwh_range, 2),
        "r_cost_month": money_text(usd, cny, currency, local),
        "r_cost_year": money_text(year[0], year[1], currency, year[2]),
        "r_co2_month": fmt_range(month.co2_kg, month.co2_kg_range, 2),
        "h_tier": tier_label(labels, est.tier),
    }


def _saving_amount(
    answer: Answer, money: dict[str, Any], rec: dict[str, Any], currency: str
) -> tuple[float, str] | None:
    """The monthly saving and how it reads: in CNY (with USD) when asked, in the question's own
    currency when it priced electricity in one, else in USD; None when it is not known."""
    local = local_price(answer) is not None  # priced in the question's own currency
    usd = money.get("saving_usd")
    if usd is None and not local:
        usd = rec.get("saving_usd_per_month")
    saving = money.get("saving_local") if local else usd
    if saving is None:
        return None
    return saving, money_text(usd, money.get("saving_cny"), currency, money.get("saving_local"))


def _saving_line(labels: dict[str, str], saving: float, amount: str, pct: float | None) -> str:
    """Already the greenest; an extra cost when the recommendation uses more energy (chat
    forces BS 1 on a setup that batches), said so instead of a negative saving; else the
    saving."""
    if pct is not None and abs(pct) < 0.05:
        return labels["greenest"]
    if saving < 0 or (pct is not None and pct < 0):
        more = "" if pct is None else labels["more_energy"].format(pct=-pct)
        return (
            f"{labels['extra_cost']}{labels['colon']}{amount.replace('-', '')} "
            f"{labels['per_month']}{more}{labels['stop']}"
        )
    less = "" if pct is None else labels["less_energy"].format(pct=pct)
    return (
        f"{labels['saving']}{labels['colon']}{amount} {labels['per_month']}{less}{labels['stop']}"
    )


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
    out = [heading(labels["estimate"], markdown, labels)]
    current = result.current
    if current is None or current.tier == "none":
        method = "" if current is None else current.method
        out += [labels["not_available"] + labels["colon"] + method, ""]
        return out
    if current.method:
        out += [labels["method"] + current.method, ""]
    out += _side_by_side(answer, labels, markdown)
    return out


def audit_section(answer: Answer, labels: dict[str, str], markdown: bool) -> list[str]:
    extra = answer.result.extra
    n = extra.get("code_lines") or 0
    if n:
        code = Text(
            f"Code: {n} {'line' if n == 1 else 'lines'} pasted into the question, "
            "audited as text (never run).",
            f"代码：问题中粘贴的 {n} 行，按文本审计（不会运行）。",
        )
        return [code.get(answer.language), ""]
    paths = extra.get("paths") or []
    return [labels["files"] + ", ".join(paths), ""] if paths else []
