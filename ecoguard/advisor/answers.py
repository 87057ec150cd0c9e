"""From a parsed question (or CLI flags) to a Deployment, defaults, and a protocol's answer.

Names are resolved against the knowledge tables here: a GPU or model nobody knows is a usage
error naming the nearest known ones. Missing facts get the stated defaults (GPU RTX 4090D,
FP16, batch size 1, 512 prompt / 256 generated tokens) and the answer lists each with how to
change it. Questions outside the reference data get a gray answer with the measurement protocol.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from ecoguard.advisor import protocols
from ecoguard.advisor.accelerators import (
    VENDORS,
    NearestProfile,
    Vendor,
    card_spec,
    nearest_profile,
)
from ecoguard.advisor.extract import LOCAL_PUE
from ecoguard.advisor.parse import OutOfData, ParsedQuestion, parse_question
from ecoguard.advisor.registry import PROTOCOLS, Request
from ecoguard.advisor.serving import (
    BatchingAdvice,
    batching_advice,
    batching_finding,
    requests_in_flight,
    serving_batch_cap,
)
from ecoguard.advisor.texts import Text
from ecoguard.advisor.volume import Conversion
from ecoguard.config import Settings
from ecoguard.deployment import Deployment, GpuSpec, ModelSpec
from ecoguard.errors import UnknownGpuError, UsageError
from ecoguard.findings import Mood, weakest_tier

DEFAULT_GPU = "rtx4090d"
DEFAULT_PRECISION = "fp16"
DEFAULT_BATCH_SIZE = 1
DEFAULT_PROMPT_TOKENS = 512
DEFAULT_GENERATION_TOKENS = 256


@dataclass(frozen=True, slots=True)
class Default:
    """A fact the question did not give, the value used, and how to change it."""

    field: str
    value: object
    how: Text

    def to_dict(self) -> dict[str, object]:
        return {"field": self.field, "value": self.value, "how_to_change": self.how.en}


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


@dataclass(frozen=True, slots=True)
class Answer:
    """A protocol result plus what the question said and what was assumed."""

    result: protocols.AdvisorResult
    parsed: ParsedQuestion | None = None
    defaults: tuple[Default, ...] = ()
    honesty: tuple[HonestyNote, ...] = ()
    extra_conversions: tuple[Conversion, ...] = ()
    measurement_protocol: bool = False
    settings_used: dict[str, Any] = field(default_factory=dict)
    batching: BatchingAdvice | None = None
    gpu_match: NearestProfile | None = None
    warnings: tuple[Text, ...] = ()
    asks: Text | None = None  # what to add to the question to price it
    vendor: Vendor | None = None  # a non-NVIDIA accelerator named

    @property
    def language(self) -> str:
        return self.result.language

    def to_dict(self) -> dict[str, Any]:
        body = self.result.to_dict()
        body["defaults"] = [d.to_dict() for d in self.defaults]
        # The Chinese wording is for rendering; the JSON keeps one wording (English).
        body["honesty"] = [h.to_dict() for h in self.honesty]
        body["settings"] = dict(self.settings_used)
        if self.extra_conversions:
            body["conversions"] = [c.to_dict() for c in self.extra_conversions]
        if self.batching is not None:
            body["batching"] = self.batching.to_dict()
        if self.gpu_match is not None:
            body["gpu_match"] = self.gpu_match.to_dict()
        if self.warnings:
            body["warnings"] = [w.en for w in self.warnings]
        if self.asks is not None:
            body["asks"] = self.asks.en
        if self.vendor is not None:
            body["accelerator"] = {"vendor": self.vendor.key, "name": self.vendor.name}
        out: dict[str, Any] = {"protocol": self.result.protocol}
        if self.parsed is not None:
            out["parsed"] = self.parsed.to_dict()
        out.update(body)
        return out


# ---------------------------------------------------------------------------------------------


def resolve_gpu_spec(name: str) -> GpuSpec:
    return resolve_gpu_match(name)[0]


def resolve_gpu_match(name: str) -> tuple[GpuSpec, NearestProfile | None]:
    """The GPU's spec; an NVIDIA card outside the table is answered with the nearest profile
    (and its own VRAM), with the match returned so the answer can say why."""
    from ecoguard.knowledge import gpu_profiles, reference_rows, resolve_gpu

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
        profile = gpu_profiles()[match.profile_key]
        spec = GpuSpec(
            profile=profile.key,
            name=card.name,
            architecture=card.architecture,
            compute_capability=card.compute_capability,
            vram_gb=card.vram_gb,
        )
        return spec, match
    return (
        GpuSpec(
            profile=profile.key,
            name=profile.name,
            architecture=profile.architecture,
            compute_capability=tuple(profile.compute_capability),  # type: ignore[arg-type]
            vram_gb=profile.vram_gb,
        ),
        None,
    )


def resolve_model_spec(text: str) -> ModelSpec:
    from ecoguard.knowledge import resolve_model

    info = resolve_model(text)
    return info.to_model_spec()


def build_deployment(
    *,
    model: str | None,
    gpu: str | None,
    precision: str | None,
    batch_size: int | None,
    prompt_tokens: int | None,
    generation_tokens: int | None,
    use: str | None,
    compiled: bool | None = None,
    int8_threshold: float | None = None,
    fill_precision: bool = True,
) -> tuple[Deployment, list[Default]]:
    """A validated Deployment with defaults for what is missing (each one listed)."""
    defaults: list[Default] = []
    if gpu is None:
        gpu = DEFAULT_GPU
        defaults.append(
            Default(
                "gpu",
                DEFAULT_GPU,
                Text(
                    "name a GPU, e.g. 'on an A800' or --gpu a800",
                    "在问题里写上 GPU，例如“在 A800 上”，或用 --gpu a800",
                ),
            )
        )
    gpu_spec = resolve_gpu_spec(gpu)
    model_spec = resolve_model_spec(model) if model else ModelSpec()
    if precision is None and fill_precision:
        precision = DEFAULT_PRECISION
        defaults.append(
            Default(
                "precision",
                DEFAULT_PRECISION,
                Text(
                    "say e.g. 'NF4', 'INT8', 'load_in_8bit=True' or --precision",
                    "写明精度，例如 NF4、INT8、load_in_8bit=True，或用 --precision",
                ),
            )
        )
    if batch_size is None:
        batch_size = DEFAULT_BATCH_SIZE
        defaults.append(
            Default(
                "batch_size",
                DEFAULT_BATCH_SIZE,
                Text(
                    "say e.g. 'batch size 8' or --batch-size 8",
                    "写明批大小，例如“批大小 8”，或用 --batch-size 8",
                ),
            )
        )
    if prompt_tokens is None:
        prompt_tokens = DEFAULT_PROMPT_TOKENS
        defaults.append(
            Default(
                "prompt_tokens",
                DEFAULT_PROMPT_TOKENS,
                Text(
                    "say e.g. '1024 tokens in' or --prompt-tokens",
                    "写明输入长度，例如“输入 1024”，或用 --prompt-tokens",
                ),
            )
        )
    if generation_tokens is None:
        generation_tokens = DEFAULT_GENERATION_TOKENS
        defaults.append(
            Default(
                "generation_tokens",
                DEFAULT_GENERATION_TOKENS,
                Text(
                    "say e.g. '128 tokens out' or --generation-tokens",
                    "写明输出长度，例如“输出 128”，或用 --generation-tokens",
                ),
            )
        )
    if use is None:
        use = protocols.use_for_batch_size(batch_size)
        defaults.append(
            Default(
                "use",
                use,
                Text(
                    "served requests from many users, which can be batched; say 'for chat' (one "
                    "interactive user), 'for an API' or 'a batch job', or --use chat|api|batch",
                    "按多用户在线服务计（可合并批处理）；写明“聊天”（单个交互用户）、“API 服务”或“批处理”，"
                    "或用 --use chat|api|batch",
                ),
            )
        )
    dep = Deployment(
        model=model_spec,
        gpu=gpu_spec,
        batch_size=batch_size,
        prompt_tokens=prompt_tokens,
        generation_tokens=generation_tokens,
        use=use,
    )
    if precision is not None:
        dep = protocols.with_precision(dep, precision, compiled=compiled)
        if (
            int8_threshold is not None
            and dep.quant.method == "bitsandbytes"
            and dep.quant.bits == 8
        ):
            dep = dep.with_(
                quant=dep.quant.__class__(
                    **{**_quant_fields(dep), "int8_threshold": int8_threshold}
                )
            )
    return dep.validate(), defaults


def _quant_fields(dep: Deployment) -> dict[str, Any]:
    q = dep.quant
    return {name: getattr(q, name) for name in q.__slots__}  # type: ignore[attr-defined]


def settings_for(
    parsed: ParsedQuestion | None, base: Settings | None = None
) -> tuple[Settings, list[Default]]:
    """Settings for the question: its region (a Chinese question defaults to China), a local
    machine's PUE (1.0: no data-centre overhead) and a USD electricity price."""
    settings = base or Settings()
    defaults: list[Default] = []
    if parsed is None:
        return settings, defaults
    changes: dict[str, Any] = {}
    if parsed.region:
        changes["region"] = parsed.region
    elif parsed.language == "zh" and settings.region == "us":
        changes["region"] = "china"
        defaults.append(
            Default(
                "region",
                "china",
                Text(
                    "say 'in the US' (or another region) to change it",
                    "在问题里写上地区（如“在美国”）即可更改",
                ),
            )
        )
    if parsed.local and settings.pue is None:
        changes["pue"] = LOCAL_PUE
    if parsed.price_per_kwh is not None:
        if parsed.price_currency == "USD":
            changes["price_usd_per_kwh"] = parsed.price_per_kwh
        elif parsed.price_currency == "CNY" and parsed.cny_per_usd:
            changes["price_usd_per_kwh"] = parsed.price_per_kwh / parsed.cny_per_usd
    return (settings.with_(**changes) if changes else settings), defaults


