//! Who answers an approval, per rule (H6), through the real binary: an `ask`
//! rule, an `ask` flow rule and an `ask` guard on arguments each name their
//! `approver`, over `[access] approver`; calls their approver is the console
//! wait in the inbox (`/api/approvals`) and go on as an operator decides,
//! while the others are asked of the client. `check` refuses an approver on
//! something that never asks.

mod common;

use common::http::{call, open, request_path, HttpWarden, Reply, POST};
use common::*;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const CANNOT_ASK: &str =
    "Error: This call needs approval, and the client cannot ask for it. Ask for the tool to be allowed instead.";
const REFUSED: &str = "Error: This call needs approval, and approval was refused.";
const KEY: &str = "AKIAIOSFODNN7EXAMPLE";

fn config(access: &str, admin: &str, echo_approver: &str) -> String {
    format!(
        "[gateway]\nanonymous_caller = \"dev\"\n\
         [access]\n{access}\n\
         [[upstream]]\nname = \"fx\"\ncommand = [\"{{fixture}}\"]\nlabels = {{ slow = [\"private_data\", \"sink\"] }}\n\
         [[rule]]\ncallers = [\"*\"]\ntools = [\"fx.echo\"]\neffect = \"ask\"\n{echo_approver}\n\
         [[rule]]\ncallers = [\"*\"]\ntools = [\"fx.fail\"]\neffect = \"ask\"\n\
         [[flow]]\ntouched = [\"private_data\"]\ncalling = \"sink\"\neffect = \"ask\"\nreason = \"Private data could leave.\"\napprover = \"console\"\n\
         [[guard]]\nname = \"keys\"\non = [\"arguments\"]\ndetect = [\"secrets\"]\ntools = [\"fx.progress\"]\naction = \"ask\"\napprover = \"console\"\n\
         [admin]\nlisten = \"{admin}\"\n"
    )
}

/// The answer among a reply's messages (an SSE body may carry notices first).
fn answer(r: Reply) -> Value {
    let found = r.messages().into_iter().find(|m| m.get("id").is_some());
    found.unwrap_or_else(|| panic!("no answer in {:?}", r.body))
}

