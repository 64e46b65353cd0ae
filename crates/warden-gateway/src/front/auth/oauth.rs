//! The HTTP front as an OAuth 2.1 resource server of one issuer (`[oauth]`).
//!
//! - It publishes its protected resource metadata (RFC 9728): its canonical URL,
//!   the issuer, the scopes, how to send a token ([`ResourceServer::metadata`]).
//! - It learns the issuer's endpoints from its metadata (RFC 8414, or OpenID
//!   Connect discovery), and the signing keys from the `jwks_uri` there: over
//!   https (http only for a loopback issuer), checked against the public roots and
//!   `oauth.tls_ca_file`, read up to [`MAX_DOCUMENT_BYTES`].
//! - Keys are cached. A token signed with a key id the cache does not hold makes
//!   the gateway fetch the keys again, at most once per `jwks_min_interval`
//!   however many such tokens come (a flood of made-up key ids costs one fetch);
//!   keys older than `jwks_max_age` are fetched again in the background. A failed
//!   fetch leaves the keys held before in use: an issuer that is down does not
//!   stop tokens it signed with them, and a token whose key is not held is
//!   refused, never let through unchecked.
//! - A token must name the issuer (`iss`), the gateway's resource URL in `aud`
//!   (RFC 8707: a token minted for another service is refused), carry `exp`, and
//!   be signed with an asymmetric algorithm the key was published for: `none`,
//!   HS256 keyed with a public key, or RS256 against an EC key are refused. A
//!   token that passed is remembered (by its SHA-256) until it expires or new
//!   keys are fetched, so each request does not pay for a signature check.
//! - Opaque tokens go to the issuer's introspection endpoint (RFC 7662) when
//!   `introspection = true`, at a bounded rate, their answers reused for a while
//!   ([`introspection`]).
//! - Scopes (`scope`, or a `scp` list) and a groups claim put the caller into
//!   groups (`scope_groups`, `groups_claim`), so access rules decide on them.

mod introspection;
mod issuer;

pub use introspection::{INTROSPECTION_TTL, REFUSAL_TTL};

use super::refused::{Challenge, Refused};
use crate::config::{parse_duration, Config};
use crate::net::fetch::form_escape;
use crate::net::target::HttpTarget;
use base64::Engine;
use globset::{Glob, GlobMatcher};
use issuer::{pick, same_kid};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_rustls::TlsConnector;

/// The largest metadata, key set or introspection answer read from the issuer.
pub const MAX_DOCUMENT_BYTES: usize = 256 * 1024;
/// The most keys taken from one key set.
const MAX_KEYS: usize = 64;
/// Verified JWTs remembered at most (expired ones go first when full).
const VERIFIED_CACHE: usize = 10_000;
/// Clock skew tolerated on `exp`, `nbf` and `iat` (as for `[auth]` JWTs).
const LEEWAY_SECS: u64 = 30;

/// The algorithms an issuer key may be used with: asymmetric only, so no public
/// key can ever serve as an HMAC secret.
const ACCEPTED: &[Algorithm] = &[
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// A token the issuer vouched for: who, with which scopes and extra groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    pub name: String,
    /// Groups from `scope_groups` and `groups_claim`, besides the caller's configured ones.
    pub groups: Vec<String>,
    pub scopes: Vec<String>,
    /// `exp`, seconds since the epoch.
    pub expires: Option<u64>,
    /// The token's claims (the introspection answer for an opaque token).
    pub claims: Option<Arc<serde_json::Map<String, Value>>>,
}

/// What the issuer's metadata says where to go.
#[derive(Debug)]
struct Endpoints {
    jwks: Option<HttpTarget>,
    introspection: Option<HttpTarget>,
    token: Option<HttpTarget>,
    /// Where a browser is sent to log in (the console's login, O9).
    authorization: Option<HttpTarget>,
}

struct Key {
    kid: Option<String>,
    alg: Algorithm,
    key: DecodingKey,
}

