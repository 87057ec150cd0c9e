"""``ecoguard mcp``: the advisor, the audit, the rules and the reference data as MCP tools.

Coding agents (Claude Code, Claude Desktop, Cursor, ...) start this server over stdio and call
its tools, so their energy answers come from the reference data with a tier and a source on
every figure, and the code they write can be audited before it lands. Nothing here computes a
figure of its own: each tool validates its input, calls the library function a CLI command
calls, and returns that function's ``to_dict()`` as the tool's structured result.

Tools: ``optimize``, ``compare``, ``estimate``, ``diagnose`` (a deployment described by fields),
``advise`` (a free-text question), ``audit_code`` (source text; parsed, never executed),
``explain_trap`` (a rule id), ``lookup_data`` (reference rows by filter). Resources:
``ecoguard://data/provenance`` (where the figures come from), ``ecoguard://rules`` and
``ecoguard://data/gpus``.

Errors: bad input comes back as an MCP tool error (``isError``) naming what was wrong and what
is accepted; an unexpected failure is logged with its traceback on stderr and comes back as a
tool error too. The server keeps serving either way. stdout carries only the protocol: logging
goes to stderr, and the SDK's stdio transport points file descriptor 1 at stderr while it owns
the wire, so a stray ``print`` cannot corrupt a message.

This module deliberately does not use ``from __future__ import annotations``: the SDK builds
each tool's JSON schema from the real annotation objects (``Annotated[int, Field(ge=1)]``), and
postponed (string) annotations could only be resolved from module globals, which would force
pydantic and the SDK into this module's import. Here they are imported inside
:func:`build_server`, so ``ecoguard --help`` pays only for argparse; the tool functions are
defined there, where their annotations evaluate against those local imports.
"""

import argparse
import functools
import json
import logging
import math
from collections.abc import Callable
from typing import Any, TypeVar

logger = logging.getLogger("ecoguard.mcp")

SERVER_NAME = "ecoguard"
PROVENANCE_URI = "ecoguard://data/provenance"
RULES_URI = "ecoguard://rules"
GPUS_URI = "ecoguard://data/gpus"

# An agent may send a whole file to audit_code; beyond this it is more likely a mistake (a
# vendored bundle, a data file) than serving code, and parsing it would stall other calls.
MAX_SOURCE_BYTES = 1_048_576
# The advisor's own bound on a question (UTF-8 bytes); the schema says it up front.
MAX_QUESTION_CHARS = 10_000
# Reference rows returned by lookup_data at most per call (the dataset has a few hundred rows;
# an agent's context does not need them all at once).
MAX_LOOKUP_LIMIT = 500
DEFAULT_LOOKUP_LIMIT = 50
# Tool calls run in worker threads, at most MAX_RUNNING_CALLS at once, so CPU-bound calls (48
# concurrent audits of large modules) cannot crowd out the event loop that reads the wire and
# answers ping; MAX_WAITING_CALLS more wait their turn and any beyond are refused as busy.
MAX_RUNNING_CALLS = 2
MAX_WAITING_CALLS = 32
# The audit is linear in the size of the source (about 1 s per 150 KB); this is a backstop.
AUDIT_TIME_LIMIT_S = 20.0
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")

ATTRIBUTION = (
    "Hongping Zhang, EcoCompute (2026), Zenodo 10.5281/zenodo.19647290, CC BY 4.0; compiled "
    "and tiered by ecoguard (see resource ecoguard://data/provenance)"
)

INSTRUCTIONS = (
    "ecoguard answers GPU energy questions for LLM inference from a reference dataset of "
    "measured and reported runs (EcoCompute). Every figure carries a tier (measured, reported, "
    "derived, extrapolated, none) and the source files behind it: quote them with the figure. "
    "Use optimize/compare/estimate/diagnose for a described deployment, advise for a free-text "
    "question, audit_code before proposing model-loading or generate code, explain_trap for "
    "a rule id found in a result, lookup_data for raw reference rows."
)

