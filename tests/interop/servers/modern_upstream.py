"""A 2026-07-28 MCP server on the official Python SDK (MCPServer), over stdio: the
upstream of the interop tests that check how mcp-warden speaks that revision to
its upstreams.

- `greet(name)`: a plain tool.
- `deploy(service)`: asks the user to confirm first (an elicitation: an
  `InputRequiredResult` to a 2026-07-28 client, a mid-call request otherwise).
- `add_tool()`: adds the tool `fresh` and announces the change to
  `subscriptions/listen` streams.
- `seen_capabilities()`: the client capabilities the last request declared, as
  the server saw them (what the gateway put in the envelope).
"""

import json
from typing import Annotated

from pydantic import BaseModel

from mcp.server.mcpserver import Context, Elicit, MCPServer, Resolve

mcp = MCPServer("modern-upstream")


class Confirmation(BaseModel):
    confirm: bool


def ask_to_confirm(service: str) -> Elicit[Confirmation]:
    return Elicit(f"Deploy {service}?", Confirmation)


@mcp.tool()
def greet(name: str) -> str:
    """Greets someone."""
    return f"Hello, {name}!"


@mcp.tool()
def deploy(service: str, answer: Annotated[Confirmation, Resolve(ask_to_confirm)]) -> str:
    """Deploys a service once the user confirmed."""
    return f"{service}: {'deployed' if answer.confirm else 'left alone'}"


@mcp.tool()
async def add_tool(ctx: Context) -> str:
    """Adds the tool `fresh`."""
    mcp.add_tool(lambda: "fresh!", name="fresh", description="Added at run time.")
    await ctx.notify_tools_changed()
    return "added"


@mcp.tool()
def seen_capabilities(ctx: Context) -> str:
    """The client capabilities this request declared."""
    caps = ctx.client_capabilities
    return json.dumps(caps.model_dump(exclude_none=True) if caps else None, sort_keys=True)


if __name__ == "__main__":
    mcp.run()
