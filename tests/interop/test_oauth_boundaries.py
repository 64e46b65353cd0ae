"""What one credential reaches through the gateway as an OAuth resource server,
with the test authorization server (authserver.py) and the helpers of
test_oauth.py:

- An exchanged upstream token (G8) serves only the OAuth token it was exchanged
  from: an API key or an [auth] JWT naming the same caller gets none, and the
  same caller's next token is exchanged for itself.
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
