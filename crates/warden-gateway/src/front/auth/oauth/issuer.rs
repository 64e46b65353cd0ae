//! Talking to the issuer: its metadata (RFC 8414, then OpenID Connect
//! discovery), its signing keys fetched, cached, refreshed at a bounded rate and
//! checked, token exchange (RFC 8693) and introspection requests.

use super::{lock, Endpoints, Key, Probe, ResourceServer, ACCEPTED, MAX_DOCUMENT_BYTES, MAX_KEYS};
use crate::net::fetch::{form, Exchange, FetchError};
use crate::net::target::HttpTarget;
use hyper::{Method, StatusCode};
use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, DecodingKey};
use serde_json::Value;
use std::sync::Arc;
use std::time::Instant;

impl ResourceServer {
    pub(super) fn keys(&self) -> (Arc<Vec<Key>>, u64) {
        let st = lock(&self.state);
        (st.keys.clone(), st.generation)
    }

    /// Keys older than `jwks_max_age` are fetched again, without holding up the
    /// request that noticed (the rate limit applies). Every JWT request looks,
    /// whether its token is remembered or checked now.
    pub(super) fn stale_check(self: &Arc<Self>) {
        let (stale, generation) = {
            let st = lock(&self.state);
            (
                st.fetched.is_some_and(|t| t.elapsed() > self.max_age),
                st.generation,
            )
        };
        if stale {
            let me = self.clone();
            tokio::spawn(async move {
                me.refresh(generation).await;
            });
        }
    }

    /// Fetches metadata (if not held) and keys, unless a fetch started less than
    /// `jwks_min_interval` ago. `seen` is the generation the caller looked at: if a
    /// fetch succeeded since, there is nothing to do. Whether new keys are held.
    pub(super) async fn refresh(&self, seen: u64) -> bool {
        let _one = self.fetching.lock().await;
        {
            let mut st = lock(&self.state);
            if st.generation != seen {
                return true;
            }
            if st.last_try.is_some_and(|t| t.elapsed() < self.min_interval) {
                return false;
            }
            st.last_try = Some(Instant::now());
        }
        match self.fetch_keys().await {
            Ok((endpoints, keys)) => {
                let mut st = lock(&self.state);
                tracing::info!(issuer = %self.issuer, keys = keys.len(), "fetched the issuer's signing keys");
                st.endpoints = Some(endpoints);
                st.keys = Arc::new(keys);
                st.fetched = Some(Instant::now());
                st.generation += 1;
                true
            }
            Err(e) => {
                tracing::warn!(issuer = %self.issuer, "fetching the issuer's signing keys failed; the keys held before stay in use: {}", e.message());
                false
            }
        }
    }

    /// The issuer's endpoints, discovered now if they are not known yet.
    pub(super) async fn endpoints(&self) -> Option<Arc<Endpoints>> {
        if let Some(e) = lock(&self.state).endpoints.clone() {
            return Some(e);
        }
        let generation = lock(&self.state).generation;
        self.refresh(generation).await;
        lock(&self.state).endpoints.clone()
    }

    /// Asks the issuer for its metadata and keys now (start-up, `check`).
    pub async fn probe(&self) -> Probe {
        let _one = self.fetching.lock().await;
        lock(&self.state).last_try = Some(Instant::now());
        match self.fetch_keys().await {
            Ok((endpoints, keys)) => {
                let mut st = lock(&self.state);
                st.endpoints = Some(endpoints);
                st.keys = Arc::new(keys);
                st.fetched = Some(Instant::now());
                st.generation += 1;
                Probe::Ready
            }
            Err(e) => e,
        }
    }

