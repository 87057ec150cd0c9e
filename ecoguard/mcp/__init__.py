"""``ecoguard mcp``: the advisor, the audit, the rules and the reference data as MCP tools.

Coding agents (Claude Code, Claude Desktop, Cursor, ...) start this server over stdio and call
its tools, so their energy answers come from the reference data with a tier and a source on
every figure, and the code they write can be audited before it lands. See docs/mcp.md.

- :mod:`ecoguard.mcp.cli`: the ``ecoguard mcp`` options (argparse only);
- :mod:`ecoguard.mcp.tools`: one function per tool and the ``TOOLS`` table;
- :mod:`ecoguard.mcp.arguments`: each tool argument's type, constraints and default, once;
- :mod:`ecoguard.mcp.resources`: the resources (provenance, rules, GPUs);
- :mod:`ecoguard.mcp.server`: ``build_server`` (tools from ``TOOLS``, bounded calls, errors);
- :mod:`ecoguard.mcp.stdio`: the stdio transport that answers malformed lines.

Importing this package stays light (``ecoguard --help`` imports the CLI module through it):
every name but ``register`` comes from a module that imports the MCP SDK and pydantic, and is
imported on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from ecoguard.mcp.cli import register

_LAZY = {
    "build_server": "ecoguard.mcp.server",
    "json_ready": "ecoguard.mcp.server",
    "TOOLS": "ecoguard.mcp.tools",
    "ToolSpec": "ecoguard.mcp.tools",
    "Argument": "ecoguard.mcp.arguments",
    "DeploymentArguments": "ecoguard.advisor.flags",
    "RESOURCES": "ecoguard.mcp.resources",
    "checked_stdio": "ecoguard.mcp.stdio",
    "check_line": "ecoguard.mcp.stdio",
}

__all__ = ["register", *_LAZY]


def __getattr__(name: str) -> Any:
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'ecoguard.mcp' has no attribute {name!r}")
    # lazy: these modules import the MCP SDK and pydantic
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
