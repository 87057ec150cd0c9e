"""The body of a diagnose answer: observed vs expected, the matching trap explained from its
evidence rows (only those comparable with the question's GPU), verification steps, crossovers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ecoguard.advisor.layout import fmt, heading, make_table, tier_label
from ecoguard.advisor.texts import trap_text
from ecoguard.findings import Mood
from ecoguard.rules.table import ROWS

if TYPE_CHECKING:
    from ecoguard.advisor.answer import Answer


def diagnose_section(answer: Answer, labels: dict[str, str], markdown: bool) -> list[str]:
    result = answer.result
    out: list[str] = []
    if result.rows:
        rows = [
            [
                r["metric"],
                fmt(r["observed"], 1),
                fmt(r["expected"], 1),
                "-" if r["gap_pct"] is None else f"{r['gap_pct']:+.1f}%",
                tier_label(labels, r["tier"]),
            ]
            for r in result.rows
        ]
        headers = [labels[k] for k in ("h_metric", "observed", "expected", "h_gap", "h_tier")]
        out += make_table(headers, rows, markdown)
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
        out += _explained_lines(answer, item, labels, markdown)
    out += _crossovers(answer, labels, markdown)
    out += _verify_steps(answer, labels, markdown)
    return out


def _explained_lines(
    answer: Answer, item: dict[str, Any], labels: dict[str, str], markdown: bool
) -> list[str]:
    """A matching trap: why (in the answer's language) and its evidence rows, those of the
    question's GPU first, each with its change vs FP16."""
    out: list[str] = []
    why = trap_text(item.get("rule"), answer.language, item.get("why"), "")[0]
    if why:
        out.append(f"{item['rule']}{labels['colon']}{why}")
    gpu = answer.result.deployment.gpu.profile if answer.result.deployment else None
    ev = sorted(
        _relevant_evidence(item["evidence"]),
        key=lambda e: e.get("precision") == "fp16",
    )
    ev_rows = []
    for e in ev[:8]:
        delta = _delta_vs_fp16(e, ev)
        ev_rows.append(
            [
                str(e.get("id", "-")),
                str(e.get("precision", "-")),
                fmt(e.get("energy_j_per_1k")),
                "-" if delta is None else f"{delta:+.1f}%",
                tier_label(labels, e.get("tier", "-")),
            ]
        )
    if ev_rows:
        headers = [labels[k] for k in ("h_row", "h_precision", "h_j_1k", "h_vs_fp16", "h_tier")]
        out += make_table(headers, ev_rows, markdown)
        others = sorted({str(e.get("gpu")) for e in ev if e.get("gpu") != gpu})
        if gpu and others and all(e.get("gpu") != gpu for e in ev):
            out.append(labels["elsewhere"].format(others=", ".join(others), gpu=gpu))
    out.append("")
    return out


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
    fixed = ROWS[rule].fixed_precision if rule in ROWS else "fp16"
    prompt = dep.prompt_tokens if dep is not None and dep.prompt_tokens else 512
    gen = dep.generation_tokens if dep is not None and dep.generation_tokens else 256
    bench = (
        f"ecoguard bench --model {model} --precisions {current},{fixed} --batch-sizes 1 "
        f"--prompt-tokens {prompt} --generation-tokens {gen}"
    )
    code = f"`{bench}`" if markdown else bench
    steps = [labels["v_apply"] + (rec.get("fix") or ""), labels["v_measure"] + code]
    steps.append(labels["v_near"])
    if rec.get("changes_outputs"):
        steps.append(labels["v_quality"])
    return [
        heading(labels["verify"], markdown, labels),
        *(f"{i}. {s}" for i, s in enumerate(steps, start=1)),
        "",
    ]


def _relevant_evidence(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The trap's rows (the protocol gave those of the asked-about GPU when it has any) and,
    beside them, only the FP16 baselines of the same GPU, model and batch size (another GPU's or
    batch size's FP16 row says nothing about this change)."""
    trap_rows = [r for r in rows if r.get("precision") != "fp16"]
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
    title = labels["crossover"]
    rows = [
        [
            c["architecture"],
            c["precision"],
            fmt(c["fitted_b"], 2) + "B" if c["fitted_b"] else "-",
            tier_label(labels, c["fitted_tier"]),
            fmt(c["reported_b"], 1) + "B" if c["reported_b"] else "-",
            tier_label(labels, c["reported_tier"]),
        ]
        for c in items
    ]
    columns = ("h_architecture", "h_precision", "h_fitted", "h_tier", "published", "h_tier")
    headers = [labels[k] for k in columns]
    return [
        heading(title, markdown, labels),
        *make_table(headers, rows, markdown),
        "",
    ]


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
        if e.get("precision") == "fp16"
        and e.get("energy_j_per_1k")
        and all(e.get(k) == row.get(k) for k in ("gpu", "model", "batch_size"))
    ]
    if not same:
        return None
    same.sort(key=lambda e: (e.get("source") != row.get("source"), e.get("tier") != "measured"))
    return (energy / same[0]["energy_j_per_1k"] - 1.0) * 100.0
