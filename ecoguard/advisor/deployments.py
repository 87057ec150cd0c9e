"""From a Question (free text, CLI flags or MCP arguments alike) to a Deployment: names resolved against the knowledge
tables (an NVIDIA card outside the table answered as its nearest profile), the stated defaults
for what is missing (chosen in ``question``, each listed with how to change it), the settings the question implies
(region, a local machine's PUE, the electricity price), the monthly volume, and the honesty notes
where the publisher's prose and the measured rows disagree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from ecoguard.advisor import protocols
from ecoguard.advisor.accelerators import (
    NearestProfile,
    card_spec,
    nearest_profile,
)
from ecoguard.advisor.conversions import Conversion
from ecoguard.advisor.question import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_GPU,
    DEFAULT_PRECISION,
    DEFAULT_REGION,
    DEFAULT_REGION_ZH,
    Default,
    Question,
)
from ecoguard.advisor.texts import Text
from ecoguard.config import Settings
from ecoguard.deployment import Deployment, GpuSpec, ModelSpec
from ecoguard.errors import UnknownGpuError, UsageError
from ecoguard.knowledge import (
    crossover,
    find_rows,
    gpu_profiles,
    pue_defaults,
    reference_rows,
    resolve_gpu,
    resolve_model,
)
from ecoguard.knowledge.memory import DEFAULT_GENERATION_TOKENS, DEFAULT_PROMPT_TOKENS


@dataclass(frozen=True, slots=True)
class HonestyNote:
    """Where the publisher's prose and the measured rows disagree: both figures, each with its
    tier. ``measured``/``published`` are a number, a [low, high] range, or (published) words."""

    topic: Text
    measured: float | list[float]
    measured_tier: str
    published: float | list[float] | Text
    published_tier: str
    unit: Text
    sources: tuple[str, ...] = ()
    method: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "topic": self.topic.en,
            "measured": self.measured,
            "measured_tier": self.measured_tier,
            "published": self.published.en if isinstance(self.published, Text) else self.published,
            "published_tier": self.published_tier,
            "unit": self.unit.en,
            "sources": list(self.sources),
        }
        if self.method is not None:
            out["method"] = self.method
        return out


def resolve_gpu_spec(name: str) -> GpuSpec:
    return resolve_gpu_match(name)[0]


def resolve_gpu_match(name: str) -> tuple[GpuSpec, NearestProfile | None]:
    """The GPU's spec; an NVIDIA card outside the table is answered with the nearest profile
    (and its own VRAM), with the match returned so the answer can say why."""
    try:
        profile = resolve_gpu(name)
    except UnknownGpuError:
        card = card_spec(name)
        if card is None:
            raise
        # Within the card's architecture any table profile will do (the estimator carries its
        # figures there with its fitted factor); across architectures, only one with rows.
        with_data = {row.gpu for row in reference_rows() if row.tier in ("measured", "reported")}
        same_arch = {k for k, p in gpu_profiles().items() if p.architecture == card.architecture}
        match = nearest_profile(card, gpu_profiles(), same_arch or with_data)
        # The card's own name, architecture and VRAM, answered with the matched profile's data.
        return replace(card.to_gpu_spec(), profile=match.profile_key), match
    return profile.to_gpu_spec(), None


def build_deployment(
    question: Question, *, fill_precision: bool = True
) -> tuple[Deployment, list[Default]]:
    """The validated Deployment ``question`` states, with defaults for what is missing (each
    one listed); without ``fill_precision`` a missing precision stays missing."""
    defaults: list[Default] = []
    q = question

    def given_or_default(field: str, value: Any, default: Any) -> Any:
        if value is not None:
            return value
        defaults.append(Default.of(field, default))
        return default

    gpu_spec = resolve_gpu_spec(given_or_default("gpu", q.gpu, DEFAULT_GPU))
    model_spec = resolve_model(q.model).to_model_spec() if q.model else ModelSpec()
    precision = q.precision
    if fill_precision:
        precision = given_or_default("precision", precision, DEFAULT_PRECISION)
    batch_size = given_or_default("batch_size", q.batch_size, DEFAULT_BATCH_SIZE)
    dep = Deployment(
        model=model_spec,
        gpu=gpu_spec,
        batch_size=batch_size,
        prompt_tokens=given_or_default("prompt_tokens", q.prompt_tokens, DEFAULT_PROMPT_TOKENS),
        generation_tokens=given_or_default(
            "generation_tokens", q.generation_tokens, DEFAULT_GENERATION_TOKENS
        ),
        use=given_or_default("use", q.use, protocols.use_for_batch_size(batch_size)),
    )
    if precision is not None:
        dep = protocols.with_precision(dep, precision, compiled=q.compiled)
        if (
            q.int8_threshold is not None
            and dep.quant.method == "bitsandbytes"
            and dep.quant.bits == 8
        ):
            dep = dep.with_(quant=replace(dep.quant, int8_threshold=q.int8_threshold))
    return served_as_stated(dep, q).validate(), defaults


def served_as_stated(dep: Deployment, question: Question) -> Deployment:
    """The deployment on the GPUs, compute dtype and engine the question names: ``4x A100``
    spreads it over four cards (VRAM per card); ``bf16`` beside ``load_in_4bit=True`` is the
    4-bit weights' compute dtype; an engine loads the precision its own way (its FP8 is fused
    kernels), decided by ``ecoguard.engines.engine_args`` as for the audit."""
    if question.gpu_count is not None and question.gpu_count > 1:
        dep = dep.with_(gpu=replace(dep.gpu, count=question.gpu_count))
    dtype = question.compute_dtype
    if dtype is not None and dep.quant.method is not None:
        dep = dep.with_(quant=replace(dep.quant, compute_dtype=dtype), dtype=dtype)
    if question.engine is not None:
        # The engines package costs every other `ecoguard advise` process ~8 ms (-X importtime).
        from ecoguard.engines.engine_args import served_by  # lazy: only when an engine is named

        dep = served_by(dep, question.engine)[0]
    return dep


def settings_for(
    question: Question | None, base: Settings | None = None
) -> tuple[Settings, list[Default]]:
    """Settings for the question: its region (listed as a default when neither the question
    nor the configuration names one: the US, or China for a question in Chinese), a local
    machine's PUE (1.0: no data-centre overhead) and a USD electricity price."""
    settings = base or Settings()
    defaults: list[Default] = []
    if question is None:
        return settings, defaults
    changes: dict[str, Any] = {}
    if question.region:
        changes["region"] = question.region
    elif settings.region == DEFAULT_REGION:  # not stated, nor configured otherwise: listed
        region = DEFAULT_REGION_ZH if question.language == "zh" else DEFAULT_REGION
        changes["region"] = region
        defaults.append(Default.of("region", region))
    if question.local and settings.pue is None:
        changes["pue"] = pue_defaults()["local"]  # no data-centre overhead
    if question.price_per_kwh is not None:
        if question.price_currency == "USD":
            changes["price_usd_per_kwh"] = question.price_per_kwh
        elif question.price_currency == "CNY" and question.cny_per_usd:
            changes["price_usd_per_kwh"] = question.price_per_kwh / question.cny_per_usd
    return (settings.with_(**changes) if changes else settings), defaults


