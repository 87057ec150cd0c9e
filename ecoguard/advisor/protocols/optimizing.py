"""optimize: the recommended precision and batch size for a model, a GPU and a use."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ecoguard.advisor.estimates import run_estimate, run_rules
from ecoguard.advisor.protocols.base import (
    BATCH_SIZES_BY_USE,
    MAX_REFERENCE_BATCH,
    TIE_FRACTION,
    UNQUANTIZED,
    AdvisorResult,
    Request,
    cited_result,
    equivalents,
    figure,
    money_side_by_side,
    plural,
    use_for_batch_size,
    with_precision,
)
from ecoguard.advisor.serving import BatchingAdvice, batching_advice, batching_finding
from ecoguard.advisor.texts import Text
from ecoguard.advisor.uncertainty import Quote, quantization_holds, uncertain_reason
from ecoguard.deployment import PRECISIONS, Deployment
from ecoguard.errors import UsageError
from ecoguard.findings import TIER_STRENGTH, Finding, Mood, weakest_tier
from ecoguard.knowledge.estimator import Estimate


@dataclass(slots=True)
class _Cell:
    """One precision x batch size tried: the estimate and, as the search goes on, what ruled
    it out, whether its saving holds against the FP16 cell (``reference``) at the same batch
    size, and its rank. ``to_dict()`` is the table row's JSON."""

    precision: str
    batch_size: int
    estimate: Estimate
    rejected_by: list[str] | None = None
    holds: bool | None = None
    reference: _Cell | None = None
    rank: int | None = None

    @property
    def energy(self) -> float:
        """J per 1k generated tokens (every cell has one: see ``_candidates``)."""
        return self.estimate.energy_per_1k_tokens_j or 0.0

    def quote(self) -> Quote:
        return Quote(self.precision, self.batch_size, self.estimate)

    def to_dict(self) -> dict[str, Any]:
        """The row's JSON: the estimate's figures as its JSON rounds them."""
        est = self.estimate.to_dict()
        row: dict[str, Any] = {
            "precision": self.precision,
            "batch_size": self.batch_size,
            **{k: figure(est, k) for k in (ENERGY, "throughput_tok_s", "latency_s", "vram_gb")},
            "cost_usd_per_month": est["monthly"]["cost_usd"],
            **{k: est[k] for k in ("tier", "rows")},
        }
        for key in ("rejected_by", "holds", "rank"):
            if getattr(self, key) is not None:
                row[key] = getattr(self, key)
        return row


ENERGY = "energy_per_1k_tokens_j"


def _blocking(findings: Iterable[Finding]) -> list[Finding]:
    """Findings that rule a candidate out: a trap (orange) or waste (red). batch-size-one is a
    serving pattern, not a property of the configuration, and is not counted here."""
    return [f for f in findings if f.mood.rank >= Mood.ORANGE.rank and f.rule != "batch-size-one"]


