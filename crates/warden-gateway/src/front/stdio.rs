//! The stdio front: newline-delimited JSON-RPC on stdin and stdout, logs on stderr.
//!
//! Each message is taken as far as arrival order matters before the next line is
//! read (the handshake, the pipeline, queueing it upstream), so requests reach the
//! upstream in the order the client wrote them; only waiting for answers runs
//! concurrently. At end of input the gateway stops reading, lets calls in flight
//! finish (each is bounded by its upstream's timeout), writes their answers, and
//! ends the upstream children. SIGTERM does the same within `gateway.drain_timeout`
//! (`/readyz` on the admin listener says "draining" meanwhile); a request still
//! running then is answered with the HTTP front's drain error and cancelled
//! upstream, or in the gateway while it waits for an approval or a before hook
//! (its audit record says `cancelled`). Each request is answered at most once: the writer decides, in the
//! order messages reach it, between the upstream's answer and the drain's.
//!
//! A request whose id is still in use by a running request is refused unrun, as
//! the HTTP front does: the client could not tell two answers with one id apart.

use crate::gateway::{CallKey, ClientSession, Gateway, Outgoing};
use crate::jsonrpc::{self, Kind, Line};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use warden_core::Caller;

/// Serves the process's stdin and stdout until end of input or SIGTERM.
///
/// When stdin and stdout are pipes (as MCP clients start servers), they are driven
/// by the runtime's poller directly; tokio's own stdio handles would hand every
/// read and write to a blocking thread, which costs a thread hop per message.
/// Anything else (a file, a terminal) falls back to those handles.
pub async fn serve(gateway: Arc<Gateway>) -> std::io::Result<()> {
    serve_as(gateway, None).await
}

/// [`serve`] the virtual server `server` (V1; `None`: the whole catalogue).
pub async fn serve_as(gateway: Arc<Gateway>, server: Option<String>) -> std::io::Result<()> {
    let stop = terminate_signal();
    #[cfg(unix)]
    {
        if let (Some(input), Some(output)) = (pipes::stdin(), pipes::stdout()) {
            tracing::debug!("stdin and stdout are pipes; polling them directly");
            return serve_on_as(
                gateway,
                server.as_deref(),
                BufReader::with_capacity(64 * 1024, input),
                output,
                stop,
            )
            .await;
        }
    }
    let stdin = BufReader::with_capacity(64 * 1024, tokio::io::stdin());
    serve_on_as(gateway, server.as_deref(), stdin, tokio::io::stdout(), stop).await
}

#[cfg(unix)]
mod pipes {
    use std::fs::File;
    use std::os::fd::AsFd;
    use tokio::net::unix::pipe;

    fn dup(fd: std::os::fd::BorrowedFd<'_>) -> Option<File> {
        fd.try_clone_to_owned().ok().map(File::from)
    }

    /// Stdin as a non-blocking pipe reader, when it is a pipe.
    pub fn stdin() -> Option<pipe::Receiver> {
        pipe::Receiver::from_file(dup(std::io::stdin().as_fd())?).ok()
    }

    /// Stdout as a non-blocking pipe writer, when it is a pipe.
    pub fn stdout() -> Option<pipe::Sender> {
        pipe::Sender::from_file(dup(std::io::stdout().as_fd())?).ok()
    }
}

async fn terminate_signal() {
    #[cfg(unix)]
    {
        if let Ok(mut term) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            term.recv().await;
            return;
        }
    }
    std::future::pending::<()>().await
}

/// Serves one client on any reader and writer (the tests use pipes).
pub async fn serve_on<R, W>(
    gateway: Arc<Gateway>,
    input: R,
    output: W,
    stop: impl std::future::Future<Output = ()>,
) -> std::io::Result<()>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    serve_on_as(gateway, None, input, output, stop).await
}

