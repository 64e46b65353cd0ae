//! The connections of an HTTP listener (the MCP front's, and the admin
//! listener's with its own smaller caps): how many may be open, in total and
//! from one client address, and how long one may hold a socket without a request.
//!
//! A connection over a cap is refused at accept, before anything of it is read
//! (the answer is built in [`super::handler`]). An admitted one is watched:
//!
//! - its first request head must be complete within `http_head_timeout` of the
//!   accept (TLS handshake included), so one that sends nothing, or half a head,
//!   cannot hold a file descriptor for long (slowloris);
//! - between requests it may sit idle for `http_idle_timeout`, after which it is
//!   shut down gracefully; once the next head's first byte arrives, that head too
//!   must be complete within `http_head_timeout`;
//! - while a request is in flight (its answer not yet fully written: a long call,
//!   an SSE stream) neither applies.
//!
//! hyper's own `header_read_timeout` starts when a connection becomes idle, so it
//! cannot tell a quiet kept-alive connection from a slow head: it would close idle
//! connections after the head timeout. It is kept only as a backstop, at the sum of
//! both timeouts, which the watch here always reaches first.

use crate::config::{parse_duration, AdminConfig, GatewayConfig};
use crate::metrics::Metrics;
use hyper::body::Body;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::Instant;
use watch::{Clock, Expiry, Tracked, Watched};

mod watch;

/// Which listener a connection came to: its caps are in its own table, and its
/// refusals and timeouts are counted apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Listener {
    /// The MCP front: `[gateway]`.
    Front,
    /// The admin listener: `[admin]`.
    Admin,
}

impl Listener {
    /// The config table its caps and timeouts are read from.
    pub(crate) fn table(self) -> &'static str {
        match self {
            Listener::Front => "gateway",
            Listener::Admin => "admin",
        }
    }

    /// The metric label of a refusal at accept.
    fn refused_label(self, over: OverCap) -> &'static str {
        match (self, over) {
            (Listener::Front, over) => over.key(),
            (Listener::Admin, OverCap::Total) => "admin.max_connections",
            (Listener::Admin, OverCap::PerClient) => "admin.max_connections_per_client",
        }
    }

    /// The metric label of a timeout (`head`, `idle`).
    pub(crate) fn timeout_label(self, head: bool) -> &'static str {
        match (self, head) {
            (Listener::Front, true) => "head",
            (Listener::Front, false) => "idle",
            (Listener::Admin, true) => "admin.head",
            (Listener::Admin, false) => "admin.idle",
        }
    }

    fn gauge(self, metrics: &Metrics) -> &std::sync::atomic::AtomicU64 {
        match self {
            Listener::Front => &metrics.http_connections,
            Listener::Admin => &metrics.admin_connections,
        }
    }
}

/// The caps and timeouts of `[gateway]` or `[admin]`, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// `http_head_timeout`.
    pub head: Duration,
    /// `http_idle_timeout`.
    pub idle: Duration,
    /// `max_connections`.
    pub max: usize,
    /// `max_connections_per_client`.
    pub per_client: usize,
    /// Whose they are.
    pub listener: Listener,
}

impl Limits {
    pub(crate) fn from_config(g: &GatewayConfig) -> Result<Limits, String> {
        let (head, idle) = (&g.http_head_timeout, &g.http_idle_timeout);
        Limits::parse(
            Listener::Front,
            head,
            idle,
            g.max_connections,
            g.max_connections_per_client,
        )
    }

    pub(crate) fn from_admin(a: &AdminConfig) -> Result<Limits, String> {
        let (head, idle) = (&a.http_head_timeout, &a.http_idle_timeout);
        Limits::parse(
            Listener::Admin,
            head,
            idle,
            a.max_connections,
            a.max_connections_per_client,
        )
    }

