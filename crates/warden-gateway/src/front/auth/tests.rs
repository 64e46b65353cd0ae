use super::*;

fn config(text: &str) -> Config {
    Config::parse(text, "t.toml").unwrap()
}

impl Auth {
    /// The local part of identification, for keys and `[auth]` JWTs.
    fn identify_now(&self, authorization: Option<&[u8]>, c: &Config) -> Result<Caller, Refused> {
        match self.local(authorization, c)? {
            Local::Caller(c) | Local::Anonymous(c) | Local::Jwt(c, _) => Ok(c),
            Local::OAuth { .. } => panic!("an [oauth] token in a local test"),
        }
    }
}

#[test]
fn keys_jwts_and_anonymous_callers() {
    std::env::set_var("WARDEN_AUTH_TEST_KEY", "k-123");
    std::env::set_var("WARDEN_AUTH_TEST_SECRET", "s3cret");
    let c = config(
            "[gateway]\nanonymous_caller = \"dev\"\n[[caller]]\nname = \"alice\"\napi_key_env = \"WARDEN_AUTH_TEST_KEY\"\ngroups = [\"ops\"]\n[auth]\njwt_secret_env = \"WARDEN_AUTH_TEST_SECRET\"\naudience = \"warden\"\nissuer = \"https://id.example\"\n",
        );
    let auth = Auth::from_config(&c, "http://127.0.0.1:8931/mcp").unwrap();
    let who = |h: Option<&str>| auth.identify_now(h.map(str::as_bytes), &c).map(|c| c.name);
    assert_eq!(who(None), Ok("dev".into()));
    assert_eq!(who(Some("Bearer k-123")).unwrap(), "alice");
    assert_eq!(
        auth.identify_now(Some(b"Bearer k-123"), &c).unwrap().groups,
        ["ops"]
    );
    assert_eq!(who(Some("Bearer k-124")), Err(Refused::Invalid));
    assert_eq!(who(Some("Basic abc")), Err(Refused::NotBearer));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let sign = |claims: Value, secret: &str| {
        jsonwebtoken::encode(
            &jsonwebtoken::Header::new(Algorithm::HS256),
            &claims,
            &jsonwebtoken::EncodingKey::from_secret(secret.as_bytes()),
        )
        .unwrap()
    };
    let good = serde_json::json!({"sub": "bob", "aud": "warden", "iss": "https://id.example", "exp": now + 60});
    let t = sign(good.clone(), "s3cret");
    assert_eq!(who(Some(&format!("Bearer {t}"))).unwrap(), "bob");
    let mut expired = good.clone();
    expired["exp"] = (now - 120).into();
    let t = sign(expired, "s3cret");
    assert_eq!(who(Some(&format!("Bearer {t}"))), Err(Refused::Expired));
    let mut aud = good.clone();
    aud["aud"] = "other".into();
    let t = sign(aud, "s3cret");
    assert_eq!(
        who(Some(&format!("Bearer {t}"))),
        Err(Refused::WrongAudience)
    );
    let mut iss = good.clone();
    iss["iss"] = "https://evil.example".into();
    let t = sign(iss, "s3cret");
    assert_eq!(who(Some(&format!("Bearer {t}"))), Err(Refused::WrongIssuer));
    let t = sign(good.clone(), "other-secret");
    assert_eq!(who(Some(&format!("Bearer {t}"))), Err(Refused::Invalid));
    let mut nosub = good;
    nosub.as_object_mut().unwrap().remove("sub");
    let t = sign(nosub, "s3cret");
    assert_eq!(who(Some(&format!("Bearer {t}"))), Err(Refused::NoCaller));
}

#[test]
fn equal_keys_compare_equal_only() {
    assert!(constant_time_eq(b"abc", b"abc"));
    assert!(!constant_time_eq(b"abc", b"abd"));
    assert!(!constant_time_eq(b"abc", b"abcd"));
}

