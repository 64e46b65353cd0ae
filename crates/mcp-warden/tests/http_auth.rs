//! Who an HTTP request acts for, through the real binary (G1): API keys and
//! bearer JWTs (HS256, a JWKS), every refusal a 401 with its challenge, the
//! claims a configured issuer and audience require, token times, and how loud an
//! anonymous caller is; and a child-process upstream that runs one child per
//! caller, each with its own caller's credential (G8).

mod common;

use common::http::{
    error_body, exchange, hold, initialize, read_reply, wait_closed, HttpWarden, POST,
};
use common::*;
use serde_json::{json, Value};
use std::io::Write as _;
use std::net::TcpStream;

#[test]
fn callers_are_identified_by_api_key_or_jwt() {
    let secret = "jwt-test-secret";
    let toml = format!(
        "[[caller]]\nname = \"alice\"\napi_key_env = \"WARDEN_TEST_ALICE_KEY\"\n[auth]\njwt_secret_env = \"WARDEN_TEST_JWT\"\naudience = \"mcp-warden\"\nissuer = \"https://id.test\"\n[[rule]]\ncallers = [\"bob\"]\ntools = [\"fx.crash\"]\neffect = \"deny\"\n{}",
        fixture_config("", "")
    );
    let w = HttpWarden::start(
        "http-auth",
        &toml,
        &[
            ("WARDEN_TEST_ALICE_KEY", "alice-key-1"),
            ("WARDEN_TEST_JWT", secret),
        ],
    );
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});

    let r = w.post(&[], &init);
    assert_eq!(r.status, 401);
    assert_eq!(
        r.header("www-authenticate"),
        Some("Bearer realm=\"mcp-warden\"")
    );
    assert_eq!(
        r.body,
        error_body("Unauthorized: send 'Authorization: Bearer <API key or token>'.")
    );

    let r = w.post(&[("Authorization", "Bearer alice-key-2")], &init);
    assert_eq!(r.status, 401);
    assert_eq!(
        r.header("www-authenticate"),
        Some("Bearer realm=\"mcp-warden\", error=\"invalid_token\", error_description=\"Unauthorized: the credential was not accepted\"")
    );
    let r = w.post(&[("Authorization", "Basic YWxpY2U6eA==")], &init);
    assert_eq!(r.status, 401);
    assert_eq!(r.body, error_body("Unauthorized: use the Bearer scheme."));

    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let token = |claims: Value| {
        format!(
            "Bearer {}",
            jsonwebtoken::encode(
                &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
                &claims,
                &jsonwebtoken::EncodingKey::from_secret(secret.as_bytes()),
            )
            .unwrap()
        )
    };
    let good =
        json!({"sub": "bob", "aud": "mcp-warden", "iss": "https://id.test", "exp": now + 300});
    let mut expired = good.clone();
    expired["exp"] = json!(now - 300);
    let r = w.post(&[("Authorization", &token(expired))], &init);
    assert_eq!(r.status, 401);
    assert_eq!(r.body, error_body("Unauthorized: the token has expired."));
    let mut other = good.clone();
    other["aud"] = json!("another-service");
    let r = w.post(&[("Authorization", &token(other))], &init);
    assert_eq!(r.status, 401);
    assert_eq!(
        r.body,
        error_body("Unauthorized: the token is meant for another audience.")
    );

    // Alice by key, Bob by token: each sees what their grants allow.
    let alice = w.session(&[("Authorization", "Bearer alice-key-1")]);
    let bob_token = token(good);
    let bob = w.session(&[("Authorization", &bob_token)]);
    let list = |auth: &str, sid: &str| -> Vec<String> {
        let r = w.post(
            &[("Authorization", auth), ("Mcp-Session-Id", sid)],
            &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        );
        r.json()["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert!(list("Bearer alice-key-1", &alice).contains(&"fx.crash".to_owned()));
    assert!(!list(&bob_token, &bob).contains(&"fx.crash".to_owned()));
    // A session belongs to the caller who opened it.
    let r = w.post(
        &[("Authorization", &bob_token), ("Mcp-Session-Id", &alice)],
        &json!({"jsonrpc": "2.0", "id": 3, "method": "ping"}),
    );
    assert_eq!(r.status, 404);
    // A valid session without credentials is still refused: sessions are not authentication.
    let r = w.post(
        &[("Mcp-Session-Id", &alice)],
        &json!({"jsonrpc": "2.0", "id": 4, "method": "ping"}),
    );
    assert_eq!(r.status, 401);
}

/// A gateway that takes HS256 tokens for audience `mcp-warden` from issuer
/// `https://id.test`, and a signer for such tokens.
/// A 401 given before the request's body was read says the connection closes,
/// and it does: a body still on its way leaves the connection unusable, and a
/// client not told so would send its retry (with the token it went to get) on
/// it and find it closed. A refusal of a request without a body keeps it.
#[test]
fn a_refusal_before_the_body_was_read_says_the_connection_closes() {
    let toml = format!(
        "[[caller]]\nname = \"alice\"\napi_key_env = \"WARDEN_TEST_ALICE_KEY\"\n{}",
        fixture_config("", "")
    );
    let w = HttpWarden::start(
        "http-auth-unread",
        &toml,
        &[("WARDEN_TEST_ALICE_KEY", "alice-key-1")],
    );
    let body = initialize().to_string();
    let mut conn = TcpStream::connect(&w.addr).unwrap();
    let mut head = format!("POST /mcp HTTP/1.1\r\nHost: {}\r\n", w.addr);
    for (k, v) in POST {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    conn.write_all(head.as_bytes()).unwrap();
    // The head alone is enough to refuse: the body has not been sent yet.
    let r = read_reply(&mut conn).unwrap();
    assert_eq!(r.status, 401);
    assert_eq!(r.header("connection"), Some("close"));
    let _ = conn.write_all(body.as_bytes());
    assert!(
        wait_closed(&mut conn, PATIENCE).is_some(),
        "the connection stayed open"
    );

    // No body: the refused connection serves the retry.
    let mut conn = TcpStream::connect(&w.addr).unwrap();
    let r = exchange(&mut conn, "GET", &[("Accept", "text/event-stream")], "");
    assert_eq!(r.status, 401);
    assert_eq!(r.header("connection"), None);
    let mut headers = POST.to_vec();
    headers.push(("Authorization", "Bearer alice-key-1"));
    let r = exchange(&mut conn, "POST", &headers, &body);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("connection"), None);
}

fn jwt_warden(name: &str) -> (HttpWarden, impl Fn(&Value) -> String) {
    let secret = "jwt-claims-secret";
    let toml = format!(
        "[auth]\njwt_secret_env = \"WARDEN_TEST_JWT\"\naudience = \"mcp-warden\"\nissuer = \"https://id.test\"\n{}",
        fixture_config("", "")
    );
    let w = HttpWarden::start(name, &toml, &[("WARDEN_TEST_JWT", secret)]);
    let sign = move |claims: &Value| {
        format!(
            "Bearer {}",
            jsonwebtoken::encode(
                &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
                claims,
                &jsonwebtoken::EncodingKey::from_secret(secret.as_bytes()),
            )
            .unwrap()
        )
    };
    (w, sign)
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A 401 for a token the front would not take: the exact body, and a challenge
/// whose description is the text without its final period.
fn assert_invalid_token(r: &common::http::Reply, text: &str) {
    assert_eq!(r.status, 401);
    assert_eq!(r.body, error_body(text));
    let challenge = format!(
        "Bearer realm=\"mcp-warden\", error=\"invalid_token\", error_description=\"{}\"",
        text.trim_end_matches('.')
    );
    assert_eq!(r.header("www-authenticate"), Some(challenge.as_str()));
}

#[test]
fn a_jwt_that_is_not_valid_yet_is_refused() {
    let (w, sign) = jwt_warden("http-jwt-times");
    let now = unix_now();
    let good = json!({"sub": "bob", "aud": "mcp-warden", "iss": "https://id.test",
        "exp": now + 2 * 86_400, "nbf": now - 60, "iat": now - 60});

    // Signed correctly, but only valid from tomorrow.
    let mut tomorrow = good.clone();
    tomorrow["nbf"] = json!(now + 86_400);
    let r = w.post(&[("Authorization", &sign(&tomorrow))], &initialize());
    assert_invalid_token(&r, "Unauthorized: the token is not valid yet.");

    // Dated as issued tomorrow.
    let mut issued_later = good.clone();
    issued_later["iat"] = json!(now + 86_400);
    let r = w.post(&[("Authorization", &sign(&issued_later))], &initialize());
    assert_invalid_token(
        &r,
        "Unauthorized: the token says it was issued in the future.",
    );

    // Valid since a minute ago: in.
    let r = w.post(&[("Authorization", &sign(&good))], &initialize());
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.header("mcp-session-id").is_some());
}

#[test]
fn a_jwt_without_the_configured_audience_or_issuer_is_refused() {
    let (w, sign) = jwt_warden("http-jwt-claims");
    let good = json!({"sub": "bob", "aud": "mcp-warden", "iss": "https://id.test", "exp": unix_now() + 300});

    let mut no_aud = good.clone();
    no_aud.as_object_mut().unwrap().remove("aud");
    let r = w.post(&[("Authorization", &sign(&no_aud))], &initialize());
    assert_invalid_token(&r, "Unauthorized: the token does not name an audience.");

    let mut no_iss = good.clone();
    no_iss.as_object_mut().unwrap().remove("iss");
    let r = w.post(&[("Authorization", &sign(&no_iss))], &initialize());
    assert_invalid_token(&r, "Unauthorized: the token does not name an issuer.");

    let r = w.post(&[("Authorization", &sign(&good))], &initialize());
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.header("mcp-session-id").is_some());
}

