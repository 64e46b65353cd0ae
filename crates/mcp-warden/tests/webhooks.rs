//! The grant webhook (G4) and hook webhooks (H1-H4) on the call path, through the
//! gateway built in-process by the harness (`Warden::start_in_process`), with real
//! upstream children and real HTTP webhook servers.

mod common;

use common::*;
use serde_json::{json, Value};
use std::time::Duration;

const INTERNAL: &str = "Error: An internal error occurred while executing the tool.";
const NOT_VERIFIED: &str = "Error: Tool access could not be verified.";

fn with_grant_webhook(url: &str) -> String {
    format!(
        "[access]\ndefault = \"allow\"\nwebhook = {{ url = \"{url}\", timeout_ms = 500 }}\n\
         [[rule]]\ncallers = [\"*\"]\ntools = [\"notes.publish_note\"]\neffect = \"deny\"\n{DEMO}"
    )
}

fn names(w: &mut Warden) -> Vec<String> {
    w.tool_names()
}

#[test]
fn grant_webhook_decides_listing_and_calls_alike() {
    let hook = HookServer::start(|_| {
        Reply::Json(
            json!({"decisions": {"notes.create_note": "deny", "notes.publish_note": "allow"}}),
        )
    });
    let mut w = Warden::start_in_process("grant-ok", &with_grant_webhook(&hook.url));
    // The webhook overrides the rules where it decides; the rules decide the rest.
    assert_eq!(names(&mut w), ["notes.list_notes", "notes.publish_note"]);
    let r = w.call("notes.create_note", json!({"title": "a", "text": "b"}));
    assert_eq!(
        r["error"],
        json!({"code": -32602, "message": "Unknown tool 'notes.create_note'."})
    );
    // An absent name asks the webhook too (same work as a hidden one).
    let before = hook.bodies().len();
    let r = w.call("notes.nothing", json!({}));
    assert_eq!(r["error"]["message"], "Unknown tool 'notes.nothing'.");
    let asked = hook.bodies();
    assert_eq!(asked.len(), before + 1);
    assert_eq!(asked.last().unwrap()["tools"], json!(["notes.nothing"]));
    assert_eq!(
        asked.last().unwrap()["caller"],
        json!({"name": "local", "groups": []})
    );
}

fn assert_fails_closed(w: &mut Warden) {
    // Listing degrades to the rules: publish_note stays hidden, the rest is shown.
    assert_eq!(names(w), ["notes.create_note", "notes.list_notes"]);
    // A call fails closed, with the outage answer (not the unknown-tool one).
    let r = w.call("notes.list_notes", json!({}));
    assert_eq!(
        r["result"],
        json!({"content": [{"type": "text", "text": NOT_VERIFIED}], "isError": true})
    );
}

#[test]
fn grant_webhook_down_slow_or_garbled_fails_calls_closed() {
    let mut down = Warden::start_in_process("grant-down", &with_grant_webhook(&dead_url()));
    assert_fails_closed(&mut down);

    let slow =
        HookServer::start(|_| Reply::After(Duration::from_secs(3), json!({"decisions": {}})));
    let mut w = Warden::start_in_process("grant-slow", &with_grant_webhook(&slow.url));
    assert_fails_closed(&mut w);

    for garbage in [
        Reply::Raw(200, b"not json at all".to_vec()),
        Reply::Raw(500, b"{}".to_vec()),
        Reply::Json(json!({"decisions": {"notes.list_notes": 7}})),
        Reply::Json(json!([1, 2])),
        Reply::Raw(
            200,
            format!(
                "{{\"decisions\": {{}}, \"pad\": \"{}\"}}",
                "x".repeat(2 << 20)
            )
            .into_bytes(),
        ),
    ] {
        let garbage = std::sync::Mutex::new(Some(garbage));
        let server = HookServer::start(move |_| {
            garbage.lock().unwrap().take().unwrap_or(Reply::Json(
                json!({"decisions": {"notes.list_notes": true}}),
            ))
        });
        let mut w = Warden::start_in_process("grant-garbage", &with_grant_webhook(&server.url));
        assert_fails_closed(&mut w);
    }
}

fn with_hooks(before: &str, after: &str) -> String {
    format!(
        "[[hook]]\nphase = \"before\"\nurl = \"{before}\"\ntimeout_ms = 500\n\
         [[hook]]\nphase = \"after\"\nurl = \"{after}\"\ntimeout_ms = 500\n{DEMO}"
    )
}

