"""Virtual servers and tool search (V1-V6) with the official Python SDK client:
a server of renamed tools over HTTP (/mcp/<name>) and over stdio
(`run --server`), search mode (list, search_tools, call_tool), the growing
variant's notifications/tools/list_changed, and [oauth.tool_scopes] kept by a
tool under its new name and behind call_tool (G7)."""

import json
from contextlib import asynccontextmanager

import anyio
import httpx2
import pytest
from mcp import ClientSession, types
from mcp.shared.exceptions import MCPError

from conftest import EVERYTHING, WARDEN
from test_interop import http_gateway, http_session, session, through_gateway
from test_oauth import AuthServer, access, free_port, gateway, oauth_config

pytestmark = pytest.mark.anyio

KEY = {"INTEROP_ALICE_KEY": "alice-secret"}


@pytest.fixture
def anyio_backend():
    return "asyncio"


SERVERS = f"""
[[upstream]]
name = "ev"
command = ["node", "{EVERYTHING}", "stdio"]
timeout_ms = 20000

[[caller]]
name = "alice"
api_key_env = "INTEROP_ALICE_KEY"

[[server]]
name = "pick"
tools = ["ev.echo", "ev.get-sum"]
rename = {{ "ev.get-sum" = "add" }}
describe = {{ "ev.echo" = "Say it back." }}
instructions = "Two tools."

[[server]]
name = "find"
tools = ["ev.*"]
discovery = "search"

[[server]]
name = "grow"
tools = ["ev.*"]
discovery = "grow"
"""


def text(result):
    return [c.text for c in result.content if getattr(c, "type", "") == "text"]


async def tool_names(s):
    return [t.name for t in (await s.list_tools()).tools]


async def check_pick(s):
    listed = (await s.list_tools()).tools
    assert [t.name for t in listed] == ["ev.echo", "add"]
    assert listed[0].description == "Say it back."
    assert "5" in text(await s.call_tool("add", {"a": 2, "b": 3}))[0]
    assert text(await s.call_tool("ev.echo", {"message": "hi"})) == ["Echo: hi"]
    # The renamed tool's own name is not shown, so not called (V3).
    with pytest.raises(MCPError) as refused:
        await s.call_tool("ev.get-sum", {"a": 1, "b": 1})
    assert refused.value.message == "Unknown tool 'ev.get-sum'."


async def test_a_virtual_server_over_http(config):
    async with http_gateway(config(SERVERS), KEY) as (url, _):
        async with http_session(url + "/pick", "alice-secret") as s:
            await check_pick(s)
        # /mcp stays the whole catalogue.
        async with http_session(url, "alice-secret") as s:
            names = await tool_names(s)
            assert "ev.get-sum" in names and len(names) > 2


async def test_a_virtual_server_over_stdio(config):
    path = config(SERVERS)
    async with through_gateway(path) as s:
        assert "ev.get-sum" in await tool_names(s)
    async with session(WARDEN, ["run", "--config", path, "--server", "pick"]) as s:
        await check_pick(s)


async def search(s, query, limit=3):
    result = await s.call_tool("search_tools", {"query": query, "limit": limit})
    assert not result.is_error, text(result)
    found = json.loads(text(result)[0])["tools"]
    assert all(set(t) <= {"name", "description", "inputSchema"} for t in found)
    return [t["name"] for t in found]


async def test_search_mode_lists_searches_and_calls(config):
    async with http_gateway(config(SERVERS), KEY) as (url, _):
        async with http_session(url + "/find", "alice-secret") as s:
            assert await tool_names(s) == ["search_tools", "call_tool"]
            found = await search(s, "the sum of two numbers")
            assert found[0] == "ev.get-sum", found
            result = await s.call_tool("call_tool", {"name": "ev.get-sum", "arguments": {"a": 2, "b": 3}})
            assert not result.is_error and "5" in text(result)[0], text(result)
            # A name search cannot return is a tool error the model can act on (V5).
            result = await s.call_tool("call_tool", {"name": "nope", "arguments": {}})
            assert result.is_error
            assert text(result) == ["No tool 'nope' is available here; call search_tools to find the tools you can call."]
            # Found tools are not listed in plain search mode.
            assert await tool_names(s) == ["search_tools", "call_tool"]