_Fn = TypeVar("_Fn", bound=Callable[..., Any])


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "mcp",
        help="serve the advisor, audit and reference data as MCP tools over stdio",
        description=(
            "Start a Model Context Protocol server on stdin/stdout exposing the tools optimize, "
            "compare, estimate, diagnose, advise, audit_code, explain_trap and lookup_data, and "
            "the dataset's provenance as a resource. Meant to be started by an MCP client "
            "(see docs/mcp.md for the client configuration). Needs the `mcp` extra."
        ),
    )
    parser.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        default="WARNING",
        help="stderr log level (default WARNING; INFO logs each rejected call)",
    )
    parser.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> int:
    import sys

    # First basicConfig wins: the SDK's own call later finds handlers in place and keeps
    # these on stderr. stdout is the protocol.
    logging.basicConfig(
        stream=sys.stderr,
        level=args.log_level,
        format="ecoguard mcp: %(levelname)s %(name)s: %(message)s",
    )
    server = build_server(log_level=args.log_level)
    import anyio

    anyio.run(_run_stdio, server)
    return 0


async def _run_stdio(server: Any) -> None:
    """Serve over stdio with every inbound line checked first (ecoguard.mcp.stdio), so a
    malformed line gets a JSON-RPC error instead of the SDK's silence."""
    lowlevel = getattr(server, "_lowlevel_server", None)
    if lowlevel is None:  # an SDK that moved it: serve as the SDK does, unchecked
        logger.warning("this MCP SDK hides its low-level server; malformed lines go unanswered")
        await server.run_stdio_async()
        return
    from ecoguard.mcp.stdio import checked_stdio

    async with checked_stdio() as (read_stream, write_stream):
        await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())


# ---------------------------------------------------------------------------------------------
# Error handling shared by every tool


class _CallGate:
    """Runs tool functions in worker threads: ``running`` at a time, ``waiting`` more queued,
    the rest refused at once with a tool error saying so. Used from the event loop only."""

    def __init__(self, running: int = MAX_RUNNING_CALLS, waiting: int = MAX_WAITING_CALLS):
        self.running = running
        self.waiting = waiting
        self.admitted = 0  # calls running or waiting now
        self._limiter: Any = None

    async def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        import anyio.to_thread
        from anyio import CapacityLimiter
        from mcp.server.mcpserver.exceptions import ToolError

        if self.admitted >= self.running + self.waiting:
            raise ToolError(
                f"busy: {self.admitted} tool calls are running or waiting (at most "
                f"{self.running} run at once, {self.waiting} wait); retry in a moment"
            )
        if self._limiter is None:
            self._limiter = CapacityLimiter(self.running)
        self.admitted += 1
        try:
            call = functools.partial(fn, *args, **kwargs)
            return await anyio.to_thread.run_sync(call, limiter=self._limiter)
        finally:
            self.admitted -= 1


def _tool_errors(fn: _Fn, gate: _CallGate) -> _Fn:
    """Run ``fn`` through ``gate`` (a worker thread, bounded), and turn ecoguard's usage
    errors into MCP tool errors with their message, and any other failure into a tool error
    naming it (traceback logged on stderr), so one bad call never stops the server or leaves
    the agent with no idea what went wrong."""
    from mcp.server.mcpserver.exceptions import ToolError

    from ecoguard.errors import UnknownGpuError, UsageError

    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return await gate.run(fn, *args, **kwargs)
        except ToolError:
            raise
        except UnknownGpuError as exc:
            # The library's message points at the CLI; an agent reads the list as a resource.
            raise ToolError(f"{exc} (or read the resource {GPUS_URI})") from None
        except UsageError as exc:
            raise ToolError(str(exc)) from None
        except Exception as exc:
            from ecoguard.faults import record_fault

            logger.exception("tool %s failed unexpectedly", fn.__name__)
            record_fault(f"mcp.{fn.__name__}", exc)
            raise ToolError(
                f"internal error in {fn.__name__}: {type(exc).__name__}: {exc} "
                "(this is an ecoguard bug; the traceback is on the server's stderr)"
            ) from None

    return wrapper  # type: ignore[return-value]


