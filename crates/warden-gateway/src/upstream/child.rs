//! An upstream run as a child process, spoken to over its stdin and stdout.
//!
//! A writer task feeds the child's stdin from the connection's bounded queue; a
//! reader task hands each line of its stdout to [`deliver`]; a third turns its
//! stderr into log lines. When the child exits (or closes its stdout) the
//! connection closes and the router hears of it.

use super::{deliver, Conn, Inbound, Upstream};
use crate::jsonrpc::{self, Line};
use crate::logged::logged;
use std::process::Stdio;
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::process::Command;
use tokio::sync::{mpsc, oneshot};

/// Starts the child and the tasks that serve its pipes.
pub(super) fn open(
    up: &Upstream,
    generation: u64,
    inbound: Weak<dyn Inbound>,
) -> Result<Arc<Conn>, String> {
    let mut cmd = Command::new(&up.program);
    // A secret the file names by variable (`secret_env`) is read as the child
    // starts, so a restart picks up a rotated value.
    let secrets = up
        .config
        .secret_env
        .iter()
        .filter_map(|(child, var)| Some((child, std::env::var(var).ok()?)));
    cmd.args(&up.config.command[1..])
        .envs(&up.config.env)
        .envs(secrets)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", up.program.display()))?;
    let stdin = child.stdin.take().ok_or("child has no stdin")?;
    let stdout = child.stdout.take().ok_or("child has no stdout")?;
    let stderr = child.stderr.take().ok_or("child has no stderr")?;
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(1024);
    let (stop_tx, mut stop_rx) = oneshot::channel::<()>();
    let conn = up.new_conn(generation, tx, stop_tx, Some(child), inbound.clone());

    let name = up.name.clone();
    tokio::spawn(async move {
        let mut stdin = stdin;
        loop {
            let line = tokio::select! {
                line = rx.recv() => line,
                _ = &mut stop_rx => None,
            };
            let Some(line) = line else { break };
            if let Err(e) = stdin.write_all(&line).await {
                tracing::debug!(upstream = %name, "writing to the upstream failed: {e}");
                break;
            }
            if rx.is_empty() {
                let _ = stdin.flush().await;
            }
        }
    });

    let name = up.name.clone();
    let max = up.max_message;
    tokio::spawn(async move {
        let mut lines = BufReader::new(stderr);
        while let Ok(Some(line)) = jsonrpc::read_line(&mut lines, max).await {
            if let Line::Message(l) = line {
                // An upstream may echo what callers sent it.
                tracing::info!(upstream = %name, "stderr: {}", logged(String::from_utf8_lossy(&l)));
            }
        }
    });

    let reader_conn = conn.clone();
    let index = up.index;
    let name = up.name.clone();
    tokio::spawn(async move {
        let mut out = BufReader::new(stdout);
        loop {
            match jsonrpc::read_line(&mut out, max).await {
                Ok(Some(Line::Message(bytes))) => {
                    deliver(&reader_conn, &inbound, &bytes, None).await;
                }
                Ok(Some(Line::TooLong(n))) => {
                    tracing::warn!(upstream = %name, "skipped a {n}-byte message: larger than gateway.max_message_bytes");
                }
                Ok(None) | Err(_) => break,
            }
        }
        reader_conn.close();
        let status = {
            let child = reader_conn
                .child
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take();
            match child {
                Some(mut c) => match tokio::time::timeout(Duration::from_secs(2), c.wait()).await {
                    Ok(Ok(s)) => s.to_string(),
                    _ => {
                        let _ = c.kill().await;
                        "killed after closing its stdout".to_owned()
                    }
                },
                None => "shut down".to_owned(),
            }
        };
        tracing::info!(upstream = %name, "upstream exited ({status})");
        if let Some(router) = inbound.upgrade() {
            router.on_exit(index, generation, reader_conn.exit());
        }
    });
    Ok(conn)
}
