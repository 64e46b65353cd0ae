//! Which credential the gateway presents to an HTTP upstream for a caller
//! (`[[upstream.credential]]`): the first entry whose callers match decides. A
//! static entry is a bearer token from the environment or a file, read at start;
//! an exchange entry trades the caller's own `[oauth]` token at the issuer for one
//! meant for this upstream (RFC 8693 token exchange) and keeps it, per token it
//! was exchanged from, until shortly before it expires. The caller's own token
//! never goes upstream.
//! A caller no entry matches gets the upstream's `bearer_token_env`, as before.
//!
//! What a call presented is named in its audit record by the entry's name, never
//! by the secret.

use crate::config::UpstreamConfig;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use warden_core::access::CallerSelector;
use warden_core::Caller;

/// An exchanged token and its lifetime in seconds, if the issuer said.
pub type Exchanged = Result<(String, Option<u64>), String>;

/// Token exchange at the `[oauth]` issuer (RFC 8693), as the gateway's own client.
pub trait TokenExchange: Send + Sync {
    fn exchange<'a>(
        &'a self,
        subject: &'a str,
        audience: &'a str,
        scope: Option<&'a str>,
    ) -> Pin<Box<dyn Future<Output = Exchanged> + Send + 'a>>;
}

/// How long an exchanged token is kept when the issuer gives no `expires_in`.
const UNSAID_LIFETIME: Duration = Duration::from_secs(60);
/// An exchanged token is renewed this long before it expires, so none expires
/// on its way upstream.
const RENEW_BEFORE: Duration = Duration::from_secs(30);

/// Exchanged tokens held at most (those expiring soonest go first when full).
const EXCHANGES_HELD: usize = 10_000;

/// (entry, SHA-256 of the caller's `[oauth]` token) → an exchanged token and when
/// to stop using it. Keyed by the token it was exchanged from, never by the
/// caller's name: an API-key caller or an `[auth]` JWT may carry the same name
/// as an OAuth subject, and must not be handed that subject's token.
type Exchanges = HashMap<(usize, [u8; 32]), (Arc<str>, Instant)>;

enum Source {
    /// A token read at start (`None`: its variable or file was empty or missing).
    Static(Option<Arc<str>>),
    Exchange {
        audience: String,
        scope: Option<String>,
    },
}

struct Entry {
    callers: Vec<CallerSelector>,
    name: String,
    source: Source,
}

/// The credential a call presents: its name (for the audit trail) and the token.
#[derive(Clone)]
pub struct Presented {
    pub name: String,
    pub token: Arc<str>,
}

impl std::fmt::Debug for Presented {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Presented")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// One upstream's per-caller credentials.
#[derive(Default)]
pub struct Credentials {
    entries: Vec<Entry>,
    exchanger: OnceLock<Arc<dyn TokenExchange>>,
    exchanged: Mutex<Exchanges>,
}

impl Credentials {
    /// Reads the static tokens an upstream's entries name (paths are resolved already).
    pub fn from_config(up: &UpstreamConfig) -> Credentials {
        let mut entries = Vec::new();
        for c in &up.credential {
            let callers = c
                .callers
                .iter()
                .filter_map(|s| CallerSelector::parse(s).ok())
                .collect();
            let (name, source) = if let Some(var) = &c.token_env {
                let token = std::env::var(var).ok().filter(|t| !t.trim().is_empty());
                if token.is_none() {
                    tracing::warn!(upstream = %up.name, "credential token_env = '{var}' is not set: calls of the callers it is for fail");
                }
                (
                    var.clone(),
                    Source::Static(token.map(|t| Arc::from(t.trim()))),
                )
            } else if let Some(path) = &c.token_file {
                let token = std::fs::read_to_string(path)
                    .map_err(|e| tracing::warn!(upstream = %up.name, "credential token_file {} cannot be read ({e}): calls of the callers it is for fail", path.display()))
                    .ok()
                    .filter(|t| !t.trim().is_empty());
                let name = path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                (name, Source::Static(token.map(|t| Arc::from(t.trim()))))
            } else if let Some(x) = &c.exchange {
                (
                    format!("exchange:{}", x.audience),
                    Source::Exchange {
                        audience: x.audience.clone(),
                        scope: x.scope.clone(),
                    },
                )
            } else {
                continue;
            };
            entries.push(Entry {
                callers,
                name: c.name.clone().unwrap_or(name),
                source,
            });
        }
        Credentials {
            entries,
            ..Default::default()
        }
    }

