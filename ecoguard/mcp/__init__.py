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

from ecoguard._lazy import lazy_exports
from ecoguard.mcp.cli import register

_LAZY = {
    "build_server": "ecoguard.mcp.server",
    "json_ready": "ecoguard.mcp.server",
    "TOOLS": "ecoguard.mcp.tools",
    "ToolSpec": "ecoguard.mcp.tools",
    "Argument": "ecoguard.mcp.arguments",
    "Question": "ecoguard.advisor.question",
    "RESOURCES": "ecoguard.mcp.resources",
    "checked_stdio": "ecoguard.mcp.stdio",
    "check_line": "ecoguard.mcp.stdio",
}

__all__ = ["register", *_LAZY]


# these modules import the MCP SDK and pydantic: imported on first use
__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
