//! `when_cel` conditions (X1-X4) through the real binary and the demo server:
//! an expression over caller, tool, args, session and request decides a call,
//! its refusal says a policy condition did, a condition that fails at run time
//! fails the call closed, `check` names a bad expression's rule and position,
//! and a reload with one leaves the policy in force.

mod common;

use common::*;
use serde_json::json;

const RULES: &str = r#"
[gateway]
stdio_caller = "local"
[access]
default = "allow"

[[rule]]
callers = ["*"]
tools = ["notes.create_note"]
effect = "deny"
when_cel = "args.title.startsWith('tmp') || (has(args.text) && args.text.size() > 20 && session.calls > 1)"

[[rule]]
callers = ["*"]
tools = ["notes.publish_note"]
effect = "deny"
when_cel = "args.id > 10 && tool.upstream == 'notes' && request.transport == 'stdio'"

[[rule]]
callers = ["*"]
tools = ["notes.list_notes"]
effect = "deny"
when_cel = "args.owner == 'x'"
"#;

#[test]
fn a_cel_condition_decides_and_a_failing_one_fails_closed() {
    let mut w = Warden::start_capturing_stderr("cel-decides", &format!("{RULES}{DEMO}"), "warn");
    let id = w.send_request(
        "tools/call",
        json!({"name": "notes.create_note", "arguments": {"title": "tmp1", "text": "x"}}),
    );
    let (line, _) = w.response_line(&json!(id));
    assert_eq!(
        line,
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":"Error: Policy does not allow this call to tool 'notes.create_note' for caller 'local'."}}],"isError":true}}}}"#
        )
    );
    // The session's second call: a long text is now refused (session.calls > 1)…
    assert_eq!(
        w.call_text("notes.create_note", json!({"title": "a", "text": "short"})),
        "Created note 1 'a' (private)."
    );
    let r = w.call(
        "notes.create_note",
        json!({"title": "b", "text": "a text longer than twenty"}),
    );
    assert_eq!(
        r["result"]["content"][0]["text"],
        "Error: Policy does not allow this call to tool 'notes.create_note' for caller 'local'."
    );
    assert_eq!(
        w.call_text("notes.publish_note", json!({"id": 1})),
        "Note 1 is now public."
    );
    assert_eq!(
        w.call("notes.publish_note", json!({"id": 11}))["result"]["content"][0]["text"],
        "Error: Policy does not allow this call to tool 'notes.publish_note' for caller 'local'."
    );
    // No `owner` to compare: the expression fails, the call fails closed, and
    // the caller learns nothing of why.
    let id = w.send_request(
        "tools/call",
        json!({"name": "notes.list_notes", "arguments": {}}),
    );
    let (line, _) = w.response_line(&json!(id));
    assert_eq!(
        line,
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":"Error: Policy could not decide on this call, so it is refused."}}],"isError":true}}}}"#
        )
    );
    w.close_stdin();
    let log = w.stderr_after_exit();
    assert!(
        log.contains("a when_cel condition failed; the call is refused")
            && log.contains(
                "rule[2].when_cel: it stopped: a key it reads is absent (guard it with has())"
            ),
        "{log}"
    );
}

#[test]
fn check_names_a_bad_expression_its_rule_and_where() {
    let dir = scratch("cel-check");
    for (expr, why) in [
        (
            "calller.name == 'x'",
            "rule[0].when_cel: unknown variable 'calller'; did you mean 'caller'? the variables are caller, tool, args, session, request (at line 1, column 1)",
        ),
        (
            "caller.name == 3",
            "rule[0].when_cel: this compares string with int: they are never equal (at line 1, column 13)",
        ),
        (
            "args.a >",
            "rule[0].when_cel: syntax error at line 1, column 9: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}",
        ),
    ] {
        let path = write_config(
            &dir,
            &format!("[[rule]]\ncallers = [\"*\"]\ntools = [\"t\"]\neffect = \"allow\"\nwhen_cel = \"{expr}\"\n"),
        );
        let (code, out, err) = cli(&["check", "--config", path.to_str().unwrap()]);
        assert_eq!((code, out.as_str()), (1, ""));
        assert_eq!(
            err,
            format!("error: {p}: {why}\n  --> {p}:5:1\n", p = path.display())
        );
    }
}

#[test]
fn a_reload_with_a_bad_expression_leaves_the_policy_in_force() {
    let port = free_port();
    let toml = format!("{RULES}{DEMO}[admin]\nlisten = \"127.0.0.1:{port}\"\n");
    let mut w = Warden::start_capturing_stderr("cel-reload", &toml, "info");
    let bad = toml.replace("args.id > 10", "request.time > 'ten'");
    let path = write_config(&w.dir, &bad);
    w.hangup();
    wait_for_reloads(port, "invalid", 1);
    // The old expression still decides.
    assert_eq!(
        w.call("notes.publish_note", json!({"id": 11}))["result"]["content"][0]["text"],
        "Error: Policy does not allow this call to tool 'notes.publish_note' for caller 'local'."
    );
    let log = w.stderr_after_exit();
    let said = format!(
        "config reload refused; the configuration in force stays: {}: rule[1].when_cel: int and string cannot be ordered (at line 1, column 14)",
        path.display()
    );
    assert!(log.contains(&said), "{log}");
}
