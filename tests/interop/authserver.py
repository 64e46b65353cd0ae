"""A test OAuth 2.1 authorization server, for the gateway's resource-server tests.

Serves, over https with the test certificate in tests/tls (or plain http):
- RFC 8414 metadata at /.well-known/oauth-authorization-server, and the same as
  OpenID Connect discovery at /.well-known/openid-configuration;
- dynamic client registration (RFC 7591) at /register;
- authorization code + PKCE (S256 only) at /authorize, approved at once for the
  user named by the `user` (or OpenID Connect's `login_hint`) query parameter
  (default "alice"): no person needed;
- the token endpoint: authorization_code, refresh_token and token exchange
  (RFC 8693, for the gateway's own confidential client); a code asked for with
  scope `openid` also gets an OpenID Connect ID token (`aud` the client, the
  `nonce` the authorization request sent, `groups` as set for its user);
- its signing keys (ES256 JWKs, and RS256, ES384 or EdDSA ones once asked for)
  at /jwks, introspection (RFC 7662) at /introspect;
- test controls under /admin: rotate the key, publish an RSA, P-384 or Ed25519
  key beside the P-256 ones, mint any token (also with an unpublished key,
  another algorithm, a header `alg` its key is not for, or any claims), issue
  opaque tokens, make /jwks huge, take /jwks down (HTTP 503), serve OpenID
  Connect discovery only (no RFC 8414 document), set the lifetime of exchanged
  tokens, slow introspection down, and read counters (key set fetches,
  exchanges, introspection requests and the most of them at once); set a user's
  groups, and spoil the next ID tokens (another nonce, audience or issuer,
  expired, or signed with an unpublished key).

Run: `python authserver.py [--tls] [--port N]`; prints `listening on URL` once ready.
Tokens are JWTs signed with PyJWT (cryptography keys); nothing here is for real use.
"""

import argparse
import base64
import hashlib
import json
import pathlib
import secrets
import ssl
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

TLS = pathlib.Path(__file__).resolve().parent.parent / "tls"
EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"


def b64(n: int, size: int) -> str:
    return base64.urlsafe_b64encode(n.to_bytes(size, "big")).rstrip(b"=").decode()


