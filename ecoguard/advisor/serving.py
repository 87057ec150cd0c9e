"""Batching advice for every serving use.

Batching: the study's rule is that production APIs batch (BS >= 8), batch jobs use 32-64, and
interactive chat may run BS 1 but batches its concurrent users. ecoguard ships the fix: the
coalescing batcher (``ecoguard.install(batching=True, max_batch_size=N)``, docs/batching.md)
merges concurrent generate calls into one batched call. The advice says how many requests are in
flight (stated, or derived: monthly requests x seconds per request / seconds in the month), how
much GPU time the volume takes at the current batch size, the batch size the batcher can fill,
and the energy and money that saves, with the estimator's ranges and tiers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

from ecoguard.advisor.estimates import run_estimate
from ecoguard.advisor.texts import BLANK, TIERS_ZH, Text
from ecoguard.config import Settings
from ecoguard.deployment import BYTES_PER_PARAM, Deployment
from ecoguard.findings import Finding, Impact, Mood, weakest_tier
from ecoguard.knowledge import find_rows, gpu_profiles
from ecoguard.knowledge.fitting import loglog

SECONDS_PER_MONTH = 30 * 86_400
BATCHER_MAX = 16  # the batcher's max_batch_size the advice proposes for serving
BATCH_JOB_SIZE = 32  # prompts per generate call for an offline job (the study: 32-64)
MIN_SAVING_PCT = 5.0  # below this the difference is within run-to-run spread


@dataclass(frozen=True, slots=True)
class BatchingAdvice:
    """How batching changes this deployment's energy. ``target_batch`` 1 means nothing to
    coalesce (fewer than two requests in flight)."""

    use: str
    serving: bool
    current_batch: int
    target_batch: int
    concurrency: float | None
    concurrency_basis: str  # "stated" | "derived" | "none"
    seconds_per_request: float | None
    gpu_days_per_month: float | None  # GPU time the monthly volume takes at the current batch
    energy_now_j_per_1k: float | None
    energy_now_range: list[float] | None
    energy_target_j_per_1k: float | None
    energy_target_range: list[float] | None
    saving_pct: float | None
    saving_usd_per_month: float | None
    saving_kwh_per_month: float | None
    tier: str
    fix: str
    conditional: bool  # chat without a stated crowd: the advice applies if users overlap
    rows: tuple[str, ...] = ()

    @property
    def worth_it(self) -> bool:
        return (
            self.target_batch > self.current_batch
            and self.saving_pct is not None
            and self.saving_pct >= MIN_SAVING_PCT
        )

    def to_dict(self) -> dict[str, Any]:
        """Every field but the evidence rows, in field order, the figures rounded as
        ``_JSON_DIGITS`` says; then ``worth_it``."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "rows"}
        for name, digits in _JSON_DIGITS.items():
            out[name] = None if out[name] is None else round(out[name], digits)
        return {**out, "worth_it": self.worth_it}

    def lines(self, language: str, local_price: tuple[float, str] | None = None) -> list[str]:
        """The advice as sentences in the answer's language. ``local_price``: (price per kWh,
        currency symbol) when the question priced electricity in a currency other than USD."""
        lines = [self._gpu_time_line(), self._in_flight_line(language)]
        if self.target_batch <= self.current_batch:
            lines.append(self._nothing_to_coalesce_line())
        else:
            lines += self._batching_lines(local_price)
        return [line.get(language) for line in lines if line is not None]

    def _gpu_time_line(self) -> Text | None:
        """The GPU time the monthly volume takes at batch size 1. With the concurrency stated,
        the volume may be only the default, so the stated figure is the one shown instead."""
        if (
            self.gpu_days_per_month is None
            or self.current_batch != 1
            or self.concurrency_basis == "stated"
        ):
            return None
        days = self.gpu_days_per_month
        gpus = max(1, math.ceil(days / 30))
        more = BLANK
        if days > 30:
            more = Text(
                f": more than one GPU can do, at least {gpus} running around the clock",
                f"，一块 GPU 不够，至少要 {gpus} 块全天运行",
            )
        return Text(
            f"At batch size 1 the monthly volume is about {days:,.1f} GPU-days of work "
            f"({self.seconds_per_request:,.1f} s per request; a month is 30 days){more.en}.",
            f"按批大小 1，每月的请求量需要约 {days:,.1f} 个 GPU·天的计算"
            f"（每次请求 {self.seconds_per_request:,.1f} 秒；一个月 30 天）{more.zh}。",
        )

    def _in_flight_line(self, language: str) -> Text | None:
        """How many requests are in flight at once, and where that figure comes from."""
        if self.concurrency is None or self.use == "batch":
            return None
        basis = _BASIS.get(self.concurrency_basis, BLANK)
        count = _count(self.concurrency, self.concurrency_basis, language)
        return Text(
            f"Requests in flight at once: {count} ({basis.en}).",
            f"同时在处理的请求：{count}（{basis.zh}）。",
        )

    def _nothing_to_coalesce_line(self) -> Text | None:
        """At batch size 1 with no larger target: a bandwidth figure is only a lower bound,
        else fewer than two requests overlap."""
        if self.target_batch > 1 or self.current_batch > 1:
            return None
        if self.concurrency_basis == "bandwidth":
            return Text(
                "That is a lower bound: with the real (longer) latency more requests "
                "overlap; measure the latency with `ecoguard bench` before deciding on the "
                "batcher.",
                "这只是下限：实际延迟更长时同时在处理的请求更多；用 `ecoguard bench` 测出延迟后再决定是否开启批处理器。",
            )
        return Text(
            "Fewer than two requests are in flight, so a batcher would have nothing "
            "to coalesce; turn it on when traffic overlaps.",
            "同时在处理的请求不到 2 个，批处理器没有可合并的请求；请求量上来后再开启。",
        )

    def _batching_lines(self, local_price: tuple[float, str] | None) -> list[Text]:
        """What to do (batched calls, or the batcher) and what it saves; a caveat first when
        how many requests overlap is not known."""
        out: list[Text] = []
        saving = "-" if self.saving_pct is None else f"{self.saving_pct:.0f}%"
        amount = self._saving_amount(local_price)
        usd = BLANK if amount is None else Text(f", about {amount}/month", f"，每月约 {amount}")
        now = _range_text(self.energy_now_j_per_1k, self.energy_now_range)
        target = _range_text(self.energy_target_j_per_1k, self.energy_target_range)
        lead = Text(f"Coalesce concurrent requests: `{self.fix}`", f"合并并发请求：`{self.fix}`")
        if self.use == "batch":
            lead = Text(
                f"Pass {self.target_batch} prompts per generate call",
                f"每次 generate 传入 {self.target_batch} 个提示词",
            )
        unknown = self.concurrency is None or self.concurrency_basis == "bandwidth"
        if unknown and self.use != "batch" and not self.conditional:
            out.append(
                Text(
                    "How many requests overlap is not known (no latency figure for this "
                    f"configuration); the saving below assumes {self.target_batch} in flight.",
                    f"同时在处理的请求数未知（该配置没有延迟数据）；下面的节省假定有 {self.target_batch} 个请求同时在处理。",
                )
            )
        when = BLANK
        if self.conditional:
            when = Text("If several users chat at once: ", "如果有多个用户同时聊天，")
        out.append(
            Text(
                f"{when.en}{lead.en}, batch size {self.current_batch} -> {self.target_batch}: "
                f"{now} -> {target} J per 1k tokens, about {saving} less energy{usd.en} "
                f"({self.tier}; outputs unchanged).",
                f"{when.zh}{lead.zh}，批大小 {self.current_batch} -> {self.target_batch}："
                f"每千 token {now} -> {target} J，能耗降低约 {saving}{usd.zh}（{TIERS_ZH.get(self.tier, self.tier)}；输出不变）。",
            )
        )
        return out

    def _saving_amount(self, local_price: tuple[float, str] | None) -> str | None:
        """The monthly saving in the question's currency (kWh x its price), else in USD."""
        if local_price is not None and self.saving_kwh_per_month is not None:
            return f"{local_price[1]}{self.saving_kwh_per_month * local_price[0]:,.2f}"
        if local_price is None and self.saving_usd_per_month is not None:
            return f"${self.saving_usd_per_month:,.2f}"
        return None