#[test]
fn before_webhook_denies_answers_or_fails_the_call() {
    let before = HookServer::start(|ctx: &Value| {
        match ctx
            .pointer("/arguments/title")
            .and_then(Value::as_str)
            .unwrap_or("")
        {
            "deny" => Reply::Json(
                json!({"decision": "deny", "reason": "Notes titled 'deny' are not allowed."}),
            ),
            "answer" => Reply::Json(
                json!({"decision": "answer", "result": {"content": [{"type": "text", "text": "cached"}]}}),
            ),
            "empty" => Reply::Json(json!({"decision": "deny", "reason": ""})),
            "garbage" => Reply::Raw(200, b"<html>".to_vec()),
            "slow" => Reply::After(Duration::from_secs(3), json!({"decision": "pass"})),
            _ => Reply::Json(json!({"decision": "pass"})),
        }
    });
    let after = HookServer::start(|_| Reply::Json(json!({})));
    let mut w = Warden::start_in_process("before-hook", &with_hooks(&before.url, &after.url));
    let call = |w: &mut Warden, title: &str| {
        w.call_text(
            "notes.create_note",
            json!({"title": title, "text": "t", "reason": "r"}),
        )
    };
    assert_eq!(call(&mut w, "deny"), "Notes titled 'deny' are not allowed.");
    assert_eq!(call(&mut w, "answer"), "cached");
    for failing in ["empty", "garbage", "slow"] {
        assert_eq!(call(&mut w, failing), INTERNAL, "{failing}");
    }
    assert_eq!(call(&mut w, "fine"), "Created note 1 'fine' (private).");
    // Only the passed call reached the server.
    assert_eq!(
        w.call_text("notes.list_notes", json!({})),
        "1. fine [private] t"
    );

    // The before hook saw the context, with `_meta` bounded and arguments as sent upstream.
    let ctx = before.bodies()[0].clone();
    assert_eq!(ctx["phase"], "before");
    assert_eq!(ctx["tool"], "notes.create_note");
    assert_eq!(ctx["upstream"], "notes");
    assert_eq!(ctx["caller"]["name"], "local");
    assert_eq!(
        ctx["arguments"],
        json!({"title": "deny", "text": "t", "reason": "r", "is_public": false})
    );

    // After hooks: exactly one event per call past the before hooks (6 create + 1 list), sent off the answer path.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while after.bodies().len() < 7 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(200));
    let events = after.bodies();
    assert_eq!(events.len(), 7, "{events:#?}");
    let failures = events.iter().filter(|e| !e["failure"].is_null()).count();
    assert_eq!(
        failures, 3,
        "the three failing hooks are recorded as failures"
    );
    assert!(events
        .iter()
        .all(|e| e["phase"] == "after" && e["duration_ms"].is_number()));
}

#[test]
fn meta_of_every_shape_reaches_hooks_bounded() {
    let before = HookServer::start(|_| Reply::Json(json!({"decision": "pass"})));
    let after = HookServer::start(|_| Reply::Json(json!({})));
    let mut w = Warden::start_in_process("meta-hook", &with_hooks(&before.url, &after.url));
    let deep = json!({"a": {"b": {"c": {"d": {"e": 1}}}}});
    let metas = [
        json!("str"),
        json!([1]),
        json!(null),
        json!({"ok": 1, "deep": deep, "long": "x".repeat(5000), "progressToken": "p"}),
    ];
    for meta in metas {
        let r = w.request(
            "tools/call",
            json!({"name": "notes.list_notes", "arguments": {}, "_meta": meta}),
        );
        assert!(r.get("result").is_some(), "{r}");
    }
    let seen: Vec<Value> = before
        .bodies()
        .into_iter()
        .map(|b| b["meta"].clone())
        .collect();
    assert_eq!(
        seen,
        [
            json!({}),
            json!({}),
            json!({}),
            json!({"ok": 1, "progressToken": "p"})
        ]
    );
}

#[test]
fn webhook_config_errors_are_named() {
    let dir = scratch("hook-config");
    let path = write_config(
        &dir,
        &format!("[[hook]]\nphase = \"during\"\nurl = \"http://127.0.0.1:1/\"\n{DEMO}"),
    );
    let (code, _, err) = cli(&["check", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(
        err.contains("hook[0].phase: 'during' is not a phase; use before or after"),
        "{err}"
    );
    let path = write_config(
        &dir,
        &format!("[access]\nwebhook = {{ url = \"ftp://x/\" }}\n{DEMO}"),
    );
    let (code, _, err) = cli(&["check", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(
        err.contains("access.webhook: 'ftp://x/' is not an http:// or https:// URL"),
        "{err}"
    );
    let path = write_config(
        &dir,
        &format!("[access]\nwebhook = {{ url = \"http://x/\", timeout = 5 }}\n{DEMO}"),
    );
    let (code, _, err) = cli(&["check", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(
        err.contains(
            "access.webhook.timeout: unknown key in [access.webhook]. Did you mean 'timeout_ms'?"
        ),
        "{err}"
    );
}

#[test]
fn a_call_refused_by_a_failed_grant_source_reaches_the_after_hooks_once() {
    let after = HookServer::start(|_| Reply::Json(json!({})));
    let config = format!(
        "[[hook]]\nphase = \"after\"\nurl = \"{}\"\n{}",
        after.url,
        with_grant_webhook(&dead_url())
    );
    let mut w = Warden::start_in_process("grant-after", &config);
    let r = w.call("notes.list_notes", json!({}));
    assert_eq!(r["result"]["content"][0]["text"], NOT_VERIFIED);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while after.bodies().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(200));
    let events = after.bodies();
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_eq!(events[0]["tool"], "notes.list_notes");
    assert_eq!(events[0]["failure"], "the grant source failed");
    assert_eq!(events[0]["result"], Value::Null);
}
