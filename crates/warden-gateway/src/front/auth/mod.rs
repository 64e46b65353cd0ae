//! Who an HTTP request acts for (G1): a bearer API key (`[[caller]] api_key_env`),
//! a bearer JWT (`[auth]`: HS256 secret, or RS256/ES256 keys from a JWKS file, with
//! issuer, audience, expiry, not-before and issue time checked), an OAuth access
//! token of the `[oauth]` issuer ([`oauth`]: a JWT checked against the issuer's
//! published keys, or an opaque token it introspects), or, with
//! `gateway.anonymous_caller`, no credential at all. Anything else is refused before
//! the pipeline sees it ([`refused`] says how).
//!
//! A JWT goes to the verifier of the issuer it names: `[oauth]`'s when its `iss`
//! is that issuer, `[auth]`'s otherwise. With only `[oauth]` configured, a token
//! from any other issuer is refused as one from an issuer this gateway does not trust.

pub mod oauth;
pub mod refused;

pub use refused::{Challenge, Refused};

use crate::config::Config;
use jsonwebtoken::{jwk::JwkSet, Algorithm, DecodingKey, Validation};
use oauth::ResourceServer;
use serde_json::Value;
use std::sync::{Arc, RwLock};
use warden_core::Caller;

/// Who a request is from, and what its OAuth token (if it showed one) grants.
#[derive(Debug, Clone)]
pub struct Identity {
    pub caller: Caller,
    /// The scopes of an `[oauth]` token; `None` for API keys, `[auth]` JWTs and
    /// the anonymous caller, which carry none (rules alone decide for them).
    pub scopes: Option<Vec<String>>,
    /// The `[oauth]` token itself, for token exchange on the caller's behalf
    /// (never sent to an upstream).
    pub token: Option<Arc<str>>,
    /// When that token expires, seconds since the epoch.
    pub expires: Option<u64>,
    /// The request showed no credential (`gateway.anonymous_caller`): every
    /// such client is the same caller, told apart only by its address.
    pub anonymous: bool,
    /// The verified token's claims (`[auth]` JWT or `[oauth]` token), for
    /// `caller.claims` (X10); `None` for API keys and the anonymous caller.
    pub claims: Option<Arc<serde_json::Map<String, Value>>>,
}

impl Identity {
    fn plain(caller: Caller, anonymous: bool) -> Identity {
        Identity {
            caller,
            scopes: None,
            token: None,
            expires: None,
            anonymous,
            claims: None,
        }
    }
}

/// What the quick, local part of identification found.
enum Local<'a> {
    Caller(Caller),
    /// An `[auth]` JWT's caller, and the token's claims.
    Jwt(Caller, serde_json::Map<String, Value>),
    /// No credential, and `gateway.anonymous_caller` lets such requests in.
    Anonymous(Caller),
    /// A token for the `[oauth]` issuer to check: a JWT, or opaque.
    OAuth {
        token: &'a str,
        jwt: bool,
    },
}

/// Clock skew tolerated between the token issuer and this gateway, in seconds. One
/// value for `exp`, `nbf` and `iat` alike, so a token is never judged by one clock
/// at its start and another at its end.
const LEEWAY_SECS: u64 = 30;

/// The credentials the HTTP front accepts, loaded at start-up; the callers'
/// keys and groups are read again when a reload changes the configuration.
pub struct Auth {
    callers: RwLock<Arc<Callers>>,
    jwt: Option<Jwt>,
    oauth: Option<Arc<ResourceServer>>,
}

/// The `[[caller]]` keys and the anonymous caller of one configuration.
struct Callers {
    /// The SHA-256 of the configuration file they were read from.
    digest: String,
    keys: Vec<(Vec<u8>, Caller)>,
    anonymous: Option<Caller>,
}

impl Callers {
    fn of(config: &Config) -> Callers {
        let caller = |name: &str| Caller {
            name: name.to_owned(),
            groups: config.groups_of(name),
        };
        let mut keys = Vec::new();
        for c in &config.caller {
            let Some(var) = &c.api_key_env else { continue };
            match std::env::var(var) {
                Ok(key) if !key.is_empty() => keys.push((key.into_bytes(), caller(&c.name))),
                _ => {
                    tracing::warn!(caller = %c.name, "api_key_env = '{var}' is not set: this caller cannot authenticate over HTTP")
                }
            }
        }
        Callers {
            digest: config.digest().to_owned(),
            keys,
            anonymous: config.gateway.anonymous_caller.as_deref().map(caller),
        }
    }
}

struct Jwt {
    keys: Vec<(Option<String>, Algorithm, DecodingKey)>,
    issuer: Option<String>,
    audience: Option<String>,
    claim: String,
}

