"""Interop: the revision bridge, feature by feature, through one gateway.

Behind one mcp-warden sit two stdio upstreams: a 2026-07-28 server on the official
Python SDK (servers/bridge_modern.py, MCPServer; tools `modern.*`) and a 2025-11-25
server on the official TypeScript SDK (servers/legacy_upstream.mjs, McpServer 1.x;
tools `legacy.*`). In front, the Python SDK's 2026-07-28 `Client` ("new") and its
2025-11-25 `ClientSession` ("old"). Every feature is a full round trip for each of
the four pairs: old client → modern server and new client → legacy server cross the
bridge (docs/revision-2026.md, "The bridge, feature by feature"); new → modern and
old → legacy are the same-revision controls.

Both clients opt in to log messages at `info` (the new one with the envelope's
`logLevel`, the old one with `logging/setLevel`), so `debug` must not arrive.

Starting a gateway with both upstreams costs about two seconds, so each client
revision gets one gateway for the whole module; the tests tell their traffic apart
by texts of their own."""

import json
import sys
from contextlib import asynccontextmanager
from functools import partial

import anyio
import pytest
from mcp import Client, ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client

from conftest import HERE, WARDEN

SERVERS = HERE / "servers"
UPSTREAMS = ("modern", "legacy")
CLIENTS = ("new", "old")

pytestmark = [
    pytest.mark.anyio,
    # Logging is deprecated at 2026-07-28; the bridge still carries it.
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
    # Every test once per client revision, with one gateway per revision (`peer`)...
    pytest.mark.parametrize("peer", CLIENTS, indirect=True, scope="module", ids=lambda c: f"{c}-client"),
    # ... and once per upstream.
    pytest.mark.parametrize("upstream", UPSTREAMS, ids=lambda u: f"{u}-server"),
]

def text(result):
    return [c.text for c in result.content if getattr(c, "type", "") == "text"]


async def until(found, within=5.0):
    """What `found()` returns once it is truthy; fails after `within` seconds."""
    with anyio.fail_after(within):
        while not (got := found()):
            await anyio.sleep(0.02)
    return got


class Peer:
    """A client in front of the gateway, and what the upstreams' requests asked of it."""

    def __init__(self, revision, records):
        self.revision = revision
        self.records = records  # upstream -> the file its wait_for_cancel writes to
        self.client = None
        self.elicited = []
        self.sampled = []
        self.logs = []

    async def sampling(self, context, params):
        prompt = params.messages[0].content.text
        self.sampled.append(prompt)
        reply = types.TextContent(type="text", text=f"the model read '{prompt}'")
        return types.CreateMessageResult(role="assistant", model="echo", content=reply)

    async def elicitation(self, context, params):
        self.elicited.append(params)
        if params.mode == "url":
            return types.ElicitResult(action="accept")
        return types.ElicitResult(action="accept", content={"color": f"teal, for '{params.message}'"})

    async def logging(self, params):
        self.logs.append(params)

    async def call(self, tool, arguments, **kwargs):
        return await self.client.call_tool(tool, arguments, **kwargs)


@asynccontextmanager
async def connected(peer, config):
    server = StdioServerParameters(command=WARDEN, args=["run", "--config", str(config)])
    callbacks = dict(
        sampling_callback=peer.sampling,
        elicitation_callback=peer.elicitation,
        logging_callback=peer.logging,
    )
    if peer.revision == "new":
        async with Client(server, mode="auto", log_level="info", **callbacks) as client:
            assert client.protocol_version == "2026-07-28"
            yield client
        return
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write, **callbacks) as session:
            await session.initialize()
            assert session.protocol_version == "2025-11-25"
            await session.set_logging_level("info")
            yield session


@pytest.fixture(scope="module")
def anyio_backend():
    return "asyncio"


