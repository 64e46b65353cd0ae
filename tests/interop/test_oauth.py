"""The gateway as an OAuth 2.1 resource server, with a test authorization server
(authserver.py) over https and the official Python SDK's OAuth client.

- The SDK discovers the gateway's protected resource metadata from a 401, the
  issuer's metadata from there, registers itself, logs in with authorization
  code + PKCE (a headless redirect handler follows the redirect), lists and calls
  tools, and steps up when a tool needs a scope its token lacks.
- An issuer found only through OpenID Connect discovery is used; RS256, ES384
  and EdDSA keys beside ES256 ones verify tokens, and a header naming an
  algorithm its key is not for is refused; a groups claim opens tools to the
  groups it names.
- Keys rotated at the issuer are picked up; with the issuer down, tokens signed
  with known keys keep working and tokens with new keys are refused. Keys older
  than jwks_max_age are fetched again though no unknown kid comes, so a withdrawn
  key stops verifying even the token a client keeps sending; a key set that is
  down then leaves the held keys in use.
- Attacks are refused with 401/403 and a WWW-Authenticate that says why.
- API keys and [auth] JWTs work beside OAuth tokens on one gateway; a bad
  credential of each kind gets the 401 of the verifier it went to, and `check`
  refuses an [auth] issuer that is the [oauth] issuer.
- Per-caller upstream credentials: two callers through one gateway to an HTTP
  upstream that records the Authorization header it saw, also on the GET that
  resumes an answer whose stream ended early; an exchanged token is exchanged
  again once it nears its expiry.
"""

import concurrent.futures
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

import anyio
import httpx2
import jwt
import pytest
from mcp import ClientSession
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken
from mcp.shared.exceptions import MCPError

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



def logged(log, text, timeout=10.0):
    """Whether a line holding `text` reaches the log within `timeout`: the gateway
    writes its stderr on its own schedule and a thread reads it, so a line may
    arrive a moment after the answer that caused it."""
    deadline = time.monotonic() + timeout
    while True:
        if any(text in line for line in log):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)


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


@asynccontextmanager
async def bearer_session(url, token):
    """An SDK session that presents `token` as it is (no OAuth flow of its own)."""
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as client:
        async with streamable_http_client(url, http_client=client) as (r, w):
            async with ClientSession(r, w) as s:
                await s.initialize()
                yield s


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
        assert logged(log, "403 insufficient_scope"), "".join(log)


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


# --- tokens straight at the front: rotation, an issuer that is down, attacks --------

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "attack", "version": "1"}}}


def post(url, token):
    """An initialize with `token`; (status, WWW-Authenticate, body)."""
    r = httpx2.post(url, json=INIT, timeout=20, headers={
        "Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"})
    return r.status_code, r.headers.get("www-authenticate", ""), r.text


def why(challenge):
    m = re.search(r'error_description="([^"]*)"', challenge)
    return m and m.group(1)


def claims(issuer, url, **over):
    now = int(time.time())
    c = {"iss": issuer.issuer, "sub": "mallory", "aud": url, "scope": "mcp",
         "iat": now, "nbf": now, "exp": now + 300}
    c.update(over)
    return {k: v for k, v in c.items() if v is not None}


@pytest.fixture
def front(issuer, tmp_path):
    port = free_port()
    with gateway(oauth_config(issuer.issuer, port), tmp_path, port=port) as (url, log):
        yield url, log


def access(issuer, url, sub="alice", scope="mcp"):
    return issuer.admin("access", sub=sub, aud=url, scope=scope)["token"]


async def test_rotated_keys_are_picked_up_and_dropped_ones_go(issuer, front):
    url, _ = front
    old = access(issuer, url)
    assert post(url, old)[0] == 200
    issuer.admin("rotate")  # k2 next to k1
    time.sleep(2.2)  # past jwks_min_interval since the fetch at start-up
    new = access(issuer, url)
    assert post(url, new)[0] == 200, "a token of the new key is taken without a restart"
    assert post(url, old)[0] == 200
    issuer.admin("rotate", drop_old=True)  # only k3 published now
    time.sleep(2.2)  # past jwks_min_interval
    newest = access(issuer, url)
    assert post(url, newest)[0] == 200
    status, challenge, _ = post(url, old)
    assert status == 401
    assert why(challenge) == "Unauthorized: the token is signed with a key the issuer does not publish"


async def test_an_issuer_that_is_down_keeps_known_keys_and_refuses_new_ones(issuer, front):
    url, log = front
    good = access(issuer, url)
    rotated_in_secret = issuer.admin("mint", claims=claims(issuer, url), unpublished=True, kid="k-next")["token"]
    issuer.stop()
    assert post(url, good)[0] == 200, "".join(log)
    time.sleep(2.2)
    status, challenge, body = post(url, rotated_in_secret)
    assert status == 401
    assert why(challenge) == "Unauthorized: the token is signed with a key the issuer does not publish"
    assert json.loads(body)["error"]["message"] == "Unauthorized: the token is signed with a key the issuer does not publish."
    assert post(url, good)[0] == 200
    assert logged(log, "fetching the issuer's signing keys failed")