#[derive(Default)]
struct State {
    endpoints: Option<Arc<Endpoints>>,
    keys: Arc<Vec<Key>>,
    /// When the keys held were fetched.
    fetched: Option<Instant>,
    /// When the last fetch (successful or not) started: the rate limit.
    last_try: Option<Instant>,
    /// Counts successful fetches, so a waiter can tell one happened meanwhile.
    generation: u64,
}

/// The result of asking the issuer at start-up (and in `mcp-warden check`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// Metadata and keys fetched.
    Ready,
    /// The issuer could not be reached: tokens are refused until it can.
    Unreachable(String),
    /// A configuration that cannot work (an untrusted certificate, metadata that
    /// names another issuer or an http key URL).
    Broken(String),
}

/// The resource server: configuration, and what it learnt from the issuer.
pub struct ResourceServer {
    issuer: String,
    issuer_target: HttpTarget,
    resource: String,
    challenge_base: String,
    scopes_supported: Vec<String>,
    required: Vec<String>,
    tool_scopes: Vec<(String, GlobMatcher)>,
    scope_groups: HashMap<String, Vec<String>>,
    groups_claim: Option<String>,
    caller_claim: String,
    tls: Option<TlsConnector>,
    /// `Authorization: Basic …` for introspection and token exchange.
    client_auth: Option<String>,
    introspection: bool,
    timeout: Duration,
    min_interval: Duration,
    max_age: Duration,
    state: Mutex<State>,
    /// One key fetch at a time; the others wait for its outcome.
    fetching: tokio::sync::Mutex<()>,
    /// Answers about opaque tokens, and the bounds on asking.
    introspector: introspection::Introspector,
    /// JWTs that passed (by SHA-256): the key generation they passed under, `exp`.
    verified: Mutex<HashMap<[u8; 32], (u64, u64, Verified)>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn now_secs() -> u64 {
    jsonwebtoken::get_current_timestamp()
}

/// The `iss` a JWT claims, read without checking anything: it only picks which
/// verifier checks the token.
pub fn unverified_issuer(token: &str) -> Option<String> {
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    #[derive(serde::Deserialize)]
    struct Iss {
        iss: Option<String>,
    }
    serde_json::from_slice::<Iss>(&bytes).ok()?.iss
}

/// The `alg` a JWT's header names, read as plain JSON.
fn raw_header_alg(token: &str) -> Option<String> {
    let head = token.split('.').next()?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(head.trim_end_matches('='))
        .ok()?;
    let v: Value = serde_json::from_slice(&bytes).ok()?;
    v.get("alg")?.as_str().map(str::to_owned)
}

/// The metadata URL of a resource (RFC 9728 §3.1): the well-known name inserted
/// between the origin and the path.
pub fn metadata_url(resource: &str) -> String {
    let (scheme, rest) = resource.split_once("://").unwrap_or(("https", resource));
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
        None => (rest, ""),
    };
    format!("{scheme}://{authority}/.well-known/oauth-protected-resource{path}")
}

/// The paths the metadata is served at: the bare well-known path and its form
/// for the resource's own path (`…/oauth-protected-resource/mcp`).
pub fn metadata_paths(resource: &str) -> [String; 2] {
    let url = metadata_url(resource);
    let path = url
        .split_once("://")
        .and_then(|(_, r)| r.find('/').map(|i| r[i..].to_owned()))
        .unwrap_or_default();
    ["/.well-known/oauth-protected-resource".to_owned(), path]
}

impl ResourceServer {
    /// Builds the resource server `[oauth]` describes (none without an issuer).
    /// `front_url` is the front's own URL, the resource when none is configured.
    pub fn from_config(config: &Config, front_url: &str) -> Result<Option<Arc<Self>>, String> {
        Self::from_settings(&config.oauth, config, front_url, "oauth")
    }