def optimize(
    request: Request,
    *,
    use: str | None = None,
    precisions: Sequence[str] | None = None,
    batch_sizes: Sequence[int] | None = None,
) -> AdvisorResult:
    """Recommended precision and batch size for a model on a GPU and a use (chat, api, batch).

    Every candidate (precision x batch size allowed by the use, plus the current batch size) is
    estimated; candidates the rules flag as traps, that do not fit in VRAM, or that have no data
    are dropped. A quantized candidate (outputs change) may win only when its saving holds across
    the experiments' spread (``serving.quantization_holds``). The lowest energy per 1k tokens
    wins, with near-ties (within 5%) going to FP16/BF16, then the stronger data tier, then a batch
    no smaller than the current one. The request's ``max_batch``: a chat served to several users
    at once may batch them up to this size (the coalescing batcher). A batch smaller than the
    current one is recommended only with its cost and the reason stated. A served use (the
    request's ``serving``; default: an API) or a batch job gets batching advice
    (``result.batching``, from the question's concurrency and hours per day) and, when batching
    would save 5% or more, a ``batch-size-one`` finding (no USD figure in it when the question
    priced energy in another currency). An accuracy-critical question: quantized precisions
    change the outputs, so only unquantized ones are candidates. ``use``, ``precisions`` and
    ``batch_sizes`` narrow the search (default: the deployment's use, every precision, the use's
    batch sizes)."""
    deployment, settings, question = request.deployment, request.settings, request.question
    requests_per_month, language = request.requests_per_month, request.language
    use = _checked_use(deployment, use)
    sizes = _batch_sizes(deployment, use, batch_sizes, request.max_batch)
    current_dep = _current(deployment, use)
    current_est = run_estimate(current_dep, settings, requests_per_month)
    current_findings = run_rules(current_dep, settings)
    lossless = question.accuracy_critical
    tried = [p for p in precisions or PRECISIONS if p in UNQUANTIZED or not lossless]
    candidates, rejected = _candidates(request, current_dep, tried, sizes)
    if not candidates:
        return _nothing_passes(current_dep, current_est, current_findings, rejected, use, language)
    chosen, lowest, best_energy = _choose(candidates, current_dep.batch_size or 1)
    ranked = _ranked(candidates)
    current_energy = current_est.energy_per_1k_tokens_j
    reasons = _reasons(
        chosen, lowest, best_energy, candidates, rejected, current_dep, current_energy, use,
        sizes, language,
    )  # fmt: skip
    recommendation = _recommendation(chosen, current_est, use, reasons)
    mood = _mood(chosen, current_dep, current_findings, recommendation["saving_pct"])
    advice = _advice(request, current_dep, use, chosen.batch_size)
    findings = tuple(current_findings)
    finding = batching_finding(advice, language, usd=question.priced_in_usd)
    if finding is not None and not any(f.rule == finding.rule for f in findings):
        findings = (*findings, finding)
        mood = Mood.worst([mood, Mood.YELLOW])
    monthly = chosen.estimate.monthly
    priced = money_side_by_side(question, current_est, chosen.estimate)  # as estimate prices it
    return cited_result(
        [*current_est.rows, *chosen.estimate.rows, *_rows_of(ranked[:6])],
        [*current_est.sources, *chosen.estimate.sources],
        protocol="optimize",
        mood=mood,
        language=language,
        deployment=current_dep,
        findings=findings,
        recommendation=recommendation,
        rows=tuple(ranked),
        tier=weakest_tier((chosen.estimate.tier, current_est.tier)),
        current=current_est,
        optimized=chosen.estimate,
        money=priced,
        equivalents=equivalents(monthly.energy_kwh, monthly.co2_kg, language),
        notes=tuple(priced["current"]["notes"]),
        extra={"use": use, "rejected": [r.to_dict() for r in rejected]},
        batching=advice,
    )


def _advice(request: Request, current: Deployment, use: str, target: int) -> BatchingAdvice | None:
    """The batching advice for the deployment as it runs now, towards the chosen batch size: a
    served use (the request's ``serving``; default: an API) from the question's concurrency and
    hours per day."""
    settings, question = request.settings, request.question
    return batching_advice(
        current,
        settings=settings,
        requests_per_month=request.requests_per_month or settings.monthly_requests,
        use=use,
        serving=use == "api" if request.serving is None else request.serving,
        concurrency=question.concurrency,
        hours_per_day=question.hours_per_day,
        target_batch=target,
    )


def _checked_use(deployment: Deployment, use: str | None) -> str:
    """The use optimized for (stated, the deployment's, else assumed from its batch size);
    UsageError for an unknown use or a deployment without a model."""
    use = use or deployment.use or use_for_batch_size(deployment.batch_size)
    if use not in BATCH_SIZES_BY_USE:
        raise UsageError(f"unknown use {use!r}; accepted: chat, api, batch")
    if deployment.model.params_b is None and deployment.model.id is None:
        raise UsageError("optimize needs a model (an id like Qwen2.5-3B or a size like 3B)")
    return use


def _ranked(candidates: list[_Cell]) -> list[_Cell]:
    """The candidates by energy per 1k tokens, lowest first, each given its ``rank``."""
    ranked = sorted(candidates, key=lambda c: c.energy)
    for rank, cand in enumerate(ranked, start=1):
        cand.rank = rank
    return ranked


def _rows_of(cells: Iterable[_Cell]) -> list[str]:
    return [row for cell in cells for row in cell.estimate.rows]


def _current(deployment: Deployment, use: str) -> Deployment:
    """The deployment as it runs now: its precision (FP16 when none is stated), its batch size
    (1 when none is stated) and the use being optimized for."""
    current = deployment.with_(
        precision=deployment.precision or "fp16", batch_size=deployment.batch_size or 1, use=use
    )
    return with_precision(current, "fp16") if deployment.precision is None else current