# The decimals BatchingAdvice.to_dict rounds each unrounded figure to.
_JSON_DIGITS = {
    "concurrency": 2,
    "seconds_per_request": 2,
    "gpu_days_per_month": 1,
    "energy_now_j_per_1k": 1,
    "energy_target_j_per_1k": 1,
    "saving_kwh_per_month": 3,
}

# Where a requests-in-flight figure comes from, per basis.
_BASIS: dict[str, Text] = {
    "stated": Text("as stated", "问题中给出"),
    "derived": Text(
        "monthly requests x seconds per request / seconds in a month",
        "每月请求数 x 每次请求秒数 / 每月秒数",
    ),
    "neighbours": Text(
        "monthly requests x seconds per request / seconds in a month; seconds per "
        "request from the measured throughput of models of neighbouring size on "
        "this GPU",
        "每月请求数 x 每次请求秒数 / 每月秒数；每次请求秒数取自此 GPU 上相近大小模型的实测吞吐",
    ),
    "bandwidth": Text(
        "monthly requests x seconds per request / seconds in a month; no measured "
        "latency here, so seconds per request = generated tokens x weight bytes / "
        "memory bandwidth, a lower bound",
        "每月请求数 x 每次请求秒数 / 每月秒数；这里没有实测延迟，每次请求秒数按 生成 token 数 x "
        "权重字节数 / 显存带宽 计，是下限",
    ),
}