@pytest.fixture(scope="module")
async def peer(request, tmp_path_factory):
    """A client of the revision `request.param` and its own gateway, for the module."""
    where = tmp_path_factory.mktemp(f"bridge-{request.param}")
    records = {u: where / f"{u}.cancelled" for u in UPSTREAMS}
    commands = {
        "modern": [sys.executable, str(SERVERS / "bridge_modern.py"), str(records["modern"])],
        "legacy": ["node", str(SERVERS / "legacy_upstream.mjs"), str(records["legacy"])],
    }
    config = where / "warden.toml"
    config.write_text(
        "".join(
            f'[[upstream]]\nname = "{name}"\ncommand = {json.dumps(command)}\ntimeout_ms = 20000\n\n'
            for name, command in commands.items()
        )
    )
    peer = Peer(request.param, records)
    async with connected(peer, config) as peer.client:
        yield peer


async def test_sampling(peer, upstream):
    result = await peer.call(f"{upstream}.sample", {"topic": f"tides ({upstream})"})
    assert not result.is_error, text(result)
    # The upstream's request reached the client's callback, and its answer the upstream.
    assert text(result) == [f"sampled: the model read 'Write about tides ({upstream})'"]
    assert peer.sampled[-1] == f"Write about tides ({upstream})"


async def test_form_elicitation(peer, upstream):
    question = f"Which colour for {upstream}?"
    result = await peer.call(f"{upstream}.ask", {"question": question})
    assert not result.is_error, text(result)
    assert text(result) == [f"accept: teal, for '{question}'"]
    asked = peer.elicited[-1]
    assert (asked.mode, asked.message) == ("form", question)
    assert "color" in asked.requested_schema["properties"]


async def test_url_elicitation(peer, upstream):
    url = f"https://auth.example/{peer.revision}/{upstream}/login"
    result = await peer.call(f"{upstream}.open_url", {"url": url})
    assert not result.is_error, text(result)
    assert text(result) == ["url: accept"]
    asked = peer.elicited[-1]
    assert (asked.mode, asked.url, asked.message) == ("url", url, "Sign in, please")
    if peer.revision == "old":
        # 2025-11-25 requires one; a 2026-07-28 upstream sends none, the gateway makes one up.
        assert asked.elicitation_id


async def test_logging(peer, upstream):
    said = f"hello from {upstream}"
    assert text(await peer.call(f"{upstream}.chatter", {"text": said})) == ["logged"]

    def heard():
        return [(m.level, m.logger, m.data) for m in peer.logs if said in str(m.data)]

    await until(lambda: len(heard()) >= 2, within=3)
    # At `info` and above, in order, and nothing of the call's `debug`.
    assert heard() == [
        ("info", upstream, f"info: {said}"),
        ("warning", upstream, f"warning: {said}"),
    ]


async def test_completion(peer, upstream):
    prompt = f"{upstream}_greeting"
    # A client learns the prompts' names from the listing; so does the gateway which
    # upstream offers each (without it, it asks the first upstream that completes).
    assert prompt in [p.name for p in (await peer.client.list_prompts()).prompts]
    ref = types.PromptReference(type="ref/prompt", name=prompt)
    result = await peer.client.complete(ref, {"name": "language", "value": "f"})
    assert result.completion.values == ["french", "finnish"]
    result = await peer.client.complete(ref, {"name": "language", "value": "g"})
    assert result.completion.values == ["german"]


async def test_progress(peer, upstream):
    seen = []

    async def on_progress(progress, total, message):
        seen.append((progress, total, message))

    result = await peer.call(f"{upstream}.count", {"steps": 3}, progress_callback=on_progress)
    assert text(result) == ["counted 3"]
    await until(lambda: len(seen) >= 3)
    assert seen == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]


async def test_cancellation(peer, upstream):
    tag = f"{peer.revision}-{upstream}"
    waiting = anyio.Event()

    async def on_progress(progress, total, message):
        waiting.set()

    async with anyio.create_task_group() as tg:
        call = partial(peer.call, f"{upstream}.wait_for_cancel", {"tag": tag}, progress_callback=on_progress)
        tg.start_soon(call)
        # The upstream reports progress 0 once it waits; then the client gives up the
        # call (its SDK sends notifications/cancelled).
        with anyio.fail_after(10):
            await waiting.wait()
        tg.cancel_scope.cancel()
    record = peer.records[upstream]
    await until(lambda: record.exists() and f"cancelled {tag}\n" in record.read_text())
    # The connection outlives the cancelled call.
    assert text(await peer.call(f"{upstream}.count", {"steps": 1})) == ["counted 1"]