# ---------------------------------------------------------------------------------------------
# Honesty: where the publisher's prose and the measured rows disagree, say both.


def honesty_notes(dep: Deployment, precisions: tuple[str, ...]) -> list[HonestyNote]:
    """Published vs measured figures for the GPU/precisions in play, computed from the data."""
    from ecoguard.knowledge import crossover, find_rows

    notes: list[HonestyNote] = []
    arch = dep.gpu.architecture
    for precision in precisions:
        if arch and precision in ("nf4", "int8_mixed", "int8_pure"):
            try:
                cross = crossover(arch, precision)
            except Exception:
                cross = None
            if (
                cross is not None
                and cross.fitted_b is not None
                and cross.reported_b is not None
                and abs(cross.fitted_b - cross.reported_b) / cross.reported_b > 0.15
            ):
                notes.append(
                    HonestyNote(
                        topic=Text(
                            f"{precision} crossover on {arch}", f"{precision} 在 {arch} 上的交叉点"
                        ),
                        measured=cross.fitted_b,
                        measured_tier=cross.fitted_tier,
                        published=cross.reported_b,
                        published_tier=cross.reported_tier,
                        unit=Text("B params", "十亿参数"),
                        sources=tuple(list(cross.sources)),
                        method=cross.method,
                    )
                )
        if dep.gpu.profile and precision not in ("fp16", "bf16", "fp32"):
            rows = find_rows(gpu=dep.gpu.profile, precision=precision, batch_size=1)
            measured = [
                r.delta_vs_fp16_pct
                for r in rows
                if r.tier == "measured" and r.delta_vs_fp16_pct is not None
            ]
            reported = [
                r.delta_vs_fp16_pct
                for r in rows
                if r.tier == "reported" and r.delta_vs_fp16_pct is not None
            ]
            if measured and reported:
                m_lo, m_hi = min(measured), max(measured)
                r_lo, r_hi = min(reported), max(reported)
                if r_hi < m_lo - 5 or r_lo > m_hi + 5:
                    notes.append(
                        HonestyNote(
                            topic=Text(
                                f"{precision} vs FP16 on {dep.gpu.profile}",
                                f"{dep.gpu.profile} 上 {precision} 相对 FP16",
                            ),
                            measured=[round(m_lo, 1), round(m_hi, 1)],
                            measured_tier="measured",
                            published=[round(r_lo, 1), round(r_hi, 1)],
                            published_tier="reported",
                            unit=Text("% energy vs FP16", "能耗变化 %"),
                            sources=tuple(sorted({r.source for r in rows})),
                        )
                    )
            if precision == "int8_pure" and measured and min(measured) > 0:
                # The publisher's guidance calls pure INT8 a saving on large-memory GPUs; the
                # measured rows on this GPU all cost more than FP16.
                notes.append(
                    HonestyNote(
                        topic=Text(
                            f"pure INT8 on {dep.gpu.profile}", f"{dep.gpu.profile} 上的纯 INT8"
                        ),
                        measured=[round(min(measured), 1), round(max(measured), 1)],
                        measured_tier="measured",
                        published=Text(
                            "described upstream as an energy saving vs FP16",
                            "上游资料称其比 FP16 省电",
                        ),
                        published_tier="reported",
                        unit=Text("% energy vs FP16", "相对 FP16 的能耗变化 %"),
                        sources=tuple(sorted({r.source for r in rows if r.tier == "measured"})),
                    )
                )
    return notes


