"""The MCP server: the tools of ``TOOLS`` and the resources of ``RESOURCES`` on one MCPServer.

Each :class:`~ecoguard.mcp.tools.ToolSpec` becomes one registered tool: its arguments make the
signature the SDK reads for the input schema, and a call runs the spec's function in a worker
thread through the :class:`CallGate`, with the server's Settings where the function asks for
them and its result made JSON-clean (:func:`json_ready`).

Errors: bad input comes back as an MCP tool error (``isError``) naming what was wrong and what
is accepted; an unexpected failure is logged with its traceback on stderr, counted as a fault
(``mcp.<tool>``) and comes back as a tool error too. The server keeps serving either way.
stdout carries only the protocol (see :mod:`ecoguard.mcp.stdio`).
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.to_thread
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations

from ecoguard import __version__
from ecoguard.config import Settings
from ecoguard.errors import UnknownGpuError, UsageError
from ecoguard.faults import record_fault
from ecoguard.knowledge import region as grid_region
from ecoguard.mcp.resources import GPUS_URI, RESOURCES
from ecoguard.mcp.stdio import checked_stdio
from ecoguard.mcp.tools import TOOLS, ToolSpec

logger = logging.getLogger("ecoguard.mcp")

SERVER_NAME = "ecoguard"
# Tool calls run in worker threads, at most MAX_RUNNING_CALLS at once, so CPU-bound calls (48
# concurrent audits of large modules) cannot crowd out the event loop that reads the wire and
# answers ping; MAX_WAITING_CALLS more wait their turn and any beyond are refused as busy.
MAX_RUNNING_CALLS = 2
MAX_WAITING_CALLS = 32
SWITCH_INTERVAL_S = 0.001  # the GIL slice while serving (CPython default: 0.005)

INSTRUCTIONS = (
    "ecoguard answers GPU energy questions for LLM inference from a reference dataset of "
    "measured and reported runs (EcoCompute). Every figure carries a tier (measured, reported, "
    "derived, extrapolated, none) and the source files behind it: quote them with the figure. "
    "Use optimize/compare/estimate/diagnose for a described deployment, advise for a free-text "
    "question, audit_code before proposing model-loading or generate code, explain_trap for "
    "a rule id found in a result, lookup_data for raw reference rows."
)
READ_ONLY = ToolAnnotations(
    read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)


def serve(*, log_level: str = "WARNING") -> None:
    """Build the server from the environment's settings and serve it over stdio until the
    client closes the wire."""
    # Tool calls run in worker threads and the audit is pure Python: with CPython's default
    # 5 ms GIL slices, the event loop that reads the wire and answers ping waited behind them
    # (a burst of 12 audits answered ping after the fourth). 1 ms slices let it in sooner.
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    anyio.run(_run_stdio, build_server(log_level=log_level))


def build_server(*, settings: Settings | None = None, log_level: str = "WARNING") -> MCPServer:
    """The MCP server with every tool and resource registered (not started).

    ``settings`` (default: ``Settings.from_env()``, read once here so a bad ECOGUARD_* value
    fails at start, not on the first call) supplies region, electricity price and monthly
    volume; a tool's ``region`` argument overrides the region for that call.
    """
    if settings is None:
        settings = Settings.from_env()
    grid_region(settings.region)  # an unknown ECOGUARD_REGION is said at start
    gate = CallGate()
    server = MCPServer(
        SERVER_NAME,
        title="ecoguard: GPU energy advice for LLM inference",
        instructions=INSTRUCTIONS,
        version=__version__,
        log_level=log_level,  # type: ignore[arg-type]
        middleware=[StrictArguments(TOOLS)],
    )
    for spec in TOOLS:
        server.add_tool(
            _tool_entry(spec, settings, gate),
            name=spec.name,
            description=spec.description,
            annotations=READ_ONLY,
        )
    for resource in RESOURCES:
        server.resource(
            resource.uri,
            name=resource.name,
            title=resource.title,
            description=resource.description,
            mime_type=resource.mime_type,
        )(resource.read)
    server.ecoguard_gate = gate  # type: ignore[attr-defined]  # tests read its counters
    return server


def _tool_entry(
    spec: ToolSpec, settings: Settings, gate: CallGate
) -> Callable[..., Awaitable[dict[str, Any]]]:
    """The coroutine function the SDK registers for ``spec``: its signature is the spec's
    arguments (the SDK builds the input schema and validates calls from it); a call runs the
    spec's function through ``gate``."""
    parameters = [
        inspect.Parameter(
            argument.name,
            inspect.Parameter.KEYWORD_ONLY,
            default=inspect.Parameter.empty if argument.required else argument.default,
            annotation=argument.annotation(settings),
        )
        for argument in spec.arguments
    ]
    function = spec.function
    if spec.wants_settings:
        function = functools.partial(function, settings)

    async def entry(**arguments: Any) -> dict[str, Any]:
        return await _run_tool(spec.name, gate, functools.partial(function, **arguments))

    entry.__name__ = entry.__qualname__ = spec.name
    entry.__doc__ = spec.description
    entry.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        parameters, return_annotation=dict[str, Any]
    )
    entry.__annotations__ = {p.name: p.annotation for p in parameters}
    entry.__annotations__["return"] = dict[str, Any]
    return entry