/// A throwaway P-256 key made for this test only (openssl genpkey), and its public JWK.
const TEST_EC_KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg+5x5P96Q720Fze4D
EkEf1W2o9XqQfNXUpdF9irWgu2OhRANCAASnLp38a3WQAbLnTSioJoYl+3iIeW0B
0LbBOx+wDIIdKjLtahPsLiJA8ZJ+88Eadrfa246ee0N+Jl+9YTHUQBlI
-----END PRIVATE KEY-----
";

/// The public half of `TEST_EC_KEY` as a JWKS document, key id `k1`.
const TEST_EC_JWKS: &str = r#"{"keys": [{"kty": "EC", "crv": "P-256", "kid": "k1", "alg": "ES256", "use": "sig",
                "x": "py6d_Gt1kAGy500oqCaGJft4iHltAdC2wTsfsAyCHSo",
                "y": "Mu1qE-wuIkDxkn7zwRp2t9rbjp57Q34mX71hMdRAGUg"}]}"#;

/// A JWKS file holding `TEST_EC_JWKS` under a name of the test's own.
fn jwks_file(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("warden-jwks-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let jwks = dir.join(name);
    std::fs::write(&jwks, TEST_EC_JWKS).unwrap();
    jwks
}

#[test]
fn es256_tokens_are_checked_against_a_jwks_file() {
    let jwks = jwks_file("keys.json");
    let c = config(&format!(
            "[auth]\njwks = \"{}\"\naudience = \"warden\"\n[[caller]]\nname = \"carol\"\ngroups = [\"ops\"]\n",
            jwks.display()
        ));
    let auth = Auth::from_config(&c, "http://127.0.0.1:8931/mcp").unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let key = jsonwebtoken::EncodingKey::from_ec_pem(TEST_EC_KEY.as_bytes()).unwrap();
    let sign = |kid: &str, claims: Value| {
        let mut h = jsonwebtoken::Header::new(Algorithm::ES256);
        h.kid = Some(kid.into());
        format!(
            "Bearer {}",
            jsonwebtoken::encode(&h, &claims, &key).unwrap()
        )
    };
    let claims = serde_json::json!({"sub": "carol", "aud": "warden", "exp": now + 60});
    let who = auth
        .identify_now(Some(sign("k1", claims.clone()).as_bytes()), &c)
        .unwrap();
    assert_eq!(
        (who.name.as_str(), who.groups.clone()),
        ("carol", vec!["ops".to_owned()])
    );
    // An HS256 token cannot pass for the ES256 key (algorithm confusion).
    let hs = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(Algorithm::HS256),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(b"py6d_Gt1kAGy500oqCaGJft4iHltAdC2wTsfsAyCHSo"),
    )
    .unwrap();
    assert_eq!(
        auth.identify_now(Some(format!("Bearer {hs}").as_bytes()), &c)
            .map(|c| c.name),
        Err(Refused::Invalid)
    );
    // A key id the file does not hold.
    assert_eq!(
        auth.identify_now(Some(sign("k2", claims).as_bytes()), &c)
            .map(|c| c.name),
        Err(Refused::Invalid)
    );
    // A file that is not JWKS is a clear start-up error.
    std::fs::write(&jwks, "not json").unwrap();
    let e = Auth::from_config(&c, "http://127.0.0.1:8931/mcp")
        .err()
        .unwrap();
    assert!(
        e.starts_with("auth.jwks: ") && e.contains("is not a JWKS document"),
        "{e}"
    );
}

fn now() -> u64 {
    jsonwebtoken::get_current_timestamp()
}

/// `[auth]` with an HS256 secret, and audience and issuer as `extra` sets them.
fn hs256_auth(extra: &str) -> (Auth, Config) {
    std::env::set_var("WARDEN_AUTH_CLAIMS_SECRET", "claims-secret");
    let c = config(&format!(
        "[auth]\njwt_secret_env = \"WARDEN_AUTH_CLAIMS_SECRET\"\n{extra}"
    ));
    (
        Auth::from_config(&c, "http://127.0.0.1:8931/mcp").unwrap(),
        c,
    )
}

