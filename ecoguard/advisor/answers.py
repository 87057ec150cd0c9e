"""The advisor's answers: one :class:`~ecoguard.advisor.question.Question` (from free text via
``advise``, or from CLI flags and MCP tool arguments via ``Question.from_flags``) -> ``answer``,
the one assembly path -> a protocol run through the ``PROTOCOLS`` table -> an ``Answer`` with
what was understood, assumed and found. Questions outside the reference data get a
gray answer with the measurement protocol; a trap that does not depend on the model is answered
without one; pasted code goes through the audit.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ecoguard.advisor import protocols
from ecoguard.advisor.accelerators import (
    VENDORS,
    NearestProfile,
    card_spec,
)
from ecoguard.advisor.answer import Answer
from ecoguard.advisor.coverage import OutOfData
from ecoguard.advisor.deployments import (
    build_deployment,
    honesty_notes,
    monthly_requests,
    resolve_gpu_match,
    resolve_gpu_spec,
    settings_for,
    settings_used_for,
    volume_default,
)
from ecoguard.advisor.estimates import Cells
from ecoguard.advisor.parse import parse_question
from ecoguard.advisor.question import OBSERVED_FIELDS, Default, Question
from ecoguard.advisor.registry import PROTOCOLS
from ecoguard.advisor.serving import (
    BatchingAdvice,
    batching_advice,
    batching_finding,
    requests_in_flight,
    serving_batch_cap,
)
from ecoguard.advisor.texts import Text
from ecoguard.config import Settings
from ecoguard.deployment import Deployment, GpuSpec
from ecoguard.errors import UsageError
from ecoguard.findings import Mood, weakest_tier
from ecoguard.knowledge.estimator import Estimate
from ecoguard.knowledge.served import CONTINUOUS_BATCHING_ENGINES
from ecoguard.rules.table import ROWS


def _gray(
    question: Question, items: tuple[OutOfData, ...], dep: Deployment | None
) -> protocols.AdvisorResult:
    return protocols.AdvisorResult(
        protocol=question.protocol,
        mood=Mood.GRAY,
        language=question.language,
        deployment=dep,
        out_of_data=tuple(o.to_dict() for o in items),
        extra={"measurement_protocol": True},
    )


_ASK_TO_PRICE = Text(
    "To put a $ figure on it, add the model (e.g. Qwen2.5-7B), the GPU (e.g. A800) and the "
    "volume (e.g. 1M requests a month, 100 requests per second).",
    "要算出具体花费，请补充模型（如 Qwen2.5-7B）、GPU（如 A800）和用量（如每月 100 万次请求、每秒 100 次请求）。",
)


# Said to a user who puts accuracy first, whatever the protocol recommends.
ACCURACY_CAVEAT = Text(
    "Accuracy-critical: only unquantized precisions (FP16/BF16) are recommended here. NF4, INT8 "
    "and FP8 change the model's outputs and can cost accuracy; validate any quantized setup on "
    "your own evaluation set before serving it.",
    "精度优先：这里只推荐不量化的精度（FP16/BF16）。NF4、INT8、FP8 会改变模型输出，可能降低准确率；"
    "上线任何量化配置之前，请先用你自己的评测集验证。",
)


# A problem with nothing to judge yet ("my GPU bill is crazy high, help!"): what to tell, and
# the traps to check first (by rule id).
_TELL_ME = Text(
    "To find what is burning the bill, tell me: 1) the model (e.g. Qwen2.5-7B); 2) the GPU "
    "(e.g. A800, T4, RTX 4090); 3) how it is loaded (fp16/bf16, load_in_8bit=True, "
    "load_in_4bit=True/NF4, FP8); 4) the batch size (prompts per generate call, or the "
    "engine's max batch). A measured tok/s or power figure lets me check it against the data.",
    "要找出电费高的原因，请告诉我：1）模型（如 Qwen2.5-7B）；2）GPU（如 A800、T4、RTX 4090）；"
    "3）加载方式（fp16/bf16、load_in_8bit=True、load_in_4bit=True/NF4、FP8）；"
    "4）批大小（每次 generate 处理几条提示，或推理引擎的最大批大小）。"
    "有实测的 tok/s 或功率数字，我可以拿它和数据对照。",
)
_TRAPS_TO_CHECK = (
    "int8-mixed",
    "small-model-quant",
    "batch-size-one",
    "fp8-eager",
    "vram-overflow",
    "bf16-unsupported",
)


def _tell_me_more(question: Question, settings_used: dict[str, Any]) -> Answer:
    """A problem stated with nothing to judge (no model, figure or trap flag): the questions
    to answer, and the traps to check first."""
    lang = question.language
    head = Text("Check these first:", "先检查这几个陷阱：").get(lang)
    colon = Text(": ", "：").get(lang)
    rows = (ROWS[rule] for rule in _TRAPS_TO_CHECK)
    notes = (head, *(r.id + colon + Text(r.look_for, r.look_for_zh).get(lang) for r in rows))
    result = protocols.AdvisorResult(
        protocol=question.protocol, mood=Mood.GRAY, language=lang, notes=notes
    )
    return Answer(result=result, question=question, settings_used=settings_used, asks=_TELL_ME)


def advise(text: object, *, settings: Settings | None = None) -> Answer:
    """Answer one free-text question. Raises UsageError (exit 2) for bad input, unknown names
    and contradictions."""
    return answer(parse_question(text), settings)


def answer(question: Question, settings: Settings | None = None) -> Answer:
    """THE assembly path: the answer to one question, whichever door it came through (free
    text, CLI flags, MCP tool arguments). Raises UsageError for unknown names and
    contradictions; anything else is a bug and propagates. Each answer has its own memo of
    estimates and findings (``Cells``), dropped with it."""
    with Cells().active():
        return _assemble(question, settings)


def _assemble(question: Question, settings: Settings | None) -> Answer:
    settings, region_defaults = settings_for(question, settings)
    settings_used = settings_used_for(settings, question)
    early = _answer_without_deployment(question, settings, settings_used)
    if early is not None:
        return early
    gpu_match = resolve_gpu_match(question.gpu)[1] if question.gpu else None
    dep, defaults = build_deployment(question, fill_precision=_fills_precision(question))
    defaults = region_defaults + defaults
    if question.out_of_data:
        return Answer(
            result=_gray(question, question.out_of_data, dep),
            question=question,
            defaults=tuple(defaults),
            measurement_protocol=True,
            settings_used=settings_used,
            gpu_match=gpu_match,
        )
    return _answer(question, dep, settings, settings_used, defaults, gpu_match)


def _fills_precision(question: Question) -> bool:
    """compare lists every precision and diagnose infers one from the figures: neither gets a
    default precision, unless the question names one (or diagnose has no figure to infer from)."""
    spec = PROTOCOLS[question.protocol]
    if spec.fills_precision or question.precisions:
        return True
    return spec.infers_precision and not question.has_figures


def _answer_without_deployment(
    question: Question, settings: Settings, settings_used: dict[str, Any]
) -> Answer | None:
    """Answers that need no deployment: code (audited), an accelerator outside the data (gray,
    with the protocol), a trap that does not depend on the model; a missing model a protocol
    needs is asked back (UsageError)."""
    if question.protocol == "data":  # the reference data's own counts (and the GPU's named)
        result = PROTOCOLS["data"].run(protocols.Request(question))
        return Answer(result=result, question=question, settings_used=settings_used)
    spec = PROTOCOLS[question.protocol]
    if spec.reads_code or question.code:
        return _audit_answer(question, settings_used)
    vendor = next((VENDORS[o.vendor] for o in question.out_of_data if o.vendor in VENDORS), None)
    if vendor is not None:
        return Answer(
            result=_gray(question, question.out_of_data, None),
            question=question,
            measurement_protocol=True,
            settings_used=settings_used,
            vendor=vendor,
        )
    if question.model is not None:
        return None
    trap = protocols.general_trap_rule(question.precision) is not None
    if spec.infers_precision and not question.has_figures and trap:
        return _trap_without_model(question, settings, settings_used)
    if spec.infers_precision and not question.has_figures:
        return _tell_me_more(question, settings_used)
    # A precision question without a model ("FP8 on Blackwell?") compares across models.
    if (spec.compares_without_model and question.precisions) or not spec.needs_model:
        return None
    if trap and not (spec.compares_with_gpu and question.gpu is not None):
        return _trap_without_model(question, settings, settings_used)
    if spec.compares_with_gpu and question.precisions:
        return None
    raise UsageError(
        Text(
            "which model? Name one, e.g. 'Qwen2.5-7B', 'Mistral-7B' or just a size like '7B'.",
            "哪个模型？请写上模型名，例如 Qwen2.5-7B、Mistral-7B，或只写大小如 7B。",
        ).get(question.language)
    )


def _answer(
    question: Question,
    dep: Deployment,
    settings: Settings,
    settings_used: dict[str, Any],
    defaults: list[Default],
    gpu_match: NearestProfile | None,
) -> Answer:
    """Run the protocol on the deployment, then add what every answer carries: batching advice,
    the extrapolated tier of a borrowed GPU profile, warnings, honesty notes."""
    lang = question.language
    serving = question.serving or (question.use is None and dep.use == "api")
    engine_batches = _engine_batches(question, dep)
    if engine_batches:
        dep, defaults = _batched_by_engine(question, dep, defaults)
    requests, volume_conversions = monthly_requests(question, dep, settings)
    spec = PROTOCOLS[question.protocol]
    listed_volume = volume_default(question, requests, settings, spec.lists_volume)
    if listed_volume is not None:
        defaults.append(listed_volume)
    monthly = requests if requests is not None else settings.monthly_requests
    max_batch = (
        dep.batch_size if engine_batches else _max_batch(question, dep, settings, monthly, serving)
    )
    # The requests in flight are the engine's batch already: no batcher, no batch-size-one.
    asked = replace(question, concurrency=dep.batch_size) if engine_batches else question
    result = spec.run(protocols.Request(asked, dep, settings, requests, max_batch, serving))
    if engine_batches:  # the engine batches; ecoguard's batcher is not put in front of it
        result = replace(result, batching=None)
    if requests is None and spec.lists_volume == "when_batched" and result.mood != Mood.GRAY:
        # The batching advice uses it.
        defaults.append(Default.of("requests_per_month", settings.monthly_requests))
    batching = result.batching
    if (
        batching is None
        and result.deployment is not None
        and result.mood != Mood.GRAY
        and not engine_batches
    ):
        # compare and diagnose: the batching advice for the deployment asked about.
        batching = _advice_for(question, dep, settings, monthly, serving)
        result = _with_batching(result, batching, question)
    if gpu_match is not None:
        result = _extrapolated(result)
    result = _mood_within_saving(result, lang)
    if question.accuracy_critical:
        result = replace(result, notes=(*result.notes, ACCURACY_CAVEAT.get(lang)))
    warnings = _warnings(dep, question)
    if warnings and result.mood == Mood.GREEN:
        result = replace(result, mood=Mood.YELLOW)  # it cannot run as asked: not green
    return Answer(
        result=result,
        question=question,
        defaults=tuple(defaults),
        honesty=tuple(
            honesty_notes(result.deployment or dep, _precisions_in_play(question, result))
        ),
        extra_conversions=tuple(volume_conversions),
        settings_used=settings_used,
        batching=batching,
        gpu_match=gpu_match,
        warnings=tuple(warnings),
    )


def _engine_batches(question: Question, dep: Deployment) -> bool:
    """An engine that batches the requests in flight itself (vLLM, SGLang, TGI, TensorRT-LLM)
    serves the deployment and no batch size is stated: the batch is the engine's."""
    return (
        question.batch_size is None
        and dep.use != "batch"
        and dep.engine in CONTINUOUS_BATCHING_ENGINES
    )