# ---------------------------------------------------------------------------------------------


def _gray(
    parsed: ParsedQuestion, items: tuple[OutOfData, ...], dep: Deployment | None
) -> protocols.AdvisorResult:
    return protocols.AdvisorResult(
        protocol=parsed.protocol,
        mood=Mood.GRAY,
        language=parsed.language,
        deployment=dep,
        out_of_data=tuple(o.to_dict() for o in items),
        extra={"measurement_protocol": True},
    )


_ASK_TO_PRICE = Text(
    "To put a $ figure on it, add the model (e.g. Qwen2.5-7B), the GPU (e.g. A800) and the "
    "volume (e.g. 1M requests a month, 100 requests per second).",
    "要算出具体花费，请补充模型（如 Qwen2.5-7B）、GPU（如 A800）和用量（如每月 100 万次请求、每秒 100 次请求）。",
)


def advise(text: object, *, settings: Settings | None = None) -> Answer:
    """Answer one free-text question. Raises UsageError (exit 2) for bad input, unknown names
    and contradictions."""
    parsed = parse_question(text)
    settings, region_defaults = settings_for(parsed, settings)
    lang = parsed.language
    settings_used = _settings_used(settings, parsed)

    if parsed.protocol == "audit" or parsed.code:
        return _audit_answer(parsed, settings_used)

    vendor = next((VENDORS[o.vendor] for o in parsed.out_of_data if o.vendor in VENDORS), None)
    if vendor is not None:
        return Answer(
            result=_gray(parsed, parsed.out_of_data, None),
            parsed=parsed,
            measurement_protocol=True,
            settings_used=settings_used,
            vendor=vendor,
        )

    spec = PROTOCOLS[parsed.protocol]
    fill_precision = spec.fills_precision or bool(parsed.precisions)
    if (
        parsed.protocol == "diagnose"
        and parsed.precision is None
        and parsed.observed_throughput_tok_s is None
        and parsed.observed_power_w is None
        and parsed.observed_energy_j_per_1k is None
    ):
        fill_precision = True
    # A precision question without a model ("FP8 on Blackwell?") compares across models.
    needs_model = spec.needs_model and not (parsed.protocol == "compare" and parsed.precisions)
    no_figures = (
        parsed.observed_throughput_tok_s is None
        and parsed.observed_power_w is None
        and parsed.observed_energy_j_per_1k is None
    )
    if (
        parsed.model is None
        and parsed.protocol == "diagnose"
        and no_figures
        and protocols.general_trap_rule(parsed.precision) is not None
    ):
        return _trap_without_model(parsed, settings, settings_used)
    if parsed.model is None and needs_model:
        if protocols.general_trap_rule(parsed.precision) is not None and not (
            parsed.protocol in ("optimize", "compare") and parsed.gpu is not None
        ):
            return _trap_without_model(parsed, settings, settings_used)
        if not (parsed.protocol == "optimize" and parsed.precisions):
            raise UsageError(
                Text(
                    "which model? Name one, e.g. 'Qwen2.5-7B', 'Mistral-7B' or just a size like '7B'.",
                    "哪个模型？请写上模型名，例如 Qwen2.5-7B、Mistral-7B，或只写大小如 7B。",
                ).get(lang)
            )
    gpu_match = resolve_gpu_match(parsed.gpu)[1] if parsed.gpu else None
    use = parsed.use
    dep, defaults = build_deployment(
        model=parsed.model,
        gpu=parsed.gpu,
        precision=parsed.precision,
        batch_size=parsed.batch_size,
        prompt_tokens=parsed.prompt_tokens,
        generation_tokens=parsed.generation_tokens,
        use=use,
        compiled=parsed.compiled,
        int8_threshold=parsed.int8_threshold,
        fill_precision=fill_precision,
    )
    serving = parsed.serving or (use is None and dep.use == "api")
    defaults = region_defaults + defaults
    if parsed.out_of_data:
        return Answer(
            result=_gray(parsed, parsed.out_of_data, dep),
            parsed=parsed,
            defaults=tuple(defaults),
            measurement_protocol=True,
            settings_used=settings_used,
            gpu_match=gpu_match,
        )

    requests, volume_conversions = _requests(parsed, dep, settings)
    volume_default = _volume_default(parsed, requests, settings)
    if volume_default is not None:
        defaults.append(volume_default)
    monthly = requests if requests is not None else settings.monthly_requests
    max_batch = _max_batch(parsed, dep, settings, monthly, serving)
    result = PROTOCOLS[parsed.protocol].run(
        _request(parsed, dep, settings, requests, max_batch, serving)
    )
    if requests is None and parsed.protocol == "diagnose" and result.mood != Mood.GRAY:
        defaults.append(_volume_default_entry(settings))  # the batching advice uses it
    batching = result.batching
    # compare and diagnose: the batching advice for the deployment asked about.
    if (
        batching is None
        and result.deployment is not None
        and result.mood != Mood.GRAY
        and dep.model.params_b
    ):
        batching = batching_advice(
            dep,
            settings=settings,
            requests_per_month=monthly,
            use=dep.use or "api",
            serving=serving,
            concurrency=parsed.concurrency,
            hours_per_day=parsed.hours_per_day,
        )
        local = parsed.price_currency not in (None, "USD", "CNY")
        result = _with_batching(result, batching, lang, usd=not local)
    if gpu_match is not None:
        result = _extrapolated(result)
    result = _mood_within_saving(result, lang)
    warnings = _warnings(dep, parsed)
    if warnings and result.mood in (Mood.GREEN,):
        result = replace(result, mood=Mood.YELLOW)  # it cannot run as asked: not green
    precisions_in_play = tuple(
        dict.fromkeys(
            list(parsed.precisions)
            + (
                [result.deployment.precision]
                if result.deployment and result.deployment.precision
                else []
            )
            + (
                [result.recommendation["precision"]]
                if result.recommendation and result.recommendation.get("precision")
                else []
            )
        )
    )
    honesty = honesty_notes(result.deployment or dep, precisions_in_play)
    return Answer(
        result=result,
        parsed=parsed,
        defaults=tuple(defaults),
        honesty=tuple(honesty),
        extra_conversions=tuple(volume_conversions),
        settings_used=settings_used,
        batching=batching,
        gpu_match=gpu_match,
        warnings=tuple(warnings),
    )