@pytest.mark.parametrize("transport", ["http", "stdio"])
async def test_the_growing_variant_announces_what_search_found(config, transport):
    changed = []

    async def on_message(message):
        if isinstance(message, types.ServerNotification):
            changed.append(message.root.method if hasattr(message, "root") else message.method)

    path = config(SERVERS)

    @asynccontextmanager
    async def grow():
        if transport == "http":
            async with http_gateway(path, KEY) as (url, _):
                async with http_session(url + "/grow", "alice-secret", message_handler=on_message) as s:
                    yield s
        else:
            async with session(WARDEN, ["run", "--config", path, "--server", "grow"],
                               message_handler=on_message) as s:
                yield s

    async with grow() as s:
        assert await tool_names(s) == ["search_tools", "call_tool"]
        found = await search(s, "the sum of two numbers", limit=1)
        assert found == ["ev.get-sum"]
        with anyio.fail_after(10):
            while "notifications/tools/list_changed" not in changed:
                await anyio.sleep(0.05)
        assert await tool_names(s) == ["search_tools", "call_tool", "ev.get-sum"]
        # Listed, so called by its name.
        assert "5" in text(await s.call_tool("ev.get-sum", {"a": 2, "b": 3}))[0]
        # Found again: no new announcement.
        before = len(changed)
        await search(s, "the sum of two numbers", limit=1)
        await anyio.sleep(0.3)
        assert changed.count("notifications/tools/list_changed") == before


# --- [oauth.tool_scopes] under a new name and behind call_tool (G7, V2) --------


@pytest.fixture
def issuer():
    a = AuthServer()
    yield a
    a.stop()


SCOPED = """
[[rule]]
callers = ["alice"]
tools = ["notes.create_note"]
effect = "allow"

[[server]]
name = "renamed"
tools = ["notes.*"]
rename = { "notes.create_note" = "jot" }

[[server]]
name = "find"
tools = ["notes.*"]
discovery = "search"
"""

ACCEPT = {"Accept": "application/json, text/event-stream"}


def open_session(url, token):
    r = httpx2.post(url, timeout=20, headers={"Authorization": f"Bearer {token}", **ACCEPT}, json={
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "scopes", "version": "1"}}})
    assert r.status_code == 200, r.text
    sid = r.headers["mcp-session-id"]
    headers = {"Authorization": f"Bearer {token}", "Mcp-Session-Id": sid, **ACCEPT}
    n = httpx2.post(url, timeout=20, headers=headers,
                    json={"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert n.status_code == 202, n.text
    return lambda msg: httpx2.post(url, timeout=20, headers=headers, json=msg)


def call(name, arguments):
    return {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": name, "arguments": arguments}}


NOTE = {"title": "t", "text": "x"}


async def test_a_tools_scope_holds_under_a_new_name_and_behind_call_tool(issuer, tmp_path):
    port = free_port()
    with gateway(oauth_config(issuer.issuer, port, SCOPED), tmp_path, port=port) as (url, _):
        tries = [
            (url + "/renamed", call("jot", NOTE)),
            (url + "/find", call("call_tool", {"name": "notes.create_note", "arguments": NOTE})),
        ]
        for at, msg in tries:
            # alice may call the tool (the rule), but her token lacks notes:write.
            # (A token's audience is the resource, /mcp, whatever the server.)
            send = open_session(at, access(issuer, url, scope="mcp"))
            r = send(msg)
            assert r.status_code == 403, (at, r.text)
            assert r.headers["www-authenticate"].endswith(
                'error="insufficient_scope", error_description="Forbidden: the token lacks a scope '
                'this request needs; ask for: mcp notes:write"'), r.headers["www-authenticate"]
            # With the scope, the same call runs the real tool.
            send = open_session(at, access(issuer, url, scope="mcp notes:write"))
            r = send(msg)
            assert r.status_code == 200, r.text
            assert '"isError":true' not in r.text, r.text
