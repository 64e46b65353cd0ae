"""What one credential reaches through the gateway as an OAuth resource server,
with the test authorization server (authserver.py) and the helpers of
test_oauth.py:

- An exchanged upstream token (G8) serves only the OAuth token it was exchanged
  from: an API key or an [auth] JWT naming the same caller gets none, and the
  same caller's next token is exchanged for itself.
- Opaque tokens made up by the thousand reach the issuer's introspection
  endpoint at oauth.introspection_rate at most, never more than 4 at once; a
  refused token is remembered.
- The console asks an [oauth] token for the required_scopes as the MCP front
  does: 403 insufficient_scope with the same challenge.
"""

import concurrent.futures
import json
import secrets
import time

import httpx2
import pytest

from test_oauth import (AuthServer, INIT, RecordingUpstream, access, audit, credential_config, free_port, gateway,
                        legacy, logged, oauth_config, post, until, whoami, why, LEGACY_SECRET)

pytestmark = pytest.mark.anyio

INACTIVE = "Unauthorized: the token is not active"
UNCHECKED = "Unauthorized: the token could not be checked with its issuer; retry later"
TOOL_FAILED = "Error: An internal error occurred while executing the tool."


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
def issuer():
    a = AuthServer()
    yield a
    a.stop()


@pytest.fixture
def recorder():
    r = RecordingUpstream()
    yield r
    r.close()


# --- an exchanged token belongs to the token it came from (G8) ---------------------


async def test_an_exchanged_token_serves_only_the_token_it_was_exchanged_from(issuer, recorder, tmp_path):
    port = free_port()
    issuer.admin("client", client_id="warden-gateway", client_secret="gw-secret")
    creds = """
    [[upstream.credential]]
    callers = ["*"]
    exchange = { audience = "https://rec.example/mcp" }
    """
    # Three ways to be `carol`: an [oauth] token, an API key, an [auth] JWT.
    config = credential_config(issuer, port, recorder, tmp_path, creds).replace(
        '[[caller]]\n    name = "bob"',
        '[[caller]]\n    name = "carol"\n    api_key_env = "CAROL_KEY"\n\n    [[caller]]\n    name = "bob"') + """
    [auth]
    jwt_secret_env = "WARDEN_TEST_JWT_SECRET"
    issuer = "https://legacy.example"
    audience = "warden-legacy"
    """
    env = {"WARDEN_CLIENT_SECRET": "gw-secret", "REC_GATEWAY_TOKEN": "gateway-own-token",
           "CAROL_KEY": "carol-api-key-0123456789", "WARDEN_TEST_JWT_SECRET": LEGACY_SECRET}
    with gateway(config, tmp_path, env, port) as (url, log):
        first_token = access(issuer, url, sub="carol")
        first = await whoami(url, first_token)
        calls = len(recorder.seen)
        # The OAuth carol's exchanged token is held now; neither other carol gets it.
        assert await whoami(url, env["CAROL_KEY"]) == TOOL_FAILED
        assert await whoami(url, legacy(sub="carol")) == TOOL_FAILED
        assert len(recorder.seen) == calls, "a call without an OAuth token reached the upstream"
        # The same token again: from the cache. A new token of carol's: its own exchange.
        assert await whoami(url, first_token) == first
        second = await whoami(url, access(issuer, url, sub="carol"))
    exchanges = issuer.stats()["exchanges"]
    assert [(x["sub"], x["audience"]) for x in exchanges] == [("carol", "https://rec.example/mcp")] * 2
    assert first == f"Bearer {exchanges[0]['token']}"
    assert second == f"Bearer {exchanges[1]['token']}" != first
    assert recorder.seen == [first, first, second]
    failed = [r for r in audit(tmp_path) if r["outcome"] == "failed"]
    assert [(r["caller"], r.get("credential")) for r in failed] == [("carol", None)] * 2
    assert {r["error"] for r in failed} == {
        "no credential for the upstream: token exchange needs the caller's OAuth token, and this caller showed none "
        "(an API key, an [auth] JWT, a local caller)"}


# --- introspection at a bounded rate ---------------------------------------------------


def introspecting_config(issuer, port, rate):
    return oauth_config(issuer.issuer, port).replace('jwks_min_interval = "2s"', f'''jwks_min_interval = "2s"
    client_id = "warden-gateway"
    client_secret_env = "WARDEN_CLIENT_SECRET"
    introspection = true
    introspection_rate = {rate}''')


def opaque(issuer, url, sub):
    return issuer.admin("opaque", claims={"sub": sub, "scope": "mcp", "aud": url, "iss": issuer.issuer,
                                          "exp": int(time.time()) + 300})["token"]


def flood(url, tokens, threads=20):
    """An initialize with each token, `threads` at once over one connection pool:
    (status, WWW-Authenticate) of each."""
    with httpx2.Client(timeout=30) as http:
        def one(token):
            r = http.post(url, json=INIT, headers={
                "Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"})
            return r.status_code, r.headers.get("www-authenticate", "")

        with concurrent.futures.ThreadPoolExecutor(threads) as pool:
            return list(pool.map(one, tokens))