/// [`serve_on`] the virtual server `server` (V1; `None`: the whole catalogue).
pub async fn serve_on_as<R, W>(
    gateway: Arc<Gateway>,
    server: Option<&str>,
    mut input: R,
    output: W,
    stop: impl std::future::Future<Output = ()>,
) -> std::io::Result<()>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let name = gateway.config.gateway.stdio_caller.clone();
    let caller = Caller {
        groups: gateway.current_config().groups_of(&name),
        name,
    };
    let (tx, rx) = mpsc::channel::<Outgoing>(1024);
    let session = ClientSession::new(Some(caller), tx);
    if let Some(name) = server {
        session.serve(name);
    }
    gateway.add_session(&session);
    let running = Arc::new(Running::default());
    let writer = tokio::spawn(write_messages(rx, output, running.clone()));
    // Every request arms a timeout. Arming one earlier than the runtime's next
    // wake-up costs a wake-up write and an extra poll; a one-second tick keeps the
    // next wake-up close, so call timeouts (a second or more) never trigger that.
    let ticker = tokio::spawn(async {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
        }
    });
    let max = gateway.config.gateway.max_message_bytes;
    let mut tasks = JoinSet::new();
    let mut stopped = false;
    tokio::pin!(stop);
    loop {
        let line = tokio::select! {
            line = jsonrpc::read_line(&mut input, max) => line,
            _ = &mut stop => { stopped = true; break; }
        };
        let msg = match line {
            Ok(Some(line)) => match message_of(line, max, &session).await {
                Some(msg) => msg,
                None => continue,
            },
            Ok(None) => break,
            Err(e) => {
                tracing::error!("reading stdin failed: {e}");
                break;
            }
        };
        // From here until its answer is written, the request's id is taken.
        let Ok(request) = take_id(&running, &session, &msg).await else {
            continue;
        };
        let waiting = gateway.handle(&session, msg).await;
        match (waiting, request) {
            (Some(waiting), Some((_, key))) => {
                let session = session.clone();
                tasks.spawn(async move {
                    waiting.await;
                    session.send(over(key)).await;
                });
            }
            (Some(waiting), None) => {
                tasks.spawn(waiting);
            }
            (None, Some((_, key))) => session.send(over(key)).await,
            (None, None) => {}
        }
        while tasks.try_join_next().is_some() {}
    }
    if stopped {
        drain_at_stop(&gateway, &session, &running, &mut tasks).await;
    } else {
        drain(&mut tasks).await;
    }
    drop(session);
    ticker.abort();
    let _ = writer.await;
    let flush = crate::gateway::audit::FLUSH_AT_EXIT;
    if !gateway.flush_audit(flush).await {
        tracing::error!("audit records still waited for the store after {flush:?}; each is in the log above, whole");
    }
    gateway.shutdown().await;
    Ok(())
}

/// A line of input as a message; `None` (answered where there is something to
/// say) for a blank line, one over `gateway.max_message_bytes` or one that is
/// no JSON.
async fn message_of(line: Line, max: usize, session: &ClientSession) -> Option<Value> {
    let bytes = match line {
        Line::Message(bytes) => bytes,
        Line::TooLong(n) => {
            let text = crate::texts::request_too_large(n, max);
            let error = jsonrpc::error(Value::Null, jsonrpc::INVALID_REQUEST, &text);
            session_send(session, error).await;
            return None;
        }
    };
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return None;
    }
    match serde_json::from_slice(&bytes) {
        Ok(v) => Some(v),
        Err(e) => {
            let text = crate::texts::parse_error(&e.to_string());
            session_send(
                session,
                jsonrpc::error(Value::Null, jsonrpc::PARSE_ERROR, &text),
            )
            .await;
            None
        }
    }
}

/// A request's id, taken until its answer is written (`Ok(None)` for what is
/// no request); `Err` when a request still running has it (answered).
async fn take_id(
    running: &Running,
    session: &ClientSession,
    msg: &Value,
) -> Result<Option<(Value, CallKey)>, ()> {
    let Kind::Request { id, .. } = jsonrpc::classify(msg) else {
        return Ok(None);
    };
    let key = jsonrpc::id_key(id);
    if running.take(&key, id) {
        return Ok(Some((id.clone(), key)));
    }
    let text = crate::texts::invalid_request(crate::texts::ID_IN_USE);
    session_send(
        session,
        jsonrpc::error(id.clone(), jsonrpc::INVALID_REQUEST, &text),
    )
    .await;
    Err(())
}

