//! The HTTP front's listener: binds the address (with TLS when configured),
//! accepts connections within the caps of [`super::conn`], serves each with
//! hyper under its timeouts, sweeps idle sessions, and on stop ends every session
//! and the upstreams.

use super::conn::{self, Connections, Limits};
use super::handler::Front;
use super::reply;
use crate::gateway::Gateway;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};

/// A bound HTTP front, ready to serve.
pub struct Server {
    listener: TcpListener,
    front: Arc<Front>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    connections: Arc<Connections>,
}

impl Server {
    /// Binds `addr` (e.g. `127.0.0.1:8931`); errors say what to change.
    pub async fn bind(gateway: Arc<Gateway>, addr: &str) -> Result<Server, String> {
        let g = &gateway.config.gateway;
        let tls = match (&g.tls_cert, &g.tls_key) {
            (Some(cert), Some(key)) => Some(crate::net::acceptor(
                &gateway.config.resolve_path(&cert.to_string_lossy()),
                &gateway.config.resolve_path(&key.to_string_lossy()),
            )?),
            _ => None,
        };
        let limits = Limits::from_config(g)?;
        if let Some(files) = conn::open_file_limit() {
            // Upstream pipes, the store and the log need descriptors too: with too
            // few, accept fails before the cap is reached and nobody is told why.
            if limits.max as u64 + 64 > files {
                tracing::warn!("gateway.max_connections = {} leaves too few of this process's {files} file descriptors (ulimit -n) for everything else: lower it, or raise the limit", limits.max);
            }
        }
        let connections = Connections::new(limits, gateway.metrics.clone());
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|e| format!("cannot listen on {addr}: {e}; pass --http with a free address or set gateway.listen"))?;
        let local = listener
            .local_addr()
            .map_err(|e| format!("reading the bound address: {e}"))?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        let front = Front::new(gateway, addr, &format!("{scheme}://{local}/mcp"))?;
        if let Some(rs) = front.auth().oauth() {
            // An issuer that is down is no reason not to start (tokens wait for it);
            // one that can never be trusted is.
            use crate::front::auth::oauth::Probe;
            match rs.probe().await {
                Probe::Ready => {
                    tracing::info!(issuer = %rs.issuer(), resource = %rs.resource(), "OAuth resource server ready: the issuer's metadata and keys are fetched")
                }
                Probe::Unreachable(m) => {
                    tracing::warn!(issuer = %rs.issuer(), "the OAuth issuer cannot be reached now ({m}); its tokens are refused until it can")
                }
                Probe::Broken(m) => return Err(format!("oauth.issuer: {m}")),
            }
        }
        Ok(Server {
            listener,
            front,
            tls,
            connections,
        })
    }

    /// `https` when the front serves TLS, else `http`.
    pub fn scheme(&self) -> &'static str {
        if self.tls.is_some() {
            "https"
        } else {
            "http"
        }
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    pub fn front(&self) -> Arc<Front> {
        self.front.clone()
    }

    /// Serves until `stop` resolves, then ends every session and the upstreams.
    pub async fn run(self, stop: impl std::future::Future<Output = ()>) {
        let front = self.front.clone();
        let sweeper = {
            let front = Arc::downgrade(&front);
            tokio::spawn(async move {
                let every = (front
                    .upgrade()
                    .map_or(Duration::from_secs(30), |f| f.sessions.idle)
                    / 2)
                .clamp(Duration::from_millis(100), Duration::from_secs(15));
                let mut tick = tokio::time::interval(every);
                loop {
                    tick.tick().await;
                    match front.upgrade() {
                        Some(f) => f.sessions.sweep(),
                        None => return,
                    }
                }
            })
        };
        tokio::pin!(stop);
        loop {
            let accepted = tokio::select! {
                a = self.listener.accept() => a,
                _ = &mut stop => break,
            };
            let (stream, peer) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors, say: wait a little instead of spinning.
                    tracing::warn!("accepting a connection failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let accepted = tokio::time::Instant::now();
            let slot = match self.connections.admit(peer.ip()) {
                Ok(slot) => slot,
                Err(over) => {
                    tracing::debug!(client = %peer.ip(), "a connection over gateway.{} was refused", over.key());
                    self.refuse(stream, over);
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let front = front.clone();
            let tls = self.tls.clone();
            let limits = self.connections.limits;
            tokio::spawn(async move {
                let _slot = slot;
                let metrics = front.gateway.metrics.clone();
                let answer = move |req| front.clone().handle(req);
                match tls {
                    None => conn::serve(stream, accepted, limits, &metrics, answer).await,
                    Some(tls) => {
                        // The handshake is part of getting a head: same time limit.
                        let handshake = tokio::time::timeout(limits.head, tls.accept(stream));
                        match handshake.await {
                            Ok(Ok(stream)) => {
                                conn::serve(stream, accepted, limits, &metrics, answer).await
                            }
                            Ok(Err(e)) => tracing::debug!("a TLS handshake failed: {e}"),
                            Err(_) => {
                                tracing::debug!("a TLS handshake timed out");
                                metrics.http_connection_timed_out("head");
                            }
                        }
                    }
                }
            });
        }
        sweeper.abort();
        front.sessions.end_all("the gateway is shutting down");
        front.gateway.shutdown().await;
    }

    /// Answers a connection over a cap with 503 and closes it, in the accept loop
    /// and without reading a byte of it: a refusal must cost less than a
    /// connection, so nothing waits here. The answer is one non-blocking write,
    /// which a fresh socket's empty send buffer takes whole; if it does not, the
    /// connection is just closed. Over TLS there is nobody to answer before a
    /// handshake, which is work the cap exists to avoid: it is just closed.
    fn refuse(&self, stream: TcpStream, over: conn::OverCap) {
        if self.tls.is_none() {
            let _ = stream.try_write(&reply::connection_refusal(over));
        }
        drop(stream);
    }
}
