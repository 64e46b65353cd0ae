//! What the end-to-end benchmarks share.

/// Resident memory of a process, in KiB (Linux; 0 when unknown).
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Runs one SQL statement as `postgres` on the machine's PostgreSQL at
/// 127.0.0.1:5432; whether it succeeded (false when no server is there).
pub fn psql(sql: &str) -> bool {
    std::process::Command::new("psql")
        .args([
            "-h",
            "127.0.0.1",
            "-U",
            "postgres",
            "-d",
            "postgres",
            "-q",
            "-c",
            sql,
        ])
        .output()
        .is_ok_and(|o| o.status.success())
}