impl Auth {
    /// Reads keys from the environment and the JWKS file the config names;
    /// `front_url` is the front's own URL (the `[oauth]` resource unless configured).
    pub fn from_config(config: &Config, front_url: &str) -> Result<Auth, String> {
        let a = &config.auth;
        let mut jwt_keys = Vec::new();
        if let Some(var) = &a.jwt_secret_env {
            let secret = std::env::var(var)
                .ok()
                .filter(|s| !s.is_empty())
                .ok_or_else(|| format!("auth.jwt_secret_env: the environment variable '{var}' is not set; export the HS256 secret in it"))?;
            jwt_keys.push((
                None,
                Algorithm::HS256,
                DecodingKey::from_secret(secret.as_bytes()),
            ));
        }
        if let Some(path) = &a.jwks {
            jwt_keys = load_jwks(&config.resolve_path(path))?;
        }
        let jwt = (!jwt_keys.is_empty()).then(|| Jwt {
            keys: jwt_keys,
            issuer: a.issuer.clone(),
            audience: a.audience.clone(),
            claim: a.caller_claim.clone().unwrap_or_else(|| "sub".to_owned()),
        });
        Ok(Auth {
            callers: RwLock::new(Arc::new(Callers::of(config))),
            jwt,
            oauth: ResourceServer::from_config(config, front_url)?,
        })
    }

    /// The callers of `config`: those read before, unless a reload changed it.
    fn callers(&self, config: &Config) -> Arc<Callers> {
        let now = self
            .callers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if now.digest == config.digest() {
            return now;
        }
        let fresh = Arc::new(Callers::of(config));
        *self.callers.write().unwrap_or_else(|e| e.into_inner()) = fresh.clone();
        fresh
    }

    /// The `[oauth]` resource server, when one is configured.
    pub fn oauth(&self) -> Option<&Arc<ResourceServer>> {
        self.oauth.as_ref()
    }

    /// What a 401 adds to its challenge under `[oauth]`.
    pub fn challenge(&self) -> Option<Challenge> {
        self.oauth.as_ref().map(|o| o.challenge())
    }

    /// Who a request's `Authorization` header identifies.
    pub async fn identify(
        &self,
        authorization: Option<&[u8]>,
        config: &Config,
    ) -> Result<Identity, Refused> {
        let (token, jwt) = match self.local(authorization, config)? {
            Local::Caller(c) => return Ok(Identity::plain(c, false)),
            Local::Jwt(c, claims) => {
                return Ok(Identity {
                    claims: Some(Arc::new(claims)),
                    ..Identity::plain(c, false)
                })
            }
            Local::Anonymous(c) => return Ok(Identity::plain(c, true)),
            Local::OAuth { token, jwt } => (token, jwt),
        };
        let Some(rs) = &self.oauth else {
            return Err(Refused::Invalid);
        };
        let v = if jwt {
            rs.verify_jwt(token).await?
        } else {
            rs.introspect(token).await?
        };
        let mut groups = config.groups_of(&v.name);
        for g in v.groups {
            if !groups.contains(&g) {
                groups.push(g);
            }
        }
        Ok(Identity {
            caller: Caller {
                name: v.name,
                groups,
            },
            scopes: Some(v.scopes),
            token: Some(Arc::from(token)),
            expires: v.expires,
            anonymous: false,
            claims: v.claims,
        })
    }

    /// Keys, `[auth]` JWTs and the anonymous caller, decided here and now; a
    /// token for the `[oauth]` issuer is handed back to be checked with it.
    fn local<'a>(
        &self,
        authorization: Option<&'a [u8]>,
        config: &Config,
    ) -> Result<Local<'a>, Refused> {
        let callers = self.callers(config);
        let Some(header) = authorization else {
            return callers
                .anonymous
                .clone()
                .map(Local::Anonymous)
                .ok_or(Refused::Missing);
        };
        let header = std::str::from_utf8(header).map_err(|_| Refused::Invalid)?;
        let (scheme, credential) = header.trim().split_once(' ').ok_or(Refused::NotBearer)?;
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Err(Refused::NotBearer);
        }
        let credential = credential.trim().as_bytes();
        // Every key is compared in full, so timing does not tell which one came close.
        let mut found = None;
        for (key, caller) in &callers.keys {
            if constant_time_eq(key, credential) && found.is_none() {
                found = Some(caller);
            }
        }
        if let Some(caller) = found {
            return Ok(Local::Caller(caller.clone()));
        }
        let token = std::str::from_utf8(credential).map_err(|_| Refused::Invalid)?;
        let is_jwt = credential.iter().filter(|b| **b == b'.').count() == 2;
        if let Some(rs) = &self.oauth {
            if !is_jwt || rs.claims_issuer(token) {
                return Ok(Local::OAuth { token, jwt: is_jwt });
            }
        }
        match &self.jwt {
            Some(jwt) if is_jwt => {
                let (name, claims) = jwt.verify(token)?;
                let caller = Caller {
                    groups: config.groups_of(&name),
                    name,
                };
                Ok(Local::Jwt(caller, claims))
            }
            // A JWT naming an issuer `[oauth]` does not trust, and no `[auth]` to try.
            None if is_jwt && self.oauth.is_some() => Err(match oauth::unverified_issuer(token) {
                Some(_) => Refused::WrongIssuer,
                None => Refused::NoIssuer,
            }),
            _ => Err(Refused::Invalid),
        }
    }

    /// Whether requests without credentials are let in (auth off), and as whom.
    pub fn anonymous(&self) -> Option<Caller> {
        self.callers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .anonymous
            .clone()
    }
}