    /// Whether any entry trades tokens at the issuer.
    pub fn exchanges(&self) -> bool {
        self.entries
            .iter()
            .any(|e| matches!(e.source, Source::Exchange { .. }))
    }

    /// Where exchanges happen; set once by the HTTP front.
    pub fn set_exchanger(&self, x: Arc<dyn TokenExchange>) {
        let _ = self.exchanger.set(x);
    }

    /// The credential for `caller`: `Ok(None)` when no entry is for it (the
    /// upstream's own token applies). `subject` is the caller's `[oauth]` token.
    pub async fn for_caller(
        &self,
        caller: Option<&Caller>,
        subject: Option<&str>,
    ) -> Result<Option<Presented>, String> {
        let Some(caller) = caller else {
            return Ok(None);
        };
        let Some((i, entry)) = self
            .entries
            .iter()
            .enumerate()
            .find(|(_, e)| e.callers.iter().any(|s| s.matches(caller)))
        else {
            return Ok(None);
        };
        let token = match &entry.source {
            Source::Static(Some(t)) => t.clone(),
            Source::Static(None) => {
                return Err(format!(
                    "the credential '{}' has no token (its variable or file is empty or missing)",
                    entry.name
                ))
            }
            Source::Exchange { audience, scope } => {
                self.exchange(i, subject, audience, scope.as_deref())
                    .await?
            }
        };
        Ok(Some(Presented {
            name: entry.name.clone(),
            token,
        }))
    }

