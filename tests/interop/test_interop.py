"""The gateway between the official Python MCP SDK and the reference servers."""

import json
import os
import pathlib
import re
import socket
import ssl
import subprocess
import threading
from contextlib import asynccontextmanager

import anyio
import httpx2
import pytest
from mcp import Client, ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from conftest import EVERYTHING, FILESYSTEM, WARDEN

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


def everything(mode="warn", prefix=True):
    return f"""
    [[upstream]]
    name = "ev"
    command = ["node", "{EVERYTHING}", "stdio"]
    prefix = {str(prefix).lower()}
    unknown_arguments = "{mode}"
    timeout_ms = 20000
    """


@asynccontextmanager
async def session(command, args, **kwargs):
    params = StdioServerParameters(command=command, args=args)
    async with stdio_client(params) as (r, w):
        async with ClientSession(r, w, **kwargs) as s:
            await s.initialize()
            yield s


def through_gateway(config_path, **kwargs):
    return session(WARDEN, ["run", "--config", config_path], **kwargs)


def direct_everything(**kwargs):
    return session("node", [str(EVERYTHING), "stdio"], **kwargs)


def text(result):
    return [c.text for c in result.content if getattr(c, "type", "") == "text"]


async def tool_names(s):
    return [t.name for t in (await s.list_tools()).tools]


async def test_list_and_call_through_the_gateway(config):
    async with through_gateway(config(everything())) as s:
        names = await tool_names(s)
        assert "ev.echo" in names and "ev.get-sum" in names
        assert all(n.startswith("ev.") for n in names)
        result = await s.call_tool("ev.echo", {"message": "hello"})
        assert text(result) == ["Echo: hello"]
        assert not result.is_error
        result = await s.call_tool("ev.get-sum", {"a": 2, "b": 3})
        assert "5" in text(result)[0]


async def test_unknown_key_in_each_mode(config):
    async with through_gateway(config(everything("warn"))) as s:
        result = await s.call_tool("ev.echo", {"message": "hi", "mesage": "typo"})
        assert text(result) == ["Echo: hi"] and not result.is_error
    async with through_gateway(config(everything("strip"))) as s:
        result = await s.call_tool("ev.echo", {"message": "hi", "extra": 1})
        assert text(result) == ["Echo: hi"] and not result.is_error
    async with through_gateway(config(everything("reject"))) as s:
        result = await s.call_tool("ev.get-sum", {"a": 1, "bb": 2})
        assert result.is_error
        assert text(result) == [
            "Error: Unknown parameter 'bb' for tool 'ev.get-sum'.\nDid you mean: b?\nAllowed parameters: a, b."
        ]


async def test_schema_errors_name_the_argument(config):
    async with through_gateway(config(everything("reject"))) as s:
        result = await s.call_tool("ev.get-sum", {"a": "one", "b": 2})
        assert result.is_error
        assert text(result) == ["Error: Invalid value for argument 'a': expected number."]


async def test_progress_through_the_gateway(config):
    seen = []

    async def on_progress(progress, total, message):
        seen.append(progress)

    async with through_gateway(config(everything())) as s:
        result = await s.call_tool(
            "ev.trigger-long-running-operation", {"duration": 1, "steps": 4}, progress_callback=on_progress
        )
        assert not result.is_error
    assert seen == sorted(seen) and len(seen) == 4, seen


async def test_sampling_round_trip(config):
    asked = []

    async def sampling(context, params):
        asked.append(params.messages[0].content.text)
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text="sampled answer"), model="test-model"
        )

    async with through_gateway(config(everything()), sampling_callback=sampling) as s:
        # server-everything adds its sampling tool once it knows the client can sample.
        for _ in range(50):
            if "ev.trigger-sampling-request" in await tool_names(s):
                break
            await anyio.sleep(0.1)
        result = await s.call_tool("ev.trigger-sampling-request", {"prompt": "write a haiku"})
        assert not result.is_error
        assert "sampled answer" in json.dumps([c.model_dump() for c in result.content])
    assert asked and "write a haiku" in asked[0]


async def test_a_cancelled_call_leaves_the_session_usable(config):
    async with through_gateway(config(everything())) as s:
        with anyio.move_on_after(0.5):
            await s.call_tool("ev.trigger-long-running-operation", {"duration": 10, "steps": 10})
            pytest.fail("the long call should have been cancelled")
        result = await s.call_tool("ev.echo", {"message": "after cancel"})
        assert text(result) == ["Echo: after cancel"]