def json_ready(value: Any) -> Any:
    """A JSON-clean copy of a library ``to_dict()``: tuples become lists, non-finite floats
    None (JSON has no NaN), dict keys strings, any other object its ``str`` (as the CLI's
    ``json.dumps(default=str)`` does). Structured tool results must be plain JSON; the library
    dicts are JSON-ready already apart from tuples, so in practice only tuples change."""
    if isinstance(value, dict):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_ready(v) for v in value]
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, str | int | bool):
        return value
    return str(value)


# ---------------------------------------------------------------------------------------------
# What each tool does, in plain Python (validated values in, JSON-ready dict out)


def _settings_for(base: Any, region: str | None, price_usd_per_kwh: float | None = None) -> Any:
    changes: dict[str, Any] = {}
    if region is not None:
        from ecoguard.knowledge import region as grid_region

        changes["region"] = grid_region(region).key  # unknown -> UsageError naming the regions
    if price_usd_per_kwh is not None:
        changes["price_usd_per_kwh"] = price_usd_per_kwh
    return base.with_(**changes) if changes else base


def _advisor_answer(
    protocol: str,
    base_settings: Any,
    *,
    model: str | None,
    gpu: str | None,
    precision: str | None,
    batch_size: int | None,
    prompt_tokens: int | None,
    generation_tokens: int | None,
    requests_per_month: int | None,
    region: str | None,
    use: str | None,
    language: str,
    observed: dict[str, float | None] | None = None,
    price_usd_per_kwh: float | None = None,
    cny_per_usd: float | None = None,
) -> dict[str, Any]:
    """The same Answer ``ecoguard optimize|compare|estimate|diagnose --json`` prints: the
    protocol's result plus the defaults used for missing facts and the published-vs-measured
    notes (one function, ``answer_for_flags``, serves both)."""
    from ecoguard.advisor.answers import answer_for_flags

    answer = answer_for_flags(
        protocol,
        model=model,
        gpu=gpu,
        precision=precision,
        batch_size=batch_size,
        prompt_tokens=prompt_tokens,
        generation_tokens=generation_tokens,
        requests_per_month=requests_per_month,
        use=use,
        language=language,
        settings=_settings_for(base_settings, region, price_usd_per_kwh),
        observed=observed,
        cny_per_usd=cny_per_usd,
    )
    return json_ready(answer.to_dict())


def _advise(text: str, base_settings: Any) -> dict[str, Any]:
    from mcp.server.mcpserver.exceptions import ToolError

    from ecoguard.advisor.answers import advise
    from ecoguard.advisor.parse import parse_question

    if parse_question(text).paths:
        # A question naming paths would make the server read files on its own machine; the
        # agent has the text, so it sends that. Code pasted into the question is audited as
        # text by the advisor (never run), like any other question.
        raise ToolError(
            "advise does not read files: pass the source text to the audit_code tool instead"
        )
    return json_ready(advise(text, settings=base_settings).to_dict())


def _audit_code(source: str, filename: str, gpu: str | None) -> dict[str, Any]:
    from mcp.server.mcpserver.exceptions import ToolError

    from ecoguard.audit import audit_source

    size = len(source.encode("utf-8", errors="surrogatepass"))
    if size > MAX_SOURCE_BYTES:
        raise ToolError(
            f"source is {size:,} bytes; audit_code accepts at most {MAX_SOURCE_BYTES:,} bytes "
            "(1 MiB). Audit one module at a time, or run `ecoguard audit PATH` locally."
        )
    if filename.lower().endswith(".ipynb"):
        raise ToolError(
            "audit_code reads Python source text; for a notebook send the code cells joined "
            "as one .py text, or run `ecoguard audit notebook.ipynb` locally"
        )
    result = audit_source(source, filename, gpu=gpu, time_limit_s=AUDIT_TIME_LIMIT_S)
    return json_ready(result.to_dict())


