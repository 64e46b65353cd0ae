use super::issuer::parse_keys;
use super::*;

#[test]
fn metadata_urls_insert_the_well_known_name() {
    assert_eq!(
        metadata_url("https://mcp.example.com/mcp"),
        "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"
    );
    assert_eq!(
        metadata_url("http://127.0.0.1:8931/"),
        "http://127.0.0.1:8931/.well-known/oauth-protected-resource"
    );
    assert_eq!(
        metadata_paths("https://mcp.example.com/tenant/mcp"),
        [
            "/.well-known/oauth-protected-resource".to_owned(),
            "/.well-known/oauth-protected-resource/tenant/mcp".to_owned()
        ]
    );
}

#[test]
fn the_issuer_is_read_without_trusting_it() {
    let b = |v: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v);
    let t = format!("{}.{}.sig", b("{}"), b(r#"{"iss":"https://id.example"}"#));
    assert_eq!(unverified_issuer(&t).as_deref(), Some("https://id.example"));
    assert_eq!(unverified_issuer("a.b.c"), None);
    assert_eq!(unverified_issuer("opaque"), None);
}

#[test]
fn only_asymmetric_signing_keys_are_taken() {
    let doc = json!({"keys": [
        {"kty": "oct", "k": "c2VjcmV0", "kid": "hmac"},
        {"kty": "EC", "crv": "P-256", "kid": "enc", "use": "enc",
         "x": "py6d_Gt1kAGy500oqCaGJft4iHltAdC2wTsfsAyCHSo",
         "y": "Mu1qE-wuIkDxkn7zwRp2t9rbjp57Q34mX71hMdRAGUg"},
        {"kty": "EC", "crv": "P-256", "kid": "sig",
         "x": "py6d_Gt1kAGy500oqCaGJft4iHltAdC2wTsfsAyCHSo",
         "y": "Mu1qE-wuIkDxkn7zwRp2t9rbjp57Q34mX71hMdRAGUg"},
        {"kty": "weird"}
    ]});
    let keys = parse_keys(&doc).unwrap();
    assert_eq!(keys.len(), 1);
    assert_eq!(
        (keys[0].kid.as_deref(), keys[0].alg),
        (Some("sig"), Algorithm::ES256)
    );
    assert_eq!(pick(&keys, Some("sig"), Algorithm::ES256), Some(0));
    assert_eq!(pick(&keys, Some("sig"), Algorithm::RS256), None);
    assert_eq!(pick(&keys, Some("other"), Algorithm::ES256), None);
    let many = json!({"keys": vec![json!({"kty": "oct"}); 65]});
    assert!(parse_keys(&many)
        .err()
        .unwrap()
        .contains("more than the 64"));
}

#[test]
fn scopes_needed_are_named_in_full() {
    let c = Config::parse(
            "[oauth]\nissuer = \"https://id.example\"\nrequired_scopes = [\"mcp\"]\n[oauth.tool_scopes]\n\"notes:write\" = [\"notes.create_*\"]\n",
            "t.toml",
        )
        .unwrap();
    let rs = ResourceServer::from_config(&c, "https://gw.example/mcp")
        .unwrap()
        .unwrap();
    let held = |s: &[&str]| s.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(rs.missing_scopes(&held(&["mcp"]), Some("notes.list")), None);
    assert_eq!(
        rs.missing_scopes(&held(&["mcp"]), Some("notes.create_note"))
            .as_deref(),
        Some("mcp notes:write")
    );
    assert_eq!(rs.missing_scopes(&held(&[]), None).as_deref(), Some("mcp"));
    assert_eq!(
        rs.metadata(),
        json!({"resource": "https://gw.example/mcp",
                "authorization_servers": ["https://id.example"],
                "scopes_supported": ["mcp", "notes:write"],
                "bearer_methods_supported": ["header"],
                "resource_name": "mcp-warden"})
    );
}

#[tokio::test]
async fn aged_keys_are_fetched_again_when_the_token_is_a_remembered_one() {
    // Nothing listens on port 1: the fetch fails at once, but it is tried.
    let c = Config::parse(
        "[oauth]\nissuer = \"http://127.0.0.1:1\"\njwks_max_age = \"1s\"\n",
        "t.toml",
    )
    .unwrap();
    let rs = ResourceServer::from_config(&c, "http://127.0.0.1:8931/mcp")
        .unwrap()
        .unwrap();
    {
        let mut st = lock(&rs.state);
        st.fetched = Some(Instant::now() - Duration::from_secs(2));
        st.generation = 1;
    }
    let exp = now_secs() + 300;
    let alice = Verified {
        name: "alice".into(),
        groups: Vec::new(),
        scopes: vec!["mcp".into()],
        expires: Some(exp),
        claims: None,
    };
    let token = "a.remembered.token";
    let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
    lock(&rs.verified).insert(digest, (1, exp, alice.clone()));
    // Answered from memory, at once, with the keys held...
    assert_eq!(rs.verify_jwt(token).await, Ok(alice));
    // ...and the keys, 2 s old with a max age of 1 s, are fetched again.
    for _ in 0..500 {
        if lock(&rs.state).last_try.is_some() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("keys older than jwks_max_age were not fetched again for a remembered token");
}

#[test]
fn a_key_is_taken_only_for_an_algorithm_its_type_signs_with() {
    let p256 = json!({"kty": "EC", "crv": "P-256",
        "x": "py6d_Gt1kAGy500oqCaGJft4iHltAdC2wTsfsAyCHSo",
        "y": "Mu1qE-wuIkDxkn7zwRp2t9rbjp57Q34mX71hMdRAGUg"});
    let p384 = json!({"kty": "EC", "crv": "P-384",
        "x": "W2ppoEG2xpPb4jUVNRsL3i2gIB1NgGdS2YqQ8VYqPUUraqVZKhmAgQiFq58hKgM5",
        "y": "OEBZb34LNhTgGnHM7zsUrBueSAdsErsgUq9areKQ7QRDTpwKjlnfMp1hsFTMtW_w"});
    let ed25519 = json!({"kty": "OKP", "crv": "Ed25519",
        "x": "V6J2qFCCuit2iW7euahWX4iJxoAM8hUSB4TMh2XDGOw"});
    let x25519 = json!({"kty": "OKP", "crv": "X25519",
        "x": "7lq9VZ8cWbvWtq5V1joSehUwU5snpoZLppKpp5ydZlA"});
    let with = |key: &Value, kid: &str, alg: Option<&str>| {
        let mut k = key.clone();
        k["kid"] = kid.into();
        if let Some(alg) = alg {
            k["alg"] = alg.into();
        }
        k
    };
    let doc = json!({"keys": [
        // What an issuer publishes: the type alone, or the type and its algorithm.
        with(&p384, "p384", None),
        with(&ed25519, "ed25519", None),
        with(&p384, "p384-labelled", Some("ES384")),
        with(&ed25519, "ed25519-labelled", Some("EdDSA")),
        // An algorithm the key's type or curve does not sign with: it could never
        // verify a token, and a symmetric key is no issuer key at all.
        with(&p384, "p384-as-es256", Some("ES256")),
        with(&p256, "p256-as-es384", Some("ES384")),
        with(&ed25519, "ed25519-as-es256", Some("ES256")),
        with(&p256, "p256-as-eddsa", Some("EdDSA")),
        with(&json!({"kty": "oct", "k": "c2VjcmV0"}), "hmac-as-es256", Some("ES256")),
        with(&json!({"kty": "oct", "k": "c2VjcmV0"}), "hmac-as-rs256", Some("RS256")),
        // X25519 is a key-agreement curve: an OKP key, but no signing key.
        with(&x25519, "x25519", None),
    ]});
    let keys = parse_keys(&doc).unwrap();
    let taken: Vec<(Option<&str>, Algorithm)> =
        keys.iter().map(|k| (k.kid.as_deref(), k.alg)).collect();
    assert_eq!(
        taken,
        [
            (Some("p384"), Algorithm::ES384),
            (Some("ed25519"), Algorithm::EdDSA),
            (Some("p384-labelled"), Algorithm::ES384),
            (Some("ed25519-labelled"), Algorithm::EdDSA),
        ]
    );
}