def _settings_used(settings: Settings, parsed: ParsedQuestion | None) -> dict[str, Any]:
    used: dict[str, Any] = {
        "region": settings.region,
        "price_usd_per_kwh": settings.price_usd_per_kwh,
    }
    if settings.pue is not None:
        used["pue"] = settings.pue
    if parsed is not None and parsed.price_per_kwh is not None:
        used["price_per_kwh"] = parsed.price_per_kwh
        used["price_currency"] = parsed.price_currency
    return used


def _request(
    parsed: ParsedQuestion,
    dep: Deployment,
    settings: Settings,
    requests: int | None,
    max_batch: int | None,
    serving: bool,
) -> Request:
    return Request(
        deployment=dep,
        settings=settings,
        language=parsed.language,
        requests_per_month=requests,
        max_batch=max_batch,
        serving=serving,
        concurrency=parsed.concurrency,
        hours_per_day=parsed.hours_per_day,
        model_named=parsed.model is not None,
        precisions=parsed.precisions,
        observed_throughput_tok_s=parsed.observed_throughput_tok_s,
        observed_power_w=parsed.observed_power_w,
        observed_energy_j_per_1k=parsed.observed_energy_j_per_1k,
        currency=parsed.currency,
        cny_per_usd=parsed.cny_per_usd,
        price_per_kwh=parsed.price_per_kwh,
        price_currency=parsed.price_currency,
    )


