//! Callers, grants and approval (G1-G5, H5) on the call path, through the gateway
//! built in-process by the harness (`Warden::start_in_process`): the stdio front
//! over an in-memory pipe, the demo server as a real child process.

mod common;

use common::*;
use serde_json::{json, Value};

/// The demo server with rules: `local` (the stdio caller) sees list and create,
/// must ask for publish, and is denied everything else.
fn ruled(default: &str, extra_rules: &str) -> String {
    format!(
        "[gateway]\nstdio_caller = \"local\"\n[access]\ndefault = \"{default}\"\napproval_timeout_ms = 3000\n\
         [[rule]]\ncallers = [\"local\"]\ntools = [\"notes.publish_note\"]\neffect = \"ask\"\n\
         [[rule]]\ncallers = [\"group:writers\", \"local\"]\ntools = [\"notes.list_notes\", \"notes.create_note\"]\neffect = \"allow\"\n\
         {extra_rules}\n{DEMO}"
    )
}

fn error_line(w: &mut Warden, name: &str) -> String {
    let raw = serde_json::to_string(&json!({"jsonrpc": "2.0", "id": "g", "method": "tools/call",
        "params": {"name": name, "arguments": {"x": 1}}}))
    .unwrap();
    w.send_raw(format!("{raw}\n").as_bytes());
    w.response_line(&json!("g")).0
}

#[test]
fn a_hidden_tool_is_answered_exactly_like_an_absent_one() {
    // `notes.secret_tool` does not exist; `notes.create_note` exists but is hidden from `local`.
    let hidden_cfg = format!(
        "[gateway]\nstdio_caller = \"local\"\n[access]\ndefault = \"allow\"\n\
         [[rule]]\ncallers = [\"local\"]\ntools = [\"notes.create_note\"]\neffect = \"deny\"\n{DEMO}"
    );
    let mut hidden = Warden::start_in_process("hidden", &hidden_cfg);
    let names: Vec<String> = hidden.request("tools/list", json!({}))["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["notes.list_notes", "notes.publish_note"]);
    let hidden_answer = error_line(&mut hidden, "notes.create_note");

    // The same name where it is absent: a server without create_note in front.
    let absent_cfg = "[gateway]\nstdio_caller = \"local\"\n[[upstream]]\nname = \"notes\"\ncommand = [\"{fixture}\"]\n";
    let mut absent = Warden::start_in_process("absent", absent_cfg);
    let absent_answer = error_line(&mut absent, "notes.create_note");
    assert_eq!(hidden_answer, absent_answer);
    assert_eq!(
        hidden_answer,
        r#"{"jsonrpc":"2.0","id":"g","error":{"code":-32602,"message":"Unknown tool 'notes.create_note'."}}"#
    );
}

#[test]
fn default_deny_hides_everything_unmatched() {
    let mut w = Warden::start_in_process("deny", &ruled("deny", ""));
    let list = w.request("tools/list", json!({}));
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "notes.create_note",
            "notes.list_notes",
            "notes.publish_note"
        ]
    );
    assert_eq!(w.call_text("notes.list_notes", json!({})), "No notes yet.");
}

#[test]
fn ask_runs_the_call_when_the_human_approves() {
    let mut w = Warden::start_in_process("ask-accept", &ruled("deny", ""));
    w.call_text("notes.create_note", json!({"title": "a", "text": "b"}));
    let id = w.send_request(
        "tools/call",
        json!({"name": "notes.publish_note", "arguments": {"id": 1}}),
    );
    let ask = w.wait_for("elicitation", |m| m["method"] == "elicitation/create");
    assert_eq!(
        ask["params"]["message"],
        "Allow the call to 'notes.publish_note' with these arguments?\n{\"id\":1}"
    );
    assert_eq!(
        ask["params"]["requestedSchema"]["properties"]["approve"]["type"],
        "boolean"
    );
    w.send(&json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"action": "accept", "content": {"approve": true}}}));
    let r = w.response(&json!(id));
    assert_eq!(r["result"]["content"][0]["text"], "Note 1 is now public.");
}