async def test_differential_direct_and_through_the_gateway(config):
    """One client script against the server directly and through the gateway
    (warn mode, no prefix): the same answers, apart from what the gateway governs."""

    calls = [
        ("echo", {"message": "same"}),
        ("get-sum", {"a": 1.5, "b": 2}),
        ("get-tiny-image", {}),
        ("get-annotated-message", {"messageType": "error", "includeImage": True}),
        ("get-structured-content", {"location": "New York"}),
        ("get-resource-links", {"count": 2}),
        ("get-resource-reference", {"resourceType": "Text", "resourceId": 1}),
    ]

    async def script(s):
        out = {"tools": [t.model_dump() for t in (await s.list_tools()).tools]}
        out["calls"] = [(await s.call_tool(name, args)).model_dump() for name, args in calls]
        out["resources"] = (await s.list_resources()).model_dump()
        out["templates"] = (await s.list_resource_templates()).model_dump()
        out["prompts"] = (await s.list_prompts()).model_dump()
        first = out["resources"]["resources"][0]["uri"]
        out["read"] = (await s.read_resource(first)).model_dump()
        # The server stamps dynamic resources with the wall clock; that is not ours to compare.
        return json.loads(re.sub(r"\d{1,2}:\d{2}:\d{2}\s?[AP]M", "<time>", json.dumps(out)))

    async with direct_everything() as s:
        direct = await script(s)
    async with through_gateway(config(everything(prefix=False))) as s:
        gated = await script(s)
    assert [t["name"] for t in gated["tools"]] == [t["name"] for t in direct["tools"]]
    assert gated["tools"] == direct["tools"]
    assert gated["calls"] == direct["calls"]
    for part in ("resources", "templates", "prompts", "read"):
        assert gated[part] == direct[part], part


async def test_filesystem_server_behind_the_gateway(config, tmp_path):
    root = tmp_path / "files"
    root.mkdir()
    (root / "hello.txt").write_text("hello from disk")
    body = f"""
    [[upstream]]
    name = "fs"
    command = ["node", "{FILESYSTEM}", "{root}"]
    unknown_arguments = "reject"
    """
    async with through_gateway(config(body)) as s:
        names = await tool_names(s)
        assert "fs.read_text_file" in names or "fs.read_file" in names
        tool = "fs.read_text_file" if "fs.read_text_file" in names else "fs.read_file"
        result = await s.call_tool(tool, {"path": str(root / "hello.txt")})
        assert "hello from disk" in text(result)[0]
        result = await s.call_tool(tool, {"path": str(root / "hello.txt"), "pth": "x"})
        assert result.is_error
        assert text(result)[0].startswith(f"Error: Unknown parameter 'pth' for tool '{tool}'.")


def ask_config(config):
    return config(
        f"""
        [access]
        default = "deny"
        approval_timeout_ms = 5000

        [[rule]]
        callers = ["local"]
        tools = ["ev.echo"]
        effect = "ask"

        [[rule]]
        callers = ["local"]
        tools = ["ev.*"]
        effect = "allow"

        [[upstream]]
        name = "ev"
        command = ["node", "{EVERYTHING}", "stdio"]
        """
    )


async def test_ask_approved_and_declined_through_sdk_elicitation(config):
    path = ask_config(config)
    questions = []

    async def approve(context, params):
        questions.append(params.message)
        return types.ElicitResult(action="accept", content={"approve": True})

    async with through_gateway(path, elicitation_callback=approve) as s:
        result = await s.call_tool("ev.echo", {"message": "approved"})
        assert text(result) == ["Echo: approved"]
    assert questions == ["Allow the call to 'ev.echo' with these arguments?\n{\"message\":\"approved\"}"]

    async def decline(context, params):
        return types.ElicitResult(action="decline")

    async with through_gateway(path, elicitation_callback=decline) as s:
        result = await s.call_tool("ev.echo", {"message": "declined"})
        assert result.is_error
        assert text(result) == ["Error: This call needs approval, and approval was refused."]
        # Tools the rules allow outright are not asked about.
        assert "5" in text(await s.call_tool("ev.get-sum", {"a": 2, "b": 3}))[0]