    fn parse(
        listener: Listener,
        head: &str,
        idle: &str,
        max: usize,
        per_client: usize,
    ) -> Result<Limits, String> {
        let duration = |key: &str, text: &str| {
            parse_duration(text)
                .map_err(|m| format!("{}.{key}: {m}", listener.table()))
                // `check` refuses 0; a library caller who skipped it gets 1 s, not a
                // listener that closes every connection at once.
                .map(|d| d.max(Duration::from_secs(1)))
        };
        Ok(Limits {
            head: duration("http_head_timeout", head)?,
            idle: duration("http_idle_timeout", idle)?,
            max: max.max(1),
            per_client: per_client.max(1),
            listener,
        })
    }
}

/// Which cap a refused connection hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OverCap {
    /// `max_connections`: the front holds as many as it will.
    Total,
    /// `max_connections_per_client`: this address holds as many as it may.
    PerClient,
}

impl OverCap {
    /// The config key, as the refusal's metric label and log line name it.
    pub(crate) fn key(self) -> &'static str {
        match self {
            OverCap::Total => "max_connections",
            OverCap::PerClient => "max_connections_per_client",
        }
    }
}

/// Who counts as one client: its IP address, an IPv6 one by its /64 (one host
/// usually holds a whole /64, and could otherwise take a fresh address for every
/// connection). An IPv4 address mapped into IPv6 counts as itself.
pub(super) fn client_of(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let mut s = v6.segments();
            s[4..].fill(0);
            IpAddr::V6(Ipv6Addr::from(s))
        }
        v4 => v4,
    }
}

/// The open connections: how many, and from which clients.
pub(crate) struct Connections {
    pub(crate) limits: Limits,
    open: Mutex<Counts>,
    metrics: Arc<Metrics>,
}

#[derive(Default)]
struct Counts {
    total: usize,
    /// Clients with no open connection have no entry.
    by_client: HashMap<IpAddr, usize>,
}

impl Connections {
    pub(crate) fn new(limits: Limits, metrics: Arc<Metrics>) -> Arc<Connections> {
        Arc::new(Connections {
            limits,
            open: Mutex::new(Counts::default()),
            metrics,
        })
    }

    fn counts(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A place for a connection from `peer`, held until the [`Slot`] drops; or
    /// the cap it would exceed (counted in the metrics). The client's own cap is
    /// checked first, so a client that floods is told it is the one over.
    pub(crate) fn admit(self: &Arc<Self>, peer: IpAddr) -> Result<Slot, OverCap> {
        let client = client_of(peer);
        let mut counts = self.counts();
        let held = counts.by_client.get(&client).copied().unwrap_or(0);
        let over = if held >= self.limits.per_client {
            Some(OverCap::PerClient)
        } else if counts.total >= self.limits.max {
            Some(OverCap::Total)
        } else {
            None
        };
        if let Some(over) = over {
            drop(counts);
            let label = self.limits.listener.refused_label(over);
            self.metrics.http_connection_refused(label);
            return Err(over);
        }
        counts.by_client.insert(client, held + 1);
        counts.total += 1;
        self.publish(&counts);
        Ok(Slot {
            connections: self.clone(),
            client,
        })
    }

    fn publish(&self, counts: &Counts) {
        self.limits
            .listener
            .gauge(&self.metrics)
            .store(counts.total as u64, std::sync::atomic::Ordering::Relaxed);
    }

    /// Open connections, in total and from `peer`'s client.
    #[cfg(test)]
    fn open(&self, peer: IpAddr) -> (usize, usize) {
        let counts = self.counts();
        let client = counts.by_client.get(&client_of(peer)).copied();
        (counts.total, client.unwrap_or(0))
    }
}

/// One admitted connection's place; dropping it (the connection ended) frees it.
pub(crate) struct Slot {
    connections: Arc<Connections>,
    client: IpAddr,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut counts = self.connections.counts();
        counts.total = counts.total.saturating_sub(1);
        match counts.by_client.get_mut(&self.client) {
            Some(n) if *n > 1 => *n -= 1,
            _ => {
                counts.by_client.remove(&self.client);
            }
        }
        self.connections.publish(&counts);
    }
}

