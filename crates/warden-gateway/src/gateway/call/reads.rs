//! Guards over what `resources/read` and `prompts/get` return (S8): a
//! resource's text and a prompt's messages reach the model as a tool result
//! does. A guard on results applies to them when its `tools` globs match the
//! method's name (`*` does; `resources/read` and `prompts/get` name them
//! alone). `redact`, `label`, `report` and `ask` act as on a tool result;
//! `block`, and an `ask` not approved, answer with a JSON-RPC error naming the
//! guard and the kinds. There is no audit record (these are no tool calls):
//! findings go to the log and the metrics, never the matched text.

use super::content::govern_result;
use super::Calls;
use crate::gateway::approval;
use crate::gateway::client_session::{CallKey, ClientSession};
use crate::gateway::rev2026::Revision;
use crate::gateway::settle::Body;
use crate::logged::logged;
use crate::texts;
use serde_json::{json, Value};

/// One read as guards see it.
pub struct Read {
    /// `resources/read` or `prompts/get`.
    pub method: &'static str,
    /// What was read: the resource's URI, or the prompt's name.
    pub what: String,
    pub call: Option<CallKey>,
    /// The request's revision: where its trail lives, whether its client can
    /// be asked about what it read.
    pub revision: Revision,
}

impl Read {
    /// The read `method` makes, when guards look at its result (`params`: its params).
    pub fn of(method: &str, params: &Value, call: &CallKey, revision: &Revision) -> Option<Read> {
        let method = *crate::config::guards::READS
            .iter()
            .find(|m| **m == method)?;
        let key = if method == "resources/read" {
            "uri"
        } else {
            "name"
        };
        let what = params.get(key).and_then(Value::as_str).unwrap_or_default();
        Some(Read {
            method,
            what: what.to_owned(),
            call: Some(call.clone()),
            revision: revision.clone(),
        })
    }

    /// How the read is named to the caller: `resource '<uri>'`, `prompt '<name>'`.
    fn named(&self) -> String {
        let noun = match self.method {
            "resources/read" => "resource",
            _ => "prompt",
        };
        format!("{noun} '{}'", warden_core::answer::shown(&self.what))
    }
}

impl Calls {
    /// S8: the guards over a read's result, under the policy now. Anything but
    /// a result, and a result no guard applies to, passes unchanged.
    pub async fn govern_read(
        &self,
        session: &ClientSession,
        read: Read,
        body: Option<Body>,
    ) -> Option<Body> {
        let Some(Ok(mut result)) = body else {
            return body;
        };
        let policy = self.policy();
        let caller = session.caller();
        let Some(guards) = policy.guards.for_results(caller.as_deref(), read.method) else {
            return Some(Ok(result));
        };
        let governed = govern_result(&guards, &mut result);
        for f in &governed.findings {
            self.settle
                .metrics
                .guard_found(&f.guard, &f.kind, &f.action, f.count as u64);
            tracing::info!(method = read.method, guard = %logged(&f.guard), kind = %logged(&f.kind), path = %logged(&f.path), count = f.count, action = %f.action, "a guard found something in a read");
        }
        let withheld = |guard: &str, kinds: &[String], because: texts::Withheld| {
            let text = texts::guard_withheld_read(&read.named(), guard, kinds, because);
            Some(Err(
                json!({"code": crate::jsonrpc::INTERNAL_ERROR, "message": text}),
            ))
        };
        if !governed.labels.is_empty() {
            let labelled = self.label_trail(
                session,
                &policy.flows,
                read.revision.flow_trail(),
                &governed.labels,
            );
            if let Err(e) = labelled.await {
                tracing::error!(method = read.method, "a guard's labels could not be added to the shared flow trail; the read is withheld: {}", logged(&e));
                let guard = label_guard(&governed.findings);
                return withheld(&guard, &[], texts::Withheld::Unrecorded);
            }
        }
        if let Some((guard, kinds)) = &governed.blocked {
            return withheld(guard, kinds, texts::Withheld::Blocked);
        }
        if let Some((guard, kinds, paths)) = &governed.asked {
            if !read.revision.can_ask_after_run(session) {
                return withheld(guard, kinds, texts::Withheld::CannotAsk);
            }
            let question = texts::guard_ask_read(&read.named(), guard, kinds, paths);
            let approved = approval::elicit_yes(
                session,
                &self.sessions,
                read.call.clone(),
                &question,
                policy.approval_timeout,
            );
            if !approved.await {
                return withheld(guard, kinds, texts::Withheld::NotLetThrough);
            }
        }
        Some(Ok(result))
    }
}

/// The first `label` guard among findings (the one whose labels went unrecorded).
fn label_guard(findings: &[warden_store::GuardFinding]) -> String {
    findings
        .iter()
        .find(|f| f.action == "label")
        .map(|f| f.guard.clone())
        .unwrap_or_default()
}
