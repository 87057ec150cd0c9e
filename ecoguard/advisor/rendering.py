"""Rendering an advisor answer: Markdown (default), plain text, or JSON.

Every answer opens with the mood tag and the EcoLobster's line (dropped with ``plain``), shows
the question as understood (conversions and defaults), the protocol's tables and an ASCII bar
chart, dollars per month and savings, a real-world equivalent, and ends with a citation built
from the reference rows actually used. Output is deterministic for a given answer.
"""

from __future__ import annotations

import json
from typing import Any

from ecoguard.advisor.answer import Answer
from ecoguard.advisor.diagnosis import diagnose_section
from ecoguard.advisor.layout import (
    ATTRIBUTION,
    LABELS,
    bar_chart,
    fmt,
    heading,
    list_head,
    tier_label,
)
from ecoguard.advisor.protocols import cite
from ecoguard.advisor.registry import PROTOCOLS
from ecoguard.advisor.sections import (
    audit_section,
    batching_section,
    compare_section,
    estimate_section,
    optimize_section,
)
from ecoguard.advisor.texts import Text, trap_text
from ecoguard.voice import colorize, lobster_line, mood_tag

__all__ = ["ATTRIBUTION", "SECTIONS", "bar_chart", "render"]


# Each protocol's body: (answer, labels, markdown?) -> lines. One per entry of PROTOCOLS.
SECTIONS = {
    "optimize": optimize_section,
    "compare": compare_section,
    "estimate": estimate_section,
    "diagnose": diagnose_section,
    "audit": audit_section,
    "data": lambda *_: [],  # a question about the data: its counts are the answer's notes
}
assert set(SECTIONS) == set(PROTOCOLS), "one section per protocol"


# How to measure what the reference data does not cover, step by step.
_MEASUREMENT_STEPS = (
    Text(
        "Fix the serving setup you will run in production (GPU power limit, driver, CUDA, torch, transformers, quantization library versions) and write it down.",
        "固定生产环境的配置（GPU 功耗上限、驱动、CUDA、torch、transformers、量化库版本）并记录下来。",
    ),
    Text(
        "Warm up with 3 runs, then time 10 runs with a fixed prompt length and max_new_tokens; keep the GPU otherwise idle.",
        "先预热 3 次，再用固定的输入长度和 max_new_tokens 计时 10 次；期间 GPU 不跑别的任务。",
    ),
    Text(
        "Read the NVML energy counter (or power at >= 10 Hz) around each run; report J per 1k generated tokens, tok/s and average W; measure idle power separately and do not subtract it silently.",
        "在每次运行前后读取 NVML 能耗计数器（或 >= 10 Hz 采样功率）；报告每千个生成 token 的焦耳数、tok/s 和平均功率；空闲功耗单独测量，不要悄悄扣除。",
    ),
    Text(
        "Run an FP16 baseline in the same session so the delta is like-for-like.",
        "在同一次会话中跑一个 FP16 基线，保证对比公平。",
    ),
    Text(
        "`ecoguard bench` runs this protocol on your machine; its rows are stored with tier `local` and the advisor uses them from then on.",
        "`ecoguard bench` 会在你的机器上执行这套流程；结果以 `local` 等级保存，之后顾问会直接使用。",
    ),
)


