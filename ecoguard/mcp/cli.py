"""``ecoguard mcp``: the command's options. Argparse only: the server (the MCP SDK, pydantic
and anyio) is imported when the command runs, so ``ecoguard --help`` pays only for this."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from ecoguard.errors import UsageError

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


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
    # First basicConfig wins: the SDK's own call later finds handlers in place and keeps
    # these on stderr. stdout is the protocol.
    logging.basicConfig(
        stream=sys.stderr,
        level=args.log_level,
        format="ecoguard mcp: %(levelname)s %(name)s: %(message)s",
    )
    _require_sdk()
    from ecoguard.mcp.server import serve  # lazy: imports the MCP SDK, pydantic and anyio

    serve(log_level=args.log_level)
    return 0


def _require_sdk() -> None:
    """UsageError (exit 2) naming the extra when the MCP SDK is not installed."""
    try:
        import mcp.server.mcpserver  # noqa: F401
    except ImportError as exc:
        raise UsageError(
            f"the MCP server needs the `mcp` extra ({exc}); install it with "
            "`pip install -e '.[mcp]'` from the ecoguard clone (or `pip install 'mcp>=2,<3'`)"
        ) from None