impl Jwt {
    /// The caller a token names, and its claims.
    fn verify(&self, token: &str) -> Result<(String, serde_json::Map<String, Value>), Refused> {
        let header = jsonwebtoken::decode_header(token).map_err(|_| Refused::Invalid)?;
        let key = self
            .keys
            .iter()
            .find(|(kid, alg, _)| {
                *alg == header.alg && (kid.is_none() || header.kid.is_none() || *kid == header.kid)
            })
            .ok_or(Refused::Invalid)?;
        let mut v = Validation::new(key.1);
        v.leeway = LEEWAY_SECS;
        // jsonwebtoken leaves `nbf` unchecked unless asked: without this, a token
        // minted to start tomorrow would work today.
        v.validate_nbf = true;
        // jsonwebtoken checks `aud` and `iss` only when the token carries them, so a
        // token that simply leaves them out would pass a configured audience or
        // issuer. What the operator configured must be present, not just not wrong.
        let mut required = vec!["exp"];
        match &self.audience {
            Some(aud) => {
                v.set_audience(&[aud]);
                required.push("aud");
            }
            None => v.validate_aud = false,
        }
        if let Some(iss) = &self.issuer {
            v.set_issuer(&[iss]);
            required.push("iss");
        }
        v.set_required_spec_claims(&required);
        let data = jsonwebtoken::decode::<serde_json::Map<String, Value>>(token, &key.2, &v)
            .map_err(|e| {
                use jsonwebtoken::errors::ErrorKind as K;
                match e.kind() {
                    K::ExpiredSignature => Refused::Expired,
                    K::ImmatureSignature => Refused::NotYetValid,
                    K::InvalidAudience => Refused::WrongAudience,
                    K::InvalidIssuer => Refused::WrongIssuer,
                    K::MissingRequiredClaim(c) if c == "aud" => Refused::NoAudience,
                    K::MissingRequiredClaim(c) if c == "iss" => Refused::NoIssuer,
                    _ => Refused::Invalid,
                }
            })?;
        check_issued_at(
            data.claims.get("iat"),
            jsonwebtoken::get_current_timestamp(),
        )?;
        match data.claims.get(&self.claim) {
            Some(Value::String(s)) if !s.is_empty() => Ok((s.clone(), data.claims)),
            _ => Err(Refused::NoCaller),
        }
    }
}

/// jsonwebtoken does not look at `iat`, so it is checked here. No issuer can have
/// signed a token later than now: an `iat` beyond the leeway means a wrong clock or
/// a made-up date, and the token's other times cannot be trusted either. `iat` is
/// optional (RFC 7519), but one that is present must be a NumericDate; an unreadable
/// one is refused like any other malformed credential.
pub(crate) fn check_issued_at(iat: Option<&Value>, now: u64) -> Result<(), Refused> {
    let Some(iat) = iat else { return Ok(()) };
    let iat = iat
        .as_f64()
        .filter(|t| t.is_finite())
        .ok_or(Refused::Invalid)?;
    if iat > (now + LEEWAY_SECS) as f64 {
        return Err(Refused::IssuedInFuture);
    }
    Ok(())
}

fn load_jwks(
    path: &std::path::Path,
) -> Result<Vec<(Option<String>, Algorithm, DecodingKey)>, String> {
    let shown = path.display();
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("auth.jwks: cannot read {shown}: {e}"))?;
    let set: JwkSet = serde_json::from_str(&text)
        .map_err(|e| format!("auth.jwks: {shown} is not a JWKS document: {e}"))?;
    let mut keys = Vec::new();
    for (i, jwk) in set.keys.iter().enumerate() {
        let alg = match (&jwk.common.key_algorithm, &jwk.algorithm) {
            (Some(a), _) => Algorithm::from_str_lossy(&a.to_string()),
            (None, jsonwebtoken::jwk::AlgorithmParameters::RSA(_)) => Some(Algorithm::RS256),
            (None, jsonwebtoken::jwk::AlgorithmParameters::EllipticCurve(_)) => {
                Some(Algorithm::ES256)
            }
            _ => None,
        };
        let Some(alg) = alg.filter(|a| matches!(a, Algorithm::RS256 | Algorithm::ES256)) else {
            return Err(format!(
                "auth.jwks: key {i} in {shown} is not an RS256 or ES256 key"
            ));
        };
        let key = DecodingKey::from_jwk(jwk)
            .map_err(|e| format!("auth.jwks: key {i} in {shown} is not usable: {e}"))?;
        keys.push((jwk.common.key_id.clone(), alg, key));
    }
    if keys.is_empty() {
        return Err(format!("auth.jwks: {shown} holds no keys"));
    }
    Ok(keys)
}

trait FromStrLossy: Sized {
    fn from_str_lossy(s: &str) -> Option<Self>;
}

impl FromStrLossy for Algorithm {
    fn from_str_lossy(s: &str) -> Option<Self> {
        s.parse().ok()
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests;