def _batched_by_engine(
    question: Question, dep: Deployment, defaults: list[Default]
) -> tuple[Deployment, list[Default]]:
    """The engine's continuous batching decides the batch size: the stated concurrency (the
    requests in flight it batches), else one request per step, the most energy per token (a
    ceiling: the figures fall as requests overlap). Listed as a default that says so."""
    engine = CONTINUOUS_BATCHING_ENGINES[dep.engine or ""]
    if question.concurrency:
        size = min(question.concurrency, protocols.MAX_REFERENCE_BATCH)
        how = Text(
            f"{engine} batches the {question.concurrency:,} requests in flight itself "
            "(continuous batching); say e.g. 'batch size 8' or --batch-size 8",
            f"{engine} 会自行合并同时在途的 {question.concurrency:,} 个请求（连续批处理）；"
            "写明批大小，例如“批大小 8”，或用 --batch-size 8",
        )
    else:
        size = 1
        how = Text(
            f"{engine} batches concurrent requests itself (continuous batching); with no "
            "concurrency stated the figures are for one request per step, the most energy per "
            "token; say e.g. '32 requests at once', 'batch size 8' or --batch-size 8",
            f"{engine} 会自行合并并发请求（连续批处理）；未写明并发数，按每步一个请求计，"
            "即每 token 能耗的上限；写明并发（如“并发 32”）或批大小（如“批大小 8”、--batch-size 8）",
        )
    entry = Default("batch_size", size, how)
    listed = [entry if d.field == "batch_size" else d for d in defaults]
    return dep.with_(batch_size=size), listed