def _max_batch(
    parsed: ParsedQuestion, dep: Deployment, settings: Settings, monthly: int, serving: bool
) -> int | None:
    """How far a served deployment may batch: the requests in flight at once (stated, or
    derived from the volume), at most the batcher's 16. None for a batch job (its grid applies)
    and for a chat with one user (batch size 1)."""
    if dep.use == "batch" or (dep.use == "chat" and not serving):
        return None
    in_flight, basis, _per_request = requests_in_flight(
        dep,
        settings=settings,
        requests_per_month=monthly,
        concurrency=parsed.concurrency,
        hours_per_day=parsed.hours_per_day,
    )
    return serving_batch_cap(None if basis == "bandwidth" else in_flight)


def _volume_default(
    parsed: ParsedQuestion, requests: int | None, settings: Settings
) -> Default | None:
    if requests is not None or parsed.protocol not in ("estimate", "optimize", "compare"):
        return None
    if parsed.protocol == "compare" and parsed.model is None:
        return None
    return _volume_default_entry(settings)


def _volume_default_entry(settings: Settings) -> Default:
    return Default(
        "requests_per_month",
        settings.monthly_requests,
        Text(
            "say e.g. '1M requests a month', '100 requests per second', '10,000 users a day' or "
            "--requests-per-month",
            "写明用量，例如“每月 100 万次请求”“每秒 100 次请求”“每天 1 万用户”，或用 --requests-per-month",
        ),
    )


