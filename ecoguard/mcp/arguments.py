"""The MCP tools' arguments: each one's name, type, JSON-schema constraints and default, once.

An :class:`Argument` holds an ``Annotated[type, Field(...)]``; the SDK turns it into the
argument's JSON schema (types, ranges, enums, lengths, description) and validates every call
against it before a tool function runs. Tools that take the same fact share the same
:class:`Argument`, so ``batch_size`` means and accepts the same thing in every tool.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field

from ecoguard.config import Settings
from ecoguard.deployment import MAX_GPU_COUNT, PRECISIONS, SERVING_ENGINES, USES
from ecoguard.findings import RULE_IDS
from ecoguard.mcp.resources import GPUS_URI

# An agent may send a whole file to audit_code; beyond this it is more likely a mistake (a
# vendored bundle, a data file) than serving code, and parsing it would stall other calls.
MAX_SOURCE_BYTES = 1_048_576
# The advisor's own bound on a question (UTF-8 bytes); the schema says it up front.
MAX_QUESTION_CHARS = 10_000
# Reference rows returned by lookup_data at most per call (the dataset has a few hundred rows;
# an agent's context does not need them all at once).
MAX_LOOKUP_LIMIT = 500
DEFAULT_LOOKUP_LIMIT = 50


@dataclass(frozen=True)
class Argument:
    """One tool argument. ``schema`` is the annotation the SDK reads; ``schema_for`` replaces
    it where the schema names something known only when the server is built (the default
    region comes from the server's Settings)."""

    name: str
    schema: Any = None
    default: Any = None
    required: bool = False
    schema_for: Callable[[Settings], Any] | None = None

    def annotation(self, settings: Settings) -> Any:
        return self.schema_for(settings) if self.schema_for is not None else self.schema


def _text(description: str, *, most: int, optional: bool = True) -> Any:
    kind = str | None if optional else str
    return Annotated[kind, Field(min_length=1, max_length=most, description=description)]


def _count(description: str, *, least: int, most: int) -> Any:
    return Annotated[int | None, Field(ge=least, le=most, description=description)]


def _positive(description: str, *, most: float) -> Any:
    return Annotated[
        float | None, Field(gt=0, le=most, allow_inf_nan=False, description=description)
    ]


def _region_schema(settings: Settings) -> Any:
    return _text(
        f"electricity grid: us, china (cn), eu, uk, fr, de, in, jp, ca (default {settings.region})",
        most=40,
    )


_PRECISIONS = ", ".join(PRECISIONS)

# -- the deployment facts (optimize, compare, estimate, diagnose) ------------------------------

MODEL = Argument(
    "model",
    _text(
        "model id or size: 'Qwen/Qwen2.5-7B-Instruct', 'mistral-7b', '7B', '1.5b'",
        most=200,
        optional=False,
    ),
    required=True,
)
GPU = Argument(
    "gpu",
    _text(
        "GPU profile key, nickname or NVML name: 'rtx5090', '5090', '4090D', "
        f"'a800', 'H100', 'T4' (default rtx4090d; list: resource {GPUS_URI})",
        most=100,
    ),
)
PRECISION = Argument(
    "precision",
    _text(
        f"precision: {_PRECISIONS}; aliases accepted (int8 -> int8_mixed, "
        "4bit -> nf4, fp8 -> fp8_weight_only, half -> fp16)",
        most=40,
    ),
)
BATCH_SIZE = Argument(
    "batch_size", _count("sequences per generate call (default 1)", least=1, most=4096)
)
PROMPT_TOKENS = Argument(
    "prompt_tokens",
    _count("prompt tokens per sequence (default 512)", least=0, most=1_048_576),
)
GENERATION_TOKENS = Argument(
    "generation_tokens",
    _count("generated tokens per sequence (default 256)", least=1, most=1_048_576),
)
REQUESTS_PER_MONTH = Argument(
    "requests_per_month",
    _count(
        "requests per month for the cost and CO2 figures (default 1,000,000)",
        least=0,
        most=10**12,
    ),
)
REGION = Argument("region", schema_for=_region_schema)
USE = Argument(
    "use",
    Annotated[
        Literal[USES] | None,  # type: ignore[valid-type]
        Field(description="chat (interactive, batch 1), api (batch 1-16) or batch (1-64)"),
    ],
)
LANGUAGE = Argument(
    "language",
    Annotated[Literal["en", "zh"], Field(description="language of notes and messages")],
    default="en",
)
GPU_COUNT = Argument(
    "gpu_count",
    _count(
        "GPUs the model is spread over (tensor parallel): energy for all cards, VRAM per card "
        "(default 1)",
        least=1,
        most=MAX_GPU_COUNT,
    ),
)
ENGINE = Argument(
    "engine",
    Annotated[
        Literal[SERVING_ENGINES] | None,  # type: ignore[valid-type]
        Field(
            description="serving engine: its FP8 is fused kernels, and vllm, sglang, tgi and "
            "tensorrt_llm batch concurrent requests themselves (default: transformers' generate)"
        ),
    ],
)
# The shape of the workload and where it runs, after model, GPU and precision.
WORKLOAD = (
    BATCH_SIZE,
    PROMPT_TOKENS,
    GENERATION_TOKENS,
    REQUESTS_PER_MONTH,
    REGION,
    GPU_COUNT,
    ENGINE,
)

# compare and diagnose read the precision differently: compare lists every precision (the
# given one is "current"), diagnose infers it from the observed figures when omitted.
CURRENT_PRECISION = Argument(
    "precision",
    _text(
        f"your current precision (its traps are listed); one of {_PRECISIONS} or an alias",
        most=40,
    ),
)
DIAGNOSED_MODEL = Argument(
    "model",
    _text(
        "model id or size ('Mistral-7B', '7B'); without one the matching "
        "traps are explained from their evidence rows",
        most=200,
    ),
)
DIAGNOSED_PRECISION = Argument(
    "precision",
    _text(
        "precision in use; when omitted, the one whose expected figures "
        f"lie nearest the observed ones is inferred. One of {_PRECISIONS} or an alias",
        most=40,
    ),
)
OBSERVED = (
    Argument(
        "observed_throughput_tok_s",
        _positive("observed generated tokens per second", most=1e9),
    ),
    Argument("observed_power_w", _positive("observed average GPU power, W", most=1e9)),
    Argument(
        "observed_energy_j_per_1k",
        _positive("observed joules per 1000 generated tokens", most=1e9),
    ),
)
PRICE_USD_PER_KWH = Argument(
    "price_usd_per_kwh",
    _positive("electricity price override, USD per kWh (default: the region's)", most=10),
)
CNY_PER_USD = Argument(
    "cny_per_usd",
    _positive("exchange rate; when given, costs are also shown in CNY", most=1000),
)

# -- advise, audit_code, explain_trap, lookup_data ----------------------------------------------

QUESTION = Argument(
    "question",
    _text(
        "an energy question in English or Chinese, e.g. 'greenest config "
        "for Qwen2.5-3B on an RTX 5090' or '我想用 Yi-6B 跑 100 万字, 要花多少钱?'",
        most=MAX_QUESTION_CHARS,
        optional=False,
    ),
    required=True,
)
SOURCE = Argument(
    "source",
    Annotated[
        str,
        Field(
            max_length=MAX_SOURCE_BYTES,
            description="Python source text to audit (at most 1 MiB); it is parsed with "
            "ast, never imported or executed",
        ),
    ],
    required=True,
)
FILENAME = Argument(
    "filename",
    _text("the name shown in findings' locations (e.g. 'serve.py')", most=255, optional=False),
    default="snippet.py",
)
AUDIT_GPU = Argument(
    "gpu",
    _text(
        "the GPU the code will run on ('T4', 'A100', 'rtx4090'): enables "
        "bf16-unsupported, vram-overflow and the architecture's quantization crossover",
        most=100,
    ),
)
RULE_ID = Argument(
    "rule_id",
    Annotated[
        Literal[RULE_IDS],  # type: ignore[valid-type]
        Field(description="a rule id, as found in a finding's 'rule' field"),
    ],
    required=True,
)
LOOKUP = (
    Argument("gpu", _text("GPU key, nickname or NVML name", most=100)),
    Argument("model", _text("model id or size ('7B')", most=200)),
    Argument("precision", _text(f"{_PRECISIONS} or an alias", most=40)),
    Argument("batch_size", Annotated[int | None, Field(ge=1, le=4096)]),
    Argument(
        "tier",
        Annotated[
            Literal["measured", "reported", "local"] | None,
            Field(
                description="measured: a published data file with runs; reported: the "
                "publisher's prose only; local: rows measured on this machine"
            ),
        ],
    ),
    Argument(
        "limit",
        Annotated[int, Field(ge=1, le=MAX_LOOKUP_LIMIT, description="rows returned at most")],
        default=DEFAULT_LOOKUP_LIMIT,
    ),
)
