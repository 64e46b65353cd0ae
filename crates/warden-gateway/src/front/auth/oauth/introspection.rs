//! Opaque tokens checked at the issuer's introspection endpoint (RFC 7662), and
//! the bounds that keep a flood of made-up tokens from becoming a flood of
//! requests to the issuer under the gateway's own client credentials:
//!
//! - Answers are remembered by the token's SHA-256: an accepted token for at most
//!   [`INTROSPECTION_TTL`] (never past its expiry), a refused one for
//!   [`REFUSAL_TTL`]. The two are held apart, each up to [`ANSWERS_HELD`], so
//!   refusals of made-up tokens never push out the tokens of real clients; a full
//!   store drops its expired answers, then those expiring soonest, never all.
//! - A token with no answer held is asked about only while the rate allows
//!   (`oauth.introspection_rate` a second, as many at once after a quiet second)
//!   and with at most [`MAX_IN_FLIGHT`] requests at the issuer at a time. Beyond
//!   the rate it is refused as one that could not be checked (retry later), as
//!   when the issuer is down.

use super::{lock, now_secs, ResourceServer, Verified, LEEWAY_SECS};
use crate::front::auth::refused::Refused;
use crate::net::fetch::form;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long an answer that accepts a token is reused (never past its expiry).
pub const INTROSPECTION_TTL: Duration = Duration::from_secs(30);
/// How long an answer that refuses a token (inactive, another audience …) is reused.
pub const REFUSAL_TTL: Duration = Duration::from_secs(10);
/// Answers held at most, of each kind (accepting, refusing).
pub const ANSWERS_HELD: usize = 10_000;
/// Introspection requests at the issuer at once, at most.
pub const MAX_IN_FLIGHT: usize = 4;

/// An answer and until when it is reused.
type Answer = (Instant, Result<Verified, Refused>);

/// Answers by the token's SHA-256, bounded.
pub(super) struct Answers {
    held: HashMap<[u8; 32], Answer>,
    most: usize,
}

impl Answers {
    pub(super) fn new(most: usize) -> Answers {
        Answers {
            held: HashMap::new(),
            most,
        }
    }

    pub(super) fn get(&self, digest: &[u8; 32], now: Instant) -> Option<Result<Verified, Refused>> {
        self.held
            .get(digest)
            .filter(|(until, _)| now < *until)
            .map(|(_, answer)| answer.clone())
    }

    /// Keeps an answer; when full, expired answers go first, then those that
    /// would expire soonest, one by one.
    pub(super) fn put(&mut self, digest: [u8; 32], answer: Answer, now: Instant) {
        if self.held.len() >= self.most && !self.held.contains_key(&digest) {
            self.held.retain(|_, (until, _)| *until > now);
            while self.held.len() >= self.most {
                let soonest = self
                    .held
                    .iter()
                    .min_by_key(|(_, (u, _))| *u)
                    .map(|(k, _)| *k);
                let Some(soonest) = soonest else { break };
                self.held.remove(&soonest);
            }
        }
        self.held.insert(digest, answer);
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.held.len()
    }
}

/// A token bucket: `rate` a second, holding at most one second's worth.
pub(super) struct Bucket {
    rate: f64,
    left: f64,
    at: Instant,
}

impl Bucket {
    pub(super) fn new(rate: u32, now: Instant) -> Bucket {
        Bucket {
            rate: rate as f64,
            left: rate as f64,
            at: now,
        }
    }

    /// Takes one, if the rate allows now.
    pub(super) fn take(&mut self, now: Instant) -> bool {
        let earned = now.saturating_duration_since(self.at).as_secs_f64() * self.rate;
        self.left = (self.left + earned).min(self.rate);
        self.at = now;
        if self.left >= 1.0 {
            self.left -= 1.0;
            true
        } else {
            false
        }
    }
}

/// What the gateway holds for introspection: answers, the rate, the requests out.
pub(super) struct Introspector {
    accepted: Mutex<Answers>,
    refused: Mutex<Answers>,
    bucket: Mutex<Bucket>,
    rate: u32,
    in_flight: tokio::sync::Semaphore,
    /// Set while the rate refuses tokens, so that is logged once per spell.
    dry: AtomicBool,
}

impl Introspector {
    pub(super) fn new(rate: u32) -> Introspector {
        Introspector {
            accepted: Mutex::new(Answers::new(ANSWERS_HELD)),
            refused: Mutex::new(Answers::new(ANSWERS_HELD)),
            bucket: Mutex::new(Bucket::new(rate, Instant::now())),
            rate,
            in_flight: tokio::sync::Semaphore::new(MAX_IN_FLIGHT),
            dry: AtomicBool::new(false),
        }
    }

    fn known(&self, digest: &[u8; 32]) -> Option<Result<Verified, Refused>> {
        let now = Instant::now();
        lock(&self.accepted)
            .get(digest, now)
            .or_else(|| lock(&self.refused).get(digest, now))
    }

    fn remember(&self, digest: [u8; 32], verdict: &Result<Verified, Refused>) {
        let now = Instant::now();
        match verdict {
            Ok(v) => {
                let mut until = now + INTROSPECTION_TTL;
                if let Some(exp) = v.expires {
                    let left = exp.saturating_sub(now_secs());
                    until = until.min(now + Duration::from_secs(left));
                }
                lock(&self.accepted).put(digest, (until, verdict.clone()), now);
            }
            Err(_) => lock(&self.refused).put(digest, (now + REFUSAL_TTL, verdict.clone()), now),
        }
    }

