//! How much of the HTTP front one client can hold, through the real binary over
//! real sockets: request heads that stall, idle keep-alive connections, the caps
//! on connections (in total and per client address), and on sessions per caller.

mod common;

use common::http::{
    anonymous, call, error_body, exchange, initialize, open, request, request_from, try_exchange,
    wait_closed, HttpWarden, POST,
};
use common::*;
use serde_json::json;
use std::io::Write as _;
use std::net::TcpStream;
use std::time::{Duration, Instant};

// Connections and sessions one client can hold (finding 4: slow and idle
// connections exhausting file descriptors; finding 5: one caller taking every session).

/// The whole answer to a connection over a cap, as it comes off the socket.
fn service_unavailable(message: &str) -> String {
    let body = json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32603, "message": message}})
        .to_string();
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// A connection the front admitted, with a session opened and used on it. A
/// closed connection's place is freed when the front notices the close, a moment
/// later: until then a new one is refused (503, or closed before it could say so).
fn served_once_admitted(w: &HttpWarden) {
    let started = Instant::now();
    let (mut conn, sid) = loop {
        let mut conn = TcpStream::connect(&w.addr).unwrap();
        match try_exchange(&mut conn, "POST", &POST, &initialize().to_string()) {
            Ok(r) if r.status == 200 => {
                let sid = r.header("mcp-session-id").expect("a session id").to_owned();
                break (conn, sid);
            }
            Ok(r) => assert_eq!(r.status, 503, "{}", r.body),
            Err(_) => {}
        }
        assert!(
            started.elapsed() < PATIENCE,
            "the front never took a connection again"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut headers = POST.to_vec();
    headers.push(("Mcp-Session-Id", &sid));
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let r = exchange(&mut conn, "POST", &headers, &note.to_string());
    assert_eq!(r.status, 202);
    let r = exchange(
        &mut conn,
        "POST",
        &headers,
        &call(1, "fx.echo", json!({"text": "in"})).to_string(),
    );
    assert_eq!(r.json()["result"]["structuredContent"]["text"], "in");
}

#[test]
fn a_stalled_request_head_is_cut_off_while_others_are_served() {
    let w = HttpWarden::start(
        "http-head-timeout",
        &anonymous("http_head_timeout = \"1s\""),
        &[],
    );
    let started = Instant::now();
    let mut half = TcpStream::connect(&w.addr).unwrap();
    half.write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty")
        .unwrap();
    let mut silent = TcpStream::connect(&w.addr).unwrap();
    // Served once, then half of a second head: the head timeout applies there too,
    // long before the idle timeout (60 s).
    let mut kept = TcpStream::connect(&w.addr).unwrap();
    let r = exchange(&mut kept, "GET", &[("Accept", "text/event-stream")], "");
    assert_eq!(r.status, 400, "{}", r.body);
    let restarted = Instant::now();
    kept.write_all(b"POST /mcp HTTP/1.1\r\nHo").unwrap();

    // Meanwhile a normal client is served.
    let sid = w.session(&[]);
    let r = w.post(
        &[("Mcp-Session-Id", &sid)],
        &call(1, "fx.echo", json!({"text": "served"})),
    );
    assert_eq!(r.json()["result"]["structuredContent"]["text"], "served");

    for (name, socket, since) in [
        ("half a head", &mut half, started),
        ("nothing", &mut silent, started),
        ("half a second head", &mut kept, restarted),
    ] {
        let (_, said) = wait_closed(socket, Duration::from_secs(5))
            .unwrap_or_else(|| panic!("a connection that sent {name} was still open after 5 s"));
        assert_eq!(said, "", "{name}");
        let took = since.elapsed();
        assert!(
            took >= Duration::from_millis(900),
            "a connection that sent {name} was closed after {took:?}, before the head timeout"
        );
    }
}

#[test]
fn a_dripping_request_body_is_cut_off_with_408_while_others_are_served() {
    let w = HttpWarden::start(
        "http-body-timeout",
        &anonymous("http_body_timeout = \"1s\""),
        &[],
    );
    let mut drip = TcpStream::connect(&w.addr).unwrap();
    let body = initialize().to_string();
    // A whole head promising a body of 4000 bytes, then a trickle of it.
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 4000\r\n\r\n{}",
        &body[..10]
    );
    drip.write_all(head.as_bytes()).unwrap();
    let mut dripper = drip.try_clone().unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let dripping = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            // One byte every 100 ms: 400 s for the whole body, never idle for long.
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if dripper.write_all(b" ").is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    // Meanwhile a normal client is served.
    let sid = w.session(&[]);
    let r = w.post(
        &[("Mcp-Session-Id", &sid)],
        &call(1, "fx.echo", json!({"text": "served"})),
    );
    assert_eq!(r.json()["result"]["structuredContent"]["text"], "served");
    let (_, said) = wait_closed(&mut drip, Duration::from_secs(10))
        .expect("a connection dripping its body was still open after 10 s");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    dripping.join().unwrap();
    let text = "Request timeout: the request body did not arrive in time; nothing was run. Send the whole body at once and retry.";
    let expected = error_body(text);
    assert!(
        said.starts_with("HTTP/1.1 408 Request Timeout\r\n"),
        "{said}"
    );
    assert!(said.contains("\r\nconnection: close\r\n"), "{said}");
    assert!(said.ends_with(&format!("\r\n\r\n{expected}")), "{said}");
}

#[test]
fn connections_over_the_cap_get_503_and_a_freed_place_is_taken_again() {
    let port = free_port();
    let toml = anonymous(&format!(
        "max_connections = 3\nhttp_head_timeout = \"60s\"\n[metrics]\nlisten = \"127.0.0.1:{port}\""
    ));
    let w = HttpWarden::start("http-max-connections", &toml, &[]);
    let mut idle: Vec<TcpStream> = (0..3)
        .map(|_| TcpStream::connect(&w.addr).unwrap())
        .collect();
    let mut fourth = TcpStream::connect(&w.addr).unwrap();
    let (_, said) = wait_closed(&mut fourth, Duration::from_secs(5))
        .expect("the connection over the cap was not closed");
    assert_eq!(
        said,
        service_unavailable("Service unavailable: too many open connections; retry later.")
    );
    let metrics = metrics_text(port);
    assert!(
        metrics.contains("warden_http_connections_refused_total{limit=\"max_connections\"} 1\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("\nwarden_http_connections 3\n"),
        "{metrics}"
    );
    // The three keep their places; once one goes, a new client is served.
    assert!(wait_closed(&mut idle[0], Duration::from_millis(200)).is_none());
    drop(idle.remove(0));
    served_once_admitted(&w);
}

#[test]
fn one_address_holds_at_most_its_share_of_connections() {
    let w = HttpWarden::start(
        "http-max-per-client",
        &anonymous("max_connections_per_client = 2\nhttp_head_timeout = \"60s\""),
        &[],
    );
    let mut held = vec![
        TcpStream::connect(&w.addr).unwrap(),
        TcpStream::connect(&w.addr).unwrap(),
    ];
    let mut third = TcpStream::connect(&w.addr).unwrap();
    let (_, said) = wait_closed(&mut third, Duration::from_secs(5))
        .expect("the connection over the cap was not closed");
    assert_eq!(
        said,
        service_unavailable("Service unavailable: too many open connections from this address; close idle ones or retry later.")
    );
    assert!(wait_closed(&mut held[0], Duration::from_millis(200)).is_none());
    drop(held.remove(0));
    served_once_admitted(&w);
}

#[test]
fn an_idle_connection_is_closed_but_streams_and_long_calls_are_not() {
    let w = HttpWarden::start(
        "http-idle-timeout",
        // A short head timeout too: a connection being closed gets no longer than
        // that to finish, so a stream wrongly taken for idle would not outlive it.
        &anonymous("http_idle_timeout = \"1s\"\nhttp_head_timeout = \"1s\""),
        &[],
    );
    let sid = w.session(&[]);
    let with = [("Mcp-Session-Id", sid.as_str())];

    // Used, kept alive between uses, then quiet: closed after the idle timeout.
    let mut kept = TcpStream::connect(&w.addr).unwrap();
    let mut headers = POST.to_vec();
    headers.extend_from_slice(&with);
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    assert_eq!(exchange(&mut kept, "POST", &headers, &ping).status, 200);
    std::thread::sleep(Duration::from_millis(500));
    // The idle time runs from the answer, which comes after this.
    let asked = Instant::now();
    assert_eq!(exchange(&mut kept, "POST", &headers, &ping).status, 200);
    let (_, said) = wait_closed(&mut kept, Duration::from_secs(5))
        .expect("an idle connection was still open 5 s after its last answer");
    assert_eq!(said, "");
    let took = asked.elapsed();
    assert!(took >= Duration::from_secs(1), "closed after {took:?}");

    // A GET stream held open for several idle timeouts still delivers.
    let get = [
        ("Accept", "text/event-stream"),
        ("Mcp-Session-Id", sid.as_str()),
    ];
    let mut stream = open(&w.addr, "GET", &get, "");
    assert_eq!(stream.status, 200);
    stream.next_event().expect("a priming event");
    // A call longer than the idle timeout is answered on its connection.
    let r = w.post(&with, &call(2, "fx.slow", json!({"ms": 3000})));
    assert_eq!(r.status, 200);
    assert_eq!(
        r.messages().last().unwrap()["result"]["content"][0]["text"],
        "slept 3000 ms"
    );
    let r = w.post(&with, &call(3, "fx.add_tool", json!({})));
    assert_eq!(r.json()["result"]["content"][0]["text"], "added");
    let (_, data) = stream
        .next_event()
        .expect("the GET stream was closed while open");
    assert!(data.contains("notifications/tools/list_changed"), "{data}");
}

#[test]
fn one_caller_cannot_take_every_session() {
    let toml = anonymous(
        "max_sessions_per_caller = 2\n[[caller]]\nname = \"alice\"\napi_key_env = \"WARDEN_TEST_SESSIONS_KEY\"",
    );
    let w = HttpWarden::start(
        "http-sessions-per-caller",
        &toml,
        &[("WARDEN_TEST_SESSIONS_KEY", "alice-key")],
    );
    let first = w.session(&[]);
    let _second = w.session(&[]);
    let r = w.post(&[], &initialize());
    assert_eq!(r.status, 429);
    assert_eq!(
        r.body,
        error_body("Too many requests: this caller already has 2 open sessions; end unused ones with DELETE or let them expire.")
    );
    let retry: u64 = r
        .header("retry-after")
        .expect("a Retry-After header")
        .parse()
        .expect("Retry-After in seconds");
    assert!((1..=1800).contains(&retry), "Retry-After: {retry}");

    // Another caller still gets a session.
    let alice = w.session(&[("Authorization", "Bearer alice-key")]);
    assert_ne!(alice, first);

    // Once the first caller ends one, it may open one again, and no more.
    let r = request(&w.addr, "DELETE", &[("Mcp-Session-Id", &first)], "");
    assert_eq!(r.status, 200);
    w.session(&[]);
    assert_eq!(w.post(&[], &initialize()).status, 429);
}

#[test]
fn anonymous_clients_each_hold_their_own_share_of_sessions() {
    let w = HttpWarden::start(
        "http-sessions-anonymous",
        &anonymous("max_sessions_per_caller = 2"),
        &[],
    );
    let init = initialize().to_string();
    let from = |source: &str| request_from(source, &w.addr, "POST", &POST, &init);
    // One client without credentials takes its share...
    for _ in 0..2 {
        assert_eq!(from("127.0.0.1").status, 200);
    }
    let r = from("127.0.0.1");
    assert_eq!(r.status, 429);
    assert_eq!(
        r.body,
        error_body("Too many requests: this caller already has 2 open sessions; end unused ones with DELETE or let them expire.")
    );
    // ...and another address, the same anonymous caller, still gets its own.
    for _ in 0..2 {
        assert_eq!(from("127.0.0.2").status, 200);
    }
    assert_eq!(from("127.0.0.2").status, 429);
}

#[test]
fn check_refuses_nonsense_connection_limits() {
    let dir = scratch("http-check-limits");
    for (gateway, error) in [
        (
            "max_connections = 0",
            "gateway.max_connections: must be at least 1: 0 would refuse everyone",
        ),
        (
            "max_connections_per_client = 0",
            "gateway.max_connections_per_client: must be at least 1: 0 would refuse everyone",
        ),
        (
            "max_sessions_per_caller = 0",
            "gateway.max_sessions_per_caller: must be at least 1: 0 would refuse everyone",
        ),
        (
            "http_head_timeout = \"ten seconds\"",
            "gateway.http_head_timeout: 'ten seconds' is not a duration; write a number and a unit: 90s, 15m, 24h, 7d",
        ),
        (
            "http_idle_timeout = \"0s\"",
            "gateway.http_idle_timeout: must be at least 1s: a zero timeout would close every connection at once",
        ),
        (
            "http_body_timeout = \"0s\"",
            "gateway.http_body_timeout: must be at least 1s: a zero timeout would close every connection at once",
        ),
        (
            "[admin]\nmax_connections = 0",
            "admin.max_connections: must be at least 1: 0 would refuse everyone",
        ),
        (
            "[admin]\nmax_connections_per_client = 0",
            "admin.max_connections_per_client: must be at least 1: 0 would refuse everyone",
        ),
        (
            "[admin]\nhttp_head_timeout = \"0s\"",
            "admin.http_head_timeout: must be at least 1s: a zero timeout would close every connection at once",
        ),
        (
            "[admin]\nhttp_idle_timeout = \"1 minute\"",
            "admin.http_idle_timeout: '1 minute' is not a duration; write a number and a unit: 90s, 15m, 24h, 7d",
        ),
    ] {
        let config = write_config(&dir, &format!("[gateway]\n{gateway}\n"));
        let (code, out, err) = cli(&["check", "--config", config.to_str().unwrap()]);
        assert_eq!((code, out.as_str()), (1, ""), "{gateway}");
        // The message, then where the file has the key (under [gateway], or [admin] after it).
        let line = if gateway.starts_with("[admin]") { 3 } else { 2 };
        assert_eq!(
            err,
            format!("error: {c}: {error}\n  --> {c}:{line}:1\n", c = config.display())
        );
    }
    let config = write_config(
        &dir,
        &format!(
            "[gateway]\nhttp_head_timeout = \"5s\"\nhttp_idle_timeout = \"2m\"\nhttp_body_timeout = \"5s\"\nmax_connections = 3\nmax_connections_per_client = 1\nmax_sessions_per_caller = 1\n[admin]\nhttp_head_timeout = \"5s\"\nhttp_idle_timeout = \"10s\"\nmax_connections = 8\nmax_connections_per_client = 2\n{}",
            fixture_config("", "")
        ),
    );
    let (code, _, err) = cli(&["check", "--config", config.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
}
