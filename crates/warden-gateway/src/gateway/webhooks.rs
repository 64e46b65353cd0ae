//! The gateway's webhooks: the grant webhook (G4) and the before/after hook
//! webhooks (H1-H5), as JSON over [`HttpTarget`]. What a failure means is each
//! caller's to say: a grant webhook that fails refuses a call and degrades a
//! listing to the rules; a before hook that fails fails the call.

use crate::config::{Config, Phase};
use crate::logged::logged;
use crate::net::target::HttpTarget;
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::mpsc;
use warden_core::hooks::{
    AfterHook, BeforeDecision, BeforeHook, CallContext, CallEnd, HookError, HookFuture,
};
use warden_core::{Caller, DenyReason, GrantDecision};

/// After-hook events waiting to be posted, at most; beyond it events are dropped and logged.
const AFTER_QUEUE: usize = 1024;

/// Before hooks and after hooks, each in the order they run.
pub type HookLists = (Vec<Arc<dyn BeforeHook>>, Vec<Arc<dyn AfterHook>>);

/// The configured `[[hook]]` webhooks, as before and after hooks in config order.
pub fn hooks(config: &Config) -> HookLists {
    let (mut before, mut after) = (Vec::new(), Vec::<Arc<dyn AfterHook>>::new());
    for h in &config.hook {
        match h.phase {
            Phase::Before => {
                before.push(Arc::new(BeforeWebhook(h.webhook.clone())) as Arc<dyn BeforeHook>)
            }
            Phase::After => after.push(AfterWebhook::start(h.webhook.clone())),
        }
    }
    (before, after)
}

fn caller_json(caller: &Caller) -> Value {
    json!({"name": caller.name, "groups": caller.groups})
}

/// The grant webhook: `{"caller": {...}, "tools": [names]}` →
/// `{"decisions": {"name": "allow" | "deny" | "ask", ...}}`. Names it leaves out
/// are decided by the configured rules.
pub async fn grant_decisions(
    hook: &HttpTarget,
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
pub struct BeforeWebhook(pub HttpTarget);

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
    pub fn start(hook: HttpTarget) -> Arc<AfterWebhook> {
        let (queue, mut rx) = mpsc::channel::<Value>(AFTER_QUEUE);
        let url = hook.url().to_owned();
        tokio::spawn(async move {
            while let Some(event) = rx.recv().await {
                if let Err(e) = hook.post(&event).await {
                    tracing::warn!(url = %hook.url(), "after webhook failed (ignored): {}", logged(&e));
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
