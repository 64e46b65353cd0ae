//! The approvals inbox page (H6): the calls waiting for an operator, each with
//! its caller, tool, arguments (as the audit trail records them), the rule that
//! asks, the caller's reason and how long it has waited; and a form per call to
//! approve or deny it with a note.

use super::html::{esc, page};
use crate::gateway::inbox::Verdict;
use crate::gateway::Gateway;
use serde_json::{json, Value};
use std::fmt::Write as _;

/// The waiting calls, oldest first, who answers approvals by default, and
/// whether a rule, flow rule or guard names the console as its own approver.
pub async fn data(gw: &Gateway) -> Value {
    let config = gw.current_config();
    let console = |a: &Option<crate::config::Approver>| {
        matches!(
            a,
            Some(crate::config::Approver::Console | crate::config::Approver::Both)
        )
    };
    let named = config.rule.iter().any(|r| console(&r.approver))
        || config.limits.flows.iter().any(|f| console(&f.approver))
        || config.guards.list.iter().any(|g| console(&g.approver));
    let approver = match config.access.approver {
        crate::config::Approver::Client => "client",
        crate::config::Approver::Console => "console",
        crate::config::Approver::Both => "both",
    };
    let waiting: Vec<Value> = gw
        .inbox()
        .list()
        .await
        .into_iter()
        .map(|(w, waited_ms)| {
            let mut v = serde_json::to_value(&w).unwrap_or_default();
            v["waited_ms"] = json!(waited_ms);
            v
        })
        .collect();
    json!({"approver": approver, "named_console": named, "waiting": waiting})
}

/// Answers waiting call `id` (`decision`: `approve` or `deny`) for admin `who`;
/// `Err`: what to tell them.
pub async fn decide(
    gw: &Gateway,
    id: &str,
    decision: &str,
    note: Option<String>,
    who: &str,
) -> Result<(), &'static str> {
    let approved = match decision {
        "approve" => true,
        "deny" => false,
        _ => return Err(BAD_DECISION),
    };
    let by = match who.strip_prefix("caller:") {
        Some(name) => format!("console:{name}"),
        None => format!("console:{who}"),
    };
    // A note is the operator's words for the audit trail: bounded.
    let note = note.map(|n| n.chars().take(500).collect::<String>());
    let verdict = Verdict { approved, by, note };
    if gw.inbox().decide(id, verdict).await {
        Ok(())
    } else {
        Err(NOT_WAITING)
    }
}

pub const BAD_DECISION: &str = "The decision must be approve or deny.";
pub const NOT_WAITING: &str = "No such call is waiting: it was answered, timed out or cancelled.";

/// The inbox page; every form carries `csrf`.
pub fn html(data: &Value, csrf: &str) -> String {
    let mut b = String::new();
    let approver = data["approver"].as_str().unwrap_or_default();
    if approver == "client" && data["named_console"] == true {
        b.push_str("<p id=\"approver\">Approvals are answered by the client's user ([access] approver = \"client\"), but the calls of the rules, flow rules and guards that name the console as their approver wait here.</p>");
    } else if approver == "client" {
        b.push_str("<p id=\"approver\">Approvals are answered by the client's user ([access] approver = \"client\"): no call waits here.</p>");
    } else {
        let _ = write!(
            b,
            "<p id=\"approver\">Approvals are answered here{} ([access] approver = \"{}\"). The first answer wins; a call nobody answers in time is refused.</p>",
            if approver == "both" { " or by the client's user" } else { "" },
            esc(approver)
        );
    }
    let waiting = data["waiting"].as_array().cloned().unwrap_or_default();
    if waiting.is_empty() {
        b.push_str("<p id=\"inbox-empty\">No call is waiting for approval.</p>");
        return page("Approvals", "/api/approvals", &b);
    }
    b.push_str("<table id=\"inbox\"><thead><tr><th scope=\"col\">Caller</th><th scope=\"col\">Tool</th><th scope=\"col\">Arguments</th><th scope=\"col\">Why it asks</th><th scope=\"col\">Waited</th><th scope=\"col\">Answer</th></tr></thead><tbody>");
    for w in &waiting {
        let id = esc(w["id"].as_str().unwrap_or_default());
        let reason = match w["reason"].as_str() {
            Some(r) => format!("<br>The caller's reason: {}", esc(r)),
            None => String::new(),
        };
        let _ = write!(
            b,
            "<tr id=\"waiting-{id}\"><td>{}</td><td>{}</td><td><pre>{}</pre></td><td>{}{reason}</td><td>{} s</td><td>\
             <form method=\"post\" action=\"/approvals/decide\"><input type=\"hidden\" name=\"csrf\" value=\"{}\">\
             <input type=\"hidden\" name=\"id\" value=\"{id}\"><label for=\"note-{id}\">Note</label>\
             <input id=\"note-{id}\" name=\"note\" maxlength=\"500\">\
             <button type=\"submit\" name=\"decision\" value=\"approve\">Approve</button>\
             <button type=\"submit\" name=\"decision\" value=\"deny\">Deny</button></form></td></tr>",
            esc(w["caller"].as_str().unwrap_or("(anonymous)")),
            esc(w["tool"].as_str().unwrap_or_default()),
            esc(&serde_json::to_string_pretty(&w["arguments"]).unwrap_or_default()),
            esc(w["rule"].as_str().unwrap_or_default()),
            w["waited_ms"].as_u64().unwrap_or_default() / 1000,
            esc(csrf),
        );
    }
    b.push_str("</tbody></table>");
    page("Approvals", "/api/approvals", &b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_waiting_call_has_its_answer_form() {
        let page = html(
            &json!({"approver": "console", "waiting": [{"id": "r1-7", "caller": "bob", "tool": "up.risky",
                "arguments": {"password": "[redacted]"}, "rule": "an ask rule (H5)", "reason": "<why>",
                "since": "t", "waited_ms": 2500}]}),
            "tok",
        );
        assert!(page.contains("<tr id=\"waiting-r1-7\"><td>bob</td><td>up.risky</td><td><pre>{\n  &quot;password&quot;: &quot;[redacted]&quot;\n}</pre></td><td>an ask rule (H5)<br>The caller's reason: &lt;why&gt;</td><td>2 s</td>"), "{page}");
        assert!(page.contains("<input type=\"hidden\" name=\"csrf\" value=\"tok\"><input type=\"hidden\" name=\"id\" value=\"r1-7\">"));
        assert!(
            page.contains("<button type=\"submit\" name=\"decision\" value=\"deny\">Deny</button>")
        );
        let none = html(&json!({"approver": "client", "waiting": []}), "tok");
        assert!(none.contains("No call is waiting for approval."));
        assert!(none.contains("<p id=\"approver\">Approvals are answered by the client's user ([access] approver = \"client\"): no call waits here.</p>"));
        let named = html(
            &json!({"approver": "client", "named_console": true, "waiting": []}),
            "tok",
        );
        assert!(named.contains("<p id=\"approver\">Approvals are answered by the client's user ([access] approver = \"client\"), but the calls of the rules, flow rules and guards that name the console as their approver wait here.</p>"), "{named}");
    }
}