def render(answer: Answer, *, fmt: str = "md", plain: bool = False, color: bool = False) -> str:
    """The answer as Markdown (``md``), plain text (``text``) or JSON (``json``)."""
    if fmt == "json":
        return json.dumps(
            answer.to_dict(), ensure_ascii=False, indent=2, sort_keys=False, default=str
        )
    markdown = fmt == "md"
    lang = answer.language
    labels = {key: text.get(lang) for key, text in LABELS.items()}
    result = answer.result
    out: list[str] = []
    tag = mood_tag(result.mood)
    head = tag if plain else f"{tag} {lobster_line(result.mood, lang)}"
    out.append(colorize(head, result.mood, color))
    out.append("")
    out.extend(_understood(answer, labels, markdown))
    body = SECTIONS[result.protocol]
    if result.out_of_data:
        out.extend(_out_of_data(answer, labels, lang, markdown))
    else:
        out.extend(body(answer, labels, markdown))
        out.extend(batching_section(answer, labels, markdown))
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
            "equivalent_optimize"
            if PROTOCOLS[result.protocol].prices_recommendation
            else "equivalent_current"
        ]
        listed = labels["semicolon"].join(result.equivalents)
        out.append(f"{label}{labels['colon']}{listed}{labels['stop']}")
        out.append("")
    out.extend(_honesty(answer, labels))
    if result.notes:
        out.append(list_head(labels["notes"], labels))
        out.extend(f"- {n}" for n in result.notes)
        out.append("")
    out.append(_citation(answer, labels))
    return "\n".join(out).rstrip() + "\n"


def _understood(answer: Answer, labels: dict[str, str], markdown: bool) -> list[str]:
    out: list[str] = []
    dep = answer.result.deployment
    colon = labels["colon"]
    parts = [f"{labels['protocol']}{colon}{answer.result.protocol}"]
    if dep is not None:
        if dep.model.id:
            size = fmt(dep.model.params_b, 2).rstrip("0").rstrip(".")
            parts.append(f"{labels['h_model']}{colon}{dep.model.id} ({size}B)")
        if dep.gpu.name:
            count = f"{dep.gpu.count} x " if dep.gpu.count > 1 else ""  # tensor parallel
            parts.append(f"{labels['f_gpu']}{colon}{count}{dep.gpu.name}")
        if dep.engine:
            parts.append(f"{labels['f_engine']}{colon}{dep.engine}")
        if dep.precision:
            parts.append(f"{labels['h_precision']}{colon}{dep.precision}")
        if dep.batch_size:
            parts.append(f"{labels['f_batch_size']}{colon}{dep.batch_size}")
        if dep.prompt_tokens is not None and dep.generation_tokens is not None:
            parts.append(labels["f_in_out"].format(p=dep.prompt_tokens, g=dep.generation_tokens))
        if dep.use:
            why = answer.question.use_reason if answer.question is not None else None
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
    listed = list(answer.question.conversions) if answer.question is not None else []
    for c in [*listed, *answer.extra_conversions]:
        if c.field == "gpu":
            conversions.append(c.rule.get(lang))
            continue
        conversions.append(
            labels["conversion"].format(
                source=c.source.get(lang),
                value=f"{c.value:,.0f}",
                field=labels.get(f"field_{c.field}", c.field.replace("_", " ")),
                rule=c.rule.get(lang),
            )
        )
    if conversions:
        out.append(list_head(labels["conversions"], labels))
        out.extend(f"- {c}" for c in conversions)
    if answer.defaults:
        out.append(list_head(labels["defaults"], labels))
        for d in answer.defaults:
            out.append(f"- {d.field} = {d.value}" + labels["paren"].format(d.how.get(lang)))
    out.append("")
    return out


def _findings(answer: Answer, labels: dict[str, str], markdown: bool) -> list[str]:
    findings = answer.result.findings
    if not findings:
        return []
    out = [list_head(labels["findings"], labels)]
    for f in findings:
        impact = ""
        if f.impact is not None and f.impact.extra_energy_pct is not None:
            usd = f.impact.extra_usd_per_month
            impact = labels["impact" if usd is None else "impact_usd"].format(
                pct=f.impact.extra_energy_pct, usd=usd, tier=tier_label(labels, f.impact.tier)
            )
        message, fix_summary = trap_text(f.rule, answer.language, f.message, f.fix_summary or "")
        if f.rule == "batch-size-one":
            message, fix_summary = f.message, f.fix_summary or ""  # the advisor's own wording
        where = _where(f, answer.language)
        out.append(f"- {mood_tag(f.mood)} {where}{f.rule}{labels['colon']}{message}{impact}")
        fix = f"`{f.fix}`" if markdown else f.fix
        out.append(f"  {labels['fix']}{labels['colon']}{fix_summary} {fix}".rstrip())
    out.append("")
    return out