async def test_ask_without_elicitation_capability(config):
    async with through_gateway(ask_config(config)) as s:
        result = await s.call_tool("ev.echo", {"message": "x"})
        assert result.is_error
        assert text(result) == [
            "Error: This call needs approval, and the client cannot ask for it. Ask for the tool to be allowed instead."
        ]


async def test_elicitation_from_the_upstream_reaches_the_client(config):
    asked = []

    async def answer(context, params):
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"name": "Ada", "check": True})

    async with through_gateway(config(everything()), elicitation_callback=answer) as s:
        for _ in range(50):
            if "ev.trigger-elicitation-request" in await tool_names(s):
                break
            await anyio.sleep(0.1)
        result = await s.call_tool("ev.trigger-elicitation-request", {})
        assert not result.is_error
        assert "Ada" in json.dumps([c.model_dump() for c in result.content])
    assert asked == ["Please provide inputs for the following fields:"]


# --- Streamable HTTP: the SDK's HTTP client against the gateway's HTTP front ---------


@asynccontextmanager
async def http_gateway(config_path, env=None):
    """`mcp-warden run --http 127.0.0.1:0`; yields (url, log lines so far)."""
    proc = subprocess.Popen(
        [WARDEN, "run", "--config", config_path, "--http", "127.0.0.1:0"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env=dict(os.environ, RUST_LOG="info", **(env or {})),
    )
    log = []
    found = threading.Event()

    def drain():
        for line in proc.stderr:
            log.append(line)
            if "mcp-warden: listening on " in line:
                found.set()

    threading.Thread(target=drain, daemon=True).start()
    assert found.wait(30), "".join(log)
    url = re.search(r"listening on (https?://\S+/mcp)", "".join(log)).group(1)
    try:
        yield url, log
    finally:
        proc.terminate()
        proc.wait(10)


@asynccontextmanager
async def http_session(url, key, **kwargs):
    client = create_mcp_http_client(headers={"Authorization": f"Bearer {key}"})
    async with streamable_http_client(url, http_client=client) as (r, w):
        async with ClientSession(r, w, **kwargs) as s:
            await s.initialize()
            yield s


def http_config(config, mode="reject"):
    return config(everything(mode) + """
    [[caller]]
    name = "alice"
    api_key_env = "INTEROP_ALICE_KEY"
    """)


async def test_sdk_http_client_lists_calls_and_streams_progress(config):
    seen = []

    async def on_progress(progress, total, message):
        seen.append(progress)

    async with http_gateway(http_config(config), {"INTEROP_ALICE_KEY": "alice-secret"}) as (url, log):
        async with http_session(url, "alice-secret") as s:
            names = await tool_names(s)
            assert "ev.echo" in names
            result = await s.call_tool("ev.echo", {"message": "over http"})
            assert not result.is_error and text(result) == ["Echo: over http"]
            # Reject mode over HTTP: the undeclared key is named with a hint.
            result = await s.call_tool("ev.echo", {"mesage": "typo"})
            assert result.is_error
            assert text(result) == [
                "Error: Unknown parameter 'mesage' for tool 'ev.echo'.\nDid you mean: message?\nAllowed parameters: message."
            ]
            # Progress before the answer: the gateway answers this POST with an SSE stream.
            result = await s.call_tool(
                "ev.trigger-long-running-operation", {"duration": 1, "steps": 3}, progress_callback=on_progress
            )
            assert not result.is_error
        # Leaving the context ends the session with DELETE.
        for _ in range(50):
            if any("HTTP session ended: the client ended the session" in l for l in log):
                break
            await anyio.sleep(0.1)
        assert any("HTTP session ended: the client ended the session" in l for l in log), "".join(log)
    assert seen == sorted(seen) and len(seen) == 3, seen


async def test_sdk_http_client_with_a_wrong_key_is_refused(config):
    async with http_gateway(http_config(config), {"INTEROP_ALICE_KEY": "alice-secret"}) as (url, _):
        async with httpx2.AsyncClient() as client:
            r = await client.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
                headers={"Authorization": "Bearer wrong", "Accept": "application/json, text/event-stream"})
            assert r.status_code == 401
            assert r.headers["www-authenticate"].startswith('Bearer realm="mcp-warden", error="invalid_token"')
        with pytest.raises(BaseException):
            async with http_session(url, "wrong"):
                pass