    /// The console's own OpenID Connect issuer (`[console] issuer`, O9), when
    /// set: its ID tokens name the console's client as their audience, the admin
    /// by `caller_claim` and their groups by `groups_claim`.
    pub fn for_console(config: &Config) -> Result<Option<Arc<Self>>, String> {
        let c = &config.console;
        let (Some(_), Some(client_id)) = (&c.issuer, c.client_id.clone()) else {
            return match (&c.issuer, &c.client_id) {
                (Some(_), None) => Err("console.client_id: the console logs in at [console] issuer as a client of it; name that client".into()),
                (None, Some(_)) => Err("console.issuer: console.client_id is a client of the console's own issuer; name that issuer".into()),
                _ => Ok(None),
            };
        };
        let o = crate::config::OAuthConfig {
            issuer: c.issuer.clone(),
            resource: Some(client_id.clone()),
            client_id: Some(client_id.clone()),
            client_secret_env: c.client_secret_env.clone(),
            caller_claim: c.caller_claim.clone(),
            groups_claim: Some(c.groups_claim.clone().unwrap_or_else(|| "groups".into())),
            tls_ca_file: c.tls_ca_file.clone(),
            timeout_ms: c.timeout_ms.unwrap_or(5000),
            ..Default::default()
        };
        Self::from_settings(&o, config, &client_id, "console")
    }