async def test_made_up_opaque_tokens_reach_the_issuer_at_the_introspection_rate(issuer, tmp_path):
    port = free_port()
    issuer.admin("client", client_id="warden-gateway", client_secret="gw-secret")
    with gateway(introspecting_config(issuer, port, 5), tmp_path, {"WARDEN_CLIENT_SECRET": "gw-secret"}, port) as (url, log):
        before = issuer.stats()["introspections"]
        tokens = [secrets.token_urlsafe(24) for _ in range(500)]
        started = time.monotonic()
        answers = flood(url, tokens)
        elapsed = time.monotonic() - started
        asked = issuer.stats()["introspections"] - before
        for status, challenge in answers:
            assert status == 401 and why(challenge) in (INACTIVE, UNCHECKED), (status, challenge)
        # 5 a second, and 5 at once after the quiet second before the flood.
        assert 1 <= asked <= 5 + 5 * elapsed, (asked, elapsed)
        print(f"\n500 made-up opaque tokens in {elapsed:.1f} s: {asked} introspection requests at the issuer")
        assert logged(log, "token introspection is at oauth.introspection_rate (5 a second): opaque tokens the "
                           "gateway holds no answer for are refused until the rate allows more"), "".join(log)
        # A token the issuer called inactive is remembered: not asked about again.
        made_up = secrets.token_urlsafe(24)
        assert until(lambda: why(post(url, made_up)[1]) == INACTIVE, 5), "".join(log)
        asked = issuer.stats()["introspections"]
        assert why(post(url, made_up)[1]) == INACTIVE
        assert issuer.stats()["introspections"] == asked
        # Once the flood is over, a real client's new token is checked and let in.
        fresh = opaque(issuer, url, "erin")
        assert until(lambda: post(url, fresh)[0] == 200, 5), "".join(log)


async def test_at_most_four_introspection_requests_are_at_the_issuer_at_once(issuer, tmp_path):
    port = free_port()
    issuer.admin("client", client_id="warden-gateway", client_secret="gw-secret")
    issuer.admin("introspect_delay", seconds=0.3)
    with gateway(introspecting_config(issuer, port, 100), tmp_path, {"WARDEN_CLIENT_SECRET": "gw-secret"}, port) as (url, _):
        tokens = [opaque(issuer, url, f"c{i}") for i in range(24)]
        answers = flood(url, tokens)
        assert [a[0] for a in answers] == [200] * 24, answers
        stats = issuer.stats()
        assert stats["introspections"] == 24
        assert stats["introspecting_most"] == 4, stats


# --- the console and required_scopes ------------------------------------------------


async def test_the_console_asks_for_the_required_scopes_as_the_front_does(issuer, tmp_path):
    port, admin_port = free_port(), free_port()
    config = oauth_config(issuer.issuer, port, f"""
    [admin]
    listen = "127.0.0.1:{admin_port}"
    callers = ["group:ops"]
    """).replace('scope_groups = { "notes:write" = ["writers"] }',
                 'scope_groups = { "notes:write" = ["writers"], "admin:all" = ["ops"] }')
    with gateway(config, tmp_path, port=port) as (url, _):
        console = f"http://127.0.0.1:{admin_port}"
        challenge = (f'Bearer realm="mcp-warden", resource_metadata="http://127.0.0.1:{port}'
                     '/.well-known/oauth-protected-resource/mcp", scope="mcp", error="insufficient_scope", '
                     'error_description="Forbidden: the token lacks a scope this request needs; ask for: mcp"')
        message = "Forbidden: the token lacks a scope this request needs; ask for: mcp."
        admin_only = access(issuer, url, sub="olga", scope="admin:all")
        status, front_challenge, body = post(url, admin_only)
        assert (status, front_challenge, json.loads(body)["error"]["message"]) == (403, challenge, message)
        bearer = {"Authorization": f"Bearer {admin_only}"}
        r = httpx2.get(console + "/api/overview", headers=bearer, timeout=20)
        assert (r.status_code, r.headers.get("www-authenticate"), r.json()) == (403, challenge, {"error": message})
        # The page, and the token as the password of HTTP Basic, the same.
        for path, auth in (("/", None), ("/calls", ("olga", admin_only))):
            r = httpx2.get(console + path, headers=None if auth else bearer, auth=auth, timeout=20)
            assert (r.status_code, r.headers.get("www-authenticate")) == (403, challenge), path
            assert message in r.text and "notes" not in r.text
        # With the required scope beside it, the console opens; without admin:all
        # the caller is no admin.
        both = access(issuer, url, sub="olga", scope="mcp admin:all")
        r = httpx2.get(console + "/api/overview", headers={"Authorization": f"Bearer {both}"}, timeout=20)
        assert r.status_code == 200, r.text
        r = httpx2.get(console + "/api/overview", headers={"Authorization": f"Bearer {access(issuer, url)}"}, timeout=20)
        assert (r.status_code, r.headers.get("www-authenticate"), r.json()) == (
            403, None, {"error": "This caller is not one of the [admin] callers."})
        # No credential, or one that names nobody: 401 with the console's Basic challenge.
        for headers in ({}, {"Authorization": "Bearer made-up"}):
            r = httpx2.get(console + "/api/overview", headers=headers, timeout=20)
            assert (r.status_code, r.headers.get("www-authenticate"), r.json()) == (
                401, 'Basic realm="mcp-warden admin", charset="UTF-8"', {"error": (
                    "Credentials are needed: an admin caller's API key or JWT, as a bearer token or as the "
                    "password of HTTP Basic.")})