def _where(finding: Any, language: str) -> str:
    """``serve.py:12: `` for an audit finding, ``line 3: `` for code pasted into the question."""
    loc = getattr(finding, "location", None)
    if loc is None or loc.line is None:
        return ""
    if loc.path == "<question>":
        return Text(f"line {loc.line}: ", f"第 {loc.line} 行 ").get(language)
    cell = f"[{loc.cell}]" if loc.cell is not None else ""
    return f"{loc.path}{cell}:{loc.line}: "


def _honesty(answer: Answer, labels: dict[str, str]) -> list[str]:
    if not answer.honesty:
        return []
    out = [list_head(labels["honesty"], labels)]
    lang = answer.language
    for note in answer.honesty:
        m, published = _span(note.measured), note.published
        p = published.get(lang) if isinstance(published, Text) else _span(published)
        out.append(
            f"- {note.topic.get(lang)}{labels['paren'].format(note.unit.get(lang))}{labels['colon']}"
            f"{labels['measured']} {m} [{tier_label(labels, note.measured_tier)}]{labels['semicolon']}"
            f"{labels['published']} {p} [{tier_label(labels, note.published_tier)}]"
        )
    out.append("")
    return out


def _span(value: float | list[float]) -> str:
    """A figure of a honesty note: a number, or a [low, high] range of changes in percent."""
    return f"{value[0]:+.1f}% .. {value[1]:+.1f}%" if isinstance(value, list) else f"{value:g}"


def _out_of_data(answer: Answer, labels: dict[str, str], lang: str, markdown: bool) -> list[str]:
    out = [list_head(labels["out_of_data"], labels)]
    if answer.question is not None and answer.question.out_of_data:
        out.extend(f"- {o.detail.get(lang)}" for o in answer.question.out_of_data)
    else:
        out.extend(f"- {o['detail']}" for o in answer.result.out_of_data)
    out.append("")
    out.append(heading(labels["protocol_steps"], markdown, labels))
    steps = list(_MEASUREMENT_STEPS)
    vendor = answer.vendor
    if vendor is not None:
        name, tool = vendor.name, vendor.power_tool
        steps[2] = Text(
            f"`ecoguard bench` reads power through NVML, which exists only on NVIDIA GPUs; on "
            f"{name} read power with {tool.en} at >= 10 Hz around each run and report J per "
            "1k generated tokens, tok/s and average W; measure idle power separately.",
            f"`ecoguard bench` 通过 NVML 读取功耗，只适用于 NVIDIA GPU；在 {name} 上请用 {tool.zh} "
            "以 >= 10 Hz 采样每次运行的功耗，报告每千个生成 token 的焦耳数、tok/s 和平均功率；空闲功耗单独测量。",
        )
        steps[4] = Text(
            f"Compare with an NVIDIA baseline only as a ratio measured the same way; no figure in "
            f"the reference data is carried to {name}.",
            f"与 NVIDIA 基线对比时，只比较用同样方法测出的比值；参考数据中的数字不会换算到 {name}。",
        )
    out.extend(f"{i}. {s.get(lang)}" for i, s in enumerate(steps, start=1))
    out.append("")
    return out


def _citation(answer: Answer, labels: dict[str, str]) -> str:
    result = answer.result
    extra_sources = [source for note in answer.honesty for source in note.sources]
    sources, tiers = cite(result.evidence, list(result.sources) + extra_sources)
    count = sum(tiers.values())
    if count:
        tier_text = labels["comma"].join(
            f"{n} {tier_label(labels, t)}"
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
