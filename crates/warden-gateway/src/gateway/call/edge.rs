//! A `tools/call` refused before it began (T6): at the front (the step-up 403,
//! a 2026-07-28 request's headers or envelope), or for the 2026-07-28 state it
//! brought back. It still ends through [`Settle::settle`], like every call: one
//! audit record, counted in the metrics, with the caller, the tool and the
//! arguments it carried, and why it was refused.

use super::Calls;
use crate::gateway::client_session::ClientSession;
use crate::gateway::settle::{Body, CallRecord, Decision, End};
use serde_json::{Map, Value};
use std::time::Instant;
use warden_core::{CallReport, Caller};

/// Who refused a call before it began is recorded for, and what they called.
pub struct Early<'a> {
    /// The session's audit label (`stdio`, `http:<id>`, `http:stateless`, or
    /// `http` for a request refused before its session was looked up).
    pub label: &'a str,
    pub caller: Option<&'a Caller>,
    /// The virtual server the request came to (V1).
    pub server: Option<&'a str>,
    /// The tool as the audit trail names it (on a virtual server: its real name).
    pub tool: &'a str,
    /// The call's `arguments`, as sent.
    pub arguments: Option<&'a Value>,
}

impl<'a> Early<'a> {
    /// A call on `session`, named `tool`, with the params it came with.
    pub fn on(
        session: &'a ClientSession,
        caller: Option<&'a Caller>,
        tool: &'a str,
        params: Option<&'a Value>,
    ) -> Early<'a> {
        Early {
            label: &session.label,
            caller,
            server: session.server(),
            tool,
            arguments: params.and_then(|p| p.get("arguments")),
        }
    }
}

impl Calls {
    /// Settles a call refused before it began with `end` (an [`End::Edge`]),
    /// and returns its answer.
    pub async fn settle_early(&self, call: Early<'_>, end: End) -> Option<Body> {
        let mut record = CallRecord::new(Instant::now(), call.tool);
        record.audit = self.settle.audit.on().then(|| {
            let empty = Map::new();
            let arguments = call.arguments.and_then(Value::as_object).unwrap_or(&empty);
            self.settle.audit.template(
                call.label,
                call.caller,
                call.tool,
                None,
                call.server,
                arguments,
                &CallReport::default(),
                None,
            )
        });
        self.settle.settle(&record, end).await
    }

    /// Records a `tools/call` the front refused before handing it to the
    /// gateway (T6): `why` goes to the audit trail; the front answers it.
    pub async fn refused_at_front(&self, call: Early<'_>, why: String) {
        let end = End::Edge {
            decision: Decision::Denied,
            why,
            body: None,
        };
        self.settle_early(call, end).await;
    }

    /// The answer to a request whose 2026-07-28 envelope is faulty: a
    /// `tools/call` that names its tool is settled as refused first (T6).
    pub async fn envelope_refused(
        &self,
        session: &ClientSession,
        method: &str,
        params: Option<&Value>,
        error: Value,
    ) -> Option<Body> {
        let tool = params.and_then(|p| p.get("name")).and_then(Value::as_str);
        let (Some(tool), "tools/call") = (tool, method) else {
            return Some(Err(error));
        };
        let end = End::Edge {
            decision: Decision::Denied,
            why: error["message"].as_str().unwrap_or_default().to_owned(),
            body: Some(Err(error)),
        };
        let caller = session.caller();
        let call = Early::on(session, caller.as_deref(), tool, params);
        self.settle_early(call, end).await
    }
}
