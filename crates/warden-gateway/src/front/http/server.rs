//! The HTTP front's listener: binds the address (with TLS when configured),
//! accepts connections within the caps of [`super::conn`], serves each with
//! hyper under its timeouts, sweeps idle sessions, and on stop drains
//! ([`super::drain`]) before it ends every session and the upstreams.

use super::conn::{self, Connections, Limits};
use super::drain::AFTER_DEADLINE;
use super::handler::Front;
use super::reply;
use crate::gateway::audit::FLUSH_AT_EXIT;
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
            // The admin listener's connections have a budget of their own, beside it.
            let admin = gateway
                .config
                .admin_listen()
                .map_or(0, |_| gateway.config.admin.max_connections);
            if (limits.max + admin) as u64 + 64 > files {
                tracing::warn!("gateway.max_connections = {} (and admin.max_connections = {admin}) leave too few of this process's {files} file descriptors (ulimit -n) for everything else: lower them, or raise the limit", limits.max);
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

    /// Serves until `stop` resolves, then drains ([`super::drain`]): no new
    /// connections, calls in flight finish within `gateway.drain_timeout`, the
    /// audit trail is flushed; then every session and the upstreams end.
    pub async fn run(self, stop: impl std::future::Future<Output = ()>) {
        let Server {
            listener,
            front,
            tls,
            connections,
        } = self;
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
                // The stop first: what is queued then is taken by the loop below.
                biased;
                _ = &mut stop => break,
                a = listener.accept() => a,
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
            serve(&front, tls.as_ref(), &connections, stream, peer, false);
        }
        // Connections the OS completed before the listener closes would be reset
        // unanswered when it does: each is taken now and answers one request
        // (503 once the drain below has begun: it did not run, which a balancer
        // retries elsewhere), then closes.
        while let Ok(Ok((stream, peer))) =
            tokio::time::timeout(Duration::ZERO, listener.accept()).await
        {
            serve(&front, tls.as_ref(), &connections, stream, peer, true);
        }
        // A closed listener: new connections are refused by the OS from now on,
        // before readiness says draining.
        drop(listener);
        front.drain.begin(&front.gateway, &front.sessions);
        drain(&front).await;
        sweeper.abort();
        front.sessions.end_all("the gateway is shutting down");
        front.gateway.shutdown().await;
    }
}

/// Serves one accepted connection within the caps (a connection over one is
/// answered 503 and closed), in a task of its own. A `last` one, taken as the
/// listener closes, answers one request and closes.
fn serve(
    front: &Arc<Front>,
    tls: Option<&tokio_rustls::TlsAcceptor>,
    connections: &Arc<Connections>,
    stream: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    last: bool,
) {
    let accepted = tokio::time::Instant::now();
    let slot = match connections.admit(peer.ip()) {
        Ok(slot) => slot,
        Err(over) => {
            tracing::debug!(client = %peer.ip(), "a connection over gateway.{} was refused", over.key());
            refuse(stream, over, tls.is_some());
            return;
        }
    };
    let _ = stream.set_nodelay(true);
    let front = front.clone();
    let tls = tls.cloned();
    let limits = connections.limits;
    // In flight until it closes: the drain waits for its answer to be written.
    let held = front.drain.hold();
    let drain = if last {
        // Reads "begun" already: conn::serve answers one request, then closes.
        tokio::sync::watch::channel(true).1
    } else {
        front.drain.subscribe()
    };
    tokio::spawn(async move {
        let (_slot, _held) = (slot, held);
        let metrics = front.gateway.metrics.clone();
        let client = conn::client_of(peer.ip());
        let answer = move |req| front.clone().handle(req, client);
        match tls {
            None => conn::serve(stream, accepted, limits, &metrics, drain, answer).await,
            Some(tls) => {
                // The handshake is part of getting a head: same time limit.
                let handshake = tokio::time::timeout(limits.head, tls.accept(stream));
                match handshake.await {
                    Ok(Ok(stream)) => {
                        conn::serve(stream, accepted, limits, &metrics, drain, answer).await
                    }
                    Ok(Err(e)) => tracing::debug!("a TLS handshake failed: {e}"),
                    Err(_) => {
                        tracing::debug!("a TLS handshake timed out");
                        metrics.http_connection_timed_out(limits.listener.timeout_label(true));
                    }
                }
            }
        }
    });
}

/// Waits for what is in flight, up to the drain deadline; answers and cancels
/// what is left then; flushes the audit trail.
async fn drain(front: &Front) {
    let d = &front.drain;
    tracing::info!(
        in_flight = d.in_flight(),
        "stopping: no new connections or requests; waiting up to {:?} (gateway.drain_timeout) for calls in flight",
        d.timeout
    );
    if tokio::time::timeout(d.timeout, d.settled()).await.is_err() {
        let n = d.answer_the_rest(&front.gateway, &front.sessions);
        tracing::warn!(
            "{n} call(s) still ran at gateway.drain_timeout ({:?}): answered with an error and cancelled upstream",
            d.timeout
        );
        if tokio::time::timeout(AFTER_DEADLINE, d.settled())
            .await
            .is_err()
        {
            tracing::warn!(
                "{} connection(s) or call(s) still open {AFTER_DEADLINE:?} after the deadline; stopping regardless",
                d.in_flight()
            );
        }
    }
    if !front.gateway.flush_audit(FLUSH_AT_EXIT).await {
        tracing::error!("audit records still waited for the store after {FLUSH_AT_EXIT:?}; each is in the log above, whole");
    }
    tracing::info!("drained");
}

/// Answers a connection over a cap with 503 and closes it, in the accept loop
/// and without reading a byte of it: a refusal must cost less than a
/// connection, so nothing waits here. The answer is one non-blocking write,
/// which a fresh socket's empty send buffer takes whole; if it does not, the
/// connection is just closed. Over TLS there is nobody to answer before a
/// handshake, which is work the cap exists to avoid: it is just closed.
fn refuse(stream: TcpStream, over: conn::OverCap, tls: bool) {
    if !tls {
        let _ = stream.try_write(&reply::connection_refusal(over));
    }
    drop(stream);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A connection the OS completed (its request already sent) but the server
    /// had not yet accepted when the stop came is answered, not reset.
    #[tokio::test]
    async fn a_connection_queued_at_the_stop_is_answered_not_reset() {
        let config = Config::parse("", "/tmp/w.toml").unwrap();
        let gateway = Gateway::new(config).await.unwrap();
        let server = Server::bind(gateway, "127.0.0.1:0").await.unwrap();
        let addr = server.local_addr().unwrap();
        let mut client = TcpStream::connect(addr).await.unwrap();
        let body = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
        let request = format!(
            "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        client.write_all(request.as_bytes()).await.unwrap();
        // Stopped before it ever accepted: the connection is still in the queue.
        server.run(std::future::ready(())).await;
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).await.unwrap();
        let answer = String::from_utf8_lossy(&answer);
        // Unauthenticated (no anonymous caller): refused before the drain is read.
        assert!(answer.starts_with("HTTP/1.1 401 "), "{answer}");
        // Answered, then closed: one request on it.
        assert!(answer.contains("connection: close"), "{answer}");
    }
}