#[test]
fn check_is_loud_about_anonymous_http_callers() {
    let dir = scratch("http-check");
    let config = write_config(
        &dir,
        "[gateway]\nfront = \"http\"\nanonymous_caller = \"dev\"\n[[upstream]]\nname = \"fx\"\ncommand = [\"{fixture}\"]\n",
    );
    let (code, out, _) = cli(&["check", "--config", config.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(out.contains("warning: gateway.anonymous_caller = 'dev': HTTP requests without credentials act as 'dev' (authentication is off for them; development and test suites only)"), "{out}");
    let config = write_config(
        &dir,
        "[gateway]\nfront = \"http\"\n[[upstream]]\nname = \"fx\"\ncommand = [\"{fixture}\"]\n",
    );
    let (_, out, _) = cli(&["check", "--config", config.to_str().unwrap()]);
    assert!(out.contains("every request will get 401"), "{out}");
}

/// `check` on `[oauth]` settings: an https issuer nobody answers at now is a
/// warning (the gateway starts and waits for it); a CA file that cannot be used
/// is an error, since no token of that issuer could ever be checked.
#[test]
fn check_explains_an_oauth_issuer_that_cannot_work() {
    let dir = scratch("oauth-check");
    let issuer = format!("https://127.0.0.1:{}", free_port());
    let oauth = |extra: &str| {
        format!("[gateway]\nfront = \"http\"\n[oauth]\nissuer = \"{issuer}\"\n{extra}\n[[upstream]]\nname = \"fx\"\ncommand = [\"{{fixture}}\"]\n")
    };
    let config = write_config(&dir, &oauth(""));
    let (code, out, err) = cli(&["check", "--config", config.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let warning = out
        .lines()
        .find(|l| l.starts_with("warning: oauth.issuer"))
        .unwrap_or_else(|| panic!("no warning about the issuer: {out}"));
    assert!(
        warning.starts_with(&format!(
            "warning: oauth.issuer '{issuer}' cannot be reached now ("
        )) && warning.ends_with("): its tokens are refused until it can"),
        "{warning}"
    );

    let config = write_config(&dir, &oauth("tls_ca_file = \"missing-ca.pem\"\n"));
    let (code, out, err) = cli(&["check", "--config", config.to_str().unwrap()]);
    assert_eq!((code, out.as_str()), (1, ""));
    assert_eq!(
        err,
        format!(
            "error: oauth.tls_ca_file: cannot read {}: I/O error: No such file or directory (os error 2)\n",
            dir.join("missing-ca.pem").display()
        )
    );
    std::fs::write(dir.join("empty-ca.pem"), "no certificate here\n").unwrap();
    let config = write_config(&dir, &oauth("tls_ca_file = \"empty-ca.pem\"\n"));
    let (code, _, err) = cli(&["check", "--config", config.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert_eq!(
        err,
        format!(
            "error: oauth.tls_ca_file: {} holds no certificate\n",
            dir.join("empty-ca.pem").display()
        )
    );
}

/// `[oauth]` with an issuer that is not there (a loopback port nobody listens on):
/// the gateway starts anyway, serves its protected resource metadata, points every
/// 401 at it, and refuses every token (none can be checked), including a JWT of
/// another issuer and an `[auth]`-style token. The SDK login, key rotation, attacks
/// and step-up against a live issuer are in tests/interop/test_oauth.py.
#[test]
fn oauth_metadata_and_challenges_without_a_reachable_issuer() {
    let issuer = format!("http://127.0.0.1:{}", free_port());
    let toml = format!(
        "[oauth]\nissuer = \"{issuer}\"\nresource = \"https://mcp.example.com/mcp\"\nrequired_scopes = [\"mcp\"]\n[oauth.tool_scopes]\n\"notes:write\" = [\"fx.*\"]\n{}",
        fixture_config("", "")
    );
    let w = HttpWarden::start("http-oauth", &toml, &[]);
    let metadata = json!({"resource": "https://mcp.example.com/mcp",
        "authorization_servers": [issuer],
        "scopes_supported": ["mcp", "notes:write"],
        "bearer_methods_supported": ["header"],
        "resource_name": "mcp-warden"});
    for path in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    ] {
        let r = common::http::request_path(&w.addr, "GET", path, &[], "");
        assert_eq!(r.status, 200, "{path}");
        assert_eq!(serde_json::from_str::<Value>(&r.body).unwrap(), metadata);
    }
    let r = w.post(&[], &initialize());
    assert_eq!(r.status, 401);
    assert_eq!(
        r.header("www-authenticate"),
        Some("Bearer realm=\"mcp-warden\", resource_metadata=\"https://mcp.example.com/.well-known/oauth-protected-resource/mcp\", scope=\"mcp\"")
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let sign = |claims: Value| {
        format!(
            "Bearer {}",
            jsonwebtoken::encode(
                &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
                &claims,
                &jsonwebtoken::EncodingKey::from_secret(b"whatever"),
            )
            .unwrap()
        )
    };
    let cases = [
        (
            json!({"iss": "https://evil.example", "sub": "m", "aud": "https://mcp.example.com/mcp", "exp": now + 60}),
            "Unauthorized: the token comes from an issuer this gateway does not trust",
        ),
        // The configured issuer, but HS256: no issuer key is an HMAC secret.
        (
            json!({"iss": issuer, "sub": "m", "aud": "https://mcp.example.com/mcp", "exp": now + 60}),
            "Unauthorized: the token is signed with an algorithm this gateway does not accept",
        ),
    ];
    for (claims, why) in cases {
        let r = w.post(&[("Authorization", &sign(claims))], &initialize());
        assert_eq!(r.status, 401);
        assert_eq!(
            r.header("www-authenticate").unwrap(),
            format!("Bearer realm=\"mcp-warden\", resource_metadata=\"https://mcp.example.com/.well-known/oauth-protected-resource/mcp\", scope=\"mcp\", error=\"invalid_token\", error_description=\"{why}\"")
        );
        assert_eq!(r.body, error_body(&format!("{why}.")));
    }
    // An opaque token without introspection configured is simply not accepted.
    let r = w.post(&[("Authorization", "Bearer opaque-token")], &initialize());
    assert_eq!(r.status, 401);
    assert_eq!(
        r.body,
        error_body("Unauthorized: the credential was not accepted.")
    );
}

/// T6, G7: the step-up 403 of a `tools/call` is answered as before, byte for
/// byte, and leaves one audit record: the caller, the tool, the arguments, and
/// `insufficient_scope`. The issuer is a loopback endpoint that answers every
/// request with one document: its metadata, and an introspection answer for
/// alice holding only the scope `mcp` (each reader takes its own keys).
#[test]
fn a_step_up_refusal_is_audited_and_answered_as_before() {
    let issuer = std::sync::Arc::new(std::sync::OnceLock::<String>::new());
    let known = issuer.clone();
    let server = HookServer::start(move |_| {
        let issuer = known.get().cloned().unwrap_or_default();
        Reply::Json(json!({"issuer": issuer,
            "introspection_endpoint": format!("{issuer}/introspect"),
            "active": true, "sub": "alice", "scope": "mcp"}))
    });
    let base = server.url.trim_end_matches("/hook").to_owned();
    issuer.set(base.clone()).unwrap();
    let toml = format!(
        "[oauth]\nissuer = \"{base}\"\nresource = \"https://mcp.example.com/mcp\"\nintrospection = true\nclient_id = \"warden\"\nclient_secret_env = \"WARDEN_TEST_OAUTH_SECRET\"\n[oauth.tool_scopes]\n\"notes:write\" = [\"fx.*\"]\n[audit]\njsonl = \"{{dir}}/audit.jsonl\"\n[[server]]\nname = \"tiny\"\ntools = [\"fx.echo\"]\nrename = {{ \"fx.echo\" = \"repeat\" }}\n{}",
        fixture_config("", "")
    );
    let w = HttpWarden::start(
        "http-step-up-audit",
        &toml,
        &[("WARDEN_TEST_OAUTH_SECRET", "s3cret")],
    );
    let auth = [("Authorization", "Bearer opaque-alice")];
    let sid = w.session(&auth);
    let mut headers = auth.to_vec();
    headers.push(("Mcp-Session-Id", &sid));
    let r = w.post(
        &headers,
        &common::http::call(5, "fx.echo", json!({"text": "hello"})),
    );
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(
        r.body,
        json!({"jsonrpc": "2.0", "id": 5, "error": {"code": -32600,
            "message": "Forbidden: the token lacks a scope this request needs; ask for: notes:write."}})
        .to_string()
    );
    assert_eq!(
        r.header("www-authenticate"),
        Some("Bearer realm=\"mcp-warden\", resource_metadata=\"https://mcp.example.com/.well-known/oauth-protected-resource/mcp\", scope=\"notes:write\", error=\"insufficient_scope\", error_description=\"Forbidden: the token lacks a scope this request needs; ask for: notes:write\"")
    );
    // On a virtual server the tool is guarded, and recorded, by its real name.
    let mut headers = POST.to_vec();
    headers.extend_from_slice(&auth);
    let msg = common::http::call(6, "repeat", json!({"text": "again"}));
    let r = common::http::request_path(&w.addr, "POST", "/mcp/tiny", &headers, &msg.to_string());
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(
        r.body,
        json!({"jsonrpc": "2.0", "id": 6, "error": {"code": -32600,
            "message": "Forbidden: the token lacks a scope this request needs; ask for: notes:write."}})
        .to_string()
    );
    let records = audit_records(&w.dir);
    assert_eq!(records.len(), 2, "{records:?}");
    for (record, (server, text)) in records
        .iter()
        .zip([(None, "hello"), (Some("tiny"), "again")])
    {
        assert_eq!(record["session"], "http");
        assert_eq!(record["caller"], "alice");
        assert_eq!(record["tool"], "fx.echo");
        assert_eq!(record.get("server").and_then(Value::as_str), server);
        assert_eq!(record["upstream"], Value::Null);
        assert_eq!(record["arguments"], json!({ "text": text }));
        assert_eq!(record["decision"], "denied");
        assert_eq!(record["outcome"], "refused");
        assert_eq!(record["error"], "insufficient_scope");
    }
}

/// Callers alice, bob and carol have credentials for the fixture (a child of
/// their own each, two at most, stopped after 1 s idle); dave has none.
const PER_CALLER: &str = r#"
[[caller]]
name = "alice"
api_key_env = "PC_ALICE_KEY"
[[caller]]
name = "bob"
api_key_env = "PC_BOB_KEY"
[[caller]]
name = "carol"
api_key_env = "PC_CAROL_KEY"
[[caller]]
name = "dave"
api_key_env = "PC_DAVE_KEY"

[[upstream]]
name = "fx"
command = ["{fixture}"]
env = { FIXTURE_SECRET_VAR = "FX_TOKEN" }
credential_env = "FX_TOKEN"
max_caller_processes = 2
caller_process_idle_ms = 1000

[[upstream.credential]]
callers = ["alice"]
token_env = "PC_ALICE_SECRET"
[[upstream.credential]]
callers = ["bob"]
name = "bob-at-fx"
token_env = "PC_BOB_SECRET"
[[upstream.credential]]
callers = ["carol"]
token_env = "PC_CAROL_SECRET"
"#;

/// A session of `who` (whose API key is `<who>-key`) that can answer sampling.
fn caller_session(w: &HttpWarden, who: &str) -> (String, String) {
    let auth = format!("Bearer {who}-key");
    let sid = w.session_with(&[("Authorization", &auth)], json!({"sampling": {}}));
    (auth, sid)
}

/// What the fixture's `secret` tool says for the caller of `(auth, sid)`.
fn secret(w: &HttpWarden, (auth, sid): &(String, String), id: i64) -> Value {
    let r = w.post(
        &[("Authorization", auth), ("Mcp-Session-Id", sid)],
        &common::http::call(id, "fx.secret", json!({})),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    r.messages().pop().expect("an answer")["result"].clone()
}

#[test]
fn a_child_process_upstream_runs_one_child_per_caller_with_its_own_credential() {
    let port = free_port();
    let toml = format!("{PER_CALLER}\n[admin]\nlisten = \"127.0.0.1:{port}\"\n");
    let w = HttpWarden::start("per-caller-children", &toml, &PER_CALLER_ENV);
    // The metrics and the console's overview count the callers' own children.
    let own = |n: usize| {
        let gauge = format!("warden_upstream_caller_processes{{upstream=\"fx\"}} {n}\n");
        let text = metrics_text(port);
        assert!(text.contains(&gauge), "{text}");
        let api = common::http::request_path(
            &format!("127.0.0.1:{port}"),
            "GET",
            "/api/overview",
            &[],
            "",
        );
        assert_eq!(api.status, 200, "{}", api.body);
        assert_eq!(
            api.json()["upstreams"][0]["caller_processes"],
            json!({"running": n, "max": 2})
        );
    };
    own(0);
    let [alice, bob, carol, dave] =
        ["alice", "bob", "carol", "dave"].map(|who| caller_session(&w, who));

    // Alice and Bob each keep their own child busy with a call that waits on them.
    let (alice_stream, alice_asked) = hold(&w, &alice, "fx.sample", 1);
    let (bob_stream, bob_asked) = hold(&w, &bob, "fx.sample", 1);
    // Each child was started with its own caller's secret, and only that.
    let (alice_env, alice_pid) = said(&secret(&w, &alice, 2));
    let (bob_env, bob_pid) = said(&secret(&w, &bob, 2));
    assert_eq!(alice_env, "FX_TOKEN=alice-secret");
    assert_eq!(bob_env, "FX_TOKEN=bob-secret");
    assert_ne!(alice_pid, bob_pid);
    // Dave has no credential: the upstream's own child, which holds no one's secret.
    let (dave_env, own_pid) = said(&secret(&w, &dave, 1));
    assert_eq!(dave_env, "FX_TOKEN=<unset>");
    assert!(own_pid != alice_pid && own_pid != bob_pid);
    // A caller's requests keep going to its child.
    assert_eq!(said(&secret(&w, &alice, 3)).1, alice_pid);
    own(2);

    // Both children may run, and both are busy: Carol is told so, and no child starts.
    let refused = secret(&w, &carol, 1);
    assert_eq!(refused["isError"], true, "{refused}");
    assert_eq!(
        refused["content"][0]["text"],
        "Error: The server of this tool is busy with as many callers as it may serve at once. Retry shortly."
    );

    // The waiting calls finish once their clients answer.
    for ((mut stream, asked), (auth, sid)) in [(alice_stream, alice_asked), (bob_stream, bob_asked)]
        .into_iter()
        .zip([&alice, &bob])
    {
        let answer = json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"role": "assistant",
            "content": {"type": "text", "text": "done"}, "model": "m"}});
        let r = w.post(&[("Authorization", auth), ("Mcp-Session-Id", sid)], &answer);
        assert_eq!(r.status, 202);
        let last = loop {
            let (_, data) = stream.next_event().expect("the call's answer");
            if data.contains("\"result\"") {
                break serde_json::from_str::<Value>(&data).unwrap();
            }
        };
        assert_eq!(last["result"]["content"][0]["text"], "model said: done");
    }

    // Idle past caller_process_idle_ms, both children are stopped; the
    // upstream's own child is not.
    let deadline = std::time::Instant::now() + PATIENCE;
    while alive(alice_pid) || alive(bob_pid) {
        assert!(
            std::time::Instant::now() < deadline,
            "idle children were not stopped"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(alive(own_pid));
    let deadline = std::time::Instant::now() + PATIENCE;
    while !metrics_text(port).contains("warden_upstream_caller_processes{upstream=\"fx\"} 0\n") {
        assert!(
            std::time::Instant::now() < deadline,
            "stopped children still counted"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    own(0);
    // Now there is room: Carol gets a child with her own secret.
    let (carol_env, carol_pid) = said(&secret(&w, &carol, 2));
    assert_eq!(carol_env, "FX_TOKEN=carol-secret");
    assert!(![alice_pid, bob_pid, own_pid].contains(&carol_pid));
    // Alice comes back: a new child, with her secret again.
    let (env, pid) = said(&secret(&w, &alice, 4));
    assert_eq!(env, "FX_TOKEN=alice-secret");
    assert_ne!(pid, alice_pid);
}

/// The environment of the per-caller tests: each caller's API key and secret.
const PER_CALLER_ENV: [(&str, &str); 7] = [
    ("PC_ALICE_KEY", "alice-key"),
    ("PC_BOB_KEY", "bob-key"),
    ("PC_CAROL_KEY", "carol-key"),
    ("PC_DAVE_KEY", "dave-key"),
    ("PC_ALICE_SECRET", "alice-secret"),
    ("PC_BOB_SECRET", "bob-secret"),
    ("PC_CAROL_SECRET", "carol-secret"),
];

#[test]
fn at_the_bound_the_idle_child_used_longest_ago_makes_room() {
    // One child at most, never stopped for idleness: only room-making stops one.
    let toml = PER_CALLER
        .replace("max_caller_processes = 2", "max_caller_processes = 1")
        .replace(
            "caller_process_idle_ms = 1000",
            "caller_process_idle_ms = 600000",
        );
    let w = HttpWarden::start("per-caller-room", &toml, &PER_CALLER_ENV);
    let [alice, bob] = ["alice", "bob"].map(|who| caller_session(&w, who));
    let (env, alice_pid) = said(&secret(&w, &alice, 1));
    assert_eq!(env, "FX_TOKEN=alice-secret");
    // Alice's child is idle: Bob's takes its place.
    let (env, bob_pid) = said(&secret(&w, &bob, 1));
    assert_eq!(env, "FX_TOKEN=bob-secret");
    let deadline = std::time::Instant::now() + PATIENCE;
    while alive(alice_pid) {
        assert!(
            std::time::Instant::now() < deadline,
            "alice's idle child was not stopped to make room"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(alive(bob_pid));
    // Bob's child is busy: Alice is refused, and Bob's child keeps running.
    let (mut stream, asked) = hold(&w, &bob, "fx.sample", 2);
    let refused = secret(&w, &alice, 2);
    assert_eq!(
        refused["content"][0]["text"],
        "Error: The server of this tool is busy with as many callers as it may serve at once. Retry shortly."
    );
    let answer = json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"role": "assistant",
        "content": {"type": "text", "text": "done"}, "model": "m"}});
    let (auth, sid) = &bob;
    let r = w.post(&[("Authorization", auth), ("Mcp-Session-Id", sid)], &answer);
    assert_eq!(r.status, 202);
    while stream.next_event().is_some() {}
    assert_eq!(said(&secret(&w, &bob, 3)).1, bob_pid);
}