async def _run_tool(name: str, gate: CallGate, call: Callable[[], dict[str, Any]]) -> Any:
    """Run ``call`` through ``gate`` and turn ecoguard's usage errors into MCP tool errors
    with their message, and any other failure into a tool error naming it (traceback logged
    on stderr), so one bad call never stops the server or leaves the agent with no idea what
    went wrong."""
    try:
        return await gate.run(lambda: json_ready(call()))
    except ToolError:
        raise
    except UnknownGpuError as exc:
        # The library's message points at the CLI; an agent reads the list as a resource.
        raise ToolError(f"{exc} (or read the resource {GPUS_URI})") from None
    except UsageError as exc:
        raise ToolError(str(exc)) from None
    except Exception as exc:
        logger.exception("tool %s failed unexpectedly", name)
        record_fault(f"mcp.{name}", exc)
        raise ToolError(
            f"internal error in {name}: {type(exc).__name__}: {exc} "
            "(this is an ecoguard bug; the traceback is on the server's stderr)"
        ) from None


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


class CallGate:
    """Runs tool functions in worker threads: ``running`` at a time, ``waiting`` more queued,
    the rest refused at once with a tool error saying so. Used from the event loop only."""

    def __init__(self, running: int = MAX_RUNNING_CALLS, waiting: int = MAX_WAITING_CALLS):
        self.running = running
        self.waiting = waiting
        self.admitted = 0  # calls running or waiting now
        self._limiter: anyio.CapacityLimiter | None = None

    async def run(self, call: Callable[[], Any]) -> Any:
        if self.admitted >= self.running + self.waiting:
            raise ToolError(
                f"busy: {self.admitted} tool calls are running or waiting (at most "
                f"{self.running} run at once, {self.waiting} wait); retry in a moment"
            )
        if self._limiter is None:  # created inside the event loop that uses it
            self._limiter = anyio.CapacityLimiter(self.running)
        self.admitted += 1
        try:
            return await anyio.to_thread.run_sync(call, limiter=self._limiter)
        finally:
            self.admitted -= 1


class StrictArguments:
    """Middleware: a ``tools/call`` naming an argument the tool does not have is refused as a
    tool error (the SDK would silently drop it, and a misspelt ``batchsize`` would then answer
    for batch size 1); ``tools/list`` advertises that with ``additionalProperties: false``."""

    def __init__(self, tools: tuple[ToolSpec, ...]) -> None:
        self._accepted = {spec.name: [a.name for a in spec.arguments] for spec in tools}

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        if ctx.method == "tools/call" and ctx.params:
            refusal = self._unknown_arguments(ctx.params)
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

    def _unknown_arguments(self, params: dict[str, Any]) -> dict[str, Any] | None:
        name = params.get("name")
        arguments = params.get("arguments") or {}
        if not isinstance(name, str) or not isinstance(arguments, dict):
            return None  # malformed: the SDK's own validation answers it
        accepted = self._accepted.get(name)
        if accepted is None:
            return None  # unknown tool: the SDK names it
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


async def _run_stdio(server: MCPServer) -> None:
    """Serve over stdio with every inbound line checked first (ecoguard.mcp.stdio), so a
    malformed line gets a JSON-RPC error instead of the SDK's silence."""
    lowlevel = getattr(server, "_lowlevel_server", None)
    if lowlevel is None:  # an SDK that moved it: serve as the SDK does, unchecked
        logger.warning("this MCP SDK hides its low-level server; malformed lines go unanswered")
        await server.run_stdio_async()
        return
    async with checked_stdio() as (read_stream, write_stream):
        await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())