fn text(r: &Value) -> &str {
    r["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
}

/// The one call the inbox holds, once it holds one.
fn waiting(admin: &str) -> Value {
    let deadline = Instant::now() + PATIENCE;
    while Instant::now() < deadline {
        let r = request_path(admin, "GET", "/api/approvals", &[], "");
        assert_eq!(r.status, 200, "{}", r.body);
        if let [one] = r.json()["waiting"].as_array().unwrap().as_slice() {
            return one.clone();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("no call came to wait in the console's inbox");
}

fn decide(admin: &str, id: &Value, decision: &str) -> Reply {
    let body = json!({"id": id, "decision": decision, "note": "per rule"}).to_string();
    let headers = [("Content-Type", "application/json")];
    request_path(admin, "POST", "/api/approvals/decide", &headers, &body)
}

#[test]
fn each_ask_names_who_answers_it_over_the_access_default() {
    let admin = format!("127.0.0.1:{}", free_port());
    let toml = config("", &admin, "approver = \"console\"");
    let w = HttpWarden::start("approvers-per-rule", &toml, &[]);
    // The client declares no elicitation: it cannot answer anything itself.
    let sid = w.session(&[]);
    let with = [("Mcp-Session-Id", sid.as_str())];
    let mut headers = POST.to_vec();
    headers.push(("Mcp-Session-Id", &sid));

    // A rule naming no approver: `[access] approver` (client), refused at once.
    let r = answer(w.post(&with, &call(1, "fx.fail", json!({}))));
    assert_eq!(text(&r), CANNOT_ASK, "{r}");

    // The rule that names the console: the call waits there, and runs once approved.
    let held = open(
        &w.addr,
        "POST",
        &headers,
        &call(2, "fx.echo", json!({"x": 1})).to_string(),
    );
    let one = waiting(&admin);
    assert_eq!(
        (one["tool"].as_str(), one["rule"].as_str()),
        (Some("fx.echo"), Some("an ask rule (H5)"))
    );
    assert_eq!(decide(&admin, &one["id"], "approve").status, 200);
    let r = answer(held.finish());
    assert_eq!(r["result"]["isError"], Value::Null, "{r}");
    assert_eq!(text(&r), r#"{"x":1}"#);

    // The flow rule names the console: denied there, refused as a client's no.
    let held = open(
        &w.addr,
        "POST",
        &headers,
        &call(3, "fx.slow", json!({"ms": 1})).to_string(),
    );
    let one = waiting(&admin);
    assert_eq!(
        (one["tool"].as_str(), one["rule"].as_str()),
        (
            Some("fx.slow"),
            Some("an ask flow rule (F2): Private data could leave.")
        )
    );
    assert_eq!(decide(&admin, &one["id"], "deny").status, 200);
    let r = answer(held.finish());
    assert_eq!(
        text(&r),
        "Error: Tool 'fx.slow' needs approval at this point of the session, and it was not given. Private data could leave. (This call needs approval, and approval was refused.)"
    );

    // The argument guard names the console too.
    let args = json!({"steps": 1, "note": format!("key {KEY}")});
    let held = open(
        &w.addr,
        "POST",
        &headers,
        &call(4, "fx.progress", args).to_string(),
    );
    let one = waiting(&admin);
    assert_eq!(one["tool"].as_str(), Some("fx.progress"));
    assert!(!one.to_string().contains(KEY), "{one}");
    assert_eq!(decide(&admin, &one["id"], "approve").status, 200);
    let r = answer(held.finish());
    assert_eq!(r["result"]["isError"], Value::Null, "{r}");
}

#[test]
fn a_rule_naming_the_client_is_not_sent_to_a_console_default() {
    let admin = format!("127.0.0.1:{}", free_port());
    let toml = config("approver = \"console\"", &admin, "approver = \"client\"");
    let w = HttpWarden::start("approvers-client-rule", &toml, &[]);
    let sid = w.session(&[]);
    let with = [("Mcp-Session-Id", sid.as_str())];
    // Its own rule says client: a client that cannot ask is refused at once.
    let r = answer(w.post(&with, &call(1, "fx.echo", json!({}))));
    assert_eq!(text(&r), CANNOT_ASK, "{r}");
    // The rule that names nobody follows `[access] approver = "console"`.
    let mut headers = POST.to_vec();
    headers.push(("Mcp-Session-Id", &sid));
    let held = open(
        &w.addr,
        "POST",
        &headers,
        &call(2, "fx.fail", json!({})).to_string(),
    );
    let one = waiting(&admin);
    assert_eq!(one["tool"].as_str(), Some("fx.fail"));
    assert_eq!(decide(&admin, &one["id"], "deny").status, 200);
    assert_eq!(text(&answer(held.finish())), REFUSED);
}

#[test]
fn an_approver_on_something_that_never_asks_is_refused_by_check() {
    let dir = scratch("approvers-check");
    let up = "[[upstream]]\nname = \"u\"\ncommand = [\"x\"]\n";
    for (toml, expected) in [
        (
            "[[rule]]\ncallers = [\"*\"]\ntools = [\"u.*\"]\neffect = \"allow\"\napprover = \"console\"\n",
            "rule[0].approver: approver names who answers a question; only an ask rule asks one (H6)",
        ),
        (
            "[[flow]]\ntouched = [\"a\"]\ncalling = \"b\"\neffect = \"deny\"\napprover = \"both\"\n",
            "flow[0]: approver names who answers a question; only an ask flow rule asks one (H6)",
        ),
        (
            "[[guard]]\nname = \"g\"\non = [\"results\"]\ndetect = [\"secrets\"]\naction = \"ask\"\napprover = \"console\"\n",
            "guard[0].approver: approver names who answers a question; only an ask guard on arguments asks one (H6)",
        ),
        (
            "[[rule]]\ncallers = [\"*\"]\ntools = [\"u.*\"]\neffect = \"ask\"\napprover = \"boss\"\n",
            "'boss' is not an approver; use client, console or both",
        ),
    ] {
        let path = write_config(&dir, &format!("{up}{toml}"));
        let (code, _, err) = cli(&["check", "--config", path.to_str().unwrap()]);
        assert_eq!(code, 1, "{toml}");
        assert!(err.contains(expected), "{err}");
    }
}
