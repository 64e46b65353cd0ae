"""An MCP server on the official Python SDK (MCPServer) over stdio, for the
trace tests that need a child-process upstream: its one tool, `seen_meta`,
answers with the `_meta` of the request that called it (JSON, keys sorted),
as this server received it from the gateway.
"""

import json

from mcp.server.mcpserver import Context, MCPServer

mcp = MCPServer("meta-upstream")


@mcp.tool()
def seen_meta(ctx: Context) -> str:
    """The `_meta` this call arrived with."""
    return json.dumps(dict(ctx.request_context.meta or {}), sort_keys=True)


if __name__ == "__main__":
    mcp.run()