@pytest.mark.parametrize("case,expected", [
    ("other_audience", "Unauthorized: the token is meant for another audience"),
    ("no_audience", "Unauthorized: the token does not name an audience"),
    ("hs256_with_public_key", "Unauthorized: the token is signed with an algorithm this gateway does not accept"),
    ("alg_none", "Unauthorized: the token is signed with an algorithm this gateway does not accept"),
    ("unconfigured_issuer", "Unauthorized: the token comes from an issuer this gateway does not trust"),
    ("not_yet_valid", "Unauthorized: the token is not valid yet"),
    ("expired", "Unauthorized: the token has expired"),
    ("issued_in_future", "Unauthorized: the token says it was issued in the future"),
    ("unpublished_key", "Unauthorized: the token is signed with a key the issuer does not publish"),
    ("forged_under_a_published_kid", "Unauthorized: the token's signature is not valid"),
])
async def test_attacks_are_refused_with_a_reason(issuer, front, case, expected):
    url, _ = front
    now = int(time.time())
    mint = lambda **kw: issuer.admin("mint", **kw)["token"]
    token = {
        "other_audience": lambda: mint(claims=claims(issuer, url, aud="https://other.example/mcp")),
        "no_audience": lambda: mint(claims=claims(issuer, url, aud=None)),
        # The issuer's public key, as published, used as an HMAC secret.
        "hs256_with_public_key": lambda: mint(claims=claims(issuer, url), alg="HS256",
                                              secret=issuer.http.get(issuer.issuer + "/jwks").json()["keys"][0]["x"]),
        "alg_none": lambda: mint(claims=claims(issuer, url), alg="none"),
        "unconfigured_issuer": lambda: mint(claims=claims(issuer, url, iss="https://evil.example")),
        "not_yet_valid": lambda: mint(claims=claims(issuer, url, nbf=now + 3600)),
        "expired": lambda: mint(claims=claims(issuer, url, exp=now - 3600)),
        "issued_in_future": lambda: mint(claims=claims(issuer, url, iat=now + 3600)),
        "unpublished_key": lambda: mint(claims=claims(issuer, url), unpublished=True, kid="k-other"),
        "forged_under_a_published_kid": lambda: mint(claims=claims(issuer, url), unpublished=True, kid="k1"),
    }[case]()
    status, challenge, body = post(url, token)
    assert status == 401, body
    assert challenge.startswith('Bearer realm="mcp-warden", resource_metadata="'), challenge
    assert 'error="invalid_token"' in challenge
    assert why(challenge) == expected
    # The same token with what it lacked is fine: the refusal was for that reason.
    assert post(url, access(issuer, url))[0] == 200


async def test_a_kid_flood_costs_one_key_fetch(issuer, front):
    url, _ = front
    before = issuer.stats()["jwks_fetches"]
    tokens = [issuer.admin("mint", claims=claims(issuer, url), unpublished=True, kid=f"flood{i}")["token"]
              for i in range(40)]
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(10) as pool:
        answers = list(pool.map(lambda t: post(url, t), tokens))
    elapsed = time.monotonic() - started
    for status, challenge, _ in answers:
        assert status == 401 and "does not publish" in challenge
    fetched = issuer.stats()["jwks_fetches"] - before
    # One fetch per jwks_min_interval (2 s) at most, however many unknown kids came.
    assert 1 <= fetched <= 1 + int(elapsed / 2), (fetched, elapsed)
    assert post(url, access(issuer, url))[0] == 200


async def test_a_ten_megabyte_key_set_is_not_taken(issuer, front):
    url, log = front
    good = access(issuer, url)
    issuer.admin("huge_jwks", on=True)
    t = issuer.admin("mint", claims=claims(issuer, url), unpublished=True, kid="k-huge")["token"]
    time.sleep(2.2)
    status, challenge, _ = post(url, t)
    assert status == 401 and "does not publish" in challenge
    assert logged(log, "is larger than 262144 bytes"), "".join(log)
    assert post(url, good)[0] == 200, "the keys held before stay in use"


UNKNOWN_KEY = "Unauthorized: the token is signed with a key the issuer does not publish"
BAD_SIGNATURE = "Unauthorized: the token's signature is not valid"
WRONG_ALGORITHM = "Unauthorized: the token is signed with an algorithm this gateway does not accept"


