"""``ecoguard mcp``: the advisor, the audit, the rules and the reference data as MCP tools."""
