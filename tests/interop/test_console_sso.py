"""Console login at an OpenID Connect issuer of the console's own ([console]
issuer, O9), not the [oauth] one, through the real binary: authserver.py as the
issuer, headless Chromium as the browser. The ID token is what names the
admin (by name or by a group in its claim), and it must pass every check:
signature by a published key, iss, aud (the console's client), exp, and the
nonce the login sent."""

import json
import re
import urllib.error
import urllib.parse
import urllib.request

from browser import Browser
from otel_peers import Gateway
from test_console import KEYS, OUT, config_text, section, upstream  # noqa: F401 (a fixture)
from test_console_act import Issuer, free_port

ID_TOKEN_REFUSED = "The issuer&#39;s ID token for this login did not pass its checks (the log says why); log in again."


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args):
        return None


def fetch(url, headers=None):
    """GET without following redirects: (status, headers, body)."""
    try:
        with urllib.request.build_opener(NoRedirect).open(urllib.request.Request(url, headers=headers or {}),
                                                          timeout=30) as r:
            return r.status, r.headers, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read().decode()


def admin_call(issuer, what, body):
    req = urllib.request.Request(issuer.url + "/admin/" + what, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def login_by_hand(base, user):
    """The login's redirects followed without a browser: (the authorization
    request's query, the callback's status and body)."""
    status, headers, _ = fetch(f"{base}/login?login_hint={user}")
    assert status == 302, status
    to = headers["Location"]
    cookie = headers["Set-Cookie"].split(";")[0]
    status, headers, _ = fetch(to)
    assert status == 302, status
    back = headers["Location"]
    status, _, body = fetch(back, {"Cookie": cookie})
    return dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(to).query)), status, body


def test_console_users_log_in_at_the_consoles_own_issuer(upstream, config, tmp_path):
    issuer = Issuer()
    port = free_port()
    client = issuer.register(f"http://127.0.0.1:{port}/login/callback")
    admin_call(issuer, "groups", {"user": "carol", "groups": ["ops"]})
    text = config_text(upstream, tmp_path, 'callers = ["alice", "group:ops"]\n    login = true').replace(
        'listen = "127.0.0.1:0"', f'listen = "127.0.0.1:{port}"') + f"""
    [console]
    issuer = "{issuer.url}"
    client_id = "{client['client_id']}"
    client_secret_env = "CONSOLE_SECRET"
    scopes = ["groups"]
    """
    gw = Gateway(config(text), env={**KEYS, "CONSOLE_SECRET": client["client_secret"]}, admin=True)
    browsers = []
    try:
        base = f"http://127.0.0.1:{port}"
        # The authorization request: code + PKCE, a nonce, the console's scopes, no resource.
        asked, status, body = login_by_hand(base, "alice")
        assert (asked["scope"], asked["client_id"], asked["code_challenge_method"]) == (
            "openid groups", client["client_id"], "S256")
        assert len(asked["nonce"]) == 43 and "resource" not in asked
        assert status == 200 and "Logged in as alice." in body, body

        # An admin by a group the ID token's claim gives, in a real browser.
        carol = Browser()
        browsers.append(carol)
        carol.command("Network.enable")
        carol.open(base + "/login?login_hint=carol")
        dom = carol.wait_for_url(base + "/")
        assert "Upstreams" in section(dom, "main")
        [cookie] = [c for c in carol.cookies() if c["name"] == "warden_console"]
        assert (cookie["httpOnly"], cookie["sameSite"]) == (True, "Strict")
        carol.screenshot(OUT / "login-console-issuer.png")

        # Someone the issuer vouches for who is no admin: the refusal page, no session.
        bob = Browser()
        browsers.append(bob)
        bob.command("Network.enable")
        bob.open(base + "/login?login_hint=bob")
        bob.wait_for_text("This caller is not one of the [admin] callers.")
        assert not [c for c in bob.cookies() if c["name"] == "warden_console"]

        # An ID token that fails any check opens no session, whoever it names.
        for fault in ["nonce", "aud", "iss", "expired", "signature"]:
            admin_call(issuer, "id_token_fault", {"fault": fault})
            _, status, body = login_by_hand(base, "alice")
            assert (status, ID_TOKEN_REFUSED in body) == (403, True), (fault, status, body)
        admin_call(issuer, "id_token_fault", {"fault": ""})
        _, status, body = login_by_hand(base, "alice")
        assert status == 200, body

        # API keys keep working; the issuer's access tokens are no console credential.
        assert gw.get("/api/overview", {"Authorization": f"Bearer {KEYS['ALICE_KEY']}"})[0] == 200
    finally:
        for b in browsers:
            b.close()
        gw.close()
        issuer.close()


def test_a_login_at_the_oauth_issuer_checks_its_id_token_too(upstream, config, tmp_path):
    """At the [oauth] issuer the access token names the admin, as before; the
    ID token the issuer sends beside it must still be this login's (nonce)
    and this client's (aud), else no session."""
    issuer = Issuer()
    port = free_port()
    client = issuer.register(f"http://127.0.0.1:{port}/login/callback")
    text = config_text(upstream, tmp_path, 'callers = ["alice"]\n    login = true').replace(
        'listen = "127.0.0.1:0"', f'listen = "127.0.0.1:{port}"') + f"""
    [oauth]
    issuer = "{issuer.url}"
    resource = "http://127.0.0.1/mcp"
    client_id = "{client['client_id']}"
    client_secret_env = "CONSOLE_SECRET"
    """
    gw = Gateway(config(text), env={**KEYS, "CONSOLE_SECRET": client["client_secret"]}, admin=True)
    try:
        base = f"http://127.0.0.1:{port}"
        asked, status, body = login_by_hand(base, "alice")
        assert (asked["scope"], asked["resource"]) == ("openid", "http://127.0.0.1/mcp")
        assert len(asked["nonce"]) == 43
        assert status == 200 and "Logged in as alice." in body, body
        for fault in ["nonce", "aud"]:
            admin_call(issuer, "id_token_fault", {"fault": fault})
            _, status, body = login_by_hand(base, "alice")
            assert (status, ID_TOKEN_REFUSED in body) == (403, True), (fault, status, body)
    finally:
        gw.close()
        issuer.close()