def until(check, timeout):
    """Calls `check` every 0.2 s until it returns something true or `timeout`
    seconds pass; its last answer."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got or time.monotonic() > deadline:
            return got
        time.sleep(0.2)


def aged_config(issuer, port, max_age):
    """oauth_config with keys that age after `max_age` (and a 1 s fetch interval)."""
    return oauth_config(issuer.issuer, port).replace(
        'jwks_min_interval = "2s"', f'jwks_min_interval = "1s"\n    jwks_max_age = "{max_age}"')


async def test_keys_older_than_jwks_max_age_are_fetched_again_so_a_withdrawn_key_stops(issuer, tmp_path):
    port = free_port()
    with gateway(aged_config(issuer, port, "4s"), tmp_path, port=port) as (url, _):
        started = time.monotonic()  # the keys were fetched at start, before this
        old = access(issuer, url)
        assert post(url, old)[0] == 200
        fetches = issuer.stats()["jwks_fetches"]
        issuer.admin("rotate", drop_old=True)  # k1 withdrawn: only k2 is published now
        # No token with an unknown kid comes, only the same k1 token again, as a
        # client sends it. Keys younger than jwks_max_age are used as they are.
        assert post(url, old)[0] == 200
        assert issuer.stats()["jwks_fetches"] == fetches
        # Once they are older, a request makes the gateway fetch them again (in the
        # background: the request that noticed is answered with the keys held), and
        # the withdrawn key stops verifying tokens.
        refused = until(lambda: (lambda a: a[0] != 200 and (a[0], a[1]))(post(url, old)), 4 + 5)
        waited = time.monotonic() - started
        assert refused == (401, f'Bearer realm="mcp-warden", resource_metadata="http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp", scope="mcp", error="invalid_token", error_description="{UNKNOWN_KEY}"'), waited
        # Fetched again (a second fetch may follow once the rate limit allows:
        # the refused token's kid is unknown now).
        assert issuer.stats()["jwks_fetches"] > fetches
        assert post(url, access(issuer, url))[0] == 200, "the key published now verifies"


async def test_an_issuer_down_when_the_keys_age_leaves_them_in_use(issuer, tmp_path):
    port = free_port()
    with gateway(aged_config(issuer, port, "3s"), tmp_path, port=port) as (url, log):
        good = access(issuer, url)
        unseen = access(issuer, url, sub="bob")  # signed with k1, shown only later
        unknown = issuer.admin("mint", claims=claims(issuer, url), unpublished=True, kid="k-next")["token"]
        forged = issuer.admin("mint", claims=claims(issuer, url), unpublished=True, kid="k1")["token"]
        assert post(url, good)[0] == 200
        fetches = issuer.stats()["jwks_fetches"]
        issuer.admin("jwks_down", on=True)  # the key set answers 503; the rest stays up
        # Past jwks_max_age, a request makes the gateway try the key set again.
        tried = until(lambda: post(url, good)[0] == 200 and issuer.stats()["jwks_fetches"] > fetches, 3 + 5)
        assert tried, "".join(log)
        assert logged(log, "fetching the issuer's signing keys failed; the keys held before stay in use: "
                           "the key set (jwks_uri): answered HTTP 503 Service Unavailable"), "".join(log)
        assert post(url, good)[0] == 200
        assert post(url, unseen)[0] == 200, "a token of a held key, never seen before, still verifies"
        for token, reason in ((unknown, UNKNOWN_KEY), (forged, BAD_SIGNATURE)):
            status, challenge, _ = post(url, token)
            assert (status, why(challenge)) == (401, reason)
        # The whole issuer down: the same.
        issuer.stop()
        failures = sum("fetching the issuer's signing keys failed" in line for line in log)
        assert until(lambda: post(url, good)[0] == 200 and sum(
            "fetching the issuer's signing keys failed" in line for line in log) > failures, 5), "".join(log)
        for token, reason in ((unknown, UNKNOWN_KEY), (forged, BAD_SIGNATURE)):
            status, challenge, _ = post(url, token)
            assert (status, why(challenge)) == (401, reason)
        assert post(url, unseen)[0] == 200


async def test_an_issuer_with_only_openid_connect_discovery_is_found_and_trusted(issuer, tmp_path):
    issuer.admin("oidc_only", on=True)
    assert issuer.http.get(issuer.issuer + "/.well-known/oauth-authorization-server").status_code == 404
    r = check(tmp_path, oauth_config(issuer.issuer, 8931))
    assert r.returncode == 0 and "warning: oauth" not in r.stdout, r.stdout + r.stderr
    port = free_port()
    with gateway(oauth_config(issuer.issuer, port), tmp_path, port=port) as (url, log):
        assert post(url, access(issuer, url))[0] == 200, "".join(log)
        # The keys came from the jwks_uri of the OpenID Connect document: a
        # signature they do not verify is still refused.
        forged = issuer.admin("mint", claims=claims(issuer, url), unpublished=True, kid="k1")["token"]
        status, challenge, _ = post(url, forged)
        assert (status, why(challenge)) == (401, "Unauthorized: the token's signature is not valid")
    assert not any("cannot be reached" in line for line in log), "".join(log)


async def test_an_rs256_key_published_beside_the_ec_one_verifies_tokens(issuer, tmp_path):
    kid = issuer.admin("rsa")["kid"]
    assert [k["kty"] for k in issuer.http.get(issuer.issuer + "/jwks").json()["keys"]] == ["EC", "RSA"]
    port = free_port()
    with gateway(oauth_config(issuer.issuer, port), tmp_path, port=port) as (url, _):
        rs256 = issuer.admin("mint", claims=claims(issuer, url, sub="rosa"), alg="RS256")["token"]
        assert jwt.get_unverified_header(rs256) == {"alg": "RS256", "kid": kid, "typ": "JWT"}
        assert post(url, rs256)[0] == 200
        async with bearer_session(url, rs256) as s:
            assert not (await s.call_tool("notes.list_notes", {})).is_error
        assert post(url, access(issuer, url))[0] == 200, "the EC key still verifies its tokens"
        forged = issuer.admin("mint", claims=claims(issuer, url), alg="RS256", unpublished=True, kid=kid)["token"]
        status, challenge, _ = post(url, forged)
        assert (status, why(challenge)) == (401, "Unauthorized: the token's signature is not valid")


async def test_es384_and_eddsa_keys_verify_their_tokens_and_no_token_of_another_algorithm(issuer, tmp_path):
    p384 = issuer.admin("publish", alg="ES384")["kid"]
    ed25519 = issuer.admin("publish", alg="EdDSA")["kid"]
    published = issuer.http.get(issuer.issuer + "/jwks").json()["keys"]
    assert [(k["kid"], k["kty"], k["crv"], k["alg"]) for k in published] == [
        ("k1", "EC", "P-256", "ES256"), (p384, "EC", "P-384", "ES384"), (ed25519, "OKP", "Ed25519", "EdDSA")]
    port = free_port()
    with gateway(oauth_config(issuer.issuer, port), tmp_path, port=port) as (url, _):
        mint = lambda **kw: issuer.admin("mint", claims=claims(issuer, url, sub="kim"), **kw)["token"]
        for alg, kid in (("ES384", p384), ("EdDSA", ed25519)):
            token = mint(alg=alg)
            assert jwt.get_unverified_header(token) == {"alg": alg, "kid": kid, "typ": "JWT"}
            assert post(url, token)[0] == 200, alg
            async with bearer_session(url, token) as s:
                assert not (await s.call_tool("notes.list_notes", {})).is_error
            # Another key of the same kind under the published kid: the key checks.
            status, challenge, _ = post(url, mint(alg=alg, unpublished=True, kid=kid))
            assert (status, why(challenge)) == (401, BAD_SIGNATURE), alg
        assert post(url, access(issuer, url))[0] == 200, "the P-256 key still verifies its tokens"
        # A published key's own signature, under a header naming an algorithm that
        # key is not for: refused for the algorithm, before any signature check.
        for named, key in (("ES256", p384), ("ES384", "k1"), ("EdDSA", "k1"), ("EdDSA", p384),
                           ("ES256", ed25519), ("ES384", ed25519), ("RS256", ed25519)):
            status, challenge, body = post(url, mint(alg=named, key=key))
            assert status == 401, (named, key)
            assert challenge == (f'Bearer realm="mcp-warden", resource_metadata="http://127.0.0.1:{port}'
                                 f'/.well-known/oauth-protected-resource/mcp", scope="mcp", error="invalid_token", '
                                 f'error_description="{WRONG_ALGORITHM}"'), (named, key)
            assert json.loads(body)["error"]["message"] == WRONG_ALGORITHM + "."
        # The same keys with the header that is theirs: accepted (the refusals
        # above were for the header's algorithm alone).
        for named, key in (("ES384", p384), ("EdDSA", ed25519), ("ES256", "k1")):
            assert post(url, mint(alg=named, key=key))[0] == 200, (named, key)


async def test_a_key_published_for_an_algorithm_its_type_does_not_sign_with_is_not_used(issuer, tmp_path):
    # A broken key set: a P-384 key labelled ES256, an Ed25519 key labelled ES256.
    p384 = issuer.admin("publish", alg="ES384", label="ES256")["kid"]
    ed25519 = issuer.admin("publish", alg="EdDSA", label="ES256")["kid"]
    assert [k["alg"] for k in issuer.http.get(issuer.issuer + "/jwks").json()["keys"]] == ["ES256", "ES256", "ES256"]
    port = free_port()
    with gateway(oauth_config(issuer.issuer, port), tmp_path, port=port) as (url, _):
        mint = lambda **kw: issuer.admin("mint", claims=claims(issuer, url), **kw)["token"]
        # Signed by the key itself, under the header its label names or the one
        # its type is for: no such key is held.
        for named, key in (("ES256", p384), ("ES384", p384), ("ES256", ed25519), ("EdDSA", ed25519)):
            status, challenge, body = post(url, mint(alg=named, key=key))
            assert (status, why(challenge)) == (401, UNKNOWN_KEY), (named, key)
            assert json.loads(body)["error"]["message"] == UNKNOWN_KEY + "."
        assert post(url, access(issuer, url))[0] == 200, "the well-formed key beside them still verifies"


async def test_the_groups_claim_puts_the_caller_in_groups_that_rules_name(issuer, tmp_path):
    port = free_port()
    publishers = """
    [[rule]]
    callers = ["group:publishers"]
    tools = ["notes.publish_note"]
    effect = "allow"
    """
    cfg = oauth_config(issuer.issuer, port, publishers).replace(
        'jwks_min_interval = "2s"', 'jwks_min_interval = "2s"\n    groups_claim = "groups"')
    with gateway(cfg, tmp_path, port=port) as (url, _):
        def token(**over):
            # notes:write puts every one of them in writers (scope_groups): create_note.
            c = claims(issuer, url, sub="gina", scope="mcp notes:write", **over)
            return issuer.admin("mint", claims=c)["token"]

        async with bearer_session(url, token(groups=["readers", "publishers"])) as s:
            names = sorted(t.name for t in (await s.list_tools()).tools)
            assert names == ["notes.create_note", "notes.list_notes", "notes.publish_note"]
            assert not (await s.call_tool("notes.create_note", {"title": "t", "text": "x"})).is_error
            assert text(await s.call_tool("notes.publish_note", {"id": 1})) == ["Note 1 is now public."]
        # Another group in the claim, or the group in a claim not configured: hidden.
        for other in (token(groups=["readers"]), token(roles=["publishers"])):
            async with bearer_session(url, other) as s:
                names = sorted(t.name for t in (await s.list_tools()).tools)
                assert names == ["notes.create_note", "notes.list_notes"]
                with pytest.raises(MCPError) as refused:
                    await s.call_tool("notes.publish_note", {"id": 1})
                assert refused.value.message == "Unknown tool 'notes.publish_note'."


async def test_a_when_cel_rule_reads_the_oauth_tokens_claims(issuer, tmp_path):
    """X10: `caller.claims` is the verified [oauth] JWT's payload: a claim the
    issuer signed decides a `when_cel` rule; a token without it fails closed (X3)."""
    port = free_port()
    by_team = """
    [[rule]]
    callers = ["*"]
    tools = ["notes.publish_note"]
    effect = "allow"
    when_cel = "caller.claims.team == 'payments' && caller.claims.iss.startsWith('http')"
    """
    with gateway(oauth_config(issuer.issuer, port, by_team), tmp_path, port=port) as (url, _):
        def token(**over):
            c = claims(issuer, url, sub="tess", scope="mcp notes:write", **over)
            return issuer.admin("mint", claims=c)["token"]

        async with bearer_session(url, token(team="payments")) as s:
            assert not (await s.call_tool("notes.create_note", {"title": "t", "text": "x"})).is_error
            assert text(await s.call_tool("notes.publish_note", {"id": 1})) == ["Note 1 is now public."]
        async with bearer_session(url, token(team="ops")) as s:
            r = await s.call_tool("notes.publish_note", {"id": 1})
            assert r.is_error
            assert text(r) == ["Error: Policy does not allow this call to tool 'notes.publish_note' for caller 'tess'."]
        async with bearer_session(url, token()) as s:
            r = await s.call_tool("notes.publish_note", {"id": 1})
            assert text(r) == ["Error: Policy could not decide on this call, so it is refused."]


async def test_a_token_without_the_required_scope_gets_403(issuer, front):
    url, _ = front
    status, challenge, body = post(url, access(issuer, url, scope="notes:read"))
    assert status == 403
    assert challenge.endswith(', scope="mcp", error="insufficient_scope", error_description="Forbidden: the token lacks a scope this request needs; ask for: mcp"')
    assert json.loads(body)["error"]["message"] == "Forbidden: the token lacks a scope this request needs; ask for: mcp."


# --- [oauth] beside API keys and [auth] JWTs ------------------------------------


def both_config(issuer, port):
    """oauth_config plus a [[caller]] with an API key (in the writers group) and
    [auth] HS256 JWTs of another issuer."""
    return oauth_config(issuer.issuer, port, """
    [[caller]]
    name = "keyed"
    api_key_env = "WARDEN_TEST_API_KEY"
    groups = ["writers"]

    [auth]
    jwt_secret_env = "WARDEN_TEST_JWT_SECRET"
    issuer = "https://legacy.example"
    audience = "warden-legacy"
    """)


LEGACY_SECRET = "legacy-secret-of-32-bytes-or-more"
BOTH_ENV = {"WARDEN_TEST_API_KEY": "key-of-keyed-0123456789", "WARDEN_TEST_JWT_SECRET": LEGACY_SECRET}


def call_raw(url, token, tool, arguments):
    """initialize, initialized and one tools/call over plain HTTP with `token`:
    the call's (status, WWW-Authenticate, body)."""
    h = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"}
    r = httpx2.post(url, json=INIT, headers=h, timeout=20)
    assert r.status_code == 200, r.text
    h.update({"Mcp-Session-Id": r.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-06-18"})
    r = httpx2.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=h, timeout=20)
    assert r.status_code == 202, r.text
    r = httpx2.post(url, headers=h, timeout=20, json={
        "jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": tool, "arguments": arguments}})
    return r.status_code, r.headers.get("www-authenticate", ""), r.text