    async fn exchange(
        &self,
        i: usize,
        subject: Option<&str>,
        audience: &str,
        scope: Option<&str>,
    ) -> Result<Arc<str>, String> {
        // Checked before the cache: a caller who showed no OAuth token gets no
        // exchanged one, whoever held its name before.
        let Some(subject) = subject else {
            return Err("token exchange needs the caller's OAuth token, and this caller showed none (an API key, an [auth] JWT, a local caller)".into());
        };
        let key = (i, Sha256::digest(subject.as_bytes()).into());
        if let Some((token, until)) = self.lock().get(&key) {
            if Instant::now() < *until {
                return Ok(token.clone());
            }
        }
        let Some(x) = self.exchanger.get() else {
            return Err("token exchange needs [oauth] on the HTTP front".into());
        };
        let (token, lifetime) = x.exchange(subject, audience, scope).await?;
        let lifetime = lifetime.map_or(UNSAID_LIFETIME, Duration::from_secs);
        let until = Instant::now() + lifetime.saturating_sub(RENEW_BEFORE);
        let token: Arc<str> = Arc::from(token);
        let mut cache = self.lock();
        make_room(&mut cache, EXCHANGES_HELD);
        cache.insert(key, (token.clone(), until));
        Ok(token)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Exchanges> {
        self.exchanged.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Below `held` entries: expired ones go first (tokens of callers gone for good,
/// tokens refreshed since), then those expiring soonest, one by one.
fn make_room(cache: &mut Exchanges, held: usize) {
    if cache.len() < held {
        return;
    }
    let now = Instant::now();
    cache.retain(|_, (_, until)| *until > now);
    while cache.len() >= held {
        let Some(soonest) = cache.iter().min_by_key(|(_, (_, u))| *u).map(|(k, _)| *k) else {
            break;
        };
        cache.remove(&soonest);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn credentials(entries: &str) -> Credentials {
        let c = Config::parse(
            &format!("[oauth]\nissuer = \"https://id.example\"\nclient_id = \"gw\"\nclient_secret_env = \"GW\"\n[[upstream]]\nname = \"u\"\nurl = \"http://127.0.0.1:1/mcp\"\n{entries}"),
            "t.toml",
        )
        .unwrap();
        Credentials::from_config(&c.upstream[0])
    }

    fn caller(name: &str, groups: &[&str]) -> Caller {
        Caller {
            name: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        }
    }

    #[tokio::test]
    async fn the_first_entry_for_the_caller_decides() {
        std::env::set_var("WARDEN_CRED_TEST_ALICE", "alice-secret");
        std::env::remove_var("WARDEN_CRED_TEST_UNSET");
        let c = credentials(
            "[[upstream.credential]]\ncallers = [\"alice\"]\ntoken_env = \"WARDEN_CRED_TEST_ALICE\"\nname = \"alice-key\"\n\
             [[upstream.credential]]\ncallers = [\"group:ops\"]\ntoken_env = \"WARDEN_CRED_TEST_UNSET\"\n\
             [[upstream.credential]]\ncallers = [\"group:x\"]\nexchange = { audience = \"https://u.example\" }\n",
        );
        let p = c
            .for_caller(Some(&caller("alice", &["ops"])), None)
            .await
            .unwrap()
            .unwrap();
        assert_eq!((p.name.as_str(), &*p.token), ("alice-key", "alice-secret"));
        // The secret is never in what is logged of a credential.
        assert!(!format!("{p:?}").contains("alice-secret"));
        assert_eq!(
            c.for_caller(Some(&caller("bob", &["ops"])), None)
                .await
                .unwrap_err(),
            "the credential 'WARDEN_CRED_TEST_UNSET' has no token (its variable or file is empty or missing)"
        );
        assert!(c
            .for_caller(Some(&caller("carol", &[])), None)
            .await
            .unwrap()
            .is_none());
        assert!(c.for_caller(None, None).await.unwrap().is_none());
        // An exchange needs the caller's OAuth token.
        assert!(c
            .for_caller(Some(&caller("dave", &["x"])), None)
            .await
            .unwrap_err()
            .starts_with("token exchange needs the caller's OAuth token"));
    }
}

#[cfg(test)]
mod exchange_tests {
    use super::*;
    use crate::config::Config;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// An issuer that names each exchanged token after the token it came from.
    #[derive(Default)]
    struct Issuer(AtomicUsize);

    impl TokenExchange for Issuer {
        fn exchange<'a>(
            &'a self,
            subject: &'a str,
            _audience: &'a str,
            _scope: Option<&'a str>,
        ) -> Pin<Box<dyn Future<Output = Exchanged> + Send + 'a>> {
            let n = self.0.fetch_add(1, Ordering::SeqCst) + 1;
            Box::pin(async move { Ok((format!("for-{subject}-{n}"), Some(300))) })
        }
    }

    #[tokio::test]
    async fn an_exchanged_token_serves_only_the_token_it_came_from() {
        let c = Config::parse(
            "[oauth]\nissuer = \"https://id.example\"\nclient_id = \"gw\"\nclient_secret_env = \"GW\"\n[[upstream]]\nname = \"u\"\nurl = \"http://127.0.0.1:1/mcp\"\n\
             [[upstream.credential]]\ncallers = [\"*\"]\nexchange = { audience = \"https://u.example\" }\n",
            "t.toml",
        )
        .unwrap();
        let creds = Credentials::from_config(&c.upstream[0]);
        let issuer = Arc::new(Issuer::default());
        creds.set_exchanger(issuer.clone());
        let carol = Caller {
            name: "carol".into(),
            groups: vec![],
        };
        let token = |subject| {
            let creds = &creds;
            let carol = &carol;
            async move {
                creds
                    .for_caller(Some(carol), subject)
                    .await
                    .map(|p| p.unwrap().token.to_string())
            }
        };
        assert_eq!(token(Some("oauth-1")).await.unwrap(), "for-oauth-1-1");
        assert_eq!(token(Some("oauth-1")).await.unwrap(), "for-oauth-1-1");
        // Another `carol` without an OAuth token (an API key, an [auth] JWT, a
        // local caller) is refused, not handed the first carol's token.
        assert!(token(None)
            .await
            .unwrap_err()
            .starts_with("token exchange needs the caller's OAuth token"));
        // A token of its own is exchanged for itself.
        assert_eq!(token(Some("oauth-2")).await.unwrap(), "for-oauth-2-2");
        assert_eq!(issuer.0.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_full_cache_drops_what_expires_soonest_not_everything() {
        let now = Instant::now();
        let mut cache = Exchanges::new();
        for n in 0..4u8 {
            let until = now + Duration::from_secs(10 * (n as u64 + 1));
            cache.insert((0, [n; 32]), (Arc::from("t"), until));
        }
        cache.insert(
            (0, [9; 32]),
            (Arc::from("gone"), now - Duration::from_secs(1)),
        );
        make_room(&mut cache, 4);
        let mut left: Vec<u8> = cache.keys().map(|k| k.1[0]).collect();
        left.sort();
        assert_eq!(left, [1, 2, 3]);
    }
}