    pub(super) async fn fetch_keys(&self) -> Result<(Arc<Endpoints>, Vec<Key>), Probe> {
        let held = lock(&self.state).endpoints.clone();
        let endpoints = match held {
            Some(e) => e,
            None => Arc::new(self.discover().await?),
        };
        let keys = match &endpoints.jwks {
            Some(jwks) => {
                let doc = self
                    .get(jwks)
                    .await
                    .map_err(|e| e.at("the key set (jwks_uri)"))?;
                parse_keys(&doc).map_err(Probe::Broken)?
            }
            None => Vec::new(),
        };
        Ok((endpoints, keys))
    }

    /// RFC 8414 metadata first, then OpenID Connect discovery; the document must
    /// name this issuer exactly (RFC 8414 §3.3).
    pub(super) async fn discover(&self) -> Result<Endpoints, Probe> {
        let (host, port, authority, path) = self.issuer_target.target();
        let _ = (host, port);
        let scheme = if self.issuer_target.is_tls() {
            "https"
        } else {
            "http"
        };
        let path = path.trim_end_matches('/');
        let urls = [
            format!("{scheme}://{authority}/.well-known/oauth-authorization-server{path}"),
            format!("{scheme}://{authority}{path}/.well-known/openid-configuration"),
        ];
        let mut last = Probe::Unreachable("no metadata".into());
        for url in &urls {
            let target =
                HttpTarget::parse(url, self.timeout.as_millis() as u64).map_err(Probe::Broken)?;
            match self.get(&target).await {
                Ok(doc) => return self.endpoints_from(&doc),
                Err(e @ Fetched::Untrusted(_)) => return Err(e.at("the issuer's metadata")),
                Err(e) => last = e.at(&format!("the issuer's metadata ({url})")),
            }
        }
        Err(last)
    }

    pub(super) fn endpoints_from(&self, doc: &Value) -> Result<Endpoints, Probe> {
        if doc.get("issuer").and_then(Value::as_str) != Some(self.issuer.as_str()) {
            return Err(Probe::Broken(format!(
                "the metadata at {} names another issuer ({}); oauth.issuer must be exactly the issuer identifier it publishes",
                self.issuer,
                crate::logged::logged(&doc.get("issuer").map(Value::to_string).unwrap_or_else(|| "none".into()))
            )));
        }
        let endpoint = |key: &str| -> Result<Option<HttpTarget>, Probe> {
            let Some(url) = doc.get(key).and_then(Value::as_str) else {
                return Ok(None);
            };
            let t = HttpTarget::parse(url, self.timeout.as_millis() as u64)
                .map_err(|e| Probe::Broken(format!("the issuer's {key}: {e}")))?;
            // http only from an http (so loopback) issuer, and only to loopback.
            let plain_ok = !self.issuer_target.is_tls() && crate::config::loopback_url(&t);
            if !t.is_tls() && !plain_ok {
                return Err(Probe::Broken(format!(
                    "the issuer's {key} '{}' is plain http: keys and tokens travel over https only",
                    crate::logged::logged(url)
                )));
            }
            Ok(Some(t))
        };
        Ok(Endpoints {
            jwks: endpoint("jwks_uri")?,
            introspection: endpoint("introspection_endpoint")?,
            token: endpoint("token_endpoint")?,
            authorization: endpoint("authorization_endpoint")?,
        })
    }

    /// For the console's login (O9): the authorization endpoint a browser is
    /// sent to, and the token endpoint its code is redeemed at (with the
    /// gateway's client credentials, [`ResourceServer::post`]).
    pub async fn login_endpoints(&self) -> Option<(HttpTarget, HttpTarget)> {
        let e = self.endpoints().await?;
        Some((e.authorization.clone()?, e.token.clone()?))
    }

    /// The token endpoint and the client credentials, for token exchange.
    pub async fn token_endpoint(&self) -> Option<(HttpTarget, String)> {
        let e = self.endpoints().await?;
        Some((e.token.clone()?, self.client_auth.clone()?))
    }