def legacy(sub="lee", secret=LEGACY_SECRET, **over):
    """An [auth] JWT (HS256, the legacy issuer and audience)."""
    now = int(time.time())
    c = {"iss": "https://legacy.example", "aud": "warden-legacy", "sub": sub, "iat": now, "exp": now + 300}
    c.update(over)
    return jwt.encode({k: v for k, v in c.items() if v is not None}, secret, algorithm="HS256")


async def test_api_keys_auth_jwts_and_oauth_tokens_work_on_one_gateway(issuer, tmp_path):
    port = free_port()
    with gateway(both_config(issuer, port), tmp_path, BOTH_ENV, port) as (url, log):
        key, oauth_token, auth_jwt = BOTH_ENV["WARDEN_TEST_API_KEY"], access(issuer, url), legacy()
        for credential, who in ((key, "keyed"), (oauth_token, "alice"), (auth_jwt, "lee")):
            async with bearer_session(url, credential) as s:
                assert not (await s.call_tool("notes.list_notes", {})).is_error
            opened = lambda: any("HTTP session opened" in line and line.rstrip().endswith(f" caller={who}") for line in log)
            assert until(opened, 10), "".join(log)
        # An API key carries no scopes and is not checked for them (neither
        # required_scopes nor tool_scopes): its groups and the rules decide, so
        # keyed, a writer, creates a note...
        async with bearer_session(url, key) as s:
            assert not (await s.call_tool("notes.create_note", {"title": "t", "text": "x"})).is_error
        # ...an OAuth token without notes:write is asked to step up...
        status, challenge, body = call_raw(url, oauth_token, "notes.create_note", {"title": "t", "text": "x"})
        assert status == 403, body
        assert challenge == (f'Bearer realm="mcp-warden", resource_metadata="http://127.0.0.1:{port}'
                             '/.well-known/oauth-protected-resource/mcp", scope="mcp notes:write", '
                             'error="insufficient_scope", error_description="Forbidden: the token lacks a scope '
                             'this request needs; ask for: mcp notes:write"')
        # ...and an [auth] JWT's caller, in no group, is not allowed the tool at all.
        async with bearer_session(url, auth_jwt) as s:
            assert [t.name for t in (await s.list_tools()).tools] == ["notes.list_notes"]
            with pytest.raises(MCPError) as refused:
                await s.call_tool("notes.create_note", {"title": "t", "text": "x"})
            assert refused.value.message == "Unknown tool 'notes.create_note'."