fn hs256_bearer(claims: &Value) -> String {
    let t = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(Algorithm::HS256),
        claims,
        &jsonwebtoken::EncodingKey::from_secret(b"claims-secret"),
    )
    .unwrap();
    format!("Bearer {t}")
}

fn who(auth: &Auth, c: &Config, bearer: &str) -> Result<String, Refused> {
    auth.identify_now(Some(bearer.as_bytes()), c)
        .map(|c| c.name)
}

#[test]
fn hs256_not_before_is_enforced_with_the_expiry_leeway() {
    let (auth, c) = hs256_auth("audience = \"warden\"\nissuer = \"https://id.example\"\n");
    let now = now();
    let token = |nbf: u64| {
        hs256_bearer(&serde_json::json!({"sub": "bob", "aud": "warden",
                "iss": "https://id.example", "exp": now + 2 * 86_400, "nbf": nbf}))
    };
    assert_eq!(
        who(&auth, &c, &token(now + 86_400)),
        Err(Refused::NotYetValid)
    );
    // Just past the leeway is still too early.
    assert_eq!(
        who(&auth, &c, &token(now + LEEWAY_SECS + 5)),
        Err(Refused::NotYetValid)
    );
    assert_eq!(who(&auth, &c, &token(now - 60)).unwrap(), "bob");
    // A few seconds ahead is clock skew, tolerated as it is for `exp`.
    assert_eq!(who(&auth, &c, &token(now + 10)).unwrap(), "bob");
    assert_eq!(
            Refused::NotYetValid.challenge(None),
            "Bearer realm=\"mcp-warden\", error=\"invalid_token\", error_description=\"Unauthorized: the token is not valid yet\""
        );
}

#[test]
fn hs256_issued_at_in_the_future_is_refused() {
    let (auth, c) = hs256_auth("audience = \"warden\"\nissuer = \"https://id.example\"\n");
    let now = now();
    let token = |iat: Value| {
        hs256_bearer(&serde_json::json!({"sub": "bob", "aud": "warden",
                "iss": "https://id.example", "exp": now + 2 * 86_400, "iat": iat}))
    };
    assert_eq!(
        who(&auth, &c, &token((now + 86_400).into())),
        Err(Refused::IssuedInFuture)
    );
    assert_eq!(
        who(&auth, &c, &token((now + LEEWAY_SECS + 5).into())),
        Err(Refused::IssuedInFuture)
    );
    assert_eq!(who(&auth, &c, &token((now - 60).into())).unwrap(), "bob");
    assert_eq!(who(&auth, &c, &token((now + 10).into())).unwrap(), "bob");
    // A fractional NumericDate is a date too.
    assert_eq!(
        who(&auth, &c, &token(((now - 1) as f64 + 0.5).into())).unwrap(),
        "bob"
    );
    // An `iat` that is not a date at all is a malformed token.
    assert_eq!(
        who(&auth, &c, &token("yesterday".into())),
        Err(Refused::Invalid)
    );
    assert_eq!(
        Refused::IssuedInFuture.text(),
        "Unauthorized: the token says it was issued in the future."
    );
}

