#!/usr/bin/env python3
"""Captures what the reference MCP servers answer, as ordinary text for the
guard corpus (issue 26): every string of every result, one line per line,
into tests/guard/reference-outputs.txt, which guard_corpus reads beside
the repository's own docs and sources.

It drives the servers the interop suite installs (tests/interop/node_modules:
server-everything, server-filesystem over the Debian license texts in
/usr/share/common-licenses, server-memory with a few entities) with the
official Python SDK client (tests/interop/.venv). Run scripts/test once first,
or install them as it does. server-everything's get-env is left out: it
answers with this machine's environment.

    tests/interop/.venv/bin/python tests/guard/capture-reference.py
"""

import asyncio
import json
import os
import sys
import tempfile

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODULES = os.path.join(ROOT, "tests", "interop", "node_modules", "@modelcontextprotocol")
OUT = os.path.join(ROOT, "tests", "guard", "reference-outputs.txt")
LICENSES = "/usr/share/common-licenses"


def server(name, *args, env=None):
    script = os.path.join(MODULES, name, "dist", "index.js")
    if not os.path.exists(script):
        sys.exit(f"capture-reference: {script} is missing: run scripts/test once (it installs the reference servers)")
    return StdioServerParameters(command="node", args=[script, *args], env={**os.environ, **(env or {})})


# Protocol words, not text: a content block's type, a MIME type.
SKIPPED_KEYS = {"type", "mimeType"}


def strings(value):
    """Every string in a result as the server sent it, in order, but the
    protocol words of SKIPPED_KEYS (they would pad the line count)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            if k not in SKIPPED_KEYS:
                yield from strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)


async def session_of(params, use):
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            return await use(session)


def dumped(result):
    return result.model_dump(mode="json", by_alias=True, exclude_unset=True)


async def everything(s):
    out = []
    calls = [("echo", {"message": "The quarterly report is attached below."}),
             ("get-sum", {"a": 1234, "b": 5678}),
             ("get-tiny-image", {}),
             ("get-resource-links", {"count": 10})]
    calls += [("get-annotated-message", {"messageType": t, "includeImage": True})
              for t in ("error", "success", "debug")]
    calls += [("get-structured-content", {"location": c}) for c in ("New York", "Chicago", "Los Angeles")]
    calls += [("get-resource-reference", {"resourceType": t, "resourceId": i})
              for t in ("Text", "Blob") for i in (1, 2, 3)]
    for name, args in calls:
        out.append(dumped(await s.call_tool(name, args)))
    for r in (await s.list_resources()).resources:
        out.append(dumped(await s.read_resource(r.uri)))
    prompts = {"simple-prompt": {}, "args-prompt": {"city": "Lisbon", "state": "Portugal"},
               "completable-prompt": {"department": "Engineering", "name": "Alice"},
               "resource-prompt": {"resourceType": "Text", "resourceId": "1"}}
    for name, args in prompts.items():
        out.append(dumped(await s.get_prompt(name, args)))
    out.append(dumped(await s.list_tools()))
    return out


async def filesystem(s):
    out = [dumped(await s.call_tool("list_directory", {"path": LICENSES}))]
    for name in sorted(os.listdir(LICENSES)):
        path = os.path.join(LICENSES, name)
        if os.path.isfile(path):
            out.append(dumped(await s.call_tool("read_text_file", {"path": path})))
    return out


async def memory(s):
    entities = [{"name": "Project Atlas", "entityType": "project",
                 "observations": ["Kick-off in March", "Owned by the platform team"]},
                {"name": "Platform team", "entityType": "team",
                 "observations": ["Runs the deploy pipeline", "On call in two rotations"]}]
    out = [dumped(await s.call_tool("create_entities", {"entities": entities}))]
    out.append(dumped(await s.call_tool("create_relations", {"relations": [
        {"from": "Platform team", "to": "Project Atlas", "relationType": "owns"}]})))
    out.append(dumped(await s.call_tool("read_graph", {})))
    out.append(dumped(await s.call_tool("search_nodes", {"query": "deploy"})))
    return out


async def main():
    results = []
    results += await session_of(server("server-everything", "stdio"), everything)
    results += await session_of(server("server-filesystem", LICENSES), filesystem)
    with tempfile.TemporaryDirectory() as tmp:
        memory_file = os.path.join(tmp, "memory.jsonl")
        results += await session_of(server("server-memory", env={"MEMORY_FILE_PATH": memory_file}), memory)
    lines = [line for r in results for text in strings(r) for line in text.splitlines() if line.strip()]
    with open(OUT, "w") as f:
        f.write("# What the reference MCP servers answered, one line per line of each string of each result\n")
        f.write("# (tests/guard/capture-reference.py made it; guard_corpus reads it as ordinary text).\n")
        for line in lines:
            f.write(line + "\n")
    print(f"capture-reference: {len(lines)} lines from {len(results)} results into {os.path.relpath(OUT, ROOT)}")


asyncio.run(main())