    /// POSTs a form to one of the issuer's endpoints with the gateway's client
    /// credentials; the JSON answer of a 2xx.
    pub async fn post(&self, target: &HttpTarget, body: String) -> Result<Value, String> {
        let (status, bytes) = Exchange {
            target,
            tls: self.tls.as_ref(),
            method: Method::POST,
            form: Some(body),
            authorization: self.client_auth.clone(),
            timeout: self.timeout,
            max_bytes: MAX_DOCUMENT_BYTES,
        }
        .send()
        .await
        .map_err(|e| e.to_string())?;
        let v: Value = serde_json::from_slice(&bytes)
            .map_err(|_| format!("answered HTTP {status} with a body that is not JSON"))?;
        if !status.is_success() {
            let error = v.get("error").and_then(Value::as_str).unwrap_or("?");
            return Err(format!(
                "answered HTTP {status} ({})",
                crate::logged::logged(error)
            ));
        }
        Ok(v)
    }

    pub(super) async fn get(&self, target: &HttpTarget) -> Result<Value, Fetched> {
        let (status, bytes) = Exchange {
            target,
            tls: self.tls.as_ref(),
            method: Method::GET,
            form: None,
            authorization: None,
            timeout: self.timeout,
            max_bytes: MAX_DOCUMENT_BYTES,
        }
        .send()
        .await
        .map_err(|e| match e {
            FetchError::Untrusted(m) => Fetched::Untrusted(m),
            FetchError::TooLarge(n) => Fetched::Bad(format!("is larger than {n} bytes")),
            FetchError::Unreachable(m) => Fetched::Down(m),
        })?;
        if status != StatusCode::OK {
            return Err(Fetched::Down(format!("answered HTTP {status}")));
        }
        let v: Value =
            serde_json::from_slice(&bytes).map_err(|_| Fetched::Bad("is not JSON".into()))?;
        if !v.is_object() {
            return Err(Fetched::Bad("is not a JSON object".into()));
        }
        Ok(v)
    }
}

impl crate::upstream::credential::TokenExchange for ResourceServer {
    /// RFC 8693: the caller's token as the subject, the upstream as the audience
    /// (and the resource, RFC 8707), the gateway authenticated as its own client.
    fn exchange<'a>(
        &'a self,
        subject: &'a str,
        audience: &'a str,
        scope: Option<&'a str>,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = crate::upstream::credential::Exchanged> + Send + 'a>,
    > {
        Box::pin(async move {
            const ACCESS_TOKEN: &str = "urn:ietf:params:oauth:token-type:access_token";
            let (endpoint, _) = self.token_endpoint().await.ok_or(
                "the issuer's token endpoint is not known (issuer unreachable, or no client_id)",
            )?;
            let mut pairs = vec![
                (
                    "grant_type",
                    "urn:ietf:params:oauth:grant-type:token-exchange",
                ),
                ("subject_token", subject),
                ("subject_token_type", ACCESS_TOKEN),
                ("requested_token_type", ACCESS_TOKEN),
                ("audience", audience),
                ("resource", audience),
            ];
            if let Some(scope) = scope {
                pairs.push(("scope", scope));
            }
            let answer = self
                .post(&endpoint, form(&pairs))
                .await
                .map_err(|e| format!("token exchange at the issuer failed: {e}"))?;
            let token = answer
                .get("access_token")
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty())
                .ok_or("the issuer's token exchange answer has no access_token")?;
            Ok((
                token.to_owned(),
                answer.get("expires_in").and_then(Value::as_u64),
            ))
        })
    }
}

/// How a GET from the issuer failed.
pub(super) enum Fetched {
    Down(String),
    Untrusted(String),
    Bad(String),
}

impl Fetched {
    pub(super) fn at(self, what: &str) -> Probe {
        match self {
            Fetched::Down(m) => Probe::Unreachable(format!("{what}: {m}")),
            Fetched::Untrusted(m) => Probe::Broken(format!(
                "{what}: the issuer's certificate is not trusted ({m}); name its CA in oauth.tls_ca_file"
            )),
            Fetched::Bad(m) => Probe::Unreachable(format!("{what} {m}")),
        }
    }
}