def _nothing_passes(
    current: Deployment,
    current_est: Estimate,
    current_findings: list[Finding],
    rejected: list[_Cell],
    use: str,
    language: str,
) -> AdvisorResult:
    """Gray: no configuration has data that passes the rules (the rejected ones are listed)."""
    return AdvisorResult(
        protocol="optimize",
        mood=Mood.GRAY,
        language=language,
        deployment=current,
        findings=tuple(current_findings),
        current=current_est,
        rows=tuple(rejected),
        notes=(
            Text(
                "No configuration of this model on this GPU has data that passes the rules.",
                "该模型在此 GPU 上没有通过规则检查且有数据支撑的配置。",
            ).get(language),
        ),
        extra={"use": use},
    )


def _recommendation(
    chosen: _Cell, current_est: Estimate, use: str, reasons: list[str]
) -> dict[str, Any]:
    """The chosen configuration with its saving against the current one (energy %, $/month)."""
    current, row, chosen_json = current_est.to_dict(), chosen.to_dict(), chosen.estimate.to_dict()
    current_energy, energy = figure(current, ENERGY), row[ENERGY]
    current_cost, cost = current["monthly"]["cost_usd"], row["cost_usd_per_month"]
    saving_pct = round((1 - energy / current_energy) * 100.0, 1) if current_energy else None
    saving_usd = (
        round(current_cost - cost, 2) if current_cost is not None and cost is not None else None
    )
    return {
        "precision": chosen.precision,
        "batch_size": chosen.batch_size,
        "use": use,
        ENERGY: energy,
        "throughput_tok_s": row["throughput_tok_s"],
        "cost_usd_per_month": cost,
        "saving_pct": saving_pct,
        "saving_usd_per_month": saving_usd,
        "tier": row["tier"],
        "changes_outputs": chosen.precision not in UNQUANTIZED,
        "energy_per_1k_tokens_j_range": chosen_json["energy_per_1k_tokens_j_range"],
        "paired_deltas": chosen_json["paired_deltas"],
        "reasons": reasons,
    }


def _batch_sizes(
    deployment: Deployment,
    use: str,
    batch_sizes: Sequence[int] | None,
    max_batch: int | None,
) -> tuple[int, ...]:
    """The batch sizes tried: the use's grid (a served deployment only as far as its requests
    overlap, ``max_batch``), plus the current batch size unless the caller fixed the sizes."""
    if batch_sizes:
        return tuple(batch_sizes)
    sizes = BATCH_SIZES_BY_USE[use]
    if max_batch is not None:
        grid = sorted(set(BATCH_SIZES_BY_USE["api"]) | {max_batch})
        sizes = tuple(b for b in grid if b <= max_batch)
    current = deployment.batch_size or 1
    if current not in sizes and current <= MAX_REFERENCE_BATCH:
        sizes = tuple(sorted({*sizes, current}))
    return tuple(sizes)


def _candidates(
    request: Request, current: Deployment, precisions: Sequence[str], sizes: Sequence[int]
) -> tuple[list[_Cell], list[_Cell]]:
    """Every precision x batch size of the current deployment with data, under the request's
    settings and volume: ``(candidates, rejected)``; rejected ones carry the rules (or the VRAM
    overflow) that ruled them out."""
    settings, vram_limit = request.settings, current.gpu.vram_gb
    candidates: list[_Cell] = []
    rejected: list[_Cell] = []
    for precision in precisions:
        for batch in sizes:
            dep = with_precision(current, precision).with_(batch_size=batch)
            cell = _Cell(precision, batch, run_estimate(dep, settings, request.requests_per_month))
            if cell.estimate.energy_per_1k_tokens_j is None:
                continue  # nothing supports this cell; it is not a candidate
            blocking = _blocking(run_rules(dep, settings))
            if blocking:
                cell.rejected_by = [f.rule for f in blocking]
            elif vram_limit and (cell.estimate.vram_gb or 0) > vram_limit:
                cell.rejected_by = ["vram-overflow"]
            (rejected if cell.rejected_by else candidates).append(cell)
    return candidates, rejected