/// After a stop: calls in flight finish within `gateway.drain_timeout`; what
/// still runs then is answered with the drain's error and cancelled upstream.
async fn drain_at_stop(
    gateway: &Arc<Gateway>,
    session: &Arc<ClientSession>,
    running: &Running,
    tasks: &mut JoinSet<()>,
) {
    gateway.health.start_draining();
    let grace = crate::config::parse_duration(&gateway.config.gateway.drain_timeout)
        .unwrap_or(Duration::from_secs(30));
    if tokio::time::timeout(grace, drain(tasks)).await.is_ok() {
        return;
    }
    let left = running.unanswered();
    tracing::warn!(
        "{} request(s) still running after {grace:?} (gateway.drain_timeout); answering them with an error and cancelling them upstream",
        left.len()
    );
    for (key, id) in left {
        // The writer sends the drain's answer only if no other was written by
        // the time this reaches it.
        session.send(drain_answer(key)).await;
        let note = jsonrpc::notification(
            "notifications/cancelled",
            Some(serde_json::json!({"requestId": id, "reason": "the gateway is shutting down"})),
        );
        if let Some(waiting) = gateway.handle(session, note).await {
            tasks.spawn(waiting);
        }
    }
    // The cancelled calls settle (their audit records) before the exit.
    if tokio::time::timeout(AFTER_DEADLINE, drain(tasks))
        .await
        .is_err()
    {
        tasks.abort_all();
    }
}

async fn drain(tasks: &mut JoinSet<()>) {
    while tasks.join_next().await.is_some() {}
}

async fn session_send(session: &ClientSession, msg: Value) {
    session.send_raw(msg).await;
}

/// After the drain deadline, how long the cancelled requests may take to settle.
const AFTER_DEADLINE: Duration = Duration::from_secs(5);

/// The client's requests that are running: handed to the gateway and not yet
/// over (each with its id), and which of them have had their answer written.
#[derive(Default)]
struct Running(Mutex<RunningIds>);

#[derive(Default)]
struct RunningIds {
    ids: HashMap<CallKey, Value>,
    answered: HashSet<CallKey>,
}

impl Running {
    /// Takes a request's id; `false` when a running request holds it.
    fn take(&self, key: &CallKey, id: &Value) -> bool {
        let mut r = self.lock();
        if r.ids.contains_key(key) {
            return false;
        }
        r.ids.insert(key.clone(), id.clone());
        true
    }

    fn release(&self, key: &CallKey) {
        let mut r = self.lock();
        r.ids.remove(key);
        r.answered.remove(key);
    }

    /// Notes that the answer to `key` is being written; `false` when one was
    /// already (this one is dropped).
    fn answer(&self, key: &CallKey) -> bool {
        let mut r = self.lock();
        !r.ids.contains_key(key) || r.answered.insert(key.clone())
    }

    /// The drain's answer to `key`, when it is still running and unanswered
    /// (noted as answered then); `None` when its own answer came first.
    fn drain_answer(&self, key: &CallKey) -> Option<Value> {
        let mut r = self.lock();
        let id = r.ids.get(key)?.clone();
        r.answered
            .insert(key.clone())
            .then(|| jsonrpc::error(id, jsonrpc::INTERNAL_ERROR, crate::texts::DRAIN_DEADLINE))
    }