def _with_batching(
    result: protocols.AdvisorResult,
    advice: BatchingAdvice | None,
    lang: str,
    *,
    usd: bool = True,
) -> protocols.AdvisorResult:
    """compare and diagnose answers get the batching finding here (optimize and estimate add it
    themselves, so the library functions, the CLI and the MCP tools agree)."""
    if any(f.rule == "batch-size-one" for f in result.findings):
        return result
    finding = batching_finding(advice, lang, usd=usd)
    if finding is None:
        return result
    mood = Mood.worst([result.mood, Mood.YELLOW]) if result.mood != Mood.GRAY else result.mood
    return replace(result, findings=(*result.findings, finding), mood=mood)


def _mood_within_saving(result: protocols.AdvisorResult, lang: str) -> protocols.AdvisorResult:
    """An answer does not open with a trap (orange/red) that its own figures call negligible:
    when every orange or red finding's impact and the recommendation's saving are all under
    5%, the mood is yellow and a note says why."""
    if result.mood.rank < Mood.ORANGE.rank or result.protocol not in ("estimate", "optimize"):
        return result
    severe = [f for f in result.findings if f.mood.rank >= Mood.ORANGE.rank]
    impacts = [
        abs(f.impact.extra_energy_pct)
        for f in severe
        if f.impact is not None and f.impact.extra_energy_pct is not None
    ]
    saving = (result.recommendation or {}).get("saving_pct")
    if not severe or len(impacts) < len(severe) or saving is None:
        return result
    limit = protocols.TIE_FRACTION * 100
    if max(impacts) >= limit or abs(saving) >= limit:
        return result
    note = Text(
        f"The rules flag {', '.join(f.rule for f in severe)}, but the data puts the difference at "
        f"{max(impacts):.1f}% (the best alternative saves {saving:.1f}%): within run-to-run "
        "spread, so this is not called a trap.",
        f"规则标记了 {'、'.join(f.rule for f in severe)}，但数据显示差别只有 {max(impacts):.1f}%"
        f"（最佳替代方案节省 {saving:.1f}%）：在测量波动之内，所以不算陷阱。",
    )
    worst_rest = [f.mood for f in result.findings if f.mood.rank < Mood.ORANGE.rank]
    mood = Mood.worst([Mood.YELLOW, *worst_rest])
    return replace(result, mood=mood, notes=(*result.notes, note.get(lang)))


