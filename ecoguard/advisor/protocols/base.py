"""What every protocol shares: the request it runs on, the result record, batch sizes per use,
precision records, citations, money and everyday equivalents."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import ecoguard.knowledge as knowledge
from ecoguard.advisor.question import Question
from ecoguard.advisor.serving import BatchingAdvice
from ecoguard.advisor.texts import Text
from ecoguard.config import Settings
from ecoguard.deployment import FP8_PRECISIONS, Deployment
from ecoguard.findings import Finding, Mood
from ecoguard.knowledge.estimator import Estimate
from ecoguard.knowledge.served import FUSED_FP8_ENGINES
from ecoguard.quantization import facts_for, fused_fp8

# Batch sizes tried per use. Chat is interactive (one user waits on one stream); an API can
# coalesce concurrent requests; an offline batch job can fill the GPU. Reference rows stop at 64.
BATCH_SIZES_BY_USE: dict[str, tuple[int, ...]] = {
    "chat": (1,),
    "api": (1, 4, 8, 16),
    "batch": (1, 4, 8, 16, 32, 64),
}


# Two energies within this fraction are treated as a tie (the measured run-to-run spread of the
# reference rows is a few percent); ties go to the configuration that keeps FP16/BF16 outputs.
TIE_FRACTION = 0.05


UNQUANTIZED = ("fp16", "bf16", "fp32")


MAX_REFERENCE_BATCH = 64


def use_for_batch_size(batch_size: int | None) -> str:
    """The use assumed when a question states none: a served API (requests from many users,
    which the coalescing batcher can merge), or a batch job when the batch size is past what an
    API batches. Chat (one interactive user, batch size 1) is never assumed: it must be said."""
    return "api" if (batch_size or 1) <= max(BATCH_SIZES_BY_USE["api"]) else "batch"


@dataclass(frozen=True, slots=True)
class Request:
    """One protocol run: the question, the deployment framed from it and what the assembly
    derived (the monthly volume, how far it may batch, whether it is served). A protocol reads
    the question's own facts (language, concurrency, prices, observed figures...) from
    ``question``."""

    question: Question
    deployment: Deployment = field(default_factory=Deployment)
    settings: Settings = field(default_factory=Settings)
    requests_per_month: int | None = None
    max_batch: int | None = None
    serving: bool | None = None  # None: an API is served, a chat or batch job is not
    audit_gpu: str | None = None

    @property
    def language(self) -> str:
        return self.question.language


@dataclass(frozen=True, slots=True)
class AdvisorResult:
    """What one protocol found. ``rows`` are the table rows shown (records on an ``estimate``
    with ``to_dict``, or dicts of plain values with a tier); ``evidence`` are reference row ids
    behind the figures; ``current`` and ``optimized`` are the estimator's records."""

    protocol: str
    mood: Mood
    language: str = "en"
    deployment: Deployment | None = None
    findings: tuple[Finding, ...] = ()
    recommendation: dict[str, Any] | None = None
    rows: tuple[Any, ...] = ()
    tier: str = "none"
    sources: tuple[str, ...] = ()
    evidence: tuple[str, ...] = ()
    current: Estimate | None = None
    optimized: Estimate | None = None
    money: dict[str, Any] | None = None
    equivalents: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    out_of_data: tuple[dict[str, str], ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)
    batching: BatchingAdvice | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "protocol": self.protocol,
            "mood": self.mood.value,
            "language": self.language,
            "findings": [f.to_dict() for f in self.findings],
            "recommendation": self.recommendation,
            "rows": [r.to_dict() if hasattr(r, "to_dict") else dict(r) for r in self.rows],
            "tier": self.tier,
            "sources": list(self.sources),
            "evidence": list(self.evidence),
            "current": None if self.current is None else self.current.to_dict(),
            "optimized": None if self.optimized is None else self.optimized.to_dict(),
            "money": self.money,
            "equivalents": list(self.equivalents),
            "notes": list(self.notes),
            "out_of_data": [dict(o) for o in self.out_of_data],
        }
        if self.deployment is not None:
            out["deployment"] = deployment_dict(self.deployment)
        if self.batching is not None:
            out["batching"] = self.batching.to_dict()
        out.update(self.extra)
        return out


def deployment_dict(deployment: Deployment) -> dict[str, Any]:
    out: dict[str, Any] = {
        "model": deployment.model.id,
        "params_b": deployment.model.params_b,
        "gpu": deployment.gpu.profile,
        "gpu_name": deployment.gpu.name,
        "architecture": deployment.gpu.architecture,
        "precision": deployment.precision,
        "batch_size": deployment.batch_size,
        "prompt_tokens": deployment.prompt_tokens,
        "generation_tokens": deployment.generation_tokens,
        "use": deployment.use,
    }
    if deployment.gpu.count > 1:
        out["gpu_count"] = deployment.gpu.count  # spread over several GPUs (tensor parallel)
    if deployment.engine is not None:
        out["engine"] = deployment.engine
    return out


def with_precision(
    deployment: Deployment, precision: str, *, compiled: bool | None = None
) -> Deployment:
    """The deployment loaded at another precision, with the quantization record a loader would
    build for it (bitsandbytes for NF4/INT8, torchao for FP8; an engine's own fused FP8 where
    the deployment is served by vLLM, SGLang, TGI or TensorRT-LLM)."""
    quant = facts_for(precision, compiled=compiled).quant
    dtype = precision if precision in UNQUANTIZED else "fp16"
    if precision in FP8_PRECISIONS:
        dtype = "bf16"
        if deployment.engine in FUSED_FP8_ENGINES:
            quant = fused_fp8().quant
    return deployment.with_(precision=precision, quant=quant, dtype=dtype)