    /// The running requests whose answer is not written yet.
    fn unanswered(&self) -> Vec<(CallKey, Value)> {
        let r = self.lock();
        r.ids
            .iter()
            .filter(|(k, _)| !r.answered.contains(*k))
            .map(|(k, id)| (k.clone(), id.clone()))
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RunningIds> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The note that request `key` is to get the drain deadline's answer, unless
/// its own was written first: the writer makes the answer, so that the choice is
/// made once, where answers are written. Never written itself (see [`over`]).
fn drain_answer(key: CallKey) -> Outgoing {
    Outgoing {
        call: Some(key),
        ends_call: false,
        msg: Value::Null,
        raw: None,
    }
}

/// The note that request `key` is over, for the writer. Sent on the session's own
/// channel once the gateway is done with the request, so it comes after the
/// request's answer, if there is one (a cancelled call has none): the id is free
/// again only once its answer is written. Never written itself; no message the
/// gateway sends is `null`.
fn over(key: CallKey) -> Outgoing {
    Outgoing {
        call: Some(key),
        ends_call: true,
        msg: Value::Null,
        raw: None,
    }
}

/// One line to write: made here from a message, or the message's own bytes
/// (without the newline).
enum OutLine {
    Made(Vec<u8>),
    Raw(bytes::Bytes),
}

async fn write_messages<W: AsyncWrite + Unpin>(
    mut rx: mpsc::Receiver<Outgoing>,
    mut out: W,
    running: Arc<Running>,
) {
    while let Some(Outgoing {
        call,
        ends_call,
        msg,
        raw,
    }) = rx.recv().await
    {
        // Bytes the gateway had already are written as they are, then the newline.
        let line_of = |msg: &Value| match &raw {
            Some(bytes) => OutLine::Raw(bytes.clone()),
            None => OutLine::Made(jsonrpc::to_line(msg)),
        };
        // What to write: nothing for the notes (a request's end, the drain's
        // turn), and an answer only if its request has none written yet.
        let line = match (&call, msg.is_null()) {
            (Some(key), true) if ends_call => {
                running.release(key);
                None
            }
            (Some(key), true) => running
                .drain_answer(key)
                .map(|e| OutLine::Made(jsonrpc::to_line(&e))),
            (None, true) => None,
            (Some(key), false) if matches!(jsonrpc::classify(&msg), Kind::Response { .. }) => {
                running.answer(key).then(|| line_of(&msg))
            }
            (_, false) => Some(line_of(&msg)),
        };
        if let Some(line) = line {
            let written = match line {
                OutLine::Made(bytes) => out.write_all(&bytes).await,
                OutLine::Raw(bytes) => match out.write_all(&bytes).await {
                    Ok(()) => out.write_all(b"\n").await,
                    e => e,
                },
            };
            if written.is_err() {
                tracing::error!("writing to stdout failed; the client is gone");
                return;
            }
        }
        if rx.is_empty() && out.flush().await.is_err() {
            return;
        }
    }
    let _ = out.flush().await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The writer over a channel, into a buffer: what the client would read.
    async fn written(messages: Vec<Outgoing>, running: Arc<Running>) -> Vec<Value> {
        let (tx, rx) = mpsc::channel(16);
        for m in messages {
            tx.send(m).await.unwrap();
        }
        drop(tx);
        let (mut client, gateway) = tokio::io::duplex(64 * 1024);
        write_messages(rx, gateway, running).await;
        let mut out = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut client, &mut out)
            .await
            .unwrap();
        out.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[tokio::test]
    async fn a_request_is_answered_once_whichever_answer_comes_first() {
        let running = Arc::new(Running::default());
        let (a, b) = (json!(1), json!("b"));
        let (ka, kb) = (jsonrpc::id_key(&a), jsonrpc::id_key(&b));
        assert!(running.take(&ka, &a) && running.take(&kb, &b));
        assert!(!running.take(&ka, &a), "an id in use is not taken twice");
        let late = |id: &Value| jsonrpc::response(id.clone(), json!({"content": []}));
        let forced = |id: &Value| {
            jsonrpc::error(
                id.clone(),
                jsonrpc::INTERNAL_ERROR,
                crate::texts::DRAIN_DEADLINE,
            )
        };
        let progress =
            jsonrpc::notification("notifications/progress", Some(json!({"progress": 1})));
        let (c, kc) = (json!(3), jsonrpc::id_key(&json!(3)));
        assert!(running.take(&kc, &c));
        let from_upstream = |key: &CallKey, msg: Value| Outgoing {
            call: Some(key.clone()),
            ends_call: true,
            msg,
            raw: None,
        };
        let out = written(
            vec![
                // 1: the deadline's note first, the upstream's answer after it.
                drain_answer(ka.clone()),
                from_upstream(&ka, progress.clone()),
                from_upstream(&ka, late(&a)),
                // "b": the upstream's answer first, the deadline's note after it.
                from_upstream(&kb, late(&b)),
                drain_answer(kb.clone()),
                // 3: answered and over before the deadline's note: nothing more.
                from_upstream(&kc, late(&c)),
                over(kc.clone()),
                drain_answer(kc.clone()),
                over(ka.clone()),
                over(kb.clone()),
            ],
            running.clone(),
        )
        .await;
        assert_eq!(out, vec![forced(&a), progress, late(&b), late(&c)]);
        // Once over, the ids are free again and answered afresh.
        assert!(running.unanswered().is_empty());
        assert!(running.take(&ka, &a));
        assert_eq!(running.unanswered(), vec![(ka, a)]);
    }
}