def _explain(rule_id: str) -> dict[str, Any]:
    from ecoguard.rules import explain

    return json_ready(explain(rule_id))


def _lookup(
    *,
    gpu: str | None,
    model: str | None,
    precision: str | None,
    batch_size: int | None,
    tier: str | None,
    limit: int,
) -> dict[str, Any]:
    from ecoguard.knowledge import find_rows

    rows = find_rows(gpu=gpu, model=model, precision=precision, batch_size=batch_size, tier=tier)
    shown = rows[:limit]
    return json_ready(
        {
            "filters": {
                "gpu": gpu,
                "model": model,
                "precision": precision,
                "batch_size": batch_size,
                "tier": tier,
            },
            "total": len(rows),
            "returned": len(shown),
            "truncated": len(rows) > len(shown),
            "rows": [row.to_dict() for row in shown],
            "attribution": ATTRIBUTION,
        }
    )


def _provenance_text() -> str:
    from ecoguard._paths import data_dir

    path = data_dir() / "README.md"
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        from mcp.server.mcpserver.exceptions import ResourceError

        raise ResourceError(f"the dataset provenance file is missing ({path}): {exc}") from None


def _rules_json() -> str:
    from ecoguard.rules import RULES

    rules = [
        {
            "id": spec.id,
            "title": spec.title,
            "summary": spec.summary,
            "why": spec.why,
            "fix": spec.fix,
            "changes_outputs": spec.changes_outputs,
            "stage": spec.stage,
        }
        for spec in RULES.values()
    ]
    return json.dumps({"rules": rules}, indent=2)


def _gpus_json() -> str:
    from ecoguard.knowledge import gpu_profiles

    gpus = [
        {
            "key": p.key,
            "name": p.name,
            "architecture": p.architecture,
            "vram_gb": p.vram_gb,
            "nicknames": list(p.nicknames),
            "bf16": p.bf16,
            "fp8": p.fp8,
        }
        for p in gpu_profiles().values()
    ]
    return json.dumps({"gpus": gpus}, indent=2)


# ---------------------------------------------------------------------------------------------
# The server


