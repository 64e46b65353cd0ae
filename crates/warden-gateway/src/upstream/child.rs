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
    let (tx, rx) = mpsc::channel::<Vec<u8>>(1024);
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let conn = up.new_conn(generation, tx, stop_tx, Some(child), inbound.clone());

    feed_stdin(up.name.clone(), stdin, rx, stop_rx);
    log_stderr(up.name.clone(), stderr, up.max_message);
    read_stdout(up, generation, stdout, conn.clone(), inbound);
    Ok(conn)
}

/// At most this many bytes of queued lines go to the child in one write.
const WRITE_BATCH: usize = 64 * 1024;

/// Writes the connection's queue to the child's stdin until the queue closes or
/// the stop comes. The lines queued by the time one is taken go in the same
/// write: under load, fewer writes here and fewer wakeups in the child.
fn feed_stdin(
    name: String,
    mut stdin: tokio::process::ChildStdin,
    mut rx: mpsc::Receiver<Vec<u8>>,
    mut stop_rx: oneshot::Receiver<()>,
) {
    tokio::spawn(async move {
        loop {
            let line = tokio::select! {
                line = rx.recv() => line,
                _ = &mut stop_rx => None,
            };
            let Some(mut batch) = line else { break };
            while batch.len() < WRITE_BATCH {
                match rx.try_recv() {
                    Ok(more) => batch.extend_from_slice(&more),
                    Err(_) => break,
                }
            }
            if let Err(e) = stdin.write_all(&batch).await {
                tracing::debug!(upstream = %name, "writing to the upstream failed: {e}");
                break;
            }
        }
    });
}

/// Each line of the child's stderr becomes a log line.
fn log_stderr(name: String, stderr: tokio::process::ChildStderr, max: usize) {
    tokio::spawn(async move {
        let mut lines = BufReader::new(stderr);
        while let Ok(Some(line)) = jsonrpc::read_line(&mut lines, max).await {
            if let Line::Message(l) = line {
                // An upstream may echo what callers sent it.
                tracing::info!(upstream = %name, "stderr: {}", logged(String::from_utf8_lossy(&l)));
            }
        }
    });
}

/// Delivers each message of the child's stdout; when it ends, closes the
/// connection, reaps the child and tells the router.
fn read_stdout(
    up: &Upstream,
    generation: u64,
    stdout: tokio::process::ChildStdout,
    conn: Arc<Conn>,
    inbound: Weak<dyn Inbound>,
) {
    let (index, name, max) = (up.index, up.name.clone(), up.max_message);
    tokio::spawn(async move {
        let mut out = BufReader::new(stdout);
        loop {
            match jsonrpc::read_line(&mut out, max).await {
                Ok(Some(Line::Message(bytes))) => {
                    deliver(&conn, &inbound, &bytes, None).await;
                }
                Ok(Some(Line::TooLong(n))) => {
                    tracing::warn!(upstream = %name, "skipped a {n}-byte message: larger than gateway.max_message_bytes");
                }
                Ok(None) | Err(_) => break,
            }
        }
        conn.close();
        let child = conn.child.lock().unwrap_or_else(|e| e.into_inner()).take();
        let status = match child {
            Some(mut c) => match tokio::time::timeout(Duration::from_secs(2), c.wait()).await {
                Ok(Ok(s)) => s.to_string(),
                _ => {
                    let _ = c.kill().await;
                    "killed after closing its stdout".to_owned()
                }
            },
            None => "shut down".to_owned(),
        };
        tracing::info!(upstream = %name, "upstream exited ({status})");
        if let Some(router) = inbound.upgrade() {
            router.on_exit(index, generation, conn.exit());
        }
    });
}