@pytest.mark.parametrize("case,expected", [
    # Not a key, not a JWT, and no introspection: nothing can accept it.
    ("wrong_api_key", "Unauthorized: the credential was not accepted"),
    # JWTs naming the [oauth] issuer are checked with its keys alone...
    ("oauth_forged", "Unauthorized: the token's signature is not valid"),
    ("oauth_other_audience", "Unauthorized: the token is meant for another audience"),
    ("oauth_expired", "Unauthorized: the token has expired"),
    # ...every other JWT by [auth]: its secret, issuer and audience.
    ("auth_wrong_secret", "Unauthorized: the credential was not accepted"),
    ("auth_expired", "Unauthorized: the token has expired"),
    ("auth_other_audience", "Unauthorized: the token is meant for another audience"),
    ("auth_other_issuer", "Unauthorized: the token comes from an issuer this gateway does not trust"),
    ("auth_no_issuer", "Unauthorized: the token does not name an issuer"),
    # The [oauth] issuer's own key, its token claiming the [auth] issuer: [auth]
    # holds no such key.
    ("oauth_key_claiming_the_auth_issuer", "Unauthorized: the credential was not accepted"),
    # An HS256 token claiming the [oauth] issuer, signed with [auth]'s secret:
    # checked as an [oauth] token, whose keys are asymmetric only.
    ("auth_secret_claiming_the_oauth_issuer", "Unauthorized: the token is signed with an algorithm this gateway does not accept"),
])
async def test_a_bad_credential_of_each_kind_gets_its_own_401_beside_oauth(issuer, tmp_path, case, expected):
    port = free_port()
    with gateway(both_config(issuer, port), tmp_path, BOTH_ENV, port) as (url, _):
        now = int(time.time())
        mint = lambda **kw: issuer.admin("mint", claims=claims(issuer, url, **kw))["token"]
        credential = {
            "wrong_api_key": lambda: "key-of-keyed-0123456780",
            "oauth_forged": lambda: issuer.admin("mint", claims=claims(issuer, url), unpublished=True, kid="k1")["token"],
            "oauth_other_audience": lambda: mint(aud="warden-legacy"),
            "oauth_expired": lambda: mint(exp=now - 3600),
            "auth_wrong_secret": lambda: legacy(secret="not-the-secret-but-as-long-as-it"),
            "auth_expired": lambda: legacy(exp=now - 3600),
            "auth_other_audience": lambda: legacy(aud=url),
            "auth_other_issuer": lambda: legacy(iss="https://evil.example"),
            "auth_no_issuer": lambda: legacy(iss=None),
            "oauth_key_claiming_the_auth_issuer": lambda: mint(iss="https://legacy.example", aud="warden-legacy"),
            "auth_secret_claiming_the_oauth_issuer": lambda: legacy(iss=issuer.issuer, aud=url),
        }[case]()
        status, challenge, body = post(url, credential)
        assert status == 401, body
        # Whichever verifier refused it, the challenge points at the [oauth]
        # metadata, so a client can go and get a token there.
        assert challenge == (f'Bearer realm="mcp-warden", resource_metadata="http://127.0.0.1:{port}'
                             f'/.well-known/oauth-protected-resource/mcp", scope="mcp", error="invalid_token", '
                             f'error_description="{expected}"')
        assert json.loads(body)["error"]["message"] == expected + "."
        # No credential at all: the challenge without an error.
        r = httpx2.post(url, json=INIT, timeout=20, headers={"Accept": "application/json, text/event-stream"})
        assert r.status_code == 401
        assert r.headers["www-authenticate"] == (f'Bearer realm="mcp-warden", resource_metadata="http://127.0.0.1:{port}'
                                                 '/.well-known/oauth-protected-resource/mcp", scope="mcp"')
        assert r.json()["error"]["message"] == "Unauthorized: send 'Authorization: Bearer <API key or token>'."
        # Each kind still works on this gateway.
        for good in (BOTH_ENV["WARDEN_TEST_API_KEY"], access(issuer, url), legacy()):
            assert post(url, good)[0] == 200