# --- server-everything over Streamable HTTP as the gateway's upstream (url = …) -------


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@asynccontextmanager
async def everything_over_http():
    port = free_port()
    proc = subprocess.Popen(["node", str(EVERYTHING), "streamableHttp"], env=dict(os.environ, PORT=str(port)),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for line in proc.stdout:
            if "listening on port" in line:
                break
        threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(10)


async def test_server_everything_over_http_behind_the_gateway(config):
    seen = []

    async def on_progress(progress, total, message):
        seen.append(progress)

    async with everything_over_http() as url:
        path = config(f"""
        [[upstream]]
        name = "ev"
        url = "{url}"
        unknown_arguments = "reject"
        timeout_ms = 20000
        """)
        async with through_gateway(path) as s:
            names = await tool_names(s)
            assert "ev.echo" in names and "ev.get-sum" in names, names
            result = await s.call_tool("ev.echo", {"message": "via http upstream"})
            assert text(result) == ["Echo: via http upstream"]
            result = await s.call_tool("ev.get-sum", {"a": 2, "b": 3, "c": 4})
            assert result.is_error
            assert text(result)[0].startswith("Error: Unknown parameter 'c' for tool 'ev.get-sum'."), text(result)
            result = await s.call_tool(
                "ev.trigger-long-running-operation", {"duration": 1, "steps": 3}, progress_callback=on_progress
            )
            assert not result.is_error
            resources = await s.list_resources()
            assert resources.resources, "resources are relayed from the HTTP upstream"
            read = await s.read_resource(resources.resources[0].uri)
            assert read.contents
    assert seen == sorted(seen) and len(seen) == 3, seen


# --- the 2026-07-28 revision: the SDK's Client probes server/discover and goes stateless --


def modern_client(path, **kwargs):
    return Client(StdioServerParameters(command=WARDEN, args=["run", "--config", path]), mode="auto", **kwargs)


async def test_sdk_client_speaks_2026_07_28_through_the_gateway(config):
    async with modern_client(config(everything("reject"))) as client:
        assert client.session.protocol_version == "2026-07-28"
        tools = await client.list_tools()
        assert "ev.echo" in [t.name for t in tools.tools]
        result = await client.call_tool("ev.echo", {"message": "stateless"})
        assert text(result) == ["Echo: stateless"]
        result = await client.call_tool("ev.echo", {"mesage": "typo"})
        assert result.is_error
        assert text(result) == [
            "Error: Unknown parameter 'mesage' for tool 'ev.echo'.\nDid you mean: message?\nAllowed parameters: message."
        ]


async def test_sdk_client_answers_an_approval_input_request(config):
    asked = []

    async def elicit(context, params):
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"approve": True})

    path = config(everything() + """
    [[rule]]
    callers = ["*"]
    tools = ["ev.echo"]
    effect = "ask"
    """)
    async with modern_client(path, elicitation_callback=elicit) as client:
        assert client.session.protocol_version == "2026-07-28"
        result = await client.call_tool("ev.echo", {"message": "approved?"})
        assert not result.is_error, text(result)
        assert text(result) == ["Echo: approved?"]
    assert len(asked) == 1 and "ev.echo" in asked[0], asked


async def test_sdk_client_speaks_2026_07_28_over_http(config):
    path = config(everything("reject") + """
    [gateway]
    anonymous_caller = "dev"
    """)
    async with http_gateway(path) as (url, log):
        async with Client(url, mode="auto") as client:
            assert client.session.protocol_version == "2026-07-28"
            names = [t.name for t in (await client.list_tools()).tools]
            assert "ev.echo" in names
            result = await client.call_tool("ev.echo", {"message": "stateless http"})
            assert text(result) == ["Echo: stateless http"]
            result = await client.call_tool("ev.echo", {"mesage": "typo"})
            assert result.is_error and text(result)[0].startswith("Error: Unknown parameter 'mesage'")
    assert not any("HTTP session opened" in l for l in log), "stateless requests open no session"


