//! The gateway's metrics as a test reads them: the text, and reloads counted.

use super::PATIENCE;
use std::io::Write;
use std::time::{Duration, Instant};

/// The gateway's Prometheus metrics on `port`, as text.
pub fn metrics_text(port: u16) -> String {
    use std::io::Read;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("metrics listener");
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// Reloads counted so far with `result` ("ok" or "invalid").
pub fn reloads(text: &str, result: &str) -> u64 {
    let prefix = format!("warden_config_reloads_total{{result=\"{result}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {prefix} in {text}"))
}

/// Waits until at least `n` reloads ended with `result` (a reload is over once
/// it is counted); returns the metrics then.
pub fn wait_for_reloads(port: u16, result: &str, n: u64) -> String {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let text = metrics_text(port);
        if reloads(&text, result) >= n {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "never {n} {result} reload(s):\n{text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
