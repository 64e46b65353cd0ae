//! The HTTP front's listener: binds the address (with TLS when configured),
//! accepts connections, serves each with hyper, sweeps idle sessions, and on stop
//! ends every session and the upstreams.

use super::handler::Front;
use crate::gateway::Gateway;
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// A bound HTTP front, ready to serve.
pub struct Server {
    listener: TcpListener,
    front: Arc<Front>,
    tls: Option<tokio_rustls::TlsAcceptor>,
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
        let front = Front::new(gateway, addr)?;
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|e| format!("cannot listen on {addr}: {e}; pass --http with a free address or set gateway.listen"))?;
        Ok(Server {
            listener,
            front,
            tls,
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
            let (stream, _) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors, say: wait a little instead of spinning.
                    tracing::warn!("accepting a connection failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let front = front.clone();
            let tls = self.tls.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let front = front.clone();
                    async move { Ok::<_, Infallible>(front.handle(req).await) }
                });
                let builder = hyper::server::conn::http1::Builder::new();
                let ended = match tls {
                    None => {
                        builder
                            .serve_connection(TokioIo::new(stream), service)
                            .await
                    }
                    Some(tls) => {
                        let handshake =
                            tokio::time::timeout(crate::net::CONNECT_TIMEOUT, tls.accept(stream));
                        match handshake.await {
                            Ok(Ok(stream)) => {
                                builder
                                    .serve_connection(TokioIo::new(stream), service)
                                    .await
                            }
                            Ok(Err(e)) => {
                                tracing::debug!("a TLS handshake failed: {e}");
                                return;
                            }
                            Err(_) => {
                                tracing::debug!("a TLS handshake timed out");
                                return;
                            }
                        }
                    }
                };
                if let Err(e) = ended {
                    tracing::debug!("an HTTP connection ended with an error: {e}");
                }
            });
        }
        sweeper.abort();
        front.sessions.end_all("the gateway is shutting down");
        front.gateway.shutdown().await;
    }
}
