"""One question's facts: the ``Question`` record every front door makes (free text through
``parse.parse_question``, CLI flags and MCP tool arguments through :func:`Question.from_flags`),
and the defaults for what a question leaves out, chosen here once for every door.

``None`` means "not stated": the answer fills the default below and lists it with how to change
it (:class:`Default`), so the same question asked through ``ecoguard advise``, ``ecoguard
optimize --model ...`` or the MCP ``optimize`` tool is answered from the same facts.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from ecoguard.advisor.conversions import Conversion
from ecoguard.advisor.coverage import OutOfData
from ecoguard.advisor.texts import Text
from ecoguard.deployment import MAX_GPU_COUNT, SERVING_ENGINES, normalize_precision
from ecoguard.errors import UsageError
from ecoguard.knowledge import region as grid_region

# The defaults for what a question does not state (each listed in the answer with HOW_TO_STATE).
# The prompt and generation lengths live with the memory formula in ecoguard.knowledge.memory.
DEFAULT_GPU = "rtx4090d"
DEFAULT_PRECISION = "fp16"
DEFAULT_BATCH_SIZE = 1
# The grid a question is priced on when it names none (and ECOGUARD_REGION does not either):
# the US, China for a question in Chinese.
DEFAULT_REGION = "us"
DEFAULT_REGION_ZH = "china"

# The protocols a flags door (CLI command, MCP tool) asks for; audit has its own doors.
FLAG_PROTOCOLS = ("optimize", "compare", "estimate", "diagnose")
# The figures a user measured (diagnose compares them with the reference).
OBSERVED_FIELDS = ("observed_throughput_tok_s", "observed_power_w", "observed_energy_j_per_1k")


@dataclass(frozen=True, slots=True)
class Default:
    """A fact the question did not give, the value used, and how to change it."""

    field: str
    value: object
    how: Text

    def to_dict(self) -> dict[str, object]:
        return {"field": self.field, "value": self.value, "how_to_change": self.how.en}

    @classmethod
    def of(cls, field: str, value: object) -> Default:
        return cls(field, value, HOW_TO_STATE[field])


# How to state each fact a question left out (the note beside its default).
HOW_TO_STATE: dict[str, Text] = {
    "gpu": Text(
        "name a GPU, e.g. 'on an A800' or --gpu a800",
        "在问题里写上 GPU，例如“在 A800 上”，或用 --gpu a800",
    ),
    "precision": Text(
        "say e.g. 'NF4', 'INT8', 'load_in_8bit=True' or --precision",
        "写明精度，例如 NF4、INT8、load_in_8bit=True，或用 --precision",
    ),
    "batch_size": Text(
        "say e.g. 'batch size 8' or --batch-size 8",
        "写明批大小，例如“批大小 8”，或用 --batch-size 8",
    ),
    "prompt_tokens": Text(
        "say e.g. '1024 tokens in' or --prompt-tokens",
        "写明输入长度，例如“输入 1024”，或用 --prompt-tokens",
    ),
    "generation_tokens": Text(
        "say e.g. '128 tokens out' or --generation-tokens",
        "写明输出长度，例如“输出 128”，或用 --generation-tokens",
    ),
    "use": Text(
        "served requests from many users, which can be batched; say 'for chat' (one "
        "interactive user), 'for an API' or 'a batch job', or --use chat|api|batch",
        "按多用户在线服务计（可合并批处理）；写明“聊天”（单个交互用户）、“API 服务”或“批处理”，"
        "或用 --use chat|api|batch",
    ),
    "region": Text(
        "name a region, e.g. 'in the EU', 'in China', 'in the US', or --region eu",
        "在问题里写上地区（如“在美国”）即可更改",
    ),
    "requests_per_month": Text(
        "say e.g. '1M requests a month', '100 requests per second', '10,000 users a day' or "
        "--requests-per-month",
        "写明用量，例如“每月 100 万次请求”“每秒 100 次请求”“每天 1 万用户”，或用 --requests-per-month",
    ),
}

# Why a question with a volume and no stated use is served (free text and flags alike).
SERVED_BY_VOLUME = Text("a request volume from many users", "来自众多用户的请求量")


@dataclass(frozen=True, slots=True)
class Question:
    """What a question said, from any door. ``text`` is the question as written (None from
    flags or tool arguments); the rest are facts, ``None`` where not stated."""

    protocol: str
    language: str = "en"  # "en" | "zh"
    text: str | None = None
    protocol_reason: str = ""
    model: str | None = None  # as written: "Qwen2.5-3B", "mistral-7b", "7B"
    model_size_b: float | None = None
    gpu: str | None = None
    gpus: tuple[str, ...] = ()
    gpu_count: int | None = None  # GPUs the model is spread over ("4x A100", "tp=4", "两张")
    tensor_parallel: bool = False
    engine: str | None = None  # serving engine: vllm, tgi, sglang, tensorrt_llm, llamacpp
    accuracy_critical: bool = False  # output quality comes first: no lossy quantization
    precision: str | None = None  # canonical, the current/asked-about one
    precisions: tuple[str, ...] = ()  # every precision mentioned, in order
    compute_dtype: str | None = None  # "bf16" beside load_in_4bit=True: the compute dtype
    batch_size: int | None = None
    prompt_tokens: int | None = None
    generation_tokens: int | None = None
    use: str | None = None
    requests_per_month: int | None = None
    total_tokens: int | None = None  # a text volume to generate
    hours_per_day: float | None = None
    region: str | None = None
    currency: str = "USD"
    cny_per_usd: float | None = None
    price_per_kwh: float | None = None
    price_currency: str | None = None
    int8_threshold: float | None = None
    double_quant: bool | None = None
    compiled: bool | None = None
    observed_throughput_tok_s: float | None = None
    observed_power_w: float | None = None
    observed_energy_j_per_1k: float | None = None
    paths: tuple[str, ...] = ()
    code: str | None = None  # Python pasted into the question (audited, never run)
    concurrency: int | None = None
    tokens_period: str | None = None
    serving: bool = False  # requests from many users over time: batching applies
    use_reason: Text | None = None
    local: bool = False  # the GPU runs on the user's own machine (PUE 1.0)
    conversions: tuple[Conversion, ...] = ()
    out_of_data: tuple[OutOfData, ...] = ()
    notes: tuple[str, ...] = ()

    @classmethod
    def from_flags(
        cls,
        protocol: str,
        *,
        model: str | None = None,
        gpu: str | None = None,
        precision: str | None = None,
        batch_size: int | None = None,
        prompt_tokens: int | None = None,
        generation_tokens: int | None = None,
        requests_per_month: int | None = None,
        region: str | None = None,
        use: str | None = None,
        language: str = "en",
        price_usd_per_kwh: float | None = None,
        cny_per_usd: float | None = None,
        observed_throughput_tok_s: float | None = None,
        observed_power_w: float | None = None,
        observed_energy_j_per_1k: float | None = None,
        engine: str | None = None,
        gpu_count: int | None = None,
    ) -> Question:
        """The facts named as CLI flags or MCP tool arguments, read as the same facts stated in a
        question: a volume without a use is a service from many users, an API is served, a
        chat is served when a volume is given, a question in Chinese asks its cost in yuan.
        Unknown protocols, languages and regions are UsageErrors."""
        if protocol not in FLAG_PROTOCOLS:
            raise UsageError(f"unknown protocol {protocol!r}; one of: {', '.join(FLAG_PROTOCOLS)}")
        if language not in ("en", "zh"):
            raise UsageError(f"unknown language {language!r}; one of: en, zh")
        if engine is not None and engine not in SERVING_ENGINES:
            raise UsageError(f"unknown engine {engine!r}; one of: {', '.join(SERVING_ENGINES)}")
        if gpu_count is not None and not 1 <= gpu_count <= MAX_GPU_COUNT:
            raise UsageError(f"gpu count must be 1 to {MAX_GPU_COUNT}, got {gpu_count}")
        canonical = normalize_precision(precision) if precision is not None else None
        volume = requests_per_month is not None
        use, serving, why = _use_fact(use, volume)
        return cls(
            protocol=protocol,
            language=language,
            model=model,
            gpu=gpu,
            gpus=(gpu,) if gpu else (),
            precision=canonical,
            precisions=(canonical,) if canonical else (),
            batch_size=batch_size,
            prompt_tokens=prompt_tokens,
            generation_tokens=generation_tokens,
            use=use,
            requests_per_month=requests_per_month,
            region=grid_region(region).key if region else None,
            # A question in Chinese asks its cost in yuan, as the same words would.
            currency="CNY" if cny_per_usd or language == "zh" else "USD",
            cny_per_usd=cny_per_usd,
            price_per_kwh=price_usd_per_kwh,
            price_currency="USD" if price_usd_per_kwh is not None else None,
            observed_throughput_tok_s=observed_throughput_tok_s,
            observed_power_w=observed_power_w,
            observed_energy_j_per_1k=observed_energy_j_per_1k,
            serving=serving,
            use_reason=why,
            engine=engine,
            gpu_count=gpu_count if gpu_count and gpu_count > 1 else None,
        )

    @property
    def priced_in_usd(self) -> bool:
        """Its money has a USD figure: electricity priced in USD or CNY (or not at all), not in
        another currency without an exchange rate."""
        return self.price_currency in (None, "USD", "CNY")

    @property
    def has_figures(self) -> bool:
        """Observed figures were given (diagnose infers the precision from them)."""
        return any(getattr(self, name) is not None for name in OBSERVED_FIELDS)

    def to_dict(self) -> dict[str, object]:
        """What a free-text question was understood as (the answer's ``parsed`` section)."""
        out: dict[str, object] = {
            "language": self.language,
            "protocol": self.protocol,
            "protocol_reason": self.protocol_reason,
        }
        out.update(
            {name: getattr(self, name) for name in _LISTED if getattr(self, name) is not None}
        )
        out["currency"] = self.currency
        if len(self.precisions) > 1:
            out["precisions"] = list(self.precisions)
        if len(self.gpus) > 1:
            out["gpus"] = list(self.gpus)
        if self.paths:
            out["paths"] = list(self.paths)
        if self.code:
            out["code"] = self.code
        out["serving"] = self.serving
        if self.tensor_parallel:
            out["tensor_parallel"] = True
        if self.use_reason is not None:
            out["use_reason"] = self.use_reason.en
        if self.local:
            out["local"] = True
        if self.accuracy_critical:
            out["accuracy_critical"] = True
        out["conversions"] = [c.to_dict() for c in self.conversions]
        out["out_of_data"] = [o.to_dict() for o in self.out_of_data]
        if self.notes:
            out["notes"] = list(self.notes)
        return out


# The optional facts ``to_dict`` lists when stated, in field order: every fact that defaults to
# None, except the question's own text (not echoed back), pasted code (listed only when not
# empty) and the use's reason (listed in English).
_LISTED = tuple(
    f.name
    for f in fields(Question)
    if f.default is None and f.name not in ("text", "code", "use_reason")
)


def _use_fact(use: str | None, volume: bool) -> tuple[str | None, bool, Text | None]:
    """The use, whether it is served, and why, as the parser reads the same facts in words:
    a batch job is not served; a chat is served when a volume is given; an API, or a volume
    with no use stated, is served."""
    if volume and use not in ("batch", "chat", "api"):
        return "api", True, SERVED_BY_VOLUME
    return use, use == "api" or (use == "chat" and volume), None