#[test]
fn hs256_configured_audience_and_issuer_must_be_present() {
    let (auth, c) = hs256_auth("audience = \"warden\"\nissuer = \"https://id.example\"\n");
    let full = serde_json::json!({"sub": "bob", "aud": "warden",
            "iss": "https://id.example", "exp": now() + 60});
    assert_eq!(who(&auth, &c, &hs256_bearer(&full)).unwrap(), "bob");
    let mut no_aud = full.clone();
    no_aud.as_object_mut().unwrap().remove("aud");
    assert_eq!(
        who(&auth, &c, &hs256_bearer(&no_aud)),
        Err(Refused::NoAudience)
    );
    let mut no_iss = full.clone();
    no_iss.as_object_mut().unwrap().remove("iss");
    assert_eq!(
        who(&auth, &c, &hs256_bearer(&no_iss)),
        Err(Refused::NoIssuer)
    );
    assert_eq!(
            Refused::NoAudience.challenge(None),
            "Bearer realm=\"mcp-warden\", error=\"invalid_token\", error_description=\"Unauthorized: the token does not name an audience\""
        );
    assert_eq!(
        Refused::NoIssuer.text(),
        "Unauthorized: the token does not name an issuer."
    );

    // Only what is configured is required: without `audience` and `issuer`, a
    // token that carries neither is fine.
    let (open, c) = hs256_auth("");
    let bare = serde_json::json!({"sub": "bob", "exp": now() + 60});
    assert_eq!(who(&open, &c, &hs256_bearer(&bare)).unwrap(), "bob");
}

#[test]
fn es256_not_before_and_missing_audience_are_refused() {
    let jwks = jwks_file("claims.json");
    let c = config(&format!(
        "[auth]\njwks = \"{}\"\naudience = \"warden\"\n",
        jwks.display()
    ));
    let auth = Auth::from_config(&c, "http://127.0.0.1:8931/mcp").unwrap();
    let key = jsonwebtoken::EncodingKey::from_ec_pem(TEST_EC_KEY.as_bytes()).unwrap();
    let sign = |claims: Value| {
        let mut h = jsonwebtoken::Header::new(Algorithm::ES256);
        h.kid = Some("k1".into());
        format!(
            "Bearer {}",
            jsonwebtoken::encode(&h, &claims, &key).unwrap()
        )
    };
    let now = now();
    let good = serde_json::json!({"sub": "carol", "aud": "warden", "exp": now + 2 * 86_400});
    assert_eq!(who(&auth, &c, &sign(good.clone())).unwrap(), "carol");
    let mut later = good.clone();
    later["nbf"] = (now + 86_400).into();
    assert_eq!(who(&auth, &c, &sign(later)), Err(Refused::NotYetValid));
    let mut started = good.clone();
    started["nbf"] = (now - 60).into();
    assert_eq!(who(&auth, &c, &sign(started)).unwrap(), "carol");
    let mut issued_later = good.clone();
    issued_later["iat"] = (now + 86_400).into();
    assert_eq!(
        who(&auth, &c, &sign(issued_later)),
        Err(Refused::IssuedInFuture)
    );
    let mut no_aud = good;
    no_aud.as_object_mut().unwrap().remove("aud");
    assert_eq!(who(&auth, &c, &sign(no_aud)), Err(Refused::NoAudience));
}

/// X10: an `[auth]` JWT's verified claims travel with the identity
/// (`caller.claims`); an API key carries none.
#[tokio::test]
async fn a_verified_jwt_keeps_its_claims_and_a_key_has_none() {
    let (auth, c) = hs256_auth("");
    let claims = serde_json::json!({"sub": "bob", "exp": now() + 600, "team": "payments"});
    let bearer = hs256_bearer(&claims);
    let who = auth.identify(Some(bearer.as_bytes()), &c).await.unwrap();
    assert_eq!(who.caller.name, "bob");
    let kept = who.claims.expect("the token's claims");
    assert_eq!(Value::Object(serde_json::Map::clone(&kept)), claims);
    std::env::set_var("WARDEN_AUTH_CLAIMS_KEY", "k-claims");
    let c = config(
        "[auth]\njwt_secret_env = \"WARDEN_AUTH_CLAIMS_SECRET\"\n\
         [[caller]]\nname = \"ann\"\napi_key_env = \"WARDEN_AUTH_CLAIMS_KEY\"\n",
    );
    let auth = Auth::from_config(&c, "http://127.0.0.1:8931/mcp").unwrap();
    let keyed = auth.identify(Some(b"Bearer k-claims"), &c).await.unwrap();
    assert_eq!((keyed.caller.name.as_str(), keyed.claims), ("ann", None));
}