    /// Leave to ask the issuer now: within the rate, one of the requests out.
    async fn admit(&self) -> Result<tokio::sync::SemaphorePermit<'_>, Refused> {
        if !lock(&self.bucket).take(Instant::now()) {
            if !self.dry.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    "token introspection is at oauth.introspection_rate ({} a second): opaque tokens the gateway holds no answer for are refused until the rate allows more",
                    self.rate
                );
            }
            return Err(Refused::Unchecked);
        }
        self.dry.store(false, Ordering::Relaxed);
        self.in_flight
            .acquire()
            .await
            .map_err(|_| Refused::Unchecked)
    }
}

impl ResourceServer {
    /// Checks an opaque token at the introspection endpoint (answers reused).
    pub async fn introspect(&self, token: &str) -> Result<Verified, Refused> {
        if !self.introspection {
            return Err(Refused::Invalid);
        }
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(answer) = self.introspector.known(&digest) {
            return answer;
        }
        let endpoint = match self.endpoints().await {
            Some(e) => e,
            None => return Err(Refused::Unchecked),
        };
        let Some(target) = &endpoint.introspection else {
            tracing::warn!(
                "the issuer's metadata names no introspection_endpoint: opaque tokens are refused"
            );
            return Err(Refused::Invalid);
        };
        let _out = self.introspector.admit().await?;
        // The same token may have been asked about while this one waited.
        if let Some(answer) = self.introspector.known(&digest) {
            return answer;
        }
        let answer = match self
            .post(
                target,
                form(&[("token", token), ("token_type_hint", "access_token")]),
            )
            .await
        {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!("token introspection failed: {e}");
                return Err(Refused::Unchecked);
            }
        };
        let verdict = self.introspected_identity(&answer);
        self.introspector.remember(digest, &verdict);
        verdict
    }

    fn introspected_identity(&self, answer: &Value) -> Result<Verified, Refused> {
        if answer.get("active") != Some(&Value::Bool(true)) {
            return Err(Refused::Inactive);
        }
        let claims = answer.as_object().ok_or(Refused::Invalid)?;
        if let Some(iss) = claims.get("iss") {
            if iss.as_str() != Some(self.issuer.as_str()) {
                return Err(Refused::WrongIssuer);
            }
        }
        // RFC 8707: a token for another resource is not for this one, however
        // active it is. An answer without `aud` leaves the binding to the issuer.
        if let Some(aud) = claims.get("aud") {
            let ok = match aud {
                Value::String(s) => *s == self.resource,
                Value::Array(a) => a.iter().any(|v| v.as_str() == Some(&self.resource)),
                _ => false,
            };
            if !ok {
                return Err(Refused::WrongAudience);
            }
        }
        let now = now_secs();
        if let Some(exp) = claims.get("exp").and_then(Value::as_f64) {
            if exp + (LEEWAY_SECS as f64) < now as f64 {
                return Err(Refused::Expired);
            }
        }
        if let Some(nbf) = claims.get("nbf").and_then(Value::as_f64) {
            if nbf > (now + LEEWAY_SECS) as f64 {
                return Err(Refused::NotYetValid);
            }
        }
        super::super::check_issued_at(claims.get("iat"), now)?;
        self.identity(claims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(n: u8) -> Result<Verified, Refused> {
        Ok(Verified {
            name: format!("c{n}"),
            groups: vec![],
            scopes: vec![],
            expires: None,
            claims: None,
        })
    }

    #[test]
    fn a_full_store_drops_what_expires_soonest_not_everything() {
        let now = Instant::now();
        let mut answers = Answers::new(3);
        for n in 1..=3u8 {
            answers.put(
                [n; 32],
                (now + Duration::from_secs(n as u64), verdict(n)),
                now,
            );
        }
        answers.put([4; 32], (now + Duration::from_secs(4), verdict(4)), now);
        assert_eq!(answers.len(), 3);
        assert_eq!(
            answers.get(&[1; 32], now),
            None,
            "the soonest to expire went"
        );
        for n in 2..=4u8 {
            assert_eq!(answers.get(&[n; 32], now), Some(verdict(n)));
        }
        // Expired answers are not given, and are the first to go.
        let later = now + Duration::from_secs(3);
        assert_eq!(answers.get(&[2; 32], later), None);
        answers.put([5; 32], (later + Duration::from_secs(9), verdict(5)), later);
        assert_eq!(answers.len(), 2);
        assert_eq!(answers.get(&[4; 32], later), Some(verdict(4)));
    }

    #[test]
    fn the_bucket_allows_its_rate_and_a_second_of_burst() {
        let start = Instant::now();
        let mut b = Bucket::new(5, start);
        assert_eq!((0..20).filter(|_| b.take(start)).count(), 5);
        let later = start + Duration::from_millis(400);
        assert_eq!((0..20).filter(|_| b.take(later)).count(), 2);
        // A long quiet spell earns no more than one second's worth.
        let much_later = later + Duration::from_secs(60);
        assert_eq!((0..20).filter(|_| b.take(much_later)).count(), 5);
    }
}