def _extrapolated(result: protocols.AdvisorResult) -> protocols.AdvisorResult:
    """Figures borrowed from the nearest GPU profile: no tier stronger than extrapolated."""

    def cap(tier: object) -> str:
        return weakest_tier((str(tier or "none"), "extrapolated")) if tier != "none" else "none"

    def fix_dict(d: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if d is None else {**d, "tier": cap(d.get("tier"))}

    rows = tuple({**r, "tier": cap(r.get("tier"))} if "tier" in r else r for r in result.rows)
    rec = result.recommendation
    if rec is not None and "tier" in rec:
        rec = {**rec, "tier": cap(rec["tier"])}
    return replace(
        result,
        tier=cap(result.tier),
        rows=rows,
        current=fix_dict(result.current),
        optimized=fix_dict(result.optimized),
        recommendation=rec,
    )


def _warnings(dep: Deployment, parsed: ParsedQuestion | None) -> list[Text]:
    out: list[Text] = []
    window = dep.model.context_window
    total = (dep.prompt_tokens or 0) + (dep.generation_tokens or 0)
    if window and total > window:
        out.append(
            Text(
                f"{dep.prompt_tokens:,} prompt + {dep.generation_tokens:,} generated tokens = "
                f"{total:,}, past {dep.model.id}'s context window of {window:,} tokens: the "
                "model cannot attend to all of it (truncate the prompt or pick a model with a "
                "longer window); the figures assume it runs.",
                f"输入 {dep.prompt_tokens:,} + 输出 {dep.generation_tokens:,} = {total:,} 个 token，"
                f"超过了 {dep.model.id} 的上下文窗口 {window:,}：模型无法覆盖全部内容（截短输入或换更长窗口的模型）；"
                "以上数字按能运行估算。",
            )
        )
    return out


def _trap_without_model(
    parsed: ParsedQuestion, settings: Settings, settings_used: dict[str, Any]
) -> Answer:
    """A trap that does not depend on the model (load_in_8bit, FP8 eager...): answer it from its
    evidence rows, then ask for model, GPU and volume to price it."""
    gpu_spec = resolve_gpu_spec(parsed.gpu) if parsed.gpu else GpuSpec()
    dep = protocols.with_precision(Deployment(gpu=gpu_spec), parsed.precision or "fp16")
    result = protocols.diagnose(dep, settings=settings, language=parsed.language)
    result = replace(result, protocol="diagnose")
    return Answer(
        result=result,
        parsed=parsed,
        settings_used=settings_used,
        asks=_ASK_TO_PRICE,
    )


def _audit_answer(parsed: ParsedQuestion, settings_used: dict[str, Any]) -> Answer:
    """Files named in the question, or code pasted into it, through ``ecoguard.audit`` (read as
    text, never run). Code that does not parse falls back to the trap its flags name."""
    gpu = parsed.gpu if parsed.gpu and card_spec(parsed.gpu) is None else None
    request = Request(language=parsed.language, paths=parsed.paths, code=parsed.code)
    run = PROTOCOLS["audit"].run
    try:
        result = run(replace(request, audit_gpu=gpu))
    except UsageError:  # a GPU the audit does not know: audit without the GPU-dependent rules
        result = run(request)
    asks = None
    if result.mood == Mood.GRAY and protocols.general_trap_rule(parsed.precision):
        traps = protocols.general_traps(parsed.precision)
        result = replace(result, findings=tuple(traps), mood=Mood.worst(f.mood for f in traps))
        asks = _ASK_TO_PRICE
    elif parsed.code and result.findings and parsed.model is None:
        asks = _ASK_TO_PRICE
    return Answer(result=result, parsed=parsed, settings_used=settings_used, asks=asks)


def answer_for_flags(
    protocol: str,
    *,
    model: str | None,
    gpu: str | None = None,
    precision: str | None = None,
    batch_size: int | None = None,
    prompt_tokens: int | None = None,
    generation_tokens: int | None = None,
    requests_per_month: int | None = None,
    use: str | None = None,
    language: str = "en",
    settings: Settings | None = None,
    observed: dict[str, float | None] | None = None,
    cny_per_usd: float | None = None,
) -> Answer:
    """The answer for explicit facts (CLI flags, MCP tool arguments): ``optimize``,
    ``compare``, ``estimate`` or ``diagnose``. Both front doors call this, so
    ``ecoguard optimize --json`` and the MCP ``optimize`` tool return the same thing."""
    from ecoguard.deployment import normalize_precision

    if protocol not in PROTOCOLS or protocol == "audit":
        raise UsageError(f"unknown protocol {protocol!r}")
    spec = PROTOCOLS[protocol]
    settings = settings or Settings()
    dep, defaults = build_deployment(
        model=model,
        gpu=gpu,
        precision=normalize_precision(precision) if precision is not None else None,
        batch_size=batch_size,
        prompt_tokens=prompt_tokens,
        generation_tokens=generation_tokens,
        use=use,
        # compare lists every precision and diagnose infers one: neither is given a default.
        fill_precision=spec.fills_precision,
    )
    observed = observed or {}
    result = spec.run(
        Request(
            deployment=dep,
            settings=settings,
            language=language,
            requests_per_month=requests_per_month,
            observed_throughput_tok_s=observed.get("throughput_tok_s"),
            observed_power_w=observed.get("power_w"),
            observed_energy_j_per_1k=observed.get("energy_j_per_1k"),
            currency="CNY" if cny_per_usd else "USD",
            cny_per_usd=cny_per_usd,
        )
    )
    batching = result.batching
    in_play = tuple(
        p
        for p in (
            result.deployment.precision if result.deployment else None,
            (result.recommendation or {}).get("precision"),
        )
        if p
    )
    return Answer(
        result=result,
        defaults=tuple(defaults),
        honesty=tuple(honesty_notes(result.deployment or dep, in_play)),
        settings_used={"region": settings.region, "price_usd_per_kwh": settings.price_usd_per_kwh},
        batching=batching,
        gpu_match=resolve_gpu_match(gpu)[1] if gpu else None,
        warnings=tuple(_warnings(dep, None)),
    )


def _requests(
    parsed: ParsedQuestion, dep: Deployment, settings: Settings
) -> tuple[int | None, list[Conversion]]:
    """Monthly requests from what the question gave: a request count, a text volume (tokens /
    generated tokens per request), or serving hours per day (throughput x hours)."""
    conversions: list[Conversion] = []
    if parsed.requests_per_month is not None:
        return parsed.requests_per_month, conversions
    gen = dep.generation_tokens or DEFAULT_GENERATION_TOKENS
    if parsed.total_tokens is not None:
        requests = max(1, math.ceil(parsed.total_tokens / gen))
        monthly = parsed.tokens_period == "month"
        conversions.append(
            Conversion.of(
                "requests",
                f"{parsed.total_tokens:,} {'token' if parsed.total_tokens == 1 else 'tokens'}"
                + (" a month" if monthly else ""),
                requests,
                f"/ {gen} generated {'token' if gen == 1 else 'tokens'} per request"
                + ("" if monthly else " (one-off volume, counted as one month)"),
                f"按每次请求生成 {gen} 个 token 计"
                + ("" if monthly else "；一次性用量，按一个月计"),
                source_zh=f"{'每月 ' if monthly else ''}{parsed.total_tokens:,} 个 token",
            )
        )
        return requests, conversions
    if parsed.hours_per_day is not None:
        est = protocols.estimate_dict(protocols.run_estimate(dep, settings, None))
        tput = protocols.figure(est, "throughput_tok_s")
        if tput:
            requests = int(parsed.hours_per_day * 3600 * 30 * tput / gen)
            conversions.append(
                Conversion.of(
                    "requests",
                    f"{parsed.hours_per_day:g} h/day",
                    requests,
                    f"{parsed.hours_per_day:g} h x 3600 s x 30 days x {tput:.1f} tok/s "
                    f"({est.get('tier')}) / {gen} tokens per request",
                    f"{parsed.hours_per_day:g} 小时 x 3600 秒 x 30 天 x {tput:.1f} tok/s"
                    f"（{est.get('tier')}）÷ 每次请求 {gen} 个 token",
                    source_zh=f"每天 {parsed.hours_per_day:g} 小时",
                )
            )
            return requests, conversions
    return None, conversions