def _advice_for(
    question: Question, dep: Deployment, settings: Settings, monthly: int, serving: bool
) -> BatchingAdvice | None:
    if not dep.model.params_b:
        return None
    return batching_advice(
        dep,
        settings=settings,
        requests_per_month=monthly,
        use=dep.use or "api",
        serving=serving,
        concurrency=question.concurrency,
        hours_per_day=question.hours_per_day,
    )


def _precisions_in_play(question: Question, result: protocols.AdvisorResult) -> tuple[str, ...]:
    """The precisions an answer talks about: asked, current, recommended."""
    found = list(question.precisions)
    if result.deployment and result.deployment.precision:
        found.append(result.deployment.precision)
    if result.recommendation and result.recommendation.get("precision"):
        found.append(result.recommendation["precision"])
    return tuple(dict.fromkeys(found))


def _max_batch(
    question: Question, dep: Deployment, settings: Settings, monthly: int, serving: bool
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
        concurrency=question.concurrency,
        hours_per_day=question.hours_per_day,
    )
    return serving_batch_cap(None if basis == "bandwidth" else in_flight)


def _with_batching(
    result: protocols.AdvisorResult, advice: BatchingAdvice | None, question: Question
) -> protocols.AdvisorResult:
    """compare and diagnose answers get the batching finding here (optimize and estimate add it
    themselves, so the library functions, the CLI and the MCP tools agree)."""
    if any(f.rule == "batch-size-one" for f in result.findings):
        return result
    finding = batching_finding(advice, question.language, usd=question.priced_in_usd)
    if finding is None:
        return result
    mood = Mood.worst([result.mood, Mood.YELLOW]) if result.mood != Mood.GRAY else result.mood
    return replace(result, findings=(*result.findings, finding), mood=mood)