def _choose(candidates: list[_Cell], current_batch: int) -> tuple[_Cell, _Cell, float]:
    """``(chosen, lowest, best eligible energy)``. Quantizing changes outputs: a quantized
    cell is eligible only when its saving holds across the range the experiments span (the
    FP16 cell at the same batch size is the reference). Near-ties go to unquantized, then the
    stronger tier, then a batch no smaller than the current one."""
    fp16_at = {c.batch_size: c for c in candidates if c.precision == "fp16"}
    for cand in candidates:
        ref = fp16_at.get(cand.batch_size)
        cand.holds = (
            cand.precision in UNQUANTIZED
            or ref is None
            or quantization_holds(cand.estimate, ref.estimate)
        )
        cand.reference = ref
    eligible = [c for c in candidates if c.holds] or candidates
    lowest = min(candidates, key=lambda c: c.energy)
    best_energy = min(c.energy for c in eligible)
    near = [c for c in eligible if c.energy <= best_energy * (1 + TIE_FRACTION)]
    chosen = min(
        near,
        key=lambda c: (
            0 if c.precision in UNQUANTIZED else 1,
            -TIER_STRENGTH.get(c.estimate.tier, 0),
            c.batch_size < current_batch,
            c.batch_size,
            c.energy,
        ),
    )
    return chosen, lowest, best_energy


def _reasons(
    chosen: _Cell,
    lowest: _Cell,
    best_energy: float,
    candidates: list[_Cell],
    rejected: list[_Cell],
    current: Deployment,
    current_energy: float | None,
    use: str,
    sizes: Sequence[int],
    language: str,
) -> list[str]:
    """Why this recommendation, in the answer's language; a smaller batch than the current one
    always says what it costs and why."""
    n_cand, n_out = len(candidates), len(rejected)
    reasons = [
        Text(
            f"lowest energy per 1k tokens among {n_cand} {plural(n_cand, 'candidate')} that "
            f"{'passes' if n_cand == 1 else 'pass'} the rules ({n_out} ruled out as "
            f"{plural(n_out, 'trap')})",
            f"在 {n_cand} 个通过规则检查的候选中每千 token 能耗最低（{n_out} 个因陷阱被排除）",
        ).get(language)
    ]
    if lowest is not chosen and not lowest.holds:
        reasons.append(
            uncertain_reason(lowest.quote(), (lowest.reference or chosen).quote(), language)
        )
    if chosen.energy > best_energy:
        reasons.append(
            Text(
                "within 5% of the lowest, and keeps unquantized outputs",
                "与最低值相差不到 5%，且不改变模型输出（不量化）",
            ).get(language)
        )
    current_batch = current.batch_size or 1
    if chosen.batch_size < current_batch and current_energy:
        ratio = chosen.energy / current_energy
        why = _smaller_batch_why(current, candidates, rejected, use, language)
        reasons.append(
            Text(
                f"batch size {chosen.batch_size} is smaller than your current "
                f"{current_batch}: it costs {(ratio - 1) * 100:+.1f}% energy per token "
                f"({ratio:.1f}x); {why}",
                f"批大小 {chosen.batch_size} 比你当前的 {current_batch} 小："
                f"每 token 能耗 {(ratio - 1) * 100:+.1f}%（{ratio:.1f} 倍）；{why}",
            ).get(language)
        )
    if use == "chat" and chosen.batch_size == 1 and max(sizes) == 1:
        reasons.append(
            Text(
                "chat is interactive and no concurrent users are stated: batch size 1",
                "聊天是交互式的，且没有说明并发用户：批大小 1",
            ).get(language)
        )
    return reasons


def _mood(
    chosen: _Cell,
    current: Deployment,
    current_findings: list[Finding],
    saving_pct: float | None,
) -> Mood:
    if chosen.precision == current.precision and chosen.batch_size == current.batch_size:
        return Mood.GREEN
    if current_findings:
        return Mood.worst(f.mood for f in current_findings)
    if saving_pct is not None and saving_pct > TIE_FRACTION * 100:
        return Mood.YELLOW
    return Mood.GREEN


def _smaller_batch_why(
    current: Deployment,
    candidates: list[_Cell],
    rejected: list[_Cell],
    use: str,
    language: str,
) -> str:
    at_current = [r for r in rejected if r.batch_size == current.batch_size]
    if at_current:
        rules = sorted({rule for r in at_current for rule in r.rejected_by or ()})
        return Text(
            f"at batch size {current.batch_size} every configuration is ruled out ({', '.join(rules)})",
            f"批大小 {current.batch_size} 下所有配置都被排除（{'、'.join(rules)}）",
        ).get(language)
    if not any(c.batch_size == current.batch_size for c in candidates):
        return Text(
            f"no reference data supports batch size {current.batch_size} for a {use} use",
            f"没有参考数据支撑 {use} 用途下的批大小 {current.batch_size}",
        ).get(language)
    return Text(
        "within 5% of the lowest energy, at a shorter wait per request",
        "与最低能耗相差不到 5%，且每次请求等待更短",
    ).get(language)