def row_lookup() -> dict[str, Any]:
    return {row.id: row for row in knowledge.reference_rows()}


def cite(
    row_ids: Iterable[str], extra_sources: Iterable[str] = ()
) -> tuple[tuple[str, ...], dict[str, int]]:
    """Sources and a tier count for the reference rows actually used."""
    lookup = row_lookup()
    sources: list[str] = []
    tiers: dict[str, int] = {}
    for row_id in dict.fromkeys(row_ids):
        row = lookup.get(row_id)
        if row is None:
            continue
        tiers[row.tier] = tiers.get(row.tier, 0) + 1
        if row.source not in sources:
            sources.append(row.source)
    for src in extra_sources:
        if src and src not in sources:
            sources.append(src)
    return tuple(sources), tiers


def cited_result(
    evidence: Iterable[str], extra_sources: Iterable[str] = (), **fields: Any
) -> AdvisorResult:
    """The protocol's result with its sources and evidence: the reference rows it used (each
    once, in order of first use) and the sources behind them."""
    row_ids = tuple(dict.fromkeys(evidence))
    sources, _tiers = cite(row_ids, extra_sources)
    return AdvisorResult(sources=sources, evidence=row_ids, **fields)


# The answer speaks the question's language; the knowledge table's labels are English.
_EQUIVALENT_LABELS_ZH = {
    "car_km": "公里（普通乘用车行驶里程）",
    "phone_charges": "次智能手机充满电",
    "led_hours": "小时（10 W LED 灯泡）",
}


def equivalents(
    energy_kwh: float | None, co2_kg: float | None, language: str = "en"
) -> tuple[str, ...]:
    if not energy_kwh or co2_kg is None:
        return ()
    out = []
    for item in knowledge.equivalents(energy_kwh, co2_kg)[:2]:
        label = Text(item.label, _EQUIVALENT_LABELS_ZH.get(item.key, item.label)).get(language)
        out.append(f"{item.value:,.{1 if item.value < 10 else 0}f} {label}")
    return tuple(out)


def figure(est_dict: dict[str, Any], key: str) -> float | None:
    value = est_dict.get(key)
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def money(question: Question, est: Estimate) -> dict[str, Any]:
    """Cost of the estimate's monthly volume in USD and, when it can be known, CNY (or the
    question's own currency when it priced electricity in one without a rate), from the
    monthly figures as the estimate's JSON rounds them. The question prices energy: the
    currency asked for (``USD``/``CNY``), an exchange rate, and a price per kWh in its own
    currency, each when given."""
    monthly = est.to_dict()["monthly"]
    kwh = monthly.get("energy_kwh")
    usd = monthly.get("cost_usd")
    currency, cny_per_usd, language = question.currency, question.cny_per_usd, question.language
    price_per_kwh, price_currency = question.price_per_kwh, question.price_currency
    cny: float | None = None
    notes: list[str] = []
    local: float | None = None
    if kwh is not None and price_per_kwh is not None and price_currency == "CNY":
        cny = kwh * price_per_kwh
        usd = cny / cny_per_usd if cny_per_usd else None
    elif kwh is not None and price_per_kwh is not None and price_currency not in (None, "USD"):
        # A price in another currency (EUR, GBP...): the cost in that currency, and no USD
        # figure, since no exchange rate is known.
        local, usd = kwh * price_per_kwh, None
        currency = price_currency
        notes.append(
            Text(
                f"Priced at {price_per_kwh:g} {price_currency}/kWh as given; no USD figure "
                "(no exchange rate).",
                f"按给出的 {price_per_kwh:g} {price_currency}/kWh 计价；没有汇率，不显示美元。",
            ).get(language)
        )
    elif usd is not None and cny_per_usd:
        cny = usd * cny_per_usd
    if currency == "CNY" and cny is None:
        notes.append(
            Text(
                "No exchange rate given, so costs are in USD; add e.g. 'rate 7.2' to see CNY.",
                "未给出汇率，费用以美元显示；加上如“汇率 7.2”即可换算成人民币。",
            ).get(language)
        )
    return {
        "requests": monthly.get("requests"),
        "energy_kwh": kwh,
        "energy_kwh_range": monthly.get("energy_kwh_range"),
        "cost_usd": usd,
        "cost_usd_range": (
            monthly.get("cost_usd_range") if usd == monthly.get("cost_usd") else None
        ),
        "co2_kg_range": monthly.get("co2_kg_range"),
        "cost_cny": cny,
        "cost_local": local,
        "co2_kg": monthly.get("co2_kg"),
        "currency": currency if (currency != "CNY" or cny is not None) else "USD",
        "cny_per_usd": cny_per_usd,
        "notes": notes,
    }


def money_side_by_side(
    question: Question, current: Estimate, optimized: Estimate | None
) -> dict[str, Any]:
    """The current configuration's money and, with an optimized one, its money and the saving
    in each currency both have (estimate's and optimize's side by side)."""
    out = {"current": money(question, current)}
    if not optimized:
        return out
    out["optimized"] = money(question, optimized)
    now, then = out["current"], out["optimized"]
    for key, saving in (
        ("cost_usd", "saving_usd"),
        ("cost_cny", "saving_cny"),
        ("cost_local", "saving_local"),
    ):
        if now[key] is not None and then[key] is not None:
            out[saving] = round(now[key] - then[key], 2)
    return out


def plural(count: int, word: str) -> str:
    return word if count == 1 else word + "s"