def _mood_within_saving(result: protocols.AdvisorResult, lang: str) -> protocols.AdvisorResult:
    """An answer does not open with a trap (orange/red) that its own figures call negligible:
    when every orange or red finding's impact and the recommendation's saving are all under
    5%, the mood is yellow and a note says why."""
    if result.mood.rank < Mood.ORANGE.rank or not PROTOCOLS[result.protocol].weighs_saving:
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

    def fix_est(est: Estimate | None) -> Estimate | None:
        return None if est is None else replace(est, tier=cap(est.tier))

    def fix_row(r: Any) -> Any:
        if not isinstance(r, dict):  # a typed row: its tier is its estimate's
            return replace(r, estimate=fix_est(r.estimate))
        return {**r, "tier": cap(r.get("tier"))} if "tier" in r else r

    rows = tuple(fix_row(r) for r in result.rows)
    rec = result.recommendation
    if rec is not None and "tier" in rec:
        rec = {**rec, "tier": cap(rec["tier"])}
    return replace(
        result,
        tier=cap(result.tier),
        rows=rows,
        current=fix_est(result.current),
        optimized=fix_est(result.optimized),
        recommendation=rec,
    )


def _warnings(dep: Deployment, question: Question | None) -> list[Text]:
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
    question: Question, settings: Settings, settings_used: dict[str, Any]
) -> Answer:
    """A trap that does not depend on the model (load_in_8bit, FP8 eager...): answer it from its
    evidence rows, then ask for model, GPU and volume to price it."""
    gpu_spec = resolve_gpu_spec(question.gpu) if question.gpu else GpuSpec()
    dep = protocols.with_precision(Deployment(gpu=gpu_spec), question.precision or "fp16")
    # The trap is explained from its evidence rows: figures a question carries without a model
    # (``Question.from_flags("estimate", observed_power_w=...)``) are not read here.
    unmeasured = replace(question, **dict.fromkeys(OBSERVED_FIELDS))
    result = PROTOCOLS["diagnose"].run(protocols.Request(unmeasured, dep, settings))
    return Answer(
        result=result,
        question=question,
        settings_used=settings_used,
        asks=_ASK_TO_PRICE,
    )


def _audit_answer(question: Question, settings_used: dict[str, Any]) -> Answer:
    """Files named in the question, or code pasted into it, through ``ecoguard.audit`` (read as
    text, never run). Code that does not parse falls back to the trap its flags name."""
    gpu = question.gpu if question.gpu and card_spec(question.gpu) is None else None
    request = protocols.Request(question)
    run = PROTOCOLS["audit"].run
    try:
        result = run(replace(request, audit_gpu=gpu))
    except UsageError:  # a GPU the audit does not know: audit without the GPU-dependent rules
        result = run(request)
    asks = None
    if result.mood == Mood.GRAY and protocols.general_trap_rule(question.precision):
        traps = protocols.general_traps(question.precision)
        result = replace(result, findings=tuple(traps), mood=Mood.worst(f.mood for f in traps))
        asks = _ASK_TO_PRICE
    elif question.code and result.findings and question.model is None:
        asks = _ASK_TO_PRICE
    return Answer(result=result, question=question, settings_used=settings_used, asks=asks)