    /// A resource server of the issuer `o` names; `section` names the table in errors.
    fn from_settings(
        o: &crate::config::OAuthConfig,
        config: &Config,
        front_url: &str,
        section: &str,
    ) -> Result<Option<Arc<Self>>, String> {
        let Some(issuer) = o.issuer.clone() else {
            return Ok(None);
        };
        let issuer_target = HttpTarget::parse(&issuer, o.timeout_ms)?;
        let tls = if issuer_target.is_tls() {
            let ca = o
                .tls_ca_file
                .as_ref()
                .map(|p| config.resolve_path(&p.to_string_lossy()));
            Some(crate::net::tls_with(ca.as_deref()).map_err(|e| format!("{section}.{e}"))?)
        } else {
            None
        };
        let client_auth = match (&o.client_id, &o.client_secret_env) {
            (Some(id), Some(var)) => {
                let secret = std::env::var(var).ok().filter(|s| !s.is_empty()).ok_or_else(|| {
                    format!("{section}.client_secret_env: the environment variable '{var}' is not set; export the gateway's client secret in it")
                })?;
                // RFC 6749 §2.3.1: both halves form-encoded before Basic encoding.
                let pair = format!("{}:{}", form_escape(id), form_escape(&secret));
                Some(format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(pair)
                ))
            }
            _ => None,
        };
        let resource = o.resource.clone().unwrap_or_else(|| front_url.to_owned());
        let mut tool_scopes = Vec::new();
        let mut scopes: Vec<&String> = o.tool_scopes.keys().collect();
        scopes.sort();
        for scope in scopes {
            for t in &o.tool_scopes[scope] {
                let g = Glob::new(t).map_err(|e| format!("{section}.tool_scopes.{scope}: {e}"))?;
                tool_scopes.push((scope.clone(), g.compile_matcher()));
            }
        }
        let mut supported = o.scopes_supported.clone();
        if supported.is_empty() {
            supported = o.required_scopes.clone();
            for (s, _) in &tool_scopes {
                if !supported.contains(s) {
                    supported.push(s.clone());
                }
            }
        }
        Ok(Some(Arc::new(ResourceServer {
            challenge_base: metadata_url(&resource),
            issuer,
            issuer_target,
            resource,
            scopes_supported: supported,
            required: o.required_scopes.clone(),
            tool_scopes,
            scope_groups: o.scope_groups.clone(),
            groups_claim: o.groups_claim.clone(),
            caller_claim: o.caller_claim.clone().unwrap_or_else(|| "sub".to_owned()),
            tls,
            client_auth,
            introspection: o.introspection,
            timeout: Duration::from_millis(o.timeout_ms),
            min_interval: parse_duration(&o.jwks_min_interval)?,
            max_age: parse_duration(&o.jwks_max_age)?,
            state: Mutex::new(State::default()),
            fetching: tokio::sync::Mutex::new(()),
            introspector: introspection::Introspector::new(o.introspection_rate),
            verified: Mutex::new(HashMap::new()),
        })))
    }

    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// The protected resource metadata document (RFC 9728 §2).
    pub fn metadata(&self) -> Value {
        json!({
            "resource": self.resource,
            "authorization_servers": [self.issuer],
            "scopes_supported": self.scopes_supported,
            "bearer_methods_supported": ["header"],
            "resource_name": "mcp-warden",
        })
    }

    /// What a 401 says besides the reason: the metadata URL and the scopes every
    /// token needs.
    pub fn challenge(&self) -> Challenge {
        Challenge {
            resource_metadata: self.challenge_base.clone(),
            scope: (!self.required.is_empty()).then(|| self.required.join(" ")),
        }
    }

    /// The scopes a request needs that `held` lacks: the required ones and, for
    /// a `tools/call`, those `tool_scopes` names for the tool. `None` when
    /// nothing is missing, else every scope the request needs (what to ask for).
    pub fn missing_scopes(&self, held: &[String], tool: Option<&str>) -> Option<String> {
        let mut needed: Vec<&str> = self.required.iter().map(String::as_str).collect();
        if let Some(tool) = tool {
            for (scope, glob) in &self.tool_scopes {
                if glob.is_match(tool) && !needed.contains(&scope.as_str()) {
                    needed.push(scope);
                }
            }
        }
        let lacking = needed.iter().any(|s| !held.iter().any(|h| h == s));
        lacking.then(|| needed.join(" "))
    }

    /// Whether a token is this issuer's to check (its unverified `iss` says so).
    pub fn claims_issuer(&self, token: &str) -> bool {
        unverified_issuer(token).as_deref() == Some(self.issuer.as_str())
    }

    /// Checks a JWT of this issuer.
    pub async fn verify_jwt(self: &Arc<Self>, token: &str) -> Result<Verified, Refused> {
        // Keys older than `jwks_max_age` are fetched again whatever the token, a
        // remembered one included: else a withdrawn key would go on vouching for
        // the token a client keeps sending, as long as no other token came.
        self.stale_check();
        // A token checked before, under the same keys and not expired since, is
        // not checked again: a signature check costs far more than the lookup.
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let generation = lock(&self.state).generation;
        if let Some((g, exp, v)) = lock(&self.verified).get(&digest) {
            if *g == generation && now_secs() <= exp.saturating_add(LEEWAY_SECS) {
                return Ok(v.clone());
            }
        }
        let v = self.verify_jwt_now(token).await?;
        if let Some(exp) = v.expires {
            let mut cache = lock(&self.verified);
            if cache.len() >= VERIFIED_CACHE {
                let now = now_secs();
                cache.retain(|_, (_, e, _)| e.saturating_add(LEEWAY_SECS) >= now);
                if cache.len() >= VERIFIED_CACHE {
                    cache.clear();
                }
            }
            let generation = lock(&self.state).generation;
            cache.insert(digest, (generation, exp, v.clone()));
        }
        Ok(v)
    }

    async fn verify_jwt_now(self: &Arc<Self>, token: &str) -> Result<Verified, Refused> {
        let claims = self.checked_claims(token, &self.resource).await?;
        self.identity(&claims)
    }

    /// An OpenID Connect ID token of this issuer (the console's login, O9):
    /// signed by a key the issuer publishes, naming it (`iss`) and the client
    /// `client_id` (`aud`), unexpired, and carrying the `nonce` the login sent,
    /// so a token minted for another login cannot be replayed into this one.
    pub async fn verify_id_token(
        self: &Arc<Self>,
        token: &str,
        nonce: &str,
        client_id: &str,
    ) -> Result<Verified, Refused> {
        let claims = self.checked_claims(token, client_id).await?;
        match claims.get("nonce") {
            Some(Value::String(n)) if !nonce.is_empty() && n == nonce => self.identity(&claims),
            _ => Err(Refused::Invalid),
        }
    }

    /// A JWT's claims once its signature, `iss`, `aud` (`audience`), `exp`,
    /// `nbf` and `iat` passed.
    async fn checked_claims(
        self: &Arc<Self>,
        token: &str,
        audience: &str,
    ) -> Result<serde_json::Map<String, Value>, Refused> {
        let header = jsonwebtoken::decode_header(token).map_err(|_| {
            // `none` and other names jsonwebtoken has no variant for fail to parse:
            // a header that names an algorithm is refused for that algorithm.
            if raw_header_alg(token).is_some() {
                Refused::Algorithm
            } else {
                Refused::Invalid
            }
        })?;
        if !ACCEPTED.contains(&header.alg) {
            return Err(Refused::Algorithm);
        }
        let (keys, generation) = self.keys();
        let found = match pick(&keys, header.kid.as_deref(), header.alg) {
            Some(found) => Some(found),
            None => {
                // A key the cache lacks may be new (rotation): fetch again, at most
                // once per interval, whatever the number of such tokens.
                self.refresh(generation).await;
                None
            }
        };
        let keys = if found.is_some() { keys } else { self.keys().0 };
        let key = match found.or_else(|| pick(&keys, header.kid.as_deref(), header.alg)) {
            Some(k) => k,
            None if keys.iter().any(|k| same_kid(k, header.kid.as_deref())) => {
                return Err(Refused::Algorithm)
            }
            None => return Err(Refused::UnknownKey),
        };
        let key = &keys[key];
        let mut v = Validation::new(key.alg);
        v.leeway = LEEWAY_SECS;
        v.validate_nbf = true;
        v.set_audience(&[audience]);
        v.set_issuer(&[&self.issuer]);
        v.set_required_spec_claims(&["exp", "aud", "iss"]);
        let data = jsonwebtoken::decode::<serde_json::Map<String, Value>>(token, &key.key, &v)
            .map_err(|e| {
                use jsonwebtoken::errors::ErrorKind as K;
                match e.kind() {
                    K::ExpiredSignature => Refused::Expired,
                    K::ImmatureSignature => Refused::NotYetValid,
                    K::InvalidAudience => Refused::WrongAudience,
                    K::InvalidIssuer => Refused::WrongIssuer,
                    K::MissingRequiredClaim(c) if c == "aud" => Refused::NoAudience,
                    K::MissingRequiredClaim(c) if c == "iss" => Refused::NoIssuer,
                    K::InvalidAlgorithm => Refused::Algorithm,
                    K::InvalidSignature => Refused::Signature,
                    _ => Refused::Invalid,
                }
            })?;
        super::check_issued_at(data.claims.get("iat"), now_secs())?;
        Ok(data.claims)
    }

    /// The caller, scopes and groups a verified token's claims give.
    fn identity(&self, claims: &serde_json::Map<String, Value>) -> Result<Verified, Refused> {
        let name = match claims.get(&self.caller_claim) {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            _ => return Err(Refused::NoCaller),
        };
        let scopes: Vec<String> = match (claims.get("scope"), claims.get("scp")) {
            (Some(Value::String(s)), _) => s.split_whitespace().map(str::to_owned).collect(),
            (_, Some(Value::Array(a))) => a
                .iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect(),
            (_, Some(Value::String(s))) => s.split_whitespace().map(str::to_owned).collect(),
            _ => Vec::new(),
        };
        let mut groups: Vec<String> = Vec::new();
        for s in &scopes {
            for g in self.scope_groups.get(s).into_iter().flatten() {
                if !groups.contains(g) {
                    groups.push(g.clone());
                }
            }
        }
        if let Some(claim) = &self.groups_claim {
            if let Some(Value::Array(a)) = claims.get(claim) {
                for g in a.iter().filter_map(Value::as_str) {
                    if !groups.iter().any(|x| x == g) {
                        groups.push(g.to_owned());
                    }
                }
            }
        }
        Ok(Verified {
            name,
            groups,
            scopes,
            expires: claims.get("exp").and_then(Value::as_u64),
            claims: Some(Arc::new(claims.clone())),
        })
    }
}

#[cfg(test)]
mod tests;
