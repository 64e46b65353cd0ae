//! Who an HTTP request acts for, through the real binary (G1): API keys and
//! bearer JWTs (HS256, a JWKS), every refusal a 401 with its challenge, the
//! claims a configured issuer and audience require, token times, and how loud an
//! anonymous caller is.

mod common;

use common::http::{error_body, initialize, HttpWarden};
use common::*;
use serde_json::{json, Value};

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
        "[gateway]\nfront = \"http\"\nanonymous_caller = \"dev\"\n",
    );
    let (code, out, _) = cli(&["check", "--config", config.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(out.contains("warning: gateway.anonymous_caller = 'dev': HTTP requests without credentials act as 'dev' (authentication is off for them; development and test suites only)"), "{out}");
    let config = write_config(&dir, "[gateway]\nfront = \"http\"\n");
    let (_, out, _) = cli(&["check", "--config", config.to_str().unwrap()]);
    assert!(out.contains("every request will get 401"), "{out}");
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