async def test_an_auth_issuer_that_is_the_oauth_issuer_is_refused_by_check_and_at_start(issuer, tmp_path):
    # Tokens naming the [oauth] issuer never reach [auth], which requires its own
    # issuer in each: such an [auth] could never let anyone in.
    config = both_config(issuer, 8931).replace('issuer = "https://legacy.example"', f'issuer = "{issuer.issuer}"')
    path = tmp_path / "warden.toml"
    said = (f"error: {path}: auth.issuer: is also oauth.issuer: a JWT naming that issuer is checked with the "
            "[oauth] issuer's published keys only, so [auth] would never accept one; set auth.issuer to the "
            "issuer its own tokens name\n")
    r = check(tmp_path, config)
    # check names where: the [auth] issuer's line and column (C1).
    lines = [l.strip() for l in config.splitlines()]
    line = lines.index(f'issuer = "{issuer.issuer}"', lines.index("[auth]")) + 1
    where = f"  --> {path}:{line}:"
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr.startswith(said + where) and r.stderr.count("\n") == 2, r.stderr
    r = subprocess.run([WARDEN, "run", "--config", str(path), "--http", "127.0.0.1:0"], stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=30, env=dict(os.environ, **BOTH_ENV))
    assert (r.returncode, r.stderr) == (1, said)

# --- per-caller upstream credentials ---------------------------------------------


class RecordingUpstream:
    """A Streamable HTTP MCP server (plain JSON answers) with a tool `whoami`
    that records the Authorization header of every tools/call, and `whoami_later`,
    whose answer stream ends after a priming event: the answer (the Authorization
    header of the resuming GET) comes on a GET with Last-Event-ID (SEP-1699)."""

    def __init__(self):
        seen = self.seen = []
        resumes = self.resumes = []
        later = {}

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def reply(self, status, body=None, headers=None):
                data = json.dumps(body).encode() if body is not None else b""
                self.send_response(status)
                if body is not None:
                    self.send_header("Content-Type", "application/json")
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def event_stream(self, event_id, data):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(f"id: {event_id}\ndata: {data}\n\n".encode())
                self.wfile.flush()
                self.close_connection = True

            def do_GET(self):
                last = self.headers.get("Last-Event-ID")
                if last not in later:
                    return self.reply(405)
                auth = self.headers.get("Authorization", "")
                resumes.append(auth)
                self.event_stream(last + "-end", json.dumps({"jsonrpc": "2.0", "id": later.pop(last), "result": {
                    "content": [{"type": "text", "text": auth}]}}))

            def do_DELETE(self):
                self.reply(200)

            def do_POST(self):
                msg = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                method, mid = msg.get("method"), msg.get("id")
                if mid is None:
                    return self.reply(202)
                if method == "initialize":
                    return self.reply(200, {"jsonrpc": "2.0", "id": mid, "result": {
                        "protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
                        "serverInfo": {"name": "recorder", "version": "1"}}}, {"Mcp-Session-Id": "s1"})
                if method == "tools/list":
                    return self.reply(200, {"jsonrpc": "2.0", "id": mid, "result": {"tools": [
                        {"name": "whoami", "inputSchema": {"type": "object", "properties": {}}},
                        {"name": "whoami_later", "inputSchema": {"type": "object", "properties": {}}}]}})
                if method == "tools/call" and msg["params"]["name"] == "whoami_later":
                    seen.append(self.headers.get("Authorization", ""))
                    later[f"later-{mid}"] = mid
                    return self.event_stream(f"later-{mid}", "")
                if method == "tools/call":
                    auth = self.headers.get("Authorization", "")
                    seen.append(auth)
                    return self.reply(200, {"jsonrpc": "2.0", "id": mid, "result": {
                        "content": [{"type": "text", "text": auth}]}})
                self.reply(200, {"jsonrpc": "2.0", "id": mid, "result": {}})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/mcp"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