def build_server(*, settings: Any = None, log_level: str = "WARNING") -> Any:
    """The MCP server with every tool and resource registered (not started).

    ``settings`` (default: ``Settings.from_env()``, read once here so a bad ECOGUARD_* value
    fails at start, not on the first call) supplies region, electricity price and monthly
    volume; a tool's ``region`` argument overrides the region for that call.
    Raises UsageError when the ``mcp`` extra is not installed.
    """
    try:
        from mcp.server.mcpserver import MCPServer
    except ImportError as exc:
        from ecoguard.errors import UsageError

        raise UsageError(
            f"the MCP server needs the `mcp` extra ({exc}); install it with "
            "`pip install 'ecoguard[mcp]'`"
        ) from None
    from typing import Annotated, Literal

    from mcp_types import ToolAnnotations
    from pydantic import Field

    from ecoguard import __version__
    from ecoguard.config import Settings
    from ecoguard.deployment import PRECISIONS, USES
    from ecoguard.findings import RULE_IDS

    if settings is None:
        settings = Settings.from_env()
    from ecoguard.knowledge import region as grid_region

    grid_region(settings.region)  # an unknown ECOGUARD_REGION is said at start

    strict = _StrictArguments()
    gate = _CallGate()

    def guarded(fn: _Fn) -> _Fn:
        return _tool_errors(fn, gate)

    server = MCPServer(
        SERVER_NAME,
        title="ecoguard: GPU energy advice for LLM inference",
        instructions=INSTRUCTIONS,
        version=__version__,
        log_level=log_level,  # type: ignore[arg-type]
        middleware=[strict],
    )
    read_only = ToolAnnotations(
        read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
    )

    # -- argument types (JSON schema: types, ranges, enums, descriptions) ----------------------
    precisions = ", ".join(PRECISIONS)
    Model = Annotated[
        str,
        Field(
            min_length=1,
            max_length=200,
            description="model id or size: 'Qwen/Qwen2.5-7B-Instruct', 'mistral-7b', '7B', '1.5b'",
        ),
    ]
    Gpu = Annotated[
        str | None,
        Field(
            min_length=1,
            max_length=100,
            description="GPU profile key, nickname or NVML name: 'rtx5090', '5090', '4090D', "
            f"'a800', 'H100', 'T4' (default rtx4090d; list: resource {GPUS_URI})",
        ),
    ]
    Precision = Annotated[
        str | None,
        Field(
            min_length=1,
            max_length=40,
            description=f"precision: {precisions}; aliases accepted (int8 -> int8_mixed, "
            "4bit -> nf4, fp8 -> fp8_weight_only, half -> fp16)",
        ),
    ]
    BatchSize = Annotated[
        int | None, Field(ge=1, le=4096, description="sequences per generate call (default 1)")
    ]
    PromptTokens = Annotated[
        int | None,
        Field(ge=0, le=1_048_576, description="prompt tokens per sequence (default 512)"),
    ]
    GenerationTokens = Annotated[
        int | None,
        Field(ge=1, le=1_048_576, description="generated tokens per sequence (default 256)"),
    ]
    Requests = Annotated[
        int | None,
        Field(
            ge=0,
            le=10**12,
            description="requests per month for the cost and CO2 figures (default 1,000,000)",
        ),
    ]
    Region = Annotated[
        str | None,
        Field(
            min_length=1,
            max_length=40,
            description="electricity grid: us, china (cn), eu, uk, fr, de, in, jp, ca "
            f"(default {settings.region})",
        ),
    ]
    Use = Annotated[
        Literal[USES] | None,  # type: ignore[valid-type]
        Field(description="chat (interactive, batch 1), api (batch 1-16) or batch (1-64)"),
    ]
    Language = Annotated[Literal["en", "zh"], Field(description="language of notes and messages")]

    def positive(what: str) -> Any:
        return Annotated[float | None, Field(gt=0, le=1e9, allow_inf_nan=False, description=what)]

    # -- tools ---------------------------------------------------------------------------------

    @server.tool(annotations=read_only)
    @guarded
    def optimize(
        model: Model,
        gpu: Gpu = None,
        precision: Precision = None,
        batch_size: BatchSize = None,
        prompt_tokens: PromptTokens = None,
        generation_tokens: GenerationTokens = None,
        requests_per_month: Requests = None,
        region: Region = None,
        use: Use = None,
        language: Language = "en",
    ) -> dict[str, Any]:
        """Recommended precision and batch size for a model on a GPU: every precision x batch
        size the use allows is estimated, configurations the rules flag as energy traps or that
        overflow VRAM are ruled out, and the lowest J per 1k tokens wins (near-ties go to
        FP16/BF16). Returns mood, recommendation, current vs optimized figures, findings,
        evidence row ids, tier and sources, and the defaults used for missing facts."""
        return _advisor_answer(
            "optimize",
            settings,
            model=model,
            gpu=gpu,
            precision=precision,
            batch_size=batch_size,
            prompt_tokens=prompt_tokens,
            generation_tokens=generation_tokens,
            requests_per_month=requests_per_month,
            region=region,
            use=use or "chat",
            language=language,
        )

    @server.tool(annotations=read_only)
    @guarded
    def compare(
        model: Model,
        gpu: Gpu = None,
        precision: Annotated[
            str | None,
            Field(
                min_length=1,
                max_length=40,
                description="your current precision (its traps are listed); "
                f"one of {precisions} or an alias",
            ),
        ] = None,
        batch_size: BatchSize = None,
        prompt_tokens: PromptTokens = None,
        generation_tokens: GenerationTokens = None,
        requests_per_month: Requests = None,
        region: Region = None,
        language: Language = "en",
    ) -> dict[str, Any]:
        """Every precision for one model on one GPU, side by side: tokens/s, J per 1k tokens,
        change vs FP16, tokens per J, VRAM, latency, power, $/month, rank and the tier of each
        row. Returns the rows plus findings for the current precision, tier and sources."""
        return _advisor_answer(
            "compare",
            settings,
            model=model,
            gpu=gpu,
            precision=precision,
            batch_size=batch_size,
            prompt_tokens=prompt_tokens,
            generation_tokens=generation_tokens,
            requests_per_month=requests_per_month,
            region=region,
            use=None,
            language=language,
        )

    @server.tool(annotations=read_only)
    @guarded
    def estimate(
        model: Model,
        gpu: Gpu = None,
        precision: Precision = None,
        batch_size: BatchSize = None,
        prompt_tokens: PromptTokens = None,
        generation_tokens: GenerationTokens = None,
        requests_per_month: Requests = None,
        region: Region = None,
        use: Use = None,
        price_usd_per_kwh: Annotated[
            float | None,
            Field(
                gt=0,
                le=10,
                allow_inf_nan=False,
                description="electricity price override, USD per kWh (default: the region's)",
            ),
        ] = None,
        cny_per_usd: Annotated[
            float | None,
            Field(
                gt=0,
                le=1000,
                allow_inf_nan=False,
                description="exchange rate; when given, costs are also shown in CNY",
            ),
        ] = None,
        language: Language = "en",
    ) -> dict[str, Any]:
        """Energy per request and per 1k tokens, power, throughput, latency, VRAM and the
        monthly kWh, cost and CO2 for a deployment, with the optimized configuration beside it.
        ``current`` and ``optimized`` are the estimator's figures; each carries its tier
        (measured, reported, derived, extrapolated or none), method and source files."""
        return _advisor_answer(
            "estimate",
            settings,
            model=model,
            gpu=gpu,
            precision=precision,
            batch_size=batch_size,
            prompt_tokens=prompt_tokens,
            generation_tokens=generation_tokens,
            requests_per_month=requests_per_month,
            region=region,
            use=use,
            language=language,
            price_usd_per_kwh=price_usd_per_kwh,
            cny_per_usd=cny_per_usd,
        )

    @server.tool(annotations=read_only)
    @guarded
    def diagnose(
        model: Annotated[
            str | None,
            Field(
                min_length=1,
                max_length=200,
                description="model id or size ('Mistral-7B', '7B'); without one the matching "
                "traps are explained from their evidence rows",
            ),
        ] = None,
        gpu: Gpu = None,
        precision: Annotated[
            str | None,
            Field(
                min_length=1,
                max_length=40,
                description="precision in use; when omitted, the one whose expected figures "
                f"lie nearest the observed ones is inferred. One of {precisions} or an alias",
            ),
        ] = None,
        batch_size: BatchSize = None,
        prompt_tokens: PromptTokens = None,
        generation_tokens: GenerationTokens = None,
        requests_per_month: Requests = None,
        region: Region = None,
        observed_throughput_tok_s: positive("observed generated tokens per second") = None,
        observed_power_w: positive("observed average GPU power, W") = None,
        observed_energy_j_per_1k: positive("observed joules per 1000 generated tokens") = None,
        language: Language = "en",
    ) -> dict[str, Any]:
        """Observed figures against the reference: per metric observed vs expected, and the
        energy trap that matches with a confidence (high within 20% of the trap's expectation,
        medium within 50%), its fix and evidence rows."""
        return _advisor_answer(
            "diagnose",
            settings,
            model=model,
            gpu=gpu,
            precision=precision,
            batch_size=batch_size,
            prompt_tokens=prompt_tokens,
            generation_tokens=generation_tokens,
            requests_per_month=requests_per_month,
            region=region,
            use=None,
            language=language,
            observed={
                "throughput_tok_s": observed_throughput_tok_s,
                "power_w": observed_power_w,
                "energy_j_per_1k": observed_energy_j_per_1k,
            },
        )

    @server.tool(annotations=read_only)
    @guarded
    def advise(
        question: Annotated[
            str,
            Field(
                min_length=1,
                max_length=MAX_QUESTION_CHARS,
                description="an energy question in English or Chinese, e.g. 'greenest config "
                "for Qwen2.5-3B on an RTX 5090' or '我想用 Yi-6B 跑 100 万字, 要花多少钱?'",
            ),
        ],
    ) -> dict[str, Any]:
        """Answer a free-text energy question: the question is parsed (model, GPU, precision,
        batch size, lengths, volume, prices, region), missing facts get stated defaults, and
        the matching protocol (optimize, compare, estimate or diagnose) answers. Returns what
        was parsed, every conversion and default, the protocol's result and honesty notes where
        the publisher's prose and the measured rows disagree."""
        return _advise(question, settings)

    @server.tool(annotations=read_only)
    @guarded
    def audit_code(
        source: Annotated[
            str,
            Field(
                max_length=MAX_SOURCE_BYTES,
                description="Python source text to audit (at most 1 MiB); it is parsed with "
                "ast, never imported or executed",
            ),
        ],
        filename: Annotated[
            str,
            Field(
                min_length=1,
                max_length=255,
                description="the name shown in findings' locations (e.g. 'serve.py')",
            ),
        ] = "snippet.py",
        gpu: Annotated[
            str | None,
            Field(
                min_length=1,
                max_length=100,
                description="the GPU the code will run on ('T4', 'A100', 'rtx4090'): enables "
                "bf16-unsupported, vram-overflow and the architecture's quantization crossover",
            ),
        ] = None,
    ) -> dict[str, Any]:
        """Find energy traps in Python source before it runs: 8-bit bitsandbytes without
        llm_int8_threshold=0.0, 4/8-bit quantization of small models, torchao FP8 without
        torch.compile, generate() called one item at a time in a loop, bf16 on pre-Ampere GPUs,
        VRAM overflow, use_cache=False. Returns findings (rule, mood, message, fix, line and
        column), audit notes, and errors such as a syntax error (reported, not raised)."""
        return _audit_code(source, filename, gpu)

    @server.tool(annotations=read_only)
    @guarded
    def explain_trap(
        rule_id: Annotated[
            Literal[RULE_IDS],  # type: ignore[valid-type]
            Field(description="a rule id, as found in a finding's 'rule' field"),
        ],
    ) -> dict[str, Any]:
        """What an energy trap is: what the rule checks, why it costs energy, the fix, whether
        the fix can change model outputs, and up to 8 reference rows behind it (id, GPU, model,
        precision, batch size, J per 1k tokens, tier and source file)."""
        return _explain(rule_id)

    @server.tool(annotations=read_only)
    @guarded
    def lookup_data(
        gpu: Annotated[
            str | None,
            Field(min_length=1, max_length=100, description="GPU key, nickname or NVML name"),
        ] = None,
        model: Annotated[
            str | None,
            Field(min_length=1, max_length=200, description="model id or size ('7B')"),
        ] = None,
        precision: Annotated[
            str | None,
            Field(min_length=1, max_length=40, description=f"{precisions} or an alias"),
        ] = None,
        batch_size: Annotated[int | None, Field(ge=1, le=4096)] = None,
        tier: Annotated[
            Literal["measured", "reported", "local"] | None,
            Field(
                description="measured: a published data file with runs; reported: the "
                "publisher's prose only; local: rows measured on this machine"
            ),
        ] = None,
        limit: Annotated[
            int, Field(ge=1, le=MAX_LOOKUP_LIMIT, description="rows returned at most")
        ] = DEFAULT_LOOKUP_LIMIT,
    ) -> dict[str, Any]:
        """Reference rows matching every given filter, each with its figures (throughput, power,
        J per 1k tokens with spread, runs), tier and source file. ``total`` counts all matches;
        ``truncated`` says when more than ``limit`` matched."""
        return _lookup(
            gpu=gpu,
            model=model,
            precision=precision,
            batch_size=batch_size,
            tier=tier,
            limit=limit,
        )

    # -- resources -----------------------------------------------------------------------------

    @server.resource(
        PROVENANCE_URI,
        name="provenance",
        title="Reference data: provenance, licences and row schema",
        description="Where every figure comes from (EcoCompute, Zenodo 10.5281/zenodo.19647290, "
        "CC BY 4.0), the licence each source states, and what each row field and tier means.",
        mime_type="text/markdown",
    )
    def provenance() -> str:
        return _provenance_text()

    @server.resource(
        RULES_URI,
        name="rules",
        title="Energy-trap rules",
        description="Every rule id with its title, what it catches, why, and the fix.",
        mime_type="application/json",
    )
    def rules() -> str:
        return _rules_json()

    @server.resource(
        GPUS_URI,
        name="gpus",
        title="Known GPU profiles",
        description="GPU profile keys, names, nicknames, architecture and VRAM.",
        mime_type="application/json",
    )
    def gpus() -> str:
        return _gpus_json()

    strict.server = server
    server.ecoguard_gate = gate  # type: ignore[attr-defined]  # tests read its counters
    return server


