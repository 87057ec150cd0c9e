"""The MCP tools: one small function each, and the ``TOOLS`` table the server registers.

Nothing here computes a figure of its own: each tool calls the library function a CLI command
calls and returns that function's ``to_dict()``. A tool function is called with its validated
arguments by name (every argument of its :class:`ToolSpec`, defaults filled in), plus the
server's ``settings`` when it has a ``settings`` parameter. Its docstring is the tool's
description shown to the agent.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mcp.server.mcpserver.exceptions import ToolError

from ecoguard.advisor.answers import advise as advise_question
from ecoguard.advisor.answers import answer
from ecoguard.advisor.layout import ATTRIBUTION as DATA_ATTRIBUTION
from ecoguard.advisor.parse import parse_question
from ecoguard.advisor.question import Question
from ecoguard.audit import audit_source
from ecoguard.config import Settings
from ecoguard.knowledge import find_rows
from ecoguard.mcp import arguments as arg
from ecoguard.mcp.arguments import Argument
from ecoguard.rules import explain

# The audit is linear in the size of the source (about 1 s per 150 KB); this is a backstop.
AUDIT_TIME_LIMIT_S = 20.0

ATTRIBUTION = (
    f"{DATA_ATTRIBUTION}; compiled and tiered by ecoguard (see resource ecoguard://data/provenance)"
)


@dataclass(frozen=True)
class ToolSpec:
    """One tool: its name, the function that answers it, and its arguments in the order the
    agent sees them (they make the tool's input schema)."""

    name: str
    function: Callable[..., dict[str, Any]]
    arguments: tuple[Argument, ...]

    @property
    def description(self) -> str:
        return inspect.getdoc(self.function) or ""

    @property
    def wants_settings(self) -> bool:
        return "settings" in inspect.signature(self.function).parameters


# -- the deployment tools ------------------------------------------------------------------------
# Each makes the same Question the CLI flags and free text make, and asks the one assembly path.


def _answer(protocol: str, settings: Settings, facts: dict[str, Any]) -> dict[str, Any]:
    """The advisor's answer to the tool's facts. A name Question.from_flags does not take is a
    TypeError: a tool table that gives a deployment tool a foreign argument is a bug."""
    return answer(Question.from_flags(protocol, **facts), settings).to_dict()


def optimize(settings: Settings, **facts: Any) -> dict[str, Any]:
    """Recommended precision and batch size for a model on a GPU: every precision x batch
    size the use allows is estimated, configurations the rules flag as energy traps or that
    overflow VRAM are ruled out, and the lowest J per 1k tokens wins (near-ties go to
    FP16/BF16). Returns mood, recommendation, current vs optimized figures, findings,
    evidence row ids, tier and sources, and the defaults used for missing facts."""
    return _answer("optimize", settings, facts)


def compare(settings: Settings, **facts: Any) -> dict[str, Any]:
    """Every precision for one model on one GPU, side by side: tokens/s, J per 1k tokens,
    change vs FP16, tokens per J, VRAM, latency, power, $/month, rank and the tier of each
    row. Returns the rows plus findings for the current precision, tier and sources."""
    return _answer("compare", settings, facts)


def estimate(settings: Settings, **facts: Any) -> dict[str, Any]:
    """Energy per request and per 1k tokens, power, throughput, latency, VRAM and the
    monthly kWh, cost and CO2 for a deployment, with the optimized configuration beside it.
    ``current`` and ``optimized`` are the estimator's figures; each carries its tier
    (measured, reported, derived, extrapolated or none), method and source files."""
    return _answer("estimate", settings, facts)


def diagnose(settings: Settings, **facts: Any) -> dict[str, Any]:
    """Observed figures against the reference: per metric observed vs expected, and the
    energy trap that matches with a confidence (high within 20% of the trap's expectation,
    medium within 50%), its fix and evidence rows."""
    return _answer("diagnose", settings, facts)


# -- the other tools -----------------------------------------------------------------------------


def advise(settings: Settings, question: str) -> dict[str, Any]:
    """Answer a free-text energy question: the question is parsed (model, GPU, precision,
    batch size, lengths, volume, prices, region), missing facts get stated defaults, and
    the matching protocol (optimize, compare, estimate or diagnose) answers. Returns what
    was parsed, every conversion and default, the protocol's result and honesty notes where
    the publisher's prose and the measured rows disagree."""
    if parse_question(question).paths:
        # A question naming paths would make the server read files on its own machine; the
        # agent has the text, so it sends that. Code pasted into the question is audited as
        # text by the advisor (never run), like any other question.
        raise ToolError(
            "advise does not read files: pass the source text to the audit_code tool instead"
        )
    return advise_question(question, settings=settings).to_dict()


def audit_code(source: str, filename: str, gpu: str | None) -> dict[str, Any]:
    """Find energy traps in Python source before it runs: 8-bit bitsandbytes without
    llm_int8_threshold=0.0, 4/8-bit quantization of small models, torchao FP8 without
    torch.compile, generate() called one item at a time in a loop, bf16 on pre-Ampere GPUs,
    VRAM overflow, use_cache=False. Returns findings (rule, mood, message, fix, line and
    column), audit notes, and errors such as a syntax error (reported, not raised)."""
    size = len(source.encode("utf-8", errors="surrogatepass"))
    if size > arg.MAX_SOURCE_BYTES:
        raise ToolError(
            f"source is {size:,} bytes; audit_code accepts at most {arg.MAX_SOURCE_BYTES:,} "
            "bytes (1 MiB). Audit one module at a time, or run `ecoguard audit PATH` locally."
        )
    if filename.lower().endswith(".ipynb"):
        raise ToolError(
            "audit_code reads Python source text; for a notebook send the code cells joined "
            "as one .py text, or run `ecoguard audit notebook.ipynb` locally"
        )
    result = audit_source(source, filename, gpu=gpu, time_limit_s=AUDIT_TIME_LIMIT_S)
    return result.to_dict()


def explain_trap(rule_id: str) -> dict[str, Any]:
    """What an energy trap is: what the rule checks, why it costs energy, the fix, whether
    the fix can change model outputs, and up to 8 reference rows behind it (id, GPU, model,
    precision, batch size, J per 1k tokens, tier and source file)."""
    return explain(rule_id)


def lookup_data(**filters: Any) -> dict[str, Any]:
    """Reference rows matching every given filter, each with its figures (throughput, power,
    J per 1k tokens with spread, runs), tier and source file. ``total`` counts all matches;
    ``truncated`` says when more than ``limit`` matched."""
    limit = filters.pop("limit")
    rows = find_rows(**filters)
    shown = rows[:limit]
    return {
        "filters": filters,
        "total": len(rows),
        "returned": len(shown),
        "truncated": len(rows) > len(shown),
        "rows": [row.to_dict() for row in shown],
        "attribution": ATTRIBUTION,
    }


# -- the table -----------------------------------------------------------------------------------

TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "optimize",
        optimize,
        (arg.MODEL, arg.GPU, arg.PRECISION, *arg.WORKLOAD, arg.USE, arg.LANGUAGE),
    ),
    ToolSpec(
        "compare",
        compare,
        (arg.MODEL, arg.GPU, arg.CURRENT_PRECISION, *arg.WORKLOAD, arg.LANGUAGE),
    ),
    ToolSpec(
        "estimate",
        estimate,
        (
            arg.MODEL,
            arg.GPU,
            arg.PRECISION,
            *arg.WORKLOAD,
            arg.USE,
            arg.PRICE_USD_PER_KWH,
            arg.CNY_PER_USD,
            arg.LANGUAGE,
        ),
    ),
    ToolSpec(
        "diagnose",
        diagnose,
        (
            arg.DIAGNOSED_MODEL,
            arg.GPU,
            arg.DIAGNOSED_PRECISION,
            *arg.WORKLOAD,
            *arg.OBSERVED,
            arg.LANGUAGE,
        ),
    ),
    ToolSpec("advise", advise, (arg.QUESTION,)),
    ToolSpec("audit_code", audit_code, (arg.SOURCE, arg.FILENAME, arg.AUDIT_GPU)),
    ToolSpec("explain_trap", explain_trap, (arg.RULE_ID,)),
    ToolSpec("lookup_data", lookup_data, arg.LOOKUP),
)
