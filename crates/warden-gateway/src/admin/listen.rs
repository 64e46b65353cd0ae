//! The admin listener's socket. It is bounded as the MCP front is, by the same
//! machinery ([`crate::front::http::conn`]) with `[admin]`'s own caps and
//! timeouts: at most `admin.max_connections` open (`admin.max_connections_per_client`
//! from one address), each closed when its head does not come whole within
//! `admin.http_head_timeout` or it idles for `admin.http_idle_timeout`. A
//! connection over a cap is answered 503 at accept and closed, unread. Its file
//! descriptors come from a budget of its own: however many sockets reach the
//! admin port, the front keeps every one of its `gateway.max_connections`.

use super::{Gate, Site};
use crate::front::http::conn::{self, Connections, Limits, OverCap};
use crate::front::http::hosts::HostCheck;
use crate::gateway::Gateway;
use crate::texts as answer;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

/// Serves the admin listener on `addr` until the process ends.
pub async fn serve(addr: &str, gw: Arc<Gateway>) -> Result<SocketAddr, String> {
    let limits = Limits::from_admin(&gw.config.admin)?;
    let site = Arc::new(Site {
        gate: Gate::from_config(&gw)?,
        hosts: HostCheck::new(&gw.config.gateway, addr),
        csrf: super::csrf::Csrf::new()?,
        login: super::login::Login::from_config(&gw.config)?,
        gw: gw.clone(),
    });
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| format!("admin.listen: cannot listen on {addr}: {e}"))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    let connections = Connections::new(limits, gw.metrics.clone());
    tokio::spawn(accept(listener, site, connections));
    Ok(local)
}

async fn accept(listener: TcpListener, site: Arc<Site>, connections: Arc<Connections>) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(a) => a,
            Err(e) => {
                // Out of file descriptors, say: wait a little instead of spinning.
                tracing::warn!("the admin listener could not accept a connection: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let accepted = Instant::now();
        let slot = match connections.admit(peer.ip()) {
            Ok(slot) => slot,
            Err(over) => {
                tracing::debug!(client = %peer.ip(), "a connection over admin.{} was refused", over.key());
                refuse(stream, over);
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let (site, limits) = (site.clone(), connections.limits);
        tokio::spawn(async move {
            let _slot = slot;
            let metrics = site.gw.metrics.clone();
            // The admin listener never drains: it answers until the process exits.
            let (_, never) = tokio::sync::watch::channel(false);
            let answer = move |req| {
                let site = site.clone();
                async move { site.respond(peer.ip(), req).await }
            };
            conn::serve(stream, accepted, limits, &metrics, never, answer).await;
        });
    }
}

/// Answers a connection over a cap with a plain 503 and closes it, without
/// reading a byte of it or waiting: one non-blocking write, which a fresh
/// socket's empty send buffer takes whole.
fn refuse(stream: TcpStream, over: OverCap) {
    let _ = stream.try_write(&refusal(over));
    drop(stream);
}

/// The whole HTTP/1.1 response for a connection over a cap.
fn refusal(over: OverCap) -> Vec<u8> {
    let text = match over {
        OverCap::Total => answer::HTTP_TOO_MANY_CONNECTIONS,
        OverCap::PerClient => answer::HTTP_TOO_MANY_CLIENT_CONNECTIONS,
    };
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\ncache-control: no-store\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}\n",
        text.len() + 1
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_over_an_admin_cap_gets_a_whole_plain_503() {
        let text = "Service unavailable: too many open connections from this address; close idle ones or retry later.\n";
        assert_eq!(
            String::from_utf8(refusal(OverCap::PerClient)).unwrap(),
            format!("HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\ncache-control: no-store\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}", text.len())
        );
    }
}
