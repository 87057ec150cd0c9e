"""The advisor's answers: a free-text question (``advise``) or explicit facts (``answer_for_flags``,
the CLI flags and the MCP tools) -> a protocol run through the ``PROTOCOLS`` table -> an
``Answer`` with what was parsed, assumed and found. Questions outside the reference data get a
gray answer with the measurement protocol; a trap that does not depend on the model is answered
without one; pasted code goes through the audit.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ecoguard.advisor import protocols
from ecoguard.advisor.accelerators import (
    VENDORS,
    NearestProfile,
    Vendor,
    card_spec,
)
from ecoguard.advisor.conversions import Conversion
from ecoguard.advisor.coverage import OutOfData
from ecoguard.advisor.deployments import (
    Default,
    HonestyNote,
    build_deployment,
    honesty_notes,
    monthly_requests,
    resolve_gpu_match,
    resolve_gpu_spec,
    settings_for,
    settings_used_for,
    volume_default,
    volume_default_entry,
)
from ecoguard.advisor.parse import ParsedQuestion, parse_question
from ecoguard.advisor.registry import PROTOCOLS, Request
from ecoguard.advisor.serving import (
    BatchingAdvice,
    batching_advice,
    batching_finding,
    requests_in_flight,
    serving_batch_cap,
)
from ecoguard.advisor.texts import Text
from ecoguard.config import Settings
from ecoguard.deployment import Deployment, GpuSpec, normalize_precision
from ecoguard.errors import UsageError
from ecoguard.findings import Mood, weakest_tier


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
    settings_used = settings_used_for(settings, parsed)
    early = _answer_without_deployment(parsed, settings, settings_used)
    if early is not None:
        return early
    gpu_match = resolve_gpu_match(parsed.gpu)[1] if parsed.gpu else None
    dep, defaults = build_deployment(
        model=parsed.model,
        gpu=parsed.gpu,
        precision=parsed.precision,
        batch_size=parsed.batch_size,
        prompt_tokens=parsed.prompt_tokens,
        generation_tokens=parsed.generation_tokens,
        use=parsed.use,
        compiled=parsed.compiled,
        int8_threshold=parsed.int8_threshold,
        fill_precision=_fills_precision(parsed),
        gpu_count=parsed.gpu_count,
        compute_dtype=parsed.compute_dtype,
        engine=parsed.engine,
    )
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
    return _answer(parsed, dep, settings, settings_used, defaults, gpu_match)


def _fills_precision(parsed: ParsedQuestion) -> bool:
    """compare lists every precision and diagnose infers one from the figures: neither gets a
    default precision, unless the question names one (or diagnose has no figure to infer from)."""
    if PROTOCOLS[parsed.protocol].fills_precision or parsed.precisions:
        return True
    return parsed.protocol == "diagnose" and not _has_figures(parsed)


def _has_figures(parsed: ParsedQuestion) -> bool:
    return any(
        v is not None
        for v in (
            parsed.observed_throughput_tok_s,
            parsed.observed_power_w,
            parsed.observed_energy_j_per_1k,
        )
    )


def _answer_without_deployment(
    parsed: ParsedQuestion, settings: Settings, settings_used: dict[str, Any]
) -> Answer | None:
    """Answers that need no deployment: code (audited), an accelerator outside the data (gray,
    with the protocol), a trap that does not depend on the model; a missing model a protocol
    needs is asked back (UsageError)."""
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
    if parsed.model is not None:
        return None
    trap = protocols.general_trap_rule(parsed.precision) is not None
    if parsed.protocol == "diagnose" and not _has_figures(parsed) and trap:
        return _trap_without_model(parsed, settings, settings_used)
    # A precision question without a model ("FP8 on Blackwell?") compares across models.
    needs_model = PROTOCOLS[parsed.protocol].needs_model and not (
        parsed.protocol == "compare" and parsed.precisions
    )
    if not needs_model:
        return None
    if trap and not (parsed.protocol in ("optimize", "compare") and parsed.gpu is not None):
        return _trap_without_model(parsed, settings, settings_used)
    if parsed.protocol == "optimize" and parsed.precisions:
        return None
    raise UsageError(
        Text(
            "which model? Name one, e.g. 'Qwen2.5-7B', 'Mistral-7B' or just a size like '7B'.",
            "哪个模型？请写上模型名，例如 Qwen2.5-7B、Mistral-7B，或只写大小如 7B。",
        ).get(parsed.language)
    )


def _answer(
    parsed: ParsedQuestion,
    dep: Deployment,
    settings: Settings,
    settings_used: dict[str, Any],
    defaults: list[Default],
    gpu_match: NearestProfile | None,
) -> Answer:
    """Run the protocol on the deployment, then add what every answer carries: batching advice,
    the extrapolated tier of a borrowed GPU profile, warnings, honesty notes."""
    lang = parsed.language
    serving = parsed.serving or (parsed.use is None and dep.use == "api")
    requests, volume_conversions = monthly_requests(parsed, dep, settings)
    listed_volume = volume_default(parsed, requests, settings)
    if listed_volume is not None:
        defaults.append(listed_volume)
    monthly = requests if requests is not None else settings.monthly_requests
    max_batch = _max_batch(parsed, dep, settings, monthly, serving)
    result = PROTOCOLS[parsed.protocol].run(
        _request(parsed, dep, settings, requests, max_batch, serving)
    )
    if requests is None and parsed.protocol == "diagnose" and result.mood != Mood.GRAY:
        defaults.append(volume_default_entry(settings))  # the batching advice uses it
    batching = result.batching
    if batching is None and result.deployment is not None and result.mood != Mood.GRAY:
        # compare and diagnose: the batching advice for the deployment asked about.
        batching = _advice_for(parsed, dep, settings, monthly, serving)
        local = parsed.price_currency not in (None, "USD", "CNY")
        result = _with_batching(result, batching, lang, usd=not local)
    if gpu_match is not None:
        result = _extrapolated(result)
    result = _mood_within_saving(result, lang)
    warnings = _warnings(dep, parsed)
    if warnings and result.mood == Mood.GREEN:
        result = replace(result, mood=Mood.YELLOW)  # it cannot run as asked: not green
    return Answer(
        result=result,
        parsed=parsed,
        defaults=tuple(defaults),
        honesty=tuple(honesty_notes(result.deployment or dep, _precisions_in_play(parsed, result))),
        extra_conversions=tuple(volume_conversions),
        settings_used=settings_used,
        batching=batching,
        gpu_match=gpu_match,
        warnings=tuple(warnings),
    )


def _advice_for(
    parsed: ParsedQuestion, dep: Deployment, settings: Settings, monthly: int, serving: bool
) -> BatchingAdvice | None:
    if not dep.model.params_b:
        return None
    return batching_advice(
        dep,
        settings=settings,
        requests_per_month=monthly,
        use=dep.use or "api",
        serving=serving,
        concurrency=parsed.concurrency,
        hours_per_day=parsed.hours_per_day,
    )


def _precisions_in_play(parsed: ParsedQuestion, result: protocols.AdvisorResult) -> tuple[str, ...]:
    """The precisions an answer talks about: asked, current, recommended."""
    found = list(parsed.precisions)
    if result.deployment and result.deployment.precision:
        found.append(result.deployment.precision)
    if result.recommendation and result.recommendation.get("precision"):
        found.append(result.recommendation["precision"])
    return tuple(dict.fromkeys(found))


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
