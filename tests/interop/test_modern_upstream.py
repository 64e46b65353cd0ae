"""Interop: mcp-warden speaks 2026-07-28 to an upstream that offers it.

The upstream is a server on the official Python SDK (servers/modern_upstream.py,
MCPServer over stdio); the clients are the same SDK's 2026-07-28 `Client`
(mode="auto") and its 2025-11-25 `ClientSession`."""

import json
import sys
from contextlib import asynccontextmanager

import anyio
import pytest
from mcp import Client, ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client

from conftest import HERE, WARDEN

pytestmark = pytest.mark.anyio

UPSTREAM = HERE / "servers" / "modern_upstream.py"


@pytest.fixture
def anyio_backend():
    return "asyncio"


def modern(extra=""):
    return f"""
    [[upstream]]
    name = "m"
    command = ["{sys.executable}", "{UPSTREAM}"]
    timeout_ms = 20000
    {extra}
    """


def params(path):
    return StdioServerParameters(command=WARDEN, args=["run", "--config", path])


def text(result):
    return [c.text for c in result.content if getattr(c, "type", "") == "text"]


@asynccontextmanager
async def legacy(path, **kwargs):
    async with stdio_client(params(path)) as (read, write):
        async with ClientSession(read, write, **kwargs) as s:
            await s.initialize()
            yield s


async def confirm(context, p):
    return types.ElicitResult(action="accept", content={"confirm": True})


async def test_a_2026_client_lists_calls_and_answers_an_upstreams_input_request(config):
    asked = []

    async def elicit(context, p):
        asked.append(p.message)
        return types.ElicitResult(action="accept", content={"confirm": True})

    async with Client(params(config(modern())), mode="auto", elicitation_callback=elicit) as client:
        assert client.session.protocol_version == "2026-07-28"
        names = [t.name for t in (await client.list_tools()).tools]
        assert names == ["m.greet", "m.deploy", "m.add_tool", "m.seen_capabilities"]
        assert text(await client.call_tool("m.greet", {"name": "Ada"})) == ["Hello, Ada!"]
        # The upstream's InputRequiredResult reaches the client (its state sealed
        # inside the gateway's), and the retry resumes the call upstream.
        result = await client.call_tool("m.deploy", {"service": "web"})
        assert not result.is_error, text(result)
        assert text(result) == ["web: deployed"]
        assert asked == ["Deploy web?"]
        # The upstream saw the capabilities this client declared, no more.
        seen = json.loads(text(await client.call_tool("m.seen_capabilities", {}))[0])
        assert set(seen) <= {"elicitation", "sampling", "roots", "experimental", "extensions"}
        assert "elicitation" in seen


async def test_a_2026_client_hears_a_list_change_on_its_subscription(config):
    async with Client(params(config(modern())), mode="auto") as client:
        async with client.listen(tools_list_changed=True) as sub:
            assert sub.honored.tools_list_changed is True
            assert text(await client.call_tool("m.add_tool", {})) == ["added"]
            with anyio.fail_after(10):
                event = await sub.__anext__()
            assert type(event).__name__ == "ToolsListChanged"
        names = [t.name for t in (await client.list_tools(cache_mode="refresh")).tools]
        assert "m.fresh" in names


async def test_a_tool_hidden_from_the_caller_causes_no_notification(config):
    path = config(modern() + """
    [[rule]]
    callers = ["*"]
    tools = ["m.fresh"]
    effect = "deny"
    """)
    async with Client(params(path), mode="auto") as client:
        async with client.listen(tools_list_changed=True) as sub:
            assert text(await client.call_tool("m.add_tool", {})) == ["added"]
            with anyio.move_on_after(2) as waited:
                await sub.__anext__()
            assert waited.cancelled_caught, "a change to a hidden tool was announced"
        assert "m.fresh" not in [t.name for t in (await client.list_tools()).tools]


async def test_a_2025_client_gets_the_upstreams_input_request_as_a_request(config):
    changed = []

    async def on_message(message):
        if isinstance(message, types.ServerNotification):
            changed.append(message.root.method if hasattr(message, "root") else message.method)

    async with legacy(config(modern()), elicitation_callback=confirm, message_handler=on_message) as s:
        assert s.protocol_version == "2025-11-25"
        assert text(await s.call_tool("m.greet", {"name": "Bo"})) == ["Hello, Bo!"]
        result = await s.call_tool("m.deploy", {"service": "db"})
        assert not result.is_error, text(result)
        assert text(result) == ["db: deployed"]
        # resultType belongs to the 2026-07-28 hop; the upstream's serverInfo too.
        assert result.model_extra is None or "resultType" not in result.model_extra
        assert text(await s.call_tool("m.add_tool", {})) == ["added"]
        with anyio.fail_after(10):
            while "notifications/tools/list_changed" not in changed:
                await anyio.sleep(0.05)
        assert "m.fresh" in [t.name for t in (await s.list_tools()).tools]