def honesty_notes(dep: Deployment, precisions: tuple[str, ...]) -> list[HonestyNote]:
    """Published vs measured figures for the GPU/precisions in play, computed from the data."""
    notes: list[HonestyNote] = []
    for precision in precisions:
        if dep.gpu.architecture and precision in ("nf4", "int8_mixed", "int8_pure"):
            note = _crossover_note(dep.gpu.architecture, precision)
            notes += [note] if note else []
        if dep.gpu.profile and precision not in ("fp16", "bf16", "fp32"):
            notes += _delta_notes(dep.gpu.profile, precision)
    return notes


def _crossover_note(arch: str, precision: str) -> HonestyNote | None:
    """The fitted crossover size beside the published one, when they differ by over 15%."""
    try:
        cross = crossover(arch, precision)
    except UsageError:  # an architecture the crossover table does not cover
        return None
    if (
        cross.fitted_b is None
        or cross.reported_b is None
        or abs(cross.fitted_b - cross.reported_b) / cross.reported_b <= 0.15
    ):
        return None
    return HonestyNote(
        topic=Text(f"{precision} crossover on {arch}", f"{precision} 在 {arch} 上的交叉点"),
        measured=cross.fitted_b,
        measured_tier=cross.fitted_tier,
        published=cross.reported_b,
        published_tier=cross.reported_tier,
        unit=Text("B params", "十亿参数"),
        sources=tuple(list(cross.sources)),
        method=cross.method,
    )


