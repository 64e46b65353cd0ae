//! Webhooks: the grant webhook (G4) and before/after hook webhooks (H1-H5).
//!
//! A webhook is an HTTP POST of a JSON body to an `http://` or `https://` URL
//! with a timeout; the answer is a JSON object, read up to 1 MiB. Anything else (a
//! refused connection, a timeout, a non-2xx status, a body that is not the JSON
//! expected) is a failure, which the caller of this module turns into the
//! fail-closed or degrade-to-rules behaviour each use asks for.

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{CONTENT_TYPE, HOST};
use hyper_util::rt::TokioIo;
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use warden_core::hooks::{
    AfterHook, BeforeDecision, BeforeHook, CallContext, CallEnd, HookError, HookFuture,
};
use warden_core::{Caller, DenyReason, GrantDecision};

/// The largest webhook answer read.
const MAX_ANSWER_BYTES: usize = 1024 * 1024;
/// After-hook events waiting to be posted, at most; beyond it events are dropped and logged.
const AFTER_QUEUE: usize = 1024;

/// One webhook endpoint.
#[derive(Debug, Clone)]
pub struct Webhook {
    url: String,
    host: String,
    port: u16,
    authority: String,
    path: String,
    timeout: Duration,
    tls: bool,
}

impl Webhook {
    /// Parses `http[s]://host[:port][/path]`; the message says what to write instead.
    pub fn parse(url: &str, timeout_ms: u64) -> Result<Webhook, String> {
        let (rest, tls) = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
            (Some(rest), _) => (rest, false),
            (None, Some(rest)) => (rest, true),
            _ => return Err(format!("'{url}' is not an http:// or https:// URL")),
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (h, after) = v6
                .split_once(']')
                .ok_or_else(|| format!("'{url}' has an unclosed IPv6 address"))?;
            (h.to_owned(), after.strip_prefix(':'))
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h.to_owned(), Some(p)),
                None => (authority.to_owned(), None),
            }
        };
        if host.is_empty() {
            return Err(format!("'{url}' names no host"));
        }
        let port = match port {
            Some(p) => p
                .parse::<u16>()
                .map_err(|_| format!("'{url}' has an invalid port"))?,
            None if tls => 443,
            None => 80,
        };
        if timeout_ms == 0 {
            return Err("timeout_ms must be more than 0".into());
        }
        Ok(Webhook {
            url: url.to_owned(),
            host,
            port,
            authority: authority.to_owned(),
            path: path.to_owned(),
            timeout: Duration::from_millis(timeout_ms),
            tls,
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// Host and port to connect to, the Host header value, and the request path.
    pub(crate) fn target(&self) -> (&str, u16, &str, &str) {
        (&self.host, self.port, &self.authority, &self.path)
    }

    /// Whether the URL is `https://`.
    pub fn is_tls(&self) -> bool {
        self.tls
    }

    /// POSTs `body`; the JSON answer, or why there is none.
    pub async fn post(&self, body: &Value) -> Result<Value, String> {
        match tokio::time::timeout(self.timeout, self.exchange(body)).await {
            Ok(result) => result,
            Err(_) => Err(format!("no answer within {} ms", self.timeout.as_millis())),
        }
    }

    async fn exchange(&self, body: &Value) -> Result<Value, String> {
        let tls = if self.tls {
            Some(crate::net::public_tls()?)
        } else {
            None
        };
        let stream = crate::net::connect(&self.host, self.port, tls.as_ref())
            .await
            .map_err(|e| format!("cannot connect: {e}"))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| format!("HTTP handshake failed: {e}"))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let bytes = serde_json::to_vec(body).map_err(|e| e.to_string())?;
        let request = hyper::Request::post(self.path.as_str())
            .header(HOST, self.authority.as_str())
            .header(CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(bytes)))
            .map_err(|e| e.to_string())?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| format!("request failed: {e}"))?;
        let status = response.status();
        if !status.is_success() {
            return Err(format!("answered HTTP {status}"));
        }
        let body = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
            .collect()
            .await
            .map_err(|e| format!("answer unreadable or over {MAX_ANSWER_BYTES} bytes: {e}"))?
            .to_bytes();
        serde_json::from_slice(&body).map_err(|e| format!("answer is not JSON: {e}"))
    }
}

fn caller_json(caller: &Caller) -> Value {
    json!({"name": caller.name, "groups": caller.groups})
}

/// The grant webhook: `{"caller": {...}, "tools": [names]}` →
/// `{"decisions": {"name": "allow" | "deny" | "ask", ...}}`. Names it leaves out
/// are decided by the configured rules.
pub async fn grant_decisions(
    hook: &Webhook,
    caller: &Caller,
    tools: &[&str],
) -> Result<HashMap<String, GrantDecision>, String> {
    let answer = hook
        .post(&json!({"caller": caller_json(caller), "tools": tools}))
        .await?;
    let decisions = answer
        .get("decisions")
        .and_then(Value::as_object)
        .ok_or("answer has no 'decisions' object")?;
    let mut out = HashMap::new();
    for (name, d) in decisions {
        let decision = match d.as_str() {
            Some("allow") => GrantDecision::Allow,
            Some("deny") => GrantDecision::Hide,
            Some("ask") => GrantDecision::Ask,
            _ => {
                return Err(format!(
                    "decision for '{name}' is not \"allow\", \"deny\" or \"ask\""
                ))
            }
        };
        out.insert(name.clone(), decision);
    }
    Ok(out)
}