def _count(value: float, basis: str, language: str = "en") -> str:
    """A stated concurrency as written (500); a derived one as an estimate (about 2.7), a
    bandwidth one as a lower bound (at least 2.7)."""
    if basis == "stated":
        return f"{value:,.0f}"
    if basis == "bandwidth":
        return Text(f"at least {value:,.1f}", f"至少 {value:,.1f}").get(language)
    return Text(f"about {value:,.1f}", f"约 {value:,.1f}").get(language)


def _range_text(value: float | None, bounds: list[float] | None) -> str:
    if value is None:
        return "-"
    if bounds and len(bounds) == 2 and None not in bounds:
        return f"{value:,.0f} ({bounds[0]:,.0f}-{bounds[1]:,.0f})"
    return f"{value:,.0f}"


def seconds_per_request(est: dict[str, Any], deployment: Deployment) -> float | None:
    """Wall time of one request at this batch size: the estimator's latency, else generated
    tokens / throughput, else energy per request / power."""
    latency = est.get("latency_s")
    if isinstance(latency, (int, float)) and latency > 0:
        return float(latency)
    tput = est.get("throughput_tok_s")
    if isinstance(tput, (int, float)) and tput > 0 and deployment.generation_tokens:
        return deployment.generation_tokens * max(1, deployment.batch_size or 1) / tput
    energy, power = est.get("energy_per_request_j"), est.get("power_w")
    if isinstance(energy, (int, float)) and isinstance(power, (int, float)) and power > 0:
        return float(energy) / float(power)
    return None


# Bytes each parameter's weight takes in memory (ecoguard.deployment's table), but 4-bit weights
# without their quantization constants: the bound reads the packed weights alone (0.5 bytes).
PACKED_BYTES_PER_PARAM = {**BYTES_PER_PARAM, "nf4": 0.5, "nf4_dq": 0.5}