@pytest.fixture
def recorder():
    r = RecordingUpstream()
    yield r
    r.close()


def credential_config(issuer, port, recorder, tmp_path, credentials):
    return f"""
    [gateway]
    listen = "127.0.0.1:{port}"

    [oauth]
    issuer = "{issuer.issuer}"
    tls_ca_file = "{CA}"
    client_id = "warden-gateway"
    client_secret_env = "WARDEN_CLIENT_SECRET"

    [[caller]]
    name = "bob"
    groups = ["ops"]

    [[upstream]]
    name = "rec"
    url = "{recorder.url}"
    bearer_token_env = "REC_GATEWAY_TOKEN"
    {credentials}

    [store]
    url = "sqlite://{tmp_path / 'warden.db'}"
    """


async def whoami(url, token, tool="rec.whoami"):
    async with bearer_session(url, token) as s:
        return text(await s.call_tool(tool, {}))[0]


def audit(tmp_path):
    out = subprocess.run([WARDEN, "audit", "--config", str(tmp_path / "warden.toml"), "--json"],
                         capture_output=True, text=True, check=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()] if not out.lstrip().startswith("[") else json.loads(out)


async def test_each_caller_presents_its_own_upstream_credential(issuer, recorder, tmp_path):
    port = free_port()
    issuer.admin("client", client_id="warden-gateway", client_secret="gw-secret")
    (tmp_path / "bob.token").write_text("bob-upstream-token\n")
    creds = """
    [[upstream.credential]]
    callers = ["alice"]
    name = "alice-at-rec"
    token_env = "REC_ALICE_TOKEN"

    [[upstream.credential]]
    callers = ["group:ops"]
    token_file = "bob.token"
    """
    env = {"REC_ALICE_TOKEN": "alice-upstream-token", "REC_GATEWAY_TOKEN": "gateway-own-token",
           "WARDEN_CLIENT_SECRET": "gw-secret"}
    with gateway(credential_config(issuer, port, recorder, tmp_path, creds), tmp_path, env, port) as (url, log):
        alice = access(issuer, url, sub="alice")
        bob = access(issuer, url, sub="bob")
        carol = access(issuer, url, sub="carol")
        assert await whoami(url, alice) == "Bearer alice-upstream-token"
        assert await whoami(url, bob) == "Bearer bob-upstream-token"
        # No entry is for carol: the upstream's own token, as before.
        assert await whoami(url, carol) == "Bearer gateway-own-token"
        # An answer whose stream ends early is fetched again with a GET
        # (Last-Event-ID): as the caller whose call it is, never as the gateway.
        assert await whoami(url, alice, "rec.whoami_later") == "Bearer alice-upstream-token"
        assert await whoami(url, bob, "rec.whoami_later") == "Bearer bob-upstream-token"
        assert await whoami(url, carol, "rec.whoami_later") == "Bearer gateway-own-token"
        assert recorder.resumes == ["Bearer alice-upstream-token", "Bearer bob-upstream-token",
                                    "Bearer gateway-own-token"]
        for t in (alice, bob, carol):
            assert not any(t in seen for seen in recorder.seen), "a client's token went upstream"
    records = audit(tmp_path)
    by_caller = {(r["caller"], r.get("credential")) for r in records}
    assert by_caller == {("alice", "alice-at-rec"), ("bob", "bob.token"), ("carol", None)}
    assert not any("upstream-token" in json.dumps(r) for r in records), "a secret in the audit trail"


async def test_token_exchange_per_caller_cached_until_expiry(issuer, recorder, tmp_path):
    port = free_port()
    issuer.admin("client", client_id="warden-gateway", client_secret="gw-secret")
    creds = """
    [[upstream.credential]]
    callers = ["*"]
    exchange = { audience = "https://rec.example/mcp", scope = "rec" }
    """
    env = {"WARDEN_CLIENT_SECRET": "gw-secret", "REC_GATEWAY_TOKEN": "gateway-own-token",
           "REC_KEYED": "keyed-caller-key"}
    config = credential_config(issuer, port, recorder, tmp_path, creds).replace(
        '[[caller]]\n    name = "bob"', '[[caller]]\n    name = "keyed"\n    api_key_env = "REC_KEYED"\n\n    [[caller]]\n    name = "bob"')
    with gateway(config, tmp_path, env, port) as (url, log):
        alice = access(issuer, url, sub="alice")
        bob = access(issuer, url, sub="bob")
        first = await whoami(url, alice)
        again = await whoami(url, alice)
        other = await whoami(url, bob)
        # A caller with an API key has no OAuth token to exchange: the call fails
        # with the generic answer and never reaches the upstream.
        calls = len(recorder.seen)
        assert await whoami(url, "keyed-caller-key") == "Error: An internal error occurred while executing the tool."
        assert len(recorder.seen) == calls
    exchanges = issuer.stats()["exchanges"]
    assert [(x["sub"], x["audience"], x["actor"]) for x in exchanges] == [
        ("alice", "https://rec.example/mcp", "warden-gateway"),
        ("bob", "https://rec.example/mcp", "warden-gateway")], "one exchange per caller, then the cache"
    assert first == again == f"Bearer {exchanges[0]['token']}"
    assert other == f"Bearer {exchanges[1]['token']}"
    assert not any(t in seen for t in (alice, bob) for seen in recorder.seen)
    records = audit(tmp_path)
    assert {r["caller"]: r.get("credential") for r in records} == {
        "alice": "exchange:https://rec.example/mcp", "bob": "exchange:https://rec.example/mcp", "keyed": None}
    failed = [r for r in records if r["caller"] == "keyed"][0]
    assert failed["outcome"] == "failed" and "token exchange needs the caller's OAuth token" in failed["error"]