class _StrictArguments:
    """Middleware: a ``tools/call`` naming an argument the tool does not have is refused as a
    tool error (the SDK would silently drop it, and a misspelt ``batchsize`` would then answer
    for batch size 1); ``tools/list`` advertises that with ``additionalProperties: false``."""

    def __init__(self) -> None:
        self.server: Any = None  # set once the tools are registered
        self._schemas: dict[str, dict[str, Any]] | None = None

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        if ctx.method == "tools/call" and ctx.params:
            refusal = await self._unknown_arguments(ctx)
            if refusal is not None:
                return refusal
        result = await call_next(ctx)
        if ctx.method == "tools/list" and isinstance(result, dict):
            # call_next returns the wire form (camelCase keys).
            for tool in result.get("tools") or ():
                schema = tool.get("inputSchema") if isinstance(tool, dict) else None
                if isinstance(schema, dict):
                    schema.setdefault("additionalProperties", False)
        return result

    async def _unknown_arguments(self, ctx: Any) -> Any:
        name = ctx.params.get("name")
        arguments = ctx.params.get("arguments") or {}
        if not isinstance(name, str) or not isinstance(arguments, dict):
            return None  # malformed: the SDK's own validation answers it
        if self._schemas is None:
            # The tool set is fixed once the server runs: read the schemas once.
            self._schemas = {t.name: t.input_schema for t in await self.server.list_tools()}
        schema = self._schemas.get(name)
        if schema is None:
            return None  # unknown tool: the SDK names it
        accepted = schema.get("properties", {})
        unknown = sorted(key for key in arguments if key not in accepted)
        if not unknown:
            return None
        logger.info("tool %r called with unknown arguments %r", name, unknown)
        message = (
            f"unknown argument{'s' if len(unknown) > 1 else ''} for {name}: "
            f"{', '.join(map(repr, unknown))}; accepted: {', '.join(accepted)}"
        )
        # A short-circuiting middleware owns the wire form: the minimal CallToolResult every
        # protocol version reads.
        return {"content": [{"type": "text", "text": message}], "isError": True}
