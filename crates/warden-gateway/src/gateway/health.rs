//! Whether this gateway is alive and ready for traffic, as `/healthz` and
//! `/readyz` tell load balancers and Kubernetes.
//!
//! Alive: the process serves (whoever can ask is answered). Ready: every
//! upstream has listed its tools and runs, the store (if any) answers a trivial
//! query, and the gateway is not draining. A probe that finds the upstreams never
//! started starts them (the HTTP front otherwise starts them at the first
//! `initialize`, which no client sends a replica that is not ready yet).
//!
//! What a failed check says is generic on purpose: the endpoints need no
//! credentials, so no upstream name, path, URL or error text is given; the log
//! has those.

use super::Gateway;
use crate::texts;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The liveness endpoint's path, on the HTTP front and the admin listener.
pub const HEALTHZ: &str = "/healthz";
/// The readiness endpoint's path, on the HTTP front and the admin listener.
pub const READYZ: &str = "/readyz";

/// The longest the store check waits: under a probe's own timeout (Kubernetes'
/// default is 1 s; the shipped manifests give 3 s), so a slow store reads as
/// unreachable instead of as a probe that hung.
const STORE_CHECK: Duration = Duration::from_secs(2);

/// The gateway's lifecycle state the health endpoints read.
#[derive(Default)]
pub struct Health {
    draining: AtomicBool,
}

impl Health {
    /// From now on `/readyz` answers 503 (SIGTERM); there is no way back.
    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    pub fn draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }
}

/// A `/healthz` or `/readyz` answer: status code and plain-text body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    pub status: u16,
    pub body: String,
}

impl Gateway {
    /// The answer for a health endpoint's path; `None` for any other path.
    pub async fn probe(self: &Arc<Self>, path: &str) -> Option<Probe> {
        match path {
            HEALTHZ => Some(self.liveness()),
            READYZ => Some(self.readiness().await),
            _ => None,
        }
    }

    /// `/healthz`: the process serves.
    pub fn liveness(&self) -> Probe {
        Probe {
            status: 200,
            body: texts::HEALTH_ALIVE.to_owned(),
        }
    }

    /// `/readyz`: 200 when every check passes, else 503 naming the failed ones.
    pub async fn readiness(self: &Arc<Self>) -> Probe {
        let mut failed = Vec::new();
        if self.health.draining() {
            failed.push(texts::NOT_READY_DRAINING.to_owned());
        }
        let total = self.upstreams.list().len();
        let unlisted = if self.upstreams.started() {
            self.upstreams.unavailable().len()
        } else {
            let me = self.clone();
            tokio::spawn(async move { me.connect(None).await });
            total
        };
        if unlisted > 0 {
            failed.push(texts::not_ready_upstreams(unlisted, total));
        }
        if let Some(store) = self.audit_store() {
            let answered = tokio::time::timeout(STORE_CHECK, store.ping()).await;
            let why = match answered {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(e.to_string()),
                Err(_) => Some(format!("no answer within {STORE_CHECK:?}")),
            };
            if let Some(why) = why {
                tracing::warn!(
                    "readiness: the store does not answer: {}",
                    crate::logged::logged(&why)
                );
                failed.push(texts::NOT_READY_STORE.to_owned());
            }
        }
        if failed.is_empty() {
            Probe {
                status: 200,
                body: texts::HEALTH_READY.to_owned(),
            }
        } else {
            Probe {
                status: 503,
                body: texts::not_ready(&failed),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[tokio::test]
    async fn ready_without_upstreams_until_draining() {
        let gw = Gateway::new(Config::parse("", "w.toml").unwrap())
            .await
            .unwrap();
        assert_eq!(gw.liveness().body, "ok\n");
        let ready = gw.readiness().await;
        assert_eq!((ready.status, ready.body.as_str()), (200, "ready\n"));
        gw.health.start_draining();
        let ready = gw.readiness().await;
        assert_eq!(
            (ready.status, ready.body.as_str()),
            (503, "not ready: draining\n")
        );
        // Alive all the same: a draining gateway is not to be restarted.
        assert_eq!(gw.liveness().status, 200);
    }

    #[tokio::test]
    async fn an_upstream_that_cannot_start_keeps_it_unready_without_saying_which() {
        let toml = "[[upstream]]\nname = \"secret-name\"\ncommand = [\"/nonexistent/warden-test-binary\"]\n";
        let gw = Gateway::new(Config::parse(toml, "/tmp/w.toml").unwrap())
            .await
            .unwrap();
        // The first probe starts the upstreams; it cannot be ready yet.
        let first = gw.readiness().await;
        assert_eq!(
            (first.status, first.body.as_str()),
            (503, "not ready: upstreams not listed (1 of 1)\n")
        );
        gw.connect(None).await;
        let again = gw.readiness().await;
        assert_eq!(again, first);
        gw.health.start_draining();
        assert_eq!(
            gw.readiness().await.body,
            "not ready: draining; upstreams not listed (1 of 1)\n"
        );
        gw.shutdown().await;
    }
}
