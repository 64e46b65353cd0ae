//! The admin listener through the real binary over real sockets: its own caps
//! and timeouts on connections, which leave the MCP front's untouched however
//! many sockets reach the admin port, and the Host/Origin check (DNS rebinding)
//! it shares with the front, which the probes and `/metrics` skip.

mod common;

use common::http::{anonymous, call, request_path, wait_closed, HttpWarden, Reply};
use common::*;
use serde_json::json;
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// A plain 503 as the admin listener writes it at accept.
fn refused_at_accept(text: &str) -> String {
    let body = format!("{text}\n");
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\ncache-control: no-store\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// `GET path` on the admin listener, retried while it is full (503 at accept, or
/// closed before it could say so): the first answer it gives past its caps.
fn admitted_get(addr: &str, path: &str) -> Reply {
    let started = Instant::now();
    loop {
        let attempt = std::panic::catch_unwind(|| request_path(addr, "GET", path, &[], ""));
        if let Ok(r) = attempt {
            if r.status != 503 {
                return r;
            }
        }
        assert!(
            started.elapsed() < PATIENCE,
            "the admin listener never took a connection again"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn idle_admin_sockets_are_capped_and_timed_out_and_never_starve_the_front() {
    let port = free_port();
    let admin = format!("127.0.0.1:{port}");
    let toml = anonymous(&format!(
        "[admin]\nlisten = \"{admin}\"\nmax_connections = 4\nhttp_head_timeout = \"2s\""
    ));
    let w = HttpWarden::start("admin-caps", &toml, &[]);
    // Many idle sockets to the admin port: four are held (and say nothing), every
    // one beyond is answered 503 at once and closed.
    let held_since = Instant::now();
    let mut held: Vec<TcpStream> = (0..4)
        .map(|_| TcpStream::connect(&admin).unwrap())
        .collect();
    let over = "Service unavailable: too many open connections; retry later.";
    for _ in 0..20 {
        let mut extra = TcpStream::connect(&admin).unwrap();
        let (_, said) = wait_closed(&mut extra, Duration::from_secs(5))
            .expect("an admin connection over the cap was not closed");
        assert_eq!(said, refused_at_accept(over));
    }
    // The MCP front serves as if nothing happened: initialize, and a call.
    let sid = w.session(&[]);
    let r = w.post(
        &[("Mcp-Session-Id", &sid)],
        &call(1, "fx.echo", json!({"text": "served"})),
    );
    assert_eq!(r.json()["result"]["structuredContent"]["text"], "served");
    // The idle sockets are closed after admin.http_head_timeout, unanswered.
    for socket in &mut held {
        let (_, said) = wait_closed(socket, Duration::from_secs(5))
            .expect("an idle admin connection was still open 5 s on");
        assert_eq!(said, "");
    }
    assert!(held_since.elapsed() >= Duration::from_millis(1900));
    // Then the liveness probe answers again, and the metrics count it all apart
    // from the front's.
    let r = admitted_get(&admin, "/healthz");
    assert_eq!((r.status, r.body.as_str()), (200, "ok\n"));
    let metrics = admitted_get(&admin, "/metrics").body;
    assert!(
        metrics.contains(
            "warden_http_connections_refused_total{limit=\"admin.max_connections\"} 20\n"
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains("warden_http_connections_timed_out_total{timeout=\"admin.head\"} 4\n"),
        "{metrics}"
    );
    assert!(
        !metrics.contains("{limit=\"max_connections\"}"),
        "{metrics}"
    );
}

#[test]
fn one_address_holds_at_most_its_share_of_admin_connections() {
    let port = free_port();
    let admin = format!("127.0.0.1:{port}");
    let toml = anonymous(&format!(
        "[admin]\nlisten = \"{admin}\"\nmax_connections_per_client = 2\nhttp_idle_timeout = \"1s\""
    ));
    let _w = HttpWarden::start("admin-per-client", &toml, &[]);
    let held = [
        TcpStream::connect(&admin).unwrap(),
        TcpStream::connect(&admin).unwrap(),
    ];
    let mut third = TcpStream::connect(&admin).unwrap();
    let (_, said) = wait_closed(&mut third, Duration::from_secs(5))
        .expect("the admin connection over the cap was not closed");
    assert_eq!(
        said,
        refused_at_accept("Service unavailable: too many open connections from this address; close idle ones or retry later.")
    );
    drop(held);
    let r = admitted_get(&admin, "/readyz");
    assert_eq!(r.status, 200, "{}", r.body);
}

/// The console's and the API's answer to a Host or Origin that is not allowed.
fn forbidden_json(text: &str) -> String {
    format!("{{\n  \"error\": \"{text}\"\n}}\n")
}

#[test]
fn the_console_answers_only_allowed_hosts_and_origins_but_probes_and_metrics_any() {
    let port = free_port();
    let admin = format!("127.0.0.1:{port}");
    let toml = anonymous(&format!(
        "allowed_hosts = [\"warden.example\"]\nallowed_origins = [\"https://ops.example\"]\n[admin]\nlisten = \"{admin}\""
    ));
    let _w = HttpWarden::start("admin-hosts", &toml, &[]);
    let get = |path: &str, headers: &[(&str, &str)]| request_path(&admin, "GET", path, headers, "");
    let bad_host = "Forbidden: this host name is not allowed.";
    let bad_origin = "Forbidden: this origin is not allowed.";

    // A page on a rebinding domain: its own name is the Host. Nothing is read.
    let evil = [("Host", "evil.example")];
    let r = get("/api/calls", &evil);
    assert_eq!(r.status, 403);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.body, forbidden_json(bad_host));
    let r = get("/calls", &evil);
    assert_eq!(r.status, 403);
    assert!(r.body.contains(&format!("<p>{bad_host}</p>")), "{}", r.body);
    let r = get(
        "/api/overview",
        &[("Host", "localhost"), ("Origin", "https://evil.example")],
    );
    assert_eq!(r.status, 403);
    assert_eq!(r.body, forbidden_json(bad_origin));

    // Loopback names, the listen address, the listed host and origin are served.
    for headers in [
        vec![("Host", "localhost")],
        vec![("Host", admin.as_str())],
        vec![("Host", "warden.example:9464")],
        vec![("Host", "127.0.0.1"), ("Origin", "https://ops.example")],
        vec![("Host", "[::1]"), ("Origin", "http://localhost:3000")],
    ] {
        let r = get("/api/calls", &headers);
        assert_eq!(r.status, 200, "{headers:?}: {}", r.body);
    }

    // Probes and /metrics answer whatever the Host: kubelets and scrapers use
    // the pod's address.
    let r = get("/healthz", &evil);
    assert_eq!((r.status, r.body.as_str()), (200, "ok\n"));
    // Ready once the upstream is listed: never refused for its Host meanwhile.
    let started = Instant::now();
    loop {
        let r = get("/readyz", &evil);
        if r.status == 200 {
            break;
        }
        assert_eq!(r.status, 503, "{}", r.body);
        assert!(started.elapsed() < PATIENCE, "never ready: {}", r.body);
        std::thread::sleep(Duration::from_millis(50));
    }
    let r = get("/metrics", &[("Host", "10.1.2.3:9464")]);
    assert_eq!(r.status, 200);
    assert!(r.body.contains("warden_admin_connections "), "{}", r.body);
}