fn context_json(phase: &str, ctx: &CallContext) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("phase".into(), json!(phase));
    m.insert(
        "caller".into(),
        ctx.caller.as_ref().map(caller_json).unwrap_or(Value::Null),
    );
    m.insert("tool".into(), json!(ctx.tool));
    m.insert("upstream".into(), json!(ctx.upstream));
    m.insert("arguments".into(), Value::Object(ctx.arguments.clone()));
    m.insert("meta".into(), Value::Object(ctx.meta.as_map().clone()));
    m.insert(
        "reason".into(),
        ctx.reason.clone().map(Value::String).unwrap_or(Value::Null),
    );
    m
}

/// A before hook that asks a webhook: `{"decision": "pass"}`, `{"decision": "deny",
/// "reason": "…"}` or `{"decision": "answer", "result": {…}}`. Any other answer,
/// and any failure, fails the call (H3).
pub struct BeforeWebhook(pub Webhook);

impl BeforeHook for BeforeWebhook {
    fn before<'a>(
        &'a self,
        ctx: &'a CallContext,
    ) -> HookFuture<'a, Result<BeforeDecision, HookError>> {
        Box::pin(async move {
            let fail = |why: String| HookError(format!("before webhook {}: {why}", self.0.url()));
            let answer = self
                .0
                .post(&Value::Object(context_json("before", ctx)))
                .await
                .map_err(fail)?;
            match answer.get("decision").and_then(Value::as_str) {
                Some("pass") => Ok(BeforeDecision::Pass),
                Some("deny") => {
                    let reason = answer
                        .get("reason")
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    DenyReason::new(reason)
                        .map(BeforeDecision::Deny)
                        .map_err(|e| fail(e.to_string()))
                }
                Some("answer") => match answer.get("result") {
                    Some(result @ Value::Object(_)) => Ok(BeforeDecision::Answer(result.clone())),
                    _ => Err(fail("an answer needs a 'result' object".into())),
                },
                _ => Err(fail(
                    "'decision' is not \"pass\", \"deny\" or \"answer\"".into(),
                )),
            }
        })
    }
}

/// An after hook that posts each call's end to a webhook, from a bounded queue,
/// so the answer to the caller never waits for it.
pub struct AfterWebhook {
    queue: mpsc::Sender<Value>,
    url: String,
}

impl AfterWebhook {
    /// Starts the worker that posts queued events (needs a Tokio runtime).
    pub fn start(hook: Webhook) -> Arc<AfterWebhook> {
        let (queue, mut rx) = mpsc::channel::<Value>(AFTER_QUEUE);
        let url = hook.url().to_owned();
        tokio::spawn(async move {
            while let Some(event) = rx.recv().await {
                if let Err(e) = hook.post(&event).await {
                    tracing::warn!(url = %hook.url(), "after webhook failed (ignored): {e}");
                }
            }
        });
        Arc::new(AfterWebhook { queue, url })
    }
}

impl AfterHook for AfterWebhook {
    fn after<'a>(
        &'a self,
        ctx: &'a CallContext,
        end: &'a CallEnd,
    ) -> HookFuture<'a, Result<(), HookError>> {
        let mut event = context_json("after", ctx);
        event.insert("result".into(), end.result.clone().unwrap_or(Value::Null));
        event.insert(
            "failure".into(),
            end.failure
                .clone()
                .map(Value::String)
                .unwrap_or(Value::Null),
        );
        event.insert("duration_ms".into(), json!(end.duration_ms));
        let queued = self.queue.try_send(Value::Object(event));
        Box::pin(async move {
            queued.map_err(|_| {
                HookError(format!(
                    "after webhook {}: queue full, event dropped",
                    self.url
                ))
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let w = Webhook::parse("http://127.0.0.1:9100/grant", 300).unwrap();
        assert_eq!(
            (
                w.host.as_str(),
                w.port,
                w.path.as_str(),
                w.authority.as_str()
            ),
            ("127.0.0.1", 9100, "/grant", "127.0.0.1:9100")
        );
        let w = Webhook::parse("http://[::1]:8080", 300).unwrap();
        assert_eq!(
            (w.host.as_str(), w.port, w.path.as_str()),
            ("::1", 8080, "/")
        );
        let w = Webhook::parse("http://hooks.local/x?y=1", 300).unwrap();
        assert_eq!((w.port, w.path.as_str()), (80, "/x?y=1"));
        let w = Webhook::parse("https://hooks.example/x", 300).unwrap();
        assert_eq!((w.port, w.is_tls(), w.path.as_str()), (443, true, "/x"));
        assert_eq!(
            Webhook::parse("ftp://x/", 300).unwrap_err(),
            "'ftp://x/' is not an http:// or https:// URL"
        );
        assert!(Webhook::parse("http://:80/", 300).is_err());
        assert!(Webhook::parse("http://x:99999/", 300).is_err());
        assert!(Webhook::parse("http://x/", 0).is_err());
    }

    #[tokio::test]
    async fn a_refused_connection_is_a_failure_not_a_hang() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let w = Webhook::parse(&format!("http://127.0.0.1:{port}/"), 2000).unwrap();
        let e = w.post(&json!({})).await.unwrap_err();
        assert!(e.starts_with("cannot connect"), "{e}");
    }
}