async def test_an_exchanged_token_is_exchanged_again_once_near_its_expiry(issuer, recorder, tmp_path):
    port = free_port()
    issuer.admin("client", client_id="warden-gateway", client_secret="gw-secret")
    # The gateway keeps an exchanged token until 30 s before it expires
    # (upstream/credential.rs, RENEW_BEFORE): 34 s from the issuer is 4 s of use.
    issuer.admin("exchange_ttl", seconds=34)
    creds = """
    [[upstream.credential]]
    callers = ["*"]
    exchange = { audience = "https://rec.example/mcp" }
    """
    env = {"WARDEN_CLIENT_SECRET": "gw-secret", "REC_GATEWAY_TOKEN": "gateway-own-token"}
    with gateway(credential_config(issuer, port, recorder, tmp_path, creds), tmp_path, env, port) as (url, _):
        async with bearer_session(url, access(issuer, url, sub="alice")) as s:
            first = text(await s.call_tool("rec.whoami", {}))[0]
            answered = time.monotonic()  # the exchange was made before this
            # Straight after: well within the 4 s, from the cache.
            again = text(await s.call_tool("rec.whoami", {}))[0]
            assert len(issuer.stats()["exchanges"]) == 1
            await anyio.sleep(max(0.0, answered + 4.3 - time.monotonic()))
            later = text(await s.call_tool("rec.whoami", {}))[0]
    exchanges = issuer.stats()["exchanges"]
    assert [(x["sub"], x["audience"]) for x in exchanges] == [("alice", "https://rec.example/mcp")] * 2
    assert first == again == f"Bearer {exchanges[0]['token']}"
    assert later == f"Bearer {exchanges[1]['token']}" != first


# --- opaque tokens, an issuer that is not there yet, and `check` ---------------------


async def test_opaque_tokens_are_introspected(issuer, tmp_path):
    port = free_port()
    issuer.admin("client", client_id="warden-gateway", client_secret="gw-secret")
    extra = """
    client_id = "warden-gateway"
    client_secret_env = "WARDEN_CLIENT_SECRET"
    introspection = true
    """
    cfg = oauth_config(issuer.issuer, port).replace('jwks_min_interval = "2s"', 'jwks_min_interval = "2s"' + extra)
    with gateway(cfg, tmp_path, {"WARDEN_CLIENT_SECRET": "gw-secret"}, port) as (url, log):
        now = int(time.time())
        good = issuer.admin("opaque", claims={"sub": "dave", "scope": "mcp", "aud": url,
                                              "iss": issuer.issuer, "exp": now + 300})["token"]
        assert post(url, good)[0] == 200
        elsewhere = issuer.admin("opaque", claims={"sub": "dave", "scope": "mcp",
                                                   "aud": "https://other.example/mcp", "exp": now + 300})["token"]
        status, challenge, _ = post(url, elsewhere)
        assert (status, why(challenge)) == (401, "Unauthorized: the token is meant for another audience")
        status, challenge, _ = post(url, "never-issued")
        assert (status, why(challenge)) == (401, "Unauthorized: the token is not active")
        # Issuer down: a token introspected a moment ago is still known (30 s at
        # most); one never seen cannot be checked, and is refused.
        unseen = issuer.admin("opaque", claims={"sub": "erin", "scope": "mcp", "exp": now + 300})["token"]
        issuer.stop()
        assert post(url, good)[0] == 200
        status, challenge, _ = post(url, unseen)
        assert (status, why(challenge)) == (401, "Unauthorized: the token could not be checked with its issuer; retry later")


async def test_an_issuer_down_at_start_is_a_warning_and_is_used_once_up(tmp_path):
    port, issuer_port = free_port(), free_port()
    issuer_url = f"https://127.0.0.1:{issuer_port}"
    with gateway(oauth_config(issuer_url, port), tmp_path, port=port) as (url, log):
        assert logged(log, "the OAuth issuer cannot be reached now"), "".join(log)
        status, challenge, _ = post(url, "a.b.c")
        assert status == 401
        later = AuthServer(issuer_port)
        try:
            time.sleep(2.2)
            assert post(url, access(later, url))[0] == 200
        finally:
            later.stop()


def check(tmp_path, config):
    p = tmp_path / "warden.toml"
    p.write_text(config)
    return subprocess.run([WARDEN, "check", "--config", str(p)], capture_output=True, text=True)


async def test_check_warns_about_an_unreachable_issuer_and_refuses_an_untrusted_one(issuer, tmp_path):
    gone = f"https://127.0.0.1:{free_port()}"
    r = check(tmp_path, oauth_config(gone, 8931))
    assert r.returncode == 0, r.stderr
    assert f"warning: oauth.issuer '{gone}' cannot be reached now" in r.stdout
    # The test CA is not among the public roots: without tls_ca_file the issuer's
    # certificate cannot be trusted, and no token could ever be checked.
    untrusted = oauth_config(issuer.issuer, 8931).replace(f'tls_ca_file = "{CA}"', "")
    r = check(tmp_path, untrusted)
    assert r.returncode == 1
    assert "oauth.issuer: the issuer's metadata: the issuer's certificate is not trusted" in r.stderr, r.stderr
    assert "name its CA in oauth.tls_ca_file" in r.stderr
    r = check(tmp_path, oauth_config(issuer.issuer, 8931))
    assert r.returncode == 0 and "warning: oauth" not in r.stdout, r.stdout + r.stderr
    plain = oauth_config("http://id.example.com", 8931).replace(f'tls_ca_file = "{CA}"', "")
    r = check(tmp_path, plain)
    assert r.returncode == 1
    assert "oauth.issuer: 'http://id.example.com' is plain http: an issuer must be https" in r.stderr