def _delta_notes(gpu: str, precision: str) -> list[HonestyNote]:
    """Where the published change vs FP16 on this GPU lies outside the measured one (by more
    than 5 points), and pure INT8 described as a saving while every measured row costs more."""
    rows = find_rows(gpu=gpu, precision=precision, batch_size=1)
    delta: dict[str, list[float]] = {"measured": [], "reported": []}
    for r in rows:
        if r.tier in delta and r.delta_vs_fp16_pct is not None:
            delta[r.tier].append(r.delta_vs_fp16_pct)
    measured, reported = delta["measured"], delta["reported"]
    notes: list[HonestyNote] = []
    if measured and reported:
        m_lo, m_hi = min(measured), max(measured)
        r_lo, r_hi = min(reported), max(reported)
        if r_hi < m_lo - 5 or r_lo > m_hi + 5:
            notes.append(
                HonestyNote(
                    topic=Text(f"{precision} vs FP16 on {gpu}", f"{gpu} 上 {precision} 相对 FP16"),
                    measured=[round(m_lo, 1), round(m_hi, 1)],
                    measured_tier="measured",
                    published=[round(r_lo, 1), round(r_hi, 1)],
                    published_tier="reported",
                    unit=Text("% energy vs FP16", "能耗变化 %"),
                    sources=tuple(sorted({r.source for r in rows})),
                )
            )
    if precision == "int8_pure" and measured and min(measured) > 0:
        # The publisher's guidance calls pure INT8 a saving on large-memory GPUs; the measured
        # rows on this GPU all cost more than FP16.
        notes.append(
            HonestyNote(
                topic=Text(f"pure INT8 on {gpu}", f"{gpu} 上的纯 INT8"),
                measured=[round(min(measured), 1), round(max(measured), 1)],
                measured_tier="measured",
                published=Text(
                    "described upstream as an energy saving vs FP16", "上游资料称其比 FP16 省电"
                ),
                published_tier="reported",
                unit=Text("% energy vs FP16", "相对 FP16 的能耗变化 %"),
                sources=tuple(sorted({r.source for r in rows if r.tier == "measured"})),
            )
        )
    return notes


def volume_default(
    question: Question, requests: int | None, settings: Settings, lists: str
) -> Default | None:
    """The volume default to list, when no volume was given and the protocol lists it
    (``ProtocolSpec.lists_volume``: "always", or "with_model" when a model is named)."""
    listed = lists == "always" or (lists == "with_model" and question.model is not None)
    if requests is None and listed:
        return Default.of("requests_per_month", settings.monthly_requests)
    return None


def monthly_requests(
    question: Question, dep: Deployment, settings: Settings
) -> tuple[int | None, list[Conversion]]:
    """Monthly requests from what the question gave: a request count, a text volume (tokens /
    generated tokens per request), or serving hours per day (throughput x hours)."""
    if question.requests_per_month is not None:
        return question.requests_per_month, []
    gen = dep.generation_tokens or DEFAULT_GENERATION_TOKENS
    if question.total_tokens is not None:
        requests = max(1, math.ceil(question.total_tokens / gen))
        monthly = question.tokens_period == "month"
        tokens = f"{question.total_tokens:,}"
        source = Text(
            f"{tokens} {'token' if question.total_tokens == 1 else 'tokens'}"
            + (" a month" if monthly else ""),
            f"{'每月 ' if monthly else ''}{tokens} 个 token",
        )
        rule = Text(
            f"/ {gen} generated {'token' if gen == 1 else 'tokens'} per request"
            + ("" if monthly else " (one-off volume, counted as one month)"),
            f"按每次请求生成 {gen} 个 token 计" + ("" if monthly else "；一次性用量，按一个月计"),
        )
        return requests, [Conversion("requests", source, requests, rule)]
    if question.hours_per_day is not None:
        est = protocols.run_estimate(dep, settings, None)
        tput = protocols.figure(est.to_dict(), "throughput_tok_s")  # rounded, as shown
        if tput:
            hours = f"{question.hours_per_day:g}"
            requests = int(question.hours_per_day * 3600 * 30 * tput / gen)
            rule = Text(
                f"{hours} h x 3600 s x 30 days x {tput:.1f} tok/s ({est.tier}) / {gen} tokens "
                "per request",
                f"{hours} 小时 x 3600 秒 x 30 天 x {tput:.1f} tok/s（{est.tier}）÷ 每次请求 {gen} 个 token",
            )
            source = Text(f"{hours} h/day", f"每天 {hours} 小时")
            return requests, [Conversion("requests", source, requests, rule)]
    return None, []


def settings_used_for(settings: Settings, question: Question | None) -> dict[str, Any]:
    used: dict[str, Any] = {
        "region": settings.region,
        "price_usd_per_kwh": settings.price_usd_per_kwh,
    }
    if settings.pue is not None:
        used["pue"] = settings.pue
    if question is not None and question.price_per_kwh is not None:
        used["price_per_kwh"] = question.price_per_kwh
        used["price_currency"] = question.price_currency
    return used