/// Serves one admitted connection with hyper until it ends, or a timeout ends it.
/// `answer` turns a request into its response; `accepted` is when the socket was
/// accepted (the first head's time runs from there, TLS handshake included).
/// Once `drain` turns true the connection closes as an idle one does: at once
/// when nothing is in flight, else right after its answer. Begun with `drain`
/// already true (taken as the listener closes), it closes after its first answer.
pub(crate) async fn serve<S, B, F, Fut>(
    io: S,
    accepted: Instant,
    limits: Limits,
    metrics: &Metrics,
    mut drain: tokio::sync::watch::Receiver<bool>,
    answer: F,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    B: Body<Data = bytes::Bytes> + Unpin + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    F: Fn(hyper::Request<hyper::body::Incoming>) -> Fut + Send + 'static,
    Fut: Future<Output = hyper::Response<B>> + Send + 'static,
{
    let clock = Clock::new(accepted);
    let service = {
        let clock = clock.clone();
        hyper::service::service_fn(move |req| {
            let busy = clock.busy();
            let answered = answer(req);
            async move {
                let response = answered.await;
                Ok::<_, std::convert::Infallible>(
                    response.map(|body| Tracked { body, _busy: busy }),
                )
            }
        })
    };
    let io = TokioIo::new(Watched {
        io,
        clock: clock.clone(),
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.head + limits.idle)
        .serve_connection(io, service);
    tokio::pin!(conn);
    let mut closing = None;
    // Until the drain begins (or its sender is gone, which never begins one).
    let mut watching = true;
    // A connection taken after the drain began (one the OS had queued at the
    // stop) answers its first request, 503 as it did not run, and then closes:
    // closed at once, that request would go unanswered.
    let mut late = *drain.borrow_and_update();
    loop {
        if late && clock.state().served {
            late = false;
            conn.as_mut().graceful_shutdown();
            closing = Some(Instant::now());
        }
        let deadline = clock.state().deadline(&limits, closing);
        let changed = clock.changed.notified();
        // Parked far away while a request is in flight; `changed` wakes the loop.
        let wake = deadline.map_or_else(|| Instant::now() + limits.idle, |(at, _)| at);
        tokio::select! {
            biased;
            ended = conn.as_mut() => {
                if let Err(e) = ended {
                    tracing::debug!("an HTTP connection ended with an error: {e}");
                }
                return;
            }
            () = changed => {}
            began = drain.changed(), if watching && closing.is_none() && !late => {
                watching = began.is_ok();
                if watching && *drain.borrow_and_update() {
                    tracing::debug!("draining: the HTTP connection closes once its answer is written");
                    conn.as_mut().graceful_shutdown();
                    closing = Some(Instant::now());
                }
            }
            () = tokio::time::sleep_until(wake) => match due(&clock, &limits, metrics, closing) {
                Due::NotYet => {}
                Due::Drop => return,
                Due::Close => {
                    // Nothing is in flight, so hyper closes at once; should a
                    // request slip in first, it is answered and then the
                    // connection closes.
                    conn.as_mut().graceful_shutdown();
                    closing = Some(Instant::now());
                }
            },
        }
    }
}

/// What a connection's timer, fired, does to it.
enum Due {
    /// Its deadline moved on (a request began as the timer fired): nothing.
    NotYet,
    /// The socket goes, now.
    Drop,
    /// A graceful close: after the answer in flight, if one slipped in.
    Close,
}

/// Whether the connection's deadline has come, and what it does (counted and
/// logged as a timeout when the head or idle timeout ran out). Read again, not
/// the one the timer was set for: a request may have begun as the timer fired.
fn due(clock: &Clock, limits: &Limits, metrics: &Metrics, closing: Option<Instant>) -> Due {
    let Some((at, why)) = clock.state().deadline(limits, closing) else {
        return Due::NotYet;
    };
    if Instant::now() < at {
        return Due::NotYet;
    }
    match why {
        Expiry::Head => {
            // Half a head is not worth a graceful close: the socket goes.
            tracing::debug!(
                "an HTTP connection sent no whole request head within {}.http_head_timeout; closed",
                limits.listener.table()
            );
            metrics.http_connection_timed_out(limits.listener.timeout_label(true));
            Due::Drop
        }
        Expiry::Idle => {
            tracing::debug!(
                "an HTTP connection was idle for {}.http_idle_timeout; closing",
                limits.listener.table()
            );
            metrics.http_connection_timed_out(limits.listener.timeout_label(false));
            Due::Close
        }
        Expiry::Closing => Due::Drop,
    }
}

/// The process's limit on open files (the soft one), where the OS tells it.
pub(crate) fn open_file_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    limits
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max: usize, per_client: usize) -> Limits {
        Limits {
            head: Duration::from_secs(10),
            idle: Duration::from_secs(60),
            max,
            per_client,
            listener: Listener::Front,
        }
    }

    #[test]
    fn caps_count_per_client_and_in_total_and_free_on_drop() {
        let metrics = Arc::new(Metrics::default());
        let conns = Connections::new(limits(3, 2), metrics.clone());
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        let c: IpAddr = "192.0.2.3".parse().unwrap();
        let a1 = conns.admit(a).unwrap();
        let _a2 = conns.admit(a).unwrap();
        assert_eq!(conns.admit(a).err(), Some(OverCap::PerClient));
        let _b1 = conns.admit(b).unwrap();
        assert_eq!(conns.admit(c).err(), Some(OverCap::Total));
        // A client over its own cap hears that, even when the front is full too.
        assert_eq!(conns.admit(a).err(), Some(OverCap::PerClient));
        assert_eq!(conns.open(a), (3, 2));
        drop(a1);
        assert_eq!(conns.open(a), (2, 1));
        let _c1 = conns.admit(c).unwrap();
        let text = metrics.render();
        assert!(
            text.contains("warden_http_connections_refused_total{limit=\"max_connections\"} 1\n"),
            "{text}"
        );
        assert!(text.contains(
            "warden_http_connections_refused_total{limit=\"max_connections_per_client\"} 2\n"
        ));
        assert!(text.contains("\nwarden_http_connections 3\n"), "{text}");
    }

    #[test]
    fn a_client_is_an_ipv4_address_or_an_ipv6_64() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(client_of(ip("192.0.2.7")), ip("192.0.2.7"));
        assert_eq!(client_of(ip("::ffff:192.0.2.7")), ip("192.0.2.7"));
        assert_eq!(
            client_of(ip("2001:db8:1:2:aaaa:bbbb:cccc:dddd")),
            ip("2001:db8:1:2::")
        );
        let conns = Connections::new(limits(10, 1), Arc::new(Metrics::default()));
        let _one = conns.admit(ip("2001:db8:1:2::1")).unwrap();
        assert_eq!(
            conns.admit(ip("2001:db8:1:2::2")).err(),
            Some(OverCap::PerClient)
        );
        assert!(conns.admit(ip("2001:db8:1:3::1")).is_ok());
    }

    #[test]
    fn limits_come_from_the_gateway_table() {
        let g = GatewayConfig::default();
        assert_eq!(
            Limits::from_config(&g).unwrap(),
            Limits {
                head: Duration::from_secs(10),
                idle: Duration::from_secs(60),
                max: 1024,
                per_client: 64,
                listener: Listener::Front,
            }
        );
        let bad = GatewayConfig {
            http_idle_timeout: "1 minute".into(),
            ..GatewayConfig::default()
        };
        assert!(Limits::from_config(&bad)
            .unwrap_err()
            .starts_with("gateway.http_idle_timeout: '1 minute' is not a duration"));
    }
}