def neighbour_seconds_per_request(deployment: Deployment) -> float | None:
    """One request's time from the measured throughput of models of neighbouring size on the
    same GPU, precision and batch size 1 (log-log between the two that bracket the size, else
    the nearest within 2x): decode speed changes slowly with size, unlike a roofline bound."""
    params = deployment.model.params_b
    if not params or not deployment.gpu.profile:
        return None
    points: dict[float, list[float]] = {}
    for row in find_rows(
        gpu=deployment.gpu.profile, precision=deployment.precision or "fp16", batch_size=1
    ):
        if row.params_b and row.throughput_tok_s and row.tier in ("measured", "reported"):
            points.setdefault(float(row.params_b), []).append(float(row.throughput_tok_s))
    if not points:
        return None
    speed = sorted((size, sorted(v)[len(v) // 2]) for size, v in points.items())
    if not speed[0][0] / 2.0 <= params <= speed[-1][0] * 2.0:
        return None
    return (deployment.generation_tokens or 256) / loglog(speed, params)


def bandwidth_seconds_per_request(deployment: Deployment) -> float | None:
    """A lower bound on one request's time when no measured figure gives it: decoding reads
    every weight once per generated token, so a token takes at least weight bytes / memory
    bandwidth (the GPU profile's), and a request at least that x generated tokens."""
    params = deployment.model.params_b
    profile = gpu_profiles().get(deployment.gpu.profile or "")
    per_param = PACKED_BYTES_PER_PARAM.get(deployment.precision or "fp16")
    if not params or profile is None or not profile.mem_bandwidth_gbs or per_param is None:
        return None
    seconds_per_token = params * 1e9 * per_param / (profile.mem_bandwidth_gbs * 1e9)
    return (deployment.generation_tokens or 256) * seconds_per_token


def serving_batch_cap(in_flight: float | None) -> int:
    """The batch a batcher can fill: the requests in flight at once (rounded), at most
    BATCHER_MAX."""
    if in_flight is None:
        return BATCHER_MAX
    return max(1, min(BATCHER_MAX, int(in_flight + 0.5)))


def requests_in_flight(
    deployment: Deployment,
    *,
    settings: Settings,
    requests_per_month: int,
    concurrency: int | None,
    hours_per_day: float | None = None,
) -> tuple[float | None, str, float | None]:
    """``(requests in flight, basis, seconds per request at batch size 1)``: stated, or derived
    by Little's law (arrival rate x time in the system) from the monthly volume."""
    single = deployment.with_(batch_size=1)
    base = run_estimate(single, settings, requests_per_month).to_dict()
    per_request = seconds_per_request(base, single)
    basis = "derived"
    if per_request is None:
        per_request, basis = neighbour_seconds_per_request(single), "neighbours"
    if per_request is None:
        per_request, basis = bandwidth_seconds_per_request(single), "bandwidth"
    if concurrency is not None:
        return float(concurrency), "stated", per_request
    if per_request is None:
        return None, "none", None
    seconds = SECONDS_PER_MONTH * ((hours_per_day or 24.0) / 24.0)
    return requests_per_month * per_request / seconds, basis, per_request


def batching_advice(
    deployment: Deployment,
    *,
    settings: Settings,
    requests_per_month: int,
    use: str,
    serving: bool,
    concurrency: int | None,
    hours_per_day: float | None = None,
    target_batch: int | None = None,
) -> BatchingAdvice | None:
    """Batching advice for a served deployment (or a batch job); None without energy data.
    ``target_batch``: the batch size a recommendation already chose (the advice then prices
    that one, so the answer does not name two targets)."""
    current_batch = max(1, deployment.batch_size or 1)
    now_dep = deployment.with_(batch_size=current_batch)
    now = run_estimate(now_dep, settings, requests_per_month).to_dict()
    energy_now = now.get("energy_per_1k_tokens_j")
    if not isinstance(energy_now, (int, float)):
        return None
    in_flight, basis, per_request = requests_in_flight(
        now_dep,
        settings=settings,
        requests_per_month=requests_per_month,
        concurrency=concurrency,
        hours_per_day=hours_per_day,
    )
    conditional = use == "chat" and not serving
    target = _target_batch(use, conditional, current_batch, in_flight, basis, target_batch)
    after = (
        run_estimate(now_dep.with_(batch_size=target), settings, requests_per_month).to_dict()
        if target != current_batch
        else None
    )
    energy_after = (after or {}).get("energy_per_1k_tokens_j")
    return BatchingAdvice(
        use=use,
        serving=serving,
        current_batch=current_batch,
        target_batch=target,
        concurrency=in_flight,
        concurrency_basis=basis,
        seconds_per_request=per_request,
        gpu_days_per_month=(
            requests_per_month * per_request / 86_400 if per_request is not None else None
        ),
        energy_now_j_per_1k=energy_now,
        energy_now_range=now.get("energy_per_1k_tokens_j_range"),
        energy_target_j_per_1k=energy_after if isinstance(energy_after, (int, float)) else None,
        energy_target_range=None if after is None else after.get("energy_per_1k_tokens_j_range"),
        saving_pct=(
            round((1 - energy_after / energy_now) * 100.0, 1)
            if isinstance(energy_after, (int, float)) and energy_now
            else None
        ),
        saving_usd_per_month=_monthly_saving(now, after, "cost_usd", 2),
        saving_kwh_per_month=_monthly_saving(now, after, "energy_kwh"),
        tier=weakest_tier([est["tier"] for est in (now, after) if est is not None]),
        fix=f"ecoguard.install(batching=True, max_batch_size={max(target, 2)})",
        conditional=conditional,
        # The rows behind the current figure and, when there is a target, behind it too.
        rows=tuple(now["rows"] if after is None else dict.fromkeys([*now["rows"], *after["rows"]])),
    )


def _target_batch(
    use: str,
    conditional: bool,
    current_batch: int,
    in_flight: float | None,
    basis: str,
    chosen: int | None,
) -> int:
    """The batch size to aim for: 32 prompts per call for a batch job, 4 for a chat whose users
    may overlap, else what the requests in flight fill (the batcher's cap when unknown); a
    batch size a recommendation already chose wins when it is larger than the current one."""
    if chosen is not None and chosen > current_batch:
        return chosen
    if use == "batch":
        return max(current_batch, BATCH_JOB_SIZE)
    if conditional:
        return max(current_batch, 4)
    # A bandwidth bound understates how many requests overlap: target as if unknown.
    known = None if basis == "bandwidth" else in_flight
    return max(current_batch, serving_batch_cap(known))


def _monthly_saving(
    now: dict[str, Any], after: dict[str, Any] | None, key: str, digits: int | None = None
) -> float | None:
    """How much less of a monthly figure (``cost_usd``, ``energy_kwh``) the target batch
    takes; None when either side lacks it."""
    if after is None:
        return None
    before = (now.get("monthly") or {}).get(key)
    then = (after.get("monthly") or {}).get(key)
    if not isinstance(before, (int, float)) or not isinstance(then, (int, float)):
        return None
    return before - then if digits is None else round(before - then, digits)


def batching_finding(
    advice: BatchingAdvice | None, language: str, *, usd: bool = True
) -> Finding | None:
    """A served deployment (or batch job) left at a batch size its traffic can beat is not
    green: a ``batch-size-one`` finding (yellow) with the batcher, or batched calls, as its fix.
    None when batching would not save 5% or the advice is conditional (one chat user)."""
    if advice is None or not advice.worth_it or advice.conditional:
        return None
    target = advice.target_batch
    if advice.use == "batch":
        message = Text(
            f"A batch job at batch size {advice.current_batch}: every token streams all the "
            "weights for one prompt; 32-64 prompts per call share that pass.",
            f"批处理任务批大小为 {advice.current_batch}：每个 token 都为一个提示词读一遍全部权重；"
            "每次传入 32-64 个提示词可以分摊这次读取。",
        )
        fix = f"model.generate(**tokenizer(prompts[:{target}], padding=True, return_tensors='pt'))"
        summary = Text(
            f"{target} prompts per generate call", f"每次 generate 传入 {target} 个提示词"
        )
    else:
        crowd = Text("concurrent requests could share that pass", "并发的请求可以分摊这次读取")
        if advice.concurrency is not None:
            crowd = Text(
                f"{_count(advice.concurrency, advice.concurrency_basis)} requests are in flight "
                "and could share that pass",
                f"同时有 {_count(advice.concurrency, advice.concurrency_basis, 'zh')} 个请求可以分摊这次读取",
            )
        message = Text(
            f"Serving at batch size {advice.current_batch}: every token streams all the weights "
            f"for one request, while {crowd.en}.",
            f"以批大小 {advice.current_batch} 提供服务：每个 token 都为一个请求读一遍全部权重，"
            f"而{crowd.zh}。",
        )
        fix = advice.fix
        summary = Text(
            f"batch concurrent requests (up to {target} per call)",
            f"合并并发请求（每次最多 {target} 个）",
        )
    return Finding(
        rule="batch-size-one",
        mood=Mood.YELLOW,
        title="Batch-size-one serving",
        message=message.get(language),
        fix=fix,
        fix_summary=summary.get(language),
        impact=Impact(
            extra_energy_pct=(
                round((advice.energy_now_j_per_1k / advice.energy_target_j_per_1k - 1) * 100, 1)
                if advice.energy_now_j_per_1k and advice.energy_target_j_per_1k
                else None
            ),
            extra_usd_per_month=advice.saving_usd_per_month if usd else None,
            extra_kwh_per_month=advice.saving_kwh_per_month,
            tier=advice.tier,
        ),
        evidence=advice.rows,
        changes_outputs=False,
    )