def b64_bytes(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


# The algorithms `Key` makes keys for, and the prefix of the key ids `publish` gives.
ASYMMETRIC = ("ES256", "ES384", "EdDSA", "RS256")
KID_PREFIX = {"RS256": "r", "ES384": "p", "EdDSA": "d"}


class Key:
    def __init__(self, kid, alg="ES256"):
        self.kid = kid
        self.alg = alg
        if alg == "RS256":
            self.private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            nums = self.private.public_key().public_numbers()
            self.jwk = {"kty": "RSA", "kid": kid, "alg": "RS256", "use": "sig",
                        "n": b64(nums.n, 256), "e": b64(nums.e, 3)}
            return
        if alg == "EdDSA":
            self.private = ed25519.Ed25519PrivateKey.generate()
            raw = self.private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
            self.jwk = {"kty": "OKP", "crv": "Ed25519", "kid": kid, "alg": "EdDSA", "use": "sig",
                        "x": b64_bytes(raw)}
            return
        curve, crv, size = (ec.SECP384R1(), "P-384", 48) if alg == "ES384" else (ec.SECP256R1(), "P-256", 32)
        self.private = ec.generate_private_key(curve)
        nums = self.private.public_key().public_numbers()
        self.jwk = {"kty": "EC", "crv": crv, "kid": kid, "alg": alg, "use": "sig",
                    "x": b64(nums.x, size), "y": b64(nums.y, size)}

    def sign_as(self, claims, alg, kid):
        """A JWS signed by this key with its own algorithm, under a header that
        names `alg` (which may not be this key's): algorithm confusion."""
        seg = lambda d: b64_bytes(json.dumps(d, separators=(",", ":")).encode())
        signing_input = f"{seg({'alg': alg, 'kid': kid, 'typ': 'JWT'})}.{seg(claims)}".encode()
        signature = jwt.algorithms.get_default_algorithms()[self.alg].sign(signing_input, self.private)
        return f"{signing_input.decode()}.{b64_bytes(signature)}"


class State:
    def __init__(self, issuer):
        self.issuer = issuer
        self.lock = threading.Lock()
        self.keys = [Key("k1")]
        self.other_keys = []  # RS256, ES384, EdDSA keys published beside `keys`; `current` stays a P-256 key
        self.jwks_down = False
        self.clients = {}
        self.codes = {}
        self.refresh = {}
        self.opaque = {}
        self.jwks_fetches = 0
        self.exchanges = []
        self.huge_jwks = False
        self.oidc_only = False
        self.exchange_ttl = 300
        self.introspections = 0
        self.introspecting = 0
        self.introspecting_most = 0
        self.introspect_delay = 0.0
        self.key_counter = 1
        self.groups = {}  # user -> the `groups` claim of their ID tokens
        self.id_token_fault = ""  # "", "nonce", "aud", "iss", "expired" or "signature"

    @property
    def current(self):
        return self.keys[-1]

    def sign(self, claims, key=None, alg="ES256", headers=None):
        key = key or self.current
        head = {"kid": key.kid}
        head.update(headers or {})
        if alg in ASYMMETRIC:
            return jwt.encode(claims, key.private, algorithm=alg, headers=head)
        return jwt.encode(claims, claims.pop("_secret", "secret"), algorithm=alg, headers=head)

    def access_token(self, sub, aud, scope, client_id, ttl=300, extra=None):
        now = int(time.time())
        claims = {"iss": self.issuer, "sub": sub, "iat": now, "nbf": now, "exp": now + ttl,
                  "jti": secrets.token_hex(8), "client_id": client_id, "scope": scope}
        if aud:
            claims["aud"] = aud
        claims.update(extra or {})
        return self.sign(claims)

    def id_token(self, sub, client_id, nonce):
        """An OpenID Connect ID token for `sub`, spoilt as `id_token_fault` says."""
        now = int(time.time())
        fault = self.id_token_fault
        claims = {"iss": self.issuer + ("/other" if fault == "iss" else ""), "sub": sub,
                  "aud": "another-client" if fault == "aud" else client_id,
                  "iat": now - (600 if fault == "expired" else 0),
                  "exp": now + (-300 if fault == "expired" else 300),
                  "groups": self.groups.get(sub, [])}
        if nonce is not None:
            claims["nonce"] = "another-nonce" if fault == "nonce" else nonce
        key = Key("rogue") if fault == "signature" else self.current
        if fault == "signature":
            key.kid = self.current.kid  # a known key id, another key's signature
        return self.sign(claims, key=key)

    def verify(self, token):
        head = jwt.get_unverified_header(token)
        for k in self.keys + self.other_keys:
            if k.kid == head.get("kid"):
                return jwt.decode(token, k.private.public_key(), algorithms=[k.alg],
                                  options={"verify_aud": False}, issuer=self.issuer)
        raise jwt.InvalidTokenError("unknown key")


def s256(verifier: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()


def make_handler(state: State):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):
            pass

        def send(self, status, body, headers=None):
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-store")
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def error(self, code, what, status=400):
            self.send(status, {"error": code, "error_description": what})

        def form(self):
            n = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(n).decode()
            ctype = self.headers.get("Content-Type", "")
            if ctype.startswith("application/json"):
                return json.loads(raw or "{}")
            return {k: v[0] for k, v in urllib.parse.parse_qs(raw).items()}

        def client(self, form):
            """The authenticated client: Basic, client_secret_post, or a public client."""
            auth = self.headers.get("Authorization", "")
            if auth.startswith("Basic "):
                cid, _, secret = base64.b64decode(auth[6:]).decode().partition(":")
                cid, secret = urllib.parse.unquote_plus(cid), urllib.parse.unquote_plus(secret)
            else:
                cid, secret = form.get("client_id"), form.get("client_secret")
            c = state.clients.get(cid)
            if c is None:
                return None
            if c.get("client_secret") and not secrets.compare_digest(c["client_secret"], secret or ""):
                return None
            return c

        # ---- GET --------------------------------------------------------------
        def do_GET(self):
            url = urllib.parse.urlparse(self.path)
            q = {k: v[0] for k, v in urllib.parse.parse_qs(url.query).items()}
            oidc = url.path == "/.well-known/openid-configuration"
            if oidc or (url.path == "/.well-known/oauth-authorization-server" and not state.oidc_only):
                i = state.issuer
                extra = {"subject_types_supported": ["public"],
                         "id_token_signing_alg_values_supported": ["ES256", "RS256"]} if oidc else {}
                return self.send(200, dict(extra, **{
                    "issuer": i,
                    "authorization_endpoint": i + "/authorize",
                    "token_endpoint": i + "/token",
                    "registration_endpoint": i + "/register",
                    "jwks_uri": i + "/jwks",
                    "introspection_endpoint": i + "/introspect",
                    "response_types_supported": ["code"],
                    "grant_types_supported": ["authorization_code", "refresh_token", EXCHANGE],
                    "code_challenge_methods_supported": ["S256"],
                    "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post", "none"],
                    "scopes_supported": ["mcp", "notes:read", "notes:write"],
                }))
            if url.path == "/jwks":
                with state.lock:
                    state.jwks_fetches += 1
                    if state.jwks_down:
                        return self.error("temporarily_unavailable", "the key set is down", 503)
                    if state.huge_jwks:
                        filler = [{"kty": "EC", "crv": "P-256", "kid": f"pad{i}", "x": "A" * 43, "y": "A" * 43}
                                  for i in range(80_000)]
                        return self.send(200, {"keys": filler})
                    return self.send(200, {"keys": [k.jwk for k in state.keys + state.other_keys]})
            if url.path == "/authorize":
                return self.authorize(q)
            if url.path == "/admin/stats":
                return self.send(200, {"jwks_fetches": state.jwks_fetches, "exchanges": state.exchanges,
                                       "introspections": state.introspections,
                                       "introspecting_most": state.introspecting_most})
            self.error("not_found", url.path, 404)

        def authorize(self, q):
            c = state.clients.get(q.get("client_id"))
            if c is None:
                return self.error("invalid_client", "unknown client")
            redirect = q.get("redirect_uri")
            if redirect not in c.get("redirect_uris", []):
                return self.error("invalid_request", "redirect_uri not registered")
            if q.get("response_type") != "code" or q.get("code_challenge_method") != "S256" or not q.get("code_challenge"):
                return self.error("invalid_request", "code + PKCE S256 required")
            code = secrets.token_urlsafe(16)
            state.codes[code] = {"client_id": c["client_id"], "redirect_uri": redirect,
                                 "challenge": q["code_challenge"], "scope": q.get("scope", ""),
                                 "resource": q.get("resource"), "nonce": q.get("nonce"),
                                 "sub": q.get("user") or q.get("login_hint") or "alice"}
            params = {"code": code, "state": q.get("state", ""), "iss": state.issuer}
            self.send_response(302)
            self.send_header("Location", redirect + ("&" if "?" in redirect else "?") + urllib.parse.urlencode(params))
            self.send_header("Content-Length", "0")
            self.end_headers()

        # ---- POST -------------------------------------------------------------
        def do_POST(self):
            url = urllib.parse.urlparse(self.path)
            form = self.form()
            if url.path == "/register":
                cid = "client-" + secrets.token_hex(6)
                c = dict(form)
                c["client_id"] = cid
                c["client_id_issued_at"] = int(time.time())
                c.setdefault("token_endpoint_auth_method", "client_secret_post")
                if c["token_endpoint_auth_method"] != "none":
                    c["client_secret"] = secrets.token_urlsafe(24)
                    c["client_secret_expires_at"] = 0
                state.clients[cid] = c
                return self.send(201, c)
            if url.path == "/token":
                return self.token(form)
            if url.path == "/introspect":
                with state.lock:
                    state.introspections += 1
                    state.introspecting += 1
                    state.introspecting_most = max(state.introspecting_most, state.introspecting)
                try:
                    time.sleep(state.introspect_delay)
                    return self.introspect(form)
                finally:
                    with state.lock:
                        state.introspecting -= 1
            if url.path.startswith("/admin/"):
                return self.admin(url.path[7:], form)
            self.error("not_found", url.path, 404)

        def introspect(self, form):
            if self.client(form) is None:
                return self.error("invalid_client", "client authentication failed", 401)
            token = form.get("token", "")
            if token in state.opaque:
                return self.send(200, dict(state.opaque[token], active=True))
            try:
                claims = state.verify(token)
                return self.send(200, dict(claims, active=True))
            except Exception:
                return self.send(200, {"active": False})

        def token(self, form):
            grant = form.get("grant_type")
            c = self.client(form)
            if c is None:
                return self.error("invalid_client", "client authentication failed", 401)
            if grant == "authorization_code":
                code = state.codes.pop(form.get("code", ""), None)
                if code is None or code["client_id"] != c["client_id"]:
                    return self.error("invalid_grant", "unknown code")
                if code["redirect_uri"] != form.get("redirect_uri"):
                    return self.error("invalid_grant", "redirect_uri differs")
                if s256(form.get("code_verifier", "")) != code["challenge"]:
                    return self.error("invalid_grant", "PKCE verification failed")
                resource = form.get("resource") or code["resource"]
                id_token = None
                if "openid" in code["scope"].split():
                    id_token = state.id_token(code["sub"], c["client_id"], code["nonce"])
                return self.issue(code["sub"], resource, code["scope"], c["client_id"], id_token)
            if grant == "refresh_token":
                r = state.refresh.pop(form.get("refresh_token", ""), None)
                if r is None:
                    return self.error("invalid_grant", "unknown refresh token")
                return self.issue(r["sub"], form.get("resource") or r["resource"], r["scope"], c["client_id"])
            if grant == EXCHANGE:
                try:
                    subject = state.verify(form.get("subject_token", ""))
                except Exception as e:
                    return self.error("invalid_grant", f"subject token: {e}")
                audience = form.get("audience") or form.get("resource")
                scope = form.get("scope", "")
                ttl = int(form.get("x_ttl", state.exchange_ttl))
                token = state.access_token(subject["sub"], audience, scope, c["client_id"], ttl=ttl,
                                           extra={"act": {"sub": c["client_id"]}})
                with state.lock:
                    state.exchanges.append({"sub": subject["sub"], "audience": audience,
                                            "actor": c["client_id"], "token": token})
                return self.send(200, {"access_token": token, "issued_token_type": ACCESS_TOKEN_TYPE,
                                       "token_type": "Bearer", "expires_in": ttl, "scope": scope})
            return self.error("unsupported_grant_type", str(grant))

        def issue(self, sub, resource, scope, client_id, id_token=None):
            token = state.access_token(sub, resource, scope, client_id)
            refresh = secrets.token_urlsafe(16)
            state.refresh[refresh] = {"sub": sub, "resource": resource, "scope": scope}
            answer = {"access_token": token, "token_type": "Bearer", "expires_in": 300,
                      "scope": scope, "refresh_token": refresh}
            if id_token:
                answer["id_token"] = id_token
            return self.send(200, answer)

        def admin(self, what, form):
            if what == "client":
                # A confidential client made by the test (the gateway's own, for exchange and introspection).
                state.clients[form["client_id"]] = {"client_id": form["client_id"],
                                                    "client_secret": form["client_secret"]}
                return self.send(200, {})
            if what == "rotate":
                with state.lock:
                    state.key_counter += 1
                    new = Key(f"k{state.key_counter}")
                    state.keys = ([] if form.get("drop_old") else state.keys) + [new]
                return self.send(200, {"kid": new.kid})
            if what == "groups":
                # {"user": "carol", "groups": ["ops"]}: the `groups` claim of carol's ID tokens.
                state.groups[form["user"]] = form.get("groups", [])
                return self.send(200, {})
            if what == "id_token_fault":
                # {"fault": "nonce"|"aud"|"iss"|"expired"|"signature"|""}: how the next ID tokens are spoilt.
                state.id_token_fault = form.get("fault", "")
                return self.send(200, {})
            if what == "huge_jwks":
                state.huge_jwks = bool(form.get("on"))
                return self.send(200, {})
            if what == "jwks_down":
                # /jwks answers 503 (the rest of the issuer stays up) until switched off.
                state.jwks_down = bool(form.get("on"))
                return self.send(200, {})
            if what == "oidc_only":
                # Metadata only at /.well-known/openid-configuration: the RFC 8414 path answers 404.
                state.oidc_only = bool(form.get("on"))
                return self.send(200, {})
            if what == "introspect_delay":
                # Each introspection request is answered this many seconds late.
                state.introspect_delay = float(form["seconds"])
                return self.send(200, {})
            if what == "exchange_ttl":
                # The `expires_in` (and token lifetime) of exchanged tokens from now on.
                state.exchange_ttl = int(form["seconds"])
                return self.send(200, {})
            if what in ("rsa", "publish"):
                # Publishes a new key beside the P-256 ones: `rsa` an RS256 one, `publish`
                # one for {"alg": "RS256"|"ES384"|"EdDSA"}; `mint` with that alg signs
                # with the newest such key. "label" publishes the key with another
                # "alg" than its own (a broken key set).
                alg = "RS256" if what == "rsa" else form["alg"]
                with state.lock:
                    state.key_counter += 1
                    new = Key(f"{KID_PREFIX[alg]}{state.key_counter}", alg=alg)
                    if "label" in form:
                        new.jwk["alg"] = form["label"]
                    state.other_keys.append(new)
                return self.send(200, {"kid": new.kid, "jwk": new.jwk})
            if what == "mint":
                # {"claims": {...}, "alg": "ES256"|"ES384"|"EdDSA"|"RS256"|"HS256"|"none",
                #  "kid": "...", "unpublished": bool, "secret": "..." (for HS256),
                #  "key": "<published kid>"}; ES384, EdDSA and RS256 sign with the newest
                # published key of that algorithm (see `publish`), or an unpublished one.
                # With "key", that published key signs with its own algorithm while the
                # header names `alg` (and `kid`, by default the key's).
                claims = form.get("claims", {})
                alg = form.get("alg", "ES256")
                if "key" in form:
                    key = next(k for k in state.keys + state.other_keys if k.kid == form["key"])
                    return self.send(200, {"token": key.sign_as(claims, alg, form.get("kid", key.kid))})
                if alg in ASYMMETRIC and alg != "ES256":
                    key = (Key(form.get("kid", "rogue"), alg=alg) if form.get("unpublished")
                           else [k for k in state.other_keys if k.alg == alg][-1])
                else:
                    key = Key(form.get("kid", "rogue")) if form.get("unpublished") else state.current
                head = {"kid": form["kid"]} if "kid" in form else {}
                if alg in ASYMMETRIC:
                    token = state.sign(claims, key=key, alg=alg, headers=head)
                elif alg == "none":
                    token = jwt.encode(claims, None, algorithm="none", headers=dict(head, kid=key.kid))
                else:
                    token = jwt.encode(claims, form.get("secret", "secret"), algorithm=alg,
                                       headers=dict({"kid": key.kid}, **head))
                return self.send(200, {"token": token})
            if what == "access":
                # A regular access token for `sub` with `aud` and `scope` (skipping the browser).
                token = state.access_token(form["sub"], form.get("aud"), form.get("scope", ""), "test",
                                           ttl=int(form.get("ttl", 300)))
                return self.send(200, {"token": token})
            if what == "opaque":
                token = secrets.token_urlsafe(24)
                state.opaque[token] = form.get("claims", {})
                return self.send(200, {"token": token})
            self.error("not_found", what, 404)

    return Handler


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tls", action="store_true")
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), None)
    server.daemon_threads = True
    scheme = "https" if args.tls else "http"
    issuer = f"{scheme}://127.0.0.1:{server.server_address[1]}"
    state = State(issuer)
    server.RequestHandlerClass = make_handler(state)
    if args.tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(TLS / "server.pem", TLS / "server-key.pem")
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
    print(f"listening on {issuer}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
