//! `caller.claims` (X10) through the real binary's HTTP front: a verified
//! JWT's claims reach a rule's `when_cel`; a caller by API key has none.

mod common;

use common::http::{call, HttpWarden};
use common::*;
use serde_json::{json, Value};

#[test]
fn a_rule_reads_the_verified_tokens_claims() {
    let secret = "cel-claims-secret";
    let toml = format!(
        "[[caller]]\nname = \"alice\"\napi_key_env = \"WARDEN_TEST_CLAIMS_KEY\"\n\
         [auth]\njwt_secret_env = \"WARDEN_TEST_CLAIMS_JWT\"\naudience = \"mcp-warden\"\n\
         [[rule]]\ncallers = [\"*\"]\ntools = [\"fx.echo\"]\neffect = \"deny\"\n\
         when_cel = \"caller.claims.team != 'payments'\"\n{}",
        fixture_config("", "")
    );
    let w = HttpWarden::start(
        "cel-claims",
        &toml,
        &[
            ("WARDEN_TEST_CLAIMS_KEY", "claims-key-1"),
            ("WARDEN_TEST_CLAIMS_JWT", secret),
        ],
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let token = |sub: &str, team: &str| {
        let claims = json!({"sub": sub, "aud": "mcp-warden", "exp": now + 300, "team": team});
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
    let text = |auth: &str| -> Value {
        let sid = w.session(&[("Authorization", auth)]);
        let r = w.post(
            &[("Authorization", auth), ("Mcp-Session-Id", &sid)],
            &call(2, "fx.echo", json!({"text": "hi"})),
        );
        assert_eq!(r.status, 200, "{}", r.body);
        r.json()["result"]["content"][0]["text"].clone()
    };
    assert_eq!(text(&token("bob", "payments")), json!(r#"{"text":"hi"}"#));
    assert_eq!(
        text(&token("carol", "ops")),
        json!("Error: Policy does not allow this call to tool 'fx.echo' for caller 'carol'.")
    );
    // An API key carries no claims: `team` is absent and the call fails closed.
    assert_eq!(
        text("Bearer claims-key-1"),
        json!("Error: Policy could not decide on this call, so it is refused.")
    );
}