impl Probe {
    pub fn message(&self) -> &str {
        match self {
            Probe::Ready => "ready",
            Probe::Unreachable(m) | Probe::Broken(m) => m,
        }
    }
}

pub(super) fn same_kid(k: &Key, kid: Option<&str>) -> bool {
    kid.is_some() && k.kid.as_deref() == kid
}

/// The key a token names: its `kid` (or, without one, the first key for its
/// algorithm), published for exactly the token's algorithm.
pub(super) fn pick(keys: &[Key], kid: Option<&str>, alg: Algorithm) -> Option<usize> {
    keys.iter()
        .position(|k| k.alg == alg && (kid.is_none() || k.kid.as_deref() == kid))
}

/// Whether a key of this type (and curve) is one `alg` signs with (RFC 7518
/// §3): an `alg` the key's type does not fit could never verify a token, and
/// names no issuer key (a symmetric key labelled `RS256`, a P-384 key labelled
/// `ES256`).
fn signs_with(alg: Algorithm, key: &jsonwebtoken::jwk::AlgorithmParameters) -> bool {
    use jsonwebtoken::jwk::{AlgorithmParameters as P, EllipticCurve as C};
    use Algorithm::*;
    match key {
        P::RSA(_) => matches!(alg, RS256 | RS384 | RS512 | PS256 | PS384 | PS512),
        P::EllipticCurve(k) => matches!((alg, &k.curve), (ES256, C::P256) | (ES384, C::P384)),
        P::OctetKeyPair(k) => alg == EdDSA && k.curve == C::Ed25519,
        P::OctetKey(_) => false,
    }
}

/// The signing keys of a JWKS document. Keys this gateway cannot use (encryption
/// keys, symmetric keys, unknown types, keys labelled with an algorithm their type
/// does not sign with) are skipped; more than [`MAX_KEYS`] is refused.
pub(super) fn parse_keys(doc: &Value) -> Result<Vec<Key>, String> {
    let list = doc
        .get("keys")
        .and_then(Value::as_array)
        .ok_or("the key set has no \"keys\" list")?;
    if list.len() > MAX_KEYS {
        return Err(format!(
            "the key set holds {} keys, more than the {MAX_KEYS} this gateway takes",
            list.len()
        ));
    }
    let mut keys = Vec::new();
    for raw in list {
        if raw.get("use").and_then(Value::as_str) == Some("enc") {
            continue;
        }
        let Ok(jwk) = serde_json::from_value::<Jwk>(raw.clone()) else {
            continue;
        };
        let alg = match (&jwk.common.key_algorithm, &jwk.algorithm) {
            (Some(a), _) => a.to_string().parse::<Algorithm>().ok(),
            (None, jsonwebtoken::jwk::AlgorithmParameters::RSA(_)) => Some(Algorithm::RS256),
            (None, jsonwebtoken::jwk::AlgorithmParameters::EllipticCurve(p)) => match p.curve {
                jsonwebtoken::jwk::EllipticCurve::P256 => Some(Algorithm::ES256),
                jsonwebtoken::jwk::EllipticCurve::P384 => Some(Algorithm::ES384),
                _ => None,
            },
            (None, jsonwebtoken::jwk::AlgorithmParameters::OctetKeyPair(_)) => {
                Some(Algorithm::EdDSA)
            }
            _ => None,
        };
        let Some(alg) = alg.filter(|a| ACCEPTED.contains(a) && signs_with(*a, &jwk.algorithm))
        else {
            continue;
        };
        let Ok(key) = DecodingKey::from_jwk(&jwk) else {
            continue;
        };
        keys.push(Key {
            kid: jwk.common.key_id.clone(),
            alg,
            key,
        });
    }
    Ok(keys)
}
