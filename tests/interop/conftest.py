"""Interop tests: the official Python MCP SDK as the client, the reference MCP
servers (npm) as upstreams, and mcp-warden between them over real pipes.

Needs: the mcp-warden binary (cargo build), `npm install` in this folder, and the
packages in requirements.txt. `.ci/run` sets all of that up."""

import os
import pathlib
import textwrap

import pytest

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
WARDEN = os.environ.get("MCP_WARDEN_BIN", str(ROOT / "target" / "debug" / "mcp-warden"))
MODULES = HERE / "node_modules" / "@modelcontextprotocol"
EVERYTHING = MODULES / "server-everything" / "dist" / "index.js"
FILESYSTEM = MODULES / "server-filesystem" / "dist" / "index.js"
TYPESCRIPT_SDK = MODULES / "sdk" / "package.json"  # servers/legacy_upstream.mjs


def pytest_sessionstart(session):
    for need in (pathlib.Path(WARDEN), EVERYTHING, FILESYSTEM, TYPESCRIPT_SDK):
        if not need.exists():
            raise pytest.UsageError(f"{need} is missing: run `cargo build` and `npm install` in tests/interop (see .ci/run)")


@pytest.fixture
def config(tmp_path):
    """Writes a warden.toml with the given body and returns its path."""

    def write(body: str) -> str:
        path = tmp_path / "warden.toml"
        path.write_text(textwrap.dedent(body))
        return str(path)

    return write
