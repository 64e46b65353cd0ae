"""The gateway as an OAuth 2.1 resource server, with a test authorization server
(authserver.py) over https and the official Python SDK's OAuth client.

- The SDK discovers the gateway's protected resource metadata from a 401, the
  issuer's metadata from there, registers itself, logs in with authorization
  code + PKCE (a headless redirect handler follows the redirect), lists and calls
  tools, and steps up when a tool needs a scope its token lacks.
- Keys rotated at the issuer are picked up; with the issuer down, tokens signed
  with known keys keep working and tokens with new keys are refused.
- Attacks are refused with 401/403 and a WWW-Authenticate that says why.
- Per-caller upstream credentials: two callers through one gateway to an HTTP
  upstream that records the Authorization header it saw.
"""

import json
import os
import pathlib
import re
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
from contextlib import asynccontextmanager, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx2
import pytest
from mcp import ClientSession
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

from conftest import ROOT, WARDEN

pytestmark = pytest.mark.anyio

HERE = pathlib.Path(__file__).resolve().parent
CA = ROOT / "tests" / "tls" / "ca.pem"
NOTES = pathlib.Path(WARDEN).parent / "warden-demo-notes"


@pytest.fixture
def anyio_backend():
    return "asyncio"


def trust():
    return ssl.create_default_context(cafile=str(CA))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class AuthServer:
    """authserver.py in a process of its own; `stop()` takes the issuer down."""

    def __init__(self, port=0):
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "authserver.py"), "--tls", "--port", str(port)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        line = self.proc.stdout.readline()
        m = re.search(r"listening on (\S+)", line)
        assert m, line
        self.issuer = m.group(1)
        self.http = httpx2.Client(verify=trust(), timeout=10)

    def admin(self, what, **body):
        r = self.http.post(f"{self.issuer}/admin/{what}", json=body)
        assert r.status_code == 200, r.text
        return r.json()

    def stats(self):
        return self.http.get(f"{self.issuer}/admin/stats").json()

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)


@pytest.fixture
def issuer():
    a = AuthServer()
    yield a
    a.stop()


def oauth_config(issuer, port, extra=""):
    return f"""
    [gateway]
    listen = "127.0.0.1:{port}"

    [oauth]
    issuer = "{issuer}"
    tls_ca_file = "{CA}"
    required_scopes = ["mcp"]
    jwks_min_interval = "2s"
    scope_groups = {{ "notes:write" = ["writers"] }}

    [oauth.tool_scopes]
    "notes:write" = ["notes.create_note", "notes.publish_note"]

    [[upstream]]
    name = "notes"
    command = ["{NOTES}"]

    [access]
    default = "deny"

    [[rule]]
    callers = ["*"]
    tools = ["notes.list_notes"]
    effect = "allow"

    [[rule]]
    callers = ["group:writers"]
    tools = ["notes.create_note"]
    effect = "allow"
    {extra}
    """


@contextmanager
def gateway(config, path, env=None, port=None):
    """`mcp-warden run --http`; yields (url, log lines)."""
    p = path / "warden.toml"
    p.write_text(config)
    proc = subprocess.Popen(
        [WARDEN, "run", "--config", str(p), "--http", f"127.0.0.1:{port or 0}"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env=dict(os.environ, RUST_LOG="info", **(env or {})))
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


class Memory:
    def __init__(self):
        self.tokens = None
        self.client = None

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken):
        self.tokens = tokens

    async def get_client_info(self):
        return self.client

    async def set_client_info(self, info: OAuthClientInformationFull):
        self.client = info


def headless_login(http, user="alice"):
    """A redirect handler that 'opens the browser' by following the authorization
    URL itself, and the callback handler that hands the code back."""
    got = {}

    async def redirect(url):
        r = await http.get(url + "&" + urllib.parse.urlencode({"user": user}), follow_redirects=False)
        assert r.status_code == 302, r.text
        q = urllib.parse.parse_qs(urllib.parse.urlparse(r.headers["location"]).query)
        got.update({k: v[0] for k, v in q.items()})

    async def callback():
        from mcp.client.auth import AuthorizationCodeResult
        return AuthorizationCodeResult(code=got["code"], state=got.get("state"), iss=got.get("iss"))

    return redirect, callback


@asynccontextmanager
async def sdk_session(url, user="alice", storage=None):
    storage = storage or Memory()
    async with httpx2.AsyncClient(verify=trust(), timeout=30) as side:
        redirect, callback = headless_login(side, user)
        auth = OAuthClientProvider(
            server_url=url,
            client_metadata=OAuthClientMetadata(
                client_name="warden interop", redirect_uris=["http://127.0.0.1:1/callback"],
                grant_types=["authorization_code", "refresh_token"], response_types=["code"]),
            storage=storage, redirect_handler=redirect, callback_handler=callback)
        async with httpx2.AsyncClient(verify=trust(), timeout=30, auth=auth) as client:
            async with streamable_http_client(url, http_client=client) as (r, w):
                async with ClientSession(r, w) as s:
                    await s.initialize()
                    yield s, storage


def text(result):
    return [c.text for c in result.content if getattr(c, "type", "") == "text"]


# --- the SDK's OAuth client: discovery, registration, login, step-up ------------


async def test_sdk_oauth_client_discovers_logs_in_and_steps_up(issuer, tmp_path):
    port = free_port()
    with gateway(oauth_config(issuer.issuer, port), tmp_path, port=port) as (url, log):
        async with sdk_session(url) as (s, storage):
            # Logged in with the scope the 401 named, and no more.
            assert storage.tokens.scope == "mcp"
            assert storage.client.client_id.startswith("client-")
            names = [t.name for t in (await s.list_tools()).tools]
            assert names == ["notes.list_notes"]
            result = await s.call_tool("notes.list_notes", {})
            assert not result.is_error
            # A tool that needs notes:write: 403 insufficient_scope, the SDK asks the
            # issuer again for mcp + notes:write, and the retried call gets through
            # (the new scope also puts alice in the writers group).
            result = await s.call_tool("notes.create_note", {"title": "t", "text": "x"})
            assert not result.is_error, text(result)
            assert set(storage.tokens.scope.split()) == {"mcp", "notes:write"}
        assert any("403 insufficient_scope" in line for line in log), "".join(log)


async def test_metadata_and_challenges(issuer, tmp_path):
    port = free_port()
    with gateway(oauth_config(issuer.issuer, port), tmp_path, port=port) as (url, _):
        async with httpx2.AsyncClient(timeout=10) as h:
            base = f"http://127.0.0.1:{port}"
            for path in ("/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"):
                r = await h.get(base + path)
                assert r.status_code == 200
                assert r.json() == {
                    "resource": url,
                    "authorization_servers": [issuer.issuer],
                    "scopes_supported": ["mcp", "notes:write"],
                    "bearer_methods_supported": ["header"],
                    "resource_name": "mcp-warden",
                }
            r = await h.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                             headers={"Accept": "application/json, text/event-stream"})
            assert r.status_code == 401
            assert r.headers["www-authenticate"] == (
                f'Bearer realm="mcp-warden", resource_metadata="{base}/.well-known/oauth-protected-resource/mcp", scope="mcp"')