#[test]
fn a_call_waiting_for_approval_is_cancelled_by_its_client() {
    let mut w = Warden::start_in_process("ask-cancelled", &ruled("deny", ""));
    w.call_text("notes.create_note", json!({"title": "a", "text": "b"}));
    let publish = json!({"name": "notes.publish_note", "arguments": {"id": 1}});
    let id = w.send_request("tools/call", publish.clone());
    w.wait_for("elicitation", |m| m["method"] == "elicitation/create");
    w.notify(
        "notifications/cancelled",
        Some(json!({"requestId": id, "reason": "the user gave up"})),
    );
    // Cancelled, it gets no answer: not even the refusal its approval's
    // timeout (3 s) would have given.
    w.expect_silence(std::time::Duration::from_secs(4));
    // Its id is free again, and the note was never published.
    let again = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "notes.list_notes", "arguments": {}}});
    w.send(&again);
    let r = w.response(&json!(id));
    assert_eq!(r["result"]["content"][0]["text"], "1. a [private] b", "{r}");
}

#[test]
fn ask_denies_on_decline_refusal_or_silence() {
    let mut w = Warden::start_in_process("ask-decline", &ruled("deny", ""));
    w.call_text("notes.create_note", json!({"title": "a", "text": "b"}));
    let answers = [
        json!({"action": "decline"}),
        json!({"action": "accept", "content": {"approve": false}}),
        json!({"action": "cancel"}),
    ];
    for answer in answers {
        let id = w.send_request(
            "tools/call",
            json!({"name": "notes.publish_note", "arguments": {"id": 1}}),
        );
        let ask = w.wait_for("elicitation", |m| m["method"] == "elicitation/create");
        w.send(&json!({"jsonrpc": "2.0", "id": ask["id"], "result": answer}));
        let r = w.response(&json!(id));
        assert_eq!(r["result"]["isError"], json!(true));
        assert_eq!(
            r["result"]["content"][0]["text"],
            "Error: This call needs approval, and approval was refused."
        );
    }
    // No answer within approval_timeout_ms (3 s here) is a refusal too.
    let id = w.send_request(
        "tools/call",
        json!({"name": "notes.publish_note", "arguments": {"id": 1}}),
    );
    w.wait_for("elicitation", |m| m["method"] == "elicitation/create");
    let r = w.response(&json!(id));
    assert_eq!(
        r["result"]["content"][0]["text"],
        "Error: This call needs approval, and approval was refused."
    );
    // The note was never published.
    assert_eq!(
        w.call_text("notes.list_notes", json!({})),
        "1. a [private] b"
    );
}

#[test]
fn ask_without_the_elicitation_capability_is_denied_saying_so() {
    let mut w = Warden::spawn_in_process("ask-nocap", &ruled("deny", ""));
    let init = w.request("initialize", json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}));
    assert!(init.get("result").is_some());
    let r = w.call("notes.publish_note", json!({"id": 1}));
    assert_eq!(
        r["result"]["content"][0]["text"],
        "Error: This call needs approval, and the client cannot ask for it. Ask for the tool to be allowed instead."
    );
}

#[test]
fn tools_prints_each_callers_view() {
    let dir = scratch("tools-caller");
    let extra =
        "[[caller]]\nname = \"local\"\n[[caller]]\nname = \"wendy\"\ngroups = [\"writers\"]\n";
    let path = write_config(&dir, &ruled("deny", extra));
    let p = path.to_str().unwrap();
    let names = |caller: &str| -> Vec<String> {
        let (code, out, err) = cli(&["tools", "--config", p, "--caller", caller, "--json"]);
        assert_eq!(code, 0, "{err}");
        let tools: Value = serde_json::from_str(&out).unwrap();
        tools
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        names("local"),
        [
            "notes.create_note",
            "notes.list_notes",
            "notes.publish_note"
        ]
    );
    assert_eq!(names("wendy"), ["notes.create_note", "notes.list_notes"]);
    assert!(names("mallory").is_empty());
}

#[test]
fn check_warns_about_shadowed_rules_and_arbitrary_targets() {
    let dir = scratch("check-rules");
    let body = format!(
        "{}\n[upstream.tools.publish_note]\narbitrary_targets = true\n",
        ruled(
            "deny",
            "[[rule]]\ncallers = [\"local\"]\ntools = [\"notes.create_note\"]\neffect = \"deny\"\n"
        )
    );
    let path = write_config(&dir, &body);
    let (code, out, _) = cli(&["check", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(
        out.contains(
            "warning: rule[2] never applies: rule[1] comes first and matches everything it does\n"
        ),
        "{out}"
    );
    assert!(out.contains("warning: 'notes.publish_note' reaches arbitrary targets (arbitrary_targets = true) and is granted"), "{out}");
}