async def test_a_2025_and_a_2026_upstream_behind_one_gateway_for_both_kinds_of_client(config):
    """Two upstreams behind one gateway, one spoken to in 2025-11-25 (`protocol`
    set) and one in 2026-07-28 (found by server/discover). Each asks for sampling
    mid-call its own way: the 2025-11-25 one sends a request, the 2026-07-28 one
    answers with an InputRequiredResult. A 2026-07-28 client gets both as input
    requests and retries; a 2025-11-25 client gets both as sampling requests. The
    input-required tools, which the fixture offers only in 2026-07-28, are listed
    for the upstream that speaks it and not for the other."""
    conformance = str(pathlib.Path(WARDEN).parent / "warden-conformance-upstream")
    sampled, elicited = [], []

    async def sampling(context, params):
        sampled.append(params.messages[0].content.text)
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text="bridged answer"), model="m"
        )

    async def elicit(context, params):
        elicited.append(params.message)
        return types.ElicitResult(action="accept", content={"username": "ada", "email": "ada@example.com"})

    path = config(f"""
    [[upstream]]
    name = "old"
    command = ["{conformance}"]
    protocol = "2025-11-25"

    [[upstream]]
    name = "new"
    command = ["{conformance}"]
    """)

    def check_listing(names):
        assert {"old.test_sampling", "new.test_sampling"} <= set(names), names
        assert "new.test_input_required_result_elicitation" in names, names
        assert "old.test_input_required_result_elicitation" not in names, names

    async with modern_client(path, sampling_callback=sampling, elicitation_callback=elicit) as client:
        assert client.session.protocol_version == "2026-07-28"
        check_listing([t.name for t in (await client.list_tools()).tools])
        for up in ("old", "new"):
            result = await client.call_tool(f"{up}.test_sampling", {"prompt": f"a haiku from {up}"})
            assert text(result) == ["LLM response: bridged answer"], (up, result)
        result = await client.call_tool("old.test_elicitation", {"message": "who are you?"})
        assert "ada@example.com" in text(result)[0]
    assert sampled == ["a haiku from old", "a haiku from new"]
    assert elicited == ["who are you?"]

    sampled.clear()
    async with through_gateway(path, sampling_callback=sampling) as s:
        check_listing(await tool_names(s))
        for up in ("old", "new"):
            result = await s.call_tool(f"{up}.test_sampling", {"prompt": f"a haiku from {up}"})
            assert not result.is_error, (up, text(result))
            assert text(result) == ["LLM response: bridged answer"], (up, result)
    assert sampled == ["a haiku from old", "a haiku from new"]


async def test_server_everything_samples_through_a_2026_07_28_client(config):
    """server-everything offers its sampling tool to clients that can sample: the
    gateway offers upstreams the first client's capabilities, taken from the
    2026-07-28 envelope, and bridges the sampling request as an input request."""
    asked = []

    async def sampling(context, params):
        asked.append(params.messages[0].content.text)
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text="sampled answer"), model="test-model"
        )

    async with modern_client(config(everything()), sampling_callback=sampling) as client:
        assert client.session.protocol_version == "2026-07-28"
        for _ in range(50):
            names = [t.name for t in (await client.list_tools()).tools]
            if "ev.trigger-sampling-request" in names:
                break
            await anyio.sleep(0.1)
        result = await client.call_tool("ev.trigger-sampling-request", {"prompt": "write a haiku"})
        assert not result.is_error, text(result)
        assert "sampled answer" in json.dumps([c.model_dump() for c in result.content])
    assert asked and "write a haiku" in asked[0]


async def test_sdk_http_client_over_https(config):
    """The HTTP front serves https with gateway.tls_cert/tls_key; the SDK client
    checks the certificate against the test CA."""
    tls = pathlib.Path(__file__).resolve().parent.parent / "tls"
    path = config(everything() + f"""
    [gateway]
    anonymous_caller = "dev"
    tls_cert = "{tls / 'server.pem'}"
    tls_key = "{tls / 'server-key.pem'}"
    """)
    async with http_gateway(path) as (url, log):
        assert url.startswith("https://127.0.0.1:"), url
        url = url.replace("127.0.0.1", "localhost")
        trust = ssl.create_default_context(cafile=str(tls / "ca.pem"))
        async with httpx2.AsyncClient(verify=trust, timeout=30) as client:
            async with streamable_http_client(url, http_client=client) as (r, w):
                async with ClientSession(r, w) as s:
                    await s.initialize()
                    result = await s.call_tool("ev.echo", {"message": "over tls"})
                    assert text(result) == ["Echo: over tls"]
        # A client that does not trust the certificate does not get through.
        with pytest.raises(Exception):
            async with httpx2.AsyncClient(timeout=5) as client:
                await client.post(url, json={})
